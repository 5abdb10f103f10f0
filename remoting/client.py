"""RemotingClient: one reused connection per address, request/response correlation by opaque."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from .codec import MAX_FRAME_SIZE
from .codes import SerializeType
from .command import OpaqueGenerator, RemotingCommand
from .connection import RemotingConnection, RequestDispatcher, ResponseCallback, ResponseEntry
from .errors import RemotingConnectError, RemotingError
from .idle_poll import IdlePoller, checked_window_us

log = structlog.get_logger(__name__)

_JSON = SerializeType.JSON  # bound once: an Enum class attribute lookup is not free, and this runs per request


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"bad address {addr!r}: expected ip:port")
    return host.strip("[]"), int(port)


class RemotingClient:
    def __init__(
        self,
        dispatcher: RequestDispatcher | None = None,
        *,
        connect_timeout_ms: float = 3000,
        serialize_type: SerializeType = SerializeType.JSON,
        max_frame_size: int = MAX_FRAME_SIZE,
        max_inflight_per_connection: int = 65535,
        idle_poll_us: int = 0,
    ) -> None:
        # The dispatcher serves requests the server sends us (NOTIFY_CONSUMER_IDS_CHANGED, ...).
        self.dispatcher = dispatcher or RequestDispatcher()
        self.connect_timeout_ms = connect_timeout_ms
        self.serialize_type = serialize_type
        self.max_frame_size = max_frame_size
        self.max_inflight = max_inflight_per_connection
        self._conns: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Future[RemotingConnection]] = {}
        self._opaque = OpaqueGenerator()
        self._closed = False
        self._close_listeners: list[Callable[[str], None]] = []
        # Per-address override of serialize_type (e.g. MSGPACK to a broker that said it speaks it);
        # forgotten when that address's connection closes.
        self.addr_serialize_types: dict[str, SerializeType] = {}
        self.idle_poll_us = checked_window_us(idle_poll_us)
        # Made with the first connection (it needs the running loop); see remoting.idle_poll.
        self.idle_poller: IdlePoller | None = None
        # on_connect(addr, conn): awaited on each new connection before any request may use it (those that
        # want it wait for the connection meanwhile), e.g. to learn which header formats the peer reads
        # before the first request is encoded. It must bound its own time and not raise (a bug in it is
        # logged, and the connection is used anyway).
        self.on_connect: Callable[[str, RemotingConnection], Awaitable[None]] | None = None

    def add_close_listener(self, cb: Callable[[str], None]) -> None:
        """cb(addr) when a connection to addr closes."""
        self._close_listeners.append(cb)

    async def get_connection(self, addr: str) -> RemotingConnection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            raise RemotingConnectError(addr, "client is closed")
        fut = self._connecting.get(addr)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._connecting[addr] = fut
            try:
                conn = await self._connect(addr)
            except BaseException as e:
                fut.set_exception(e)
                fut.exception()  # mark retrieved: others may not be waiting
                raise
            finally:
                self._connecting.pop(addr, None)
            fut.set_result(conn)
            return conn
        return await asyncio.shield(fut)

    async def _connect(self, addr: str) -> RemotingConnection:
        try:
            host, port = split_addr(addr)
        except ValueError as e:
            raise RemotingConnectError(addr, str(e)) from None
        loop = asyncio.get_running_loop()

        def on_close(c: RemotingConnection, addr: str = addr) -> None:
            if self._conns.get(addr) is c:
                del self._conns[addr]
                self.addr_serialize_types.pop(addr, None)
            for cb in self._close_listeners:
                try:
                    cb(addr)
                except Exception:
                    log.exception("close_listener_failed", addr=addr)

        if self.idle_poll_us and self.idle_poller is None:
            self.idle_poller = IdlePoller(loop, self.idle_poll_us)

        def factory() -> RemotingConnection:
            return RemotingConnection(
                self.dispatcher,
                opaque=self._opaque,
                on_close=on_close,
                max_frame_size=self.max_frame_size,
                max_inflight=self.max_inflight,
                role="client",
                idle_poller=self.idle_poller,
            )

        try:
            _t, conn = await asyncio.wait_for(
                loop.create_connection(factory, host, port), self.connect_timeout_ms / 1000.0
            )
        except TimeoutError:
            raise RemotingConnectError(addr, f"timed out after {self.connect_timeout_ms:.0f} ms") from None
        except OSError as e:
            raise RemotingConnectError(addr, e.strerror or str(e)) from None
        if self.on_connect is not None:
            try:
                await self.on_connect(addr, conn)
            except asyncio.CancelledError:
                conn.close()
                raise
            except Exception:
                log.exception("on_connect_failed", addr=addr)
            if conn.closed:
                raise RemotingConnectError(addr, "the connection closed while it was being set up")
        self._conns[addr] = conn
        return conn

    def serialize_type_for(self, addr: str) -> SerializeType:
        """The header format requests to addr go out in (unless a request asks for another)."""
        return self.addr_serialize_types.get(addr, self.serialize_type)

    def _prepare(self, cmd: RemotingCommand, addr: str) -> RemotingCommand:
        if cmd.serialize_type is _JSON:
            st = self.addr_serialize_types.get(addr, self.serialize_type)
            if st is not _JSON:
                cmd.serialize_type = st
        return cmd

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000) -> RemotingCommand:
        """Send a request and await its response; typed RemotingError subclasses on failure."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed or not conn.is_writable:  # connect / wait for the write buffer
            start = time.monotonic()
            conn = await self.get_connection(addr)
            await conn.writable()
            timeout_ms = max(1.0, timeout_ms - (time.monotonic() - start) * 1000.0)
        return await conn.invoke_future(self._prepare(cmd, addr), timeout_ms)

    async def invoke_future(
        self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000
    ) -> asyncio.Future[RemotingCommand]:
        """Send now and return the response future without awaiting it (pipelining)."""
        conn = await self.get_connection(addr)
        await conn.writable()
        return conn.invoke_future(self._prepare(cmd, addr), timeout_ms)

    def invoke_future_nowait(
        self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000
    ) -> asyncio.Future[RemotingCommand] | None:
        """invoke_future without awaiting anything: None (nothing sent) unless a connection to addr
        is open and under its write high-water mark. The hot path of pipelined sends uses it to
        avoid a coroutine per request; callers fall back to invoke_future on None."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed or not conn.is_writable:
            return None
        return conn.invoke_future(self._prepare(cmd, addr), timeout_ms)

    def invoke_callback_nowait(
        self, addr: str, cmd: RemotingCommand, timeout_ms: float, callback: ResponseCallback
    ) -> bool:
        """The cheapest pipelined request: send now if a connection to addr is open and under its
        write high-water mark (else return False: nothing sent) and call callback(response, None)
        or callback(None, error) — RemotingTimeoutError naming addr, code and elapsed ms, or
        RemotingConnectionClosedError — exactly once, synchronously from the read path. The callback
        must not raise and must not block."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed or conn.write_paused:
            return False
        conn.invoke_callback(self._prepare(cmd, addr), timeout_ms, callback)
        return True

    def invoke_entry_packed_nowait(
        self,
        addr: str,
        entry: ResponseEntry,
        code: int,
        ext_parts: tuple[bytes, ...],
        body: bytes | bytearray | memoryview,
        timeout_ms: float,
        flush_now: bool = False,
    ) -> bool:
        """invoke_callback_nowait for a request to a MSGPACK peer given as code, pre-packed extFields
        pieces and body, answered to entry.on_response (RemotingConnection.invoke_entry_packed): no
        RemotingCommand and no callback object are built. False: nothing sent."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed or conn.write_paused:
            return False
        conn.invoke_entry_packed(entry, code, ext_parts, body, timeout_ms, flush_now)
        return True

    async def invoke_async(
        self, addr: str, cmd: RemotingCommand, timeout_ms: float, callback: ResponseCallback
    ) -> None:
        """Send now; callback(response, None) or callback(None, error) later on the loop."""
        try:
            fut = await self.invoke_future(addr, cmd, timeout_ms)
        except RemotingError as e:
            callback(None, e)
            return

        def done(f: asyncio.Future[RemotingCommand]) -> None:
            if f.cancelled():
                callback(None, asyncio.CancelledError())
            elif f.exception() is not None:
                callback(None, f.exception())
            else:
                callback(f.result(), None)

        fut.add_done_callback(done)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.get_connection(addr)
        await conn.writable()
        conn.invoke_oneway(self._prepare(cmd, addr))

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    def connected_addrs(self) -> list[str]:
        return [a for a, c in self._conns.items() if not c.closed]

    async def close(self) -> None:
        self._closed = True
        if self.idle_poller is not None:
            self.idle_poller.close()
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        await self.dispatcher.close()
        # Give transports a moment to run connection_lost so pending calls fail promptly.
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)
