"""RemotingClient: one reused connection per address, request/response correlation by opaque."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

import structlog

from .codec import MAX_FRAME_SIZE
from .codes import SerializeType
from .command import OpaqueGenerator, RemotingCommand
from .connection import RemotingConnection, RequestDispatcher, _Pending
from .errors import RemotingConnectError, RemotingError, RemotingTimeoutError, RemotingTooMuchRequestError

log = structlog.get_logger(__name__)

ResponseCallback = Callable[[RemotingCommand | None, BaseException | None], None]


def _noop_callback(response: RemotingCommand | None, exc: BaseException | None) -> None:
    return None


class _CallbackSlot(_Pending):
    """A connection's pending-table entry that is its own response "future" (the connection only
    calls done/set_result/set_exception on `entry.future`): the response callback runs right inside
    data_received (or connection_lost), so a pipelined request costs no Future, no scheduled
    done-callback and no per-request timer. Time-outs come from RemotingClient's _TimeoutScan."""

    __slots__ = ("callback", "conn", "opaque", "deadline", "finished")

    def __init__(
        self, callback: ResponseCallback, conn: RemotingConnection, opaque: int, code: int, started: float,
        timeout_ms: float,
    ) -> None:
        # _Pending's fields, minus `future` (the property below): no per-request timer.
        self.code = code
        self.started = started
        self.timeout_ms = timeout_ms
        self.timer = None
        self.callback = callback
        self.conn = conn
        self.opaque = opaque
        self.deadline = started + timeout_ms / 1000.0
        self.finished = False

    @property  # type: ignore[override]
    def future(self) -> _CallbackSlot:  # a property, not a self-reference: no reference cycle
        return self

    def done(self) -> bool:
        return self.finished

    def set_result(self, response: RemotingCommand) -> None:
        self._finish(response, None)

    def set_exception(self, exc: BaseException) -> None:
        self._finish(None, exc)

    def _finish(self, response: RemotingCommand | None, exc: BaseException | None) -> None:
        if self.finished:
            return
        self.finished = True
        callback = self.callback
        # A finished slot may wait in _TimeoutScan's FIFO behind an unanswered one: keep it small
        # (the callback holds the whole send).
        self.callback = _noop_callback
        try:
            callback(response, exc)
        except Exception:  # runs inside the protocol's data_received: never let it break the read loop
            log.exception("response_callback_failed", peer=self.conn.remote_addr, opaque=self.opaque)

    def expire(self, now: float) -> None:
        pending = self.conn._pending
        if pending.get(self.opaque) is self:
            del pending[self.opaque]
        self._finish(None, RemotingTimeoutError(
            self.conn.remote_addr, self.code, (now - self.started) * 1000.0, self.timeout_ms
        ))


_COMPACT_MIN = 4096  # _TimeoutScan: smallest FIFO worth compacting


class _TimeoutScan:
    """Time-outs of callback requests without a timer each (Java's scanResponseTable, but exact):
    one FIFO per time-out value, so deadlines in a FIFO only grow; answered heads are dropped as
    new requests are added, and one loop timer fires at the earliest unanswered deadline. An
    unanswered head holds answered slots (small: their callbacks are dropped) behind it; when a FIFO
    doubles past its last compaction it is compacted, so it stays O(requests in flight)."""

    __slots__ = ("_queues", "_compact_at", "_handle", "_due")

    def __init__(self) -> None:
        self._queues: dict[float, deque[_CallbackSlot]] = {}
        self._compact_at: dict[float, int] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def add(self, slot: _CallbackSlot) -> None:
        key = slot.timeout_ms
        dq = self._queues.get(key)
        if dq is None:
            dq = self._queues[key] = deque()
        else:
            while dq and dq[0].finished:  # amortised O(1): keeps the FIFO at about the in-flight count
                dq.popleft()
            if len(dq) >= self._compact_at.get(key, _COMPACT_MIN):
                live = deque(s for s in dq if not s.finished)
                self._queues[key] = dq = live
                self._compact_at[key] = max(_COMPACT_MIN, 2 * len(live))
        dq.append(slot)
        if self._handle is None or slot.deadline < self._due:
            self._arm(slot.deadline)

    def _arm(self, due: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._due = due
        loop = asyncio.get_running_loop()
        # call_at takes loop.time(); deadlines are time.monotonic() (the same clock on Linux, but
        # convert anyway).
        self._handle = loop.call_at(loop.time() + max(0.0, due - time.monotonic()), self._scan)

    def _scan(self) -> None:
        self._handle = None
        now = time.monotonic()
        due = float("inf")
        for key in list(self._queues):
            dq = self._queues[key]
            while dq:
                s = dq[0]
                if s.finished:
                    dq.popleft()
                elif s.deadline <= now:
                    dq.popleft()
                    s.expire(now)
                else:
                    due = min(due, s.deadline)
                    break
            if not dq:
                del self._queues[key]
                self._compact_at.pop(key, None)
        if due != float("inf"):
            self._arm(due)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


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
        self._timeouts = _TimeoutScan()
        self._closed = False
        self._close_listeners: list[Callable[[str], None]] = []
        # Per-address override of serialize_type (e.g. MSGPACK to a broker that said it speaks it);
        # forgotten when that address's connection closes.
        self.addr_serialize_types: dict[str, SerializeType] = {}

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

        def factory() -> RemotingConnection:
            return RemotingConnection(
                self.dispatcher,
                opaque=self._opaque,
                on_close=on_close,
                max_frame_size=self.max_frame_size,
                max_inflight=self.max_inflight,
                role="client",
            )

        try:
            _t, conn = await asyncio.wait_for(
                loop.create_connection(factory, host, port), self.connect_timeout_ms / 1000.0
            )
        except TimeoutError:
            raise RemotingConnectError(addr, f"timed out after {self.connect_timeout_ms:.0f} ms") from None
        except OSError as e:
            raise RemotingConnectError(addr, e.strerror or str(e)) from None
        self._conns[addr] = conn
        return conn

    def _prepare(self, cmd: RemotingCommand, addr: str) -> RemotingCommand:
        if cmd.serialize_type is SerializeType.JSON:
            st = self.addr_serialize_types.get(addr, self.serialize_type)
            if st is not SerializeType.JSON:
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
        if conn is None or conn.closed or not conn.is_writable:
            return False
        pending = conn._pending
        if len(pending) >= self.max_inflight:
            raise RemotingTooMuchRequestError(f"{len(pending)} requests already in flight to {conn.remote_addr}")
        self._prepare(cmd, addr)
        opaque = cmd.opaque = self._opaque.next()
        started = time.monotonic()
        slot = _CallbackSlot(callback, conn, opaque, cmd.code, started, timeout_ms)
        pending[opaque] = slot
        try:
            conn.send(cmd)
        except Exception:
            pending.pop(opaque, None)
            raise
        self._timeouts.add(slot)
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
        self._timeouts.cancel()  # connection_lost fails what is still pending
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        await self.dispatcher.close()
        # Give transports a moment to run connection_lost so pending calls fail promptly.
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)
