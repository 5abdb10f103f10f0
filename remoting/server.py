"""RemotingServer: accepts connections and hands their requests to a RequestDispatcher."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from .codec import MAX_FRAME_SIZE
from .command import OpaqueGenerator
from .connection import RemotingConnection, RequestDispatcher
from .idle_poll import IdlePoller, checked_window_us

log = structlog.get_logger(__name__)


class RemotingServer:
    def __init__(
        self,
        dispatcher: RequestDispatcher | None = None,
        *,
        host: str = "0.0.0.0",
        port: int = 0,
        idle_timeout_s: float = 120.0,
        max_frame_size: int = MAX_FRAME_SIZE,
        name: str = "remoting",
        idle_poll_us: int = 0,
    ) -> None:
        self.dispatcher = dispatcher or RequestDispatcher()
        self.host = host
        self.port = port
        self.idle_timeout_s = idle_timeout_s
        self.max_frame_size = max_frame_size
        self.name = name
        self.connections: set[RemotingConnection] = set()
        self._close_listeners: list[Callable[[RemotingConnection], None]] = []
        self._server: asyncio.base_events.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._opaque = OpaqueGenerator()
        self._idle_poll_us = checked_window_us(idle_poll_us)
        # Made in start() (it needs the running loop); see remoting.idle_poll.
        self.idle_poller: IdlePoller | None = None

    @property
    def idle_poll_us(self) -> int:
        """How long the loop keeps polling after a connection's last read or write (0: off)."""
        return self._idle_poll_us

    @idle_poll_us.setter
    def idle_poll_us(self, value: int) -> None:
        self._idle_poll_us = checked_window_us(value)
        if self.idle_poller is not None:
            self.idle_poller.window_us = value

    def add_close_listener(self, cb: Callable[[RemotingConnection], None]) -> None:
        self._close_listeners.append(cb)

    def _on_close(self, conn: RemotingConnection) -> None:
        self.connections.discard(conn)
        for cb in self._close_listeners:
            try:
                cb(conn)
            except Exception:
                log.exception("close_listener_failed", server=self.name, peer=conn.remote_addr)

    def _make_connection(self) -> RemotingConnection:
        conn = RemotingConnection(
            self.dispatcher,
            opaque=self._opaque,
            on_close=self._on_close,
            max_frame_size=self.max_frame_size,
            role="server",
            idle_poller=self.idle_poller,
        )
        self.connections.add(conn)
        return conn

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self.idle_poller = IdlePoller(loop, self._idle_poll_us)
        if self._idle_poll_us and self.idle_poller.single_cpu:
            log.info("idle_poll_off_single_cpu", server=self.name, idle_poll_us=self._idle_poll_us)
        self._server = await loop.create_server(
            self._make_connection, self.host, self.port, reuse_address=True, backlog=1024
        )
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        self._idle_task = asyncio.create_task(self._close_idle(), name=f"{self.name}-idle-scan")
        return sock[0], sock[1]

    async def _close_idle(self) -> None:
        interval = max(0.5, min(10.0, self.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self.idle_timeout_s
            for conn in list(self.connections):
                if conn.last_active < deadline and conn.pending_count == 0:
                    log.info("idle_connection_closed", server=self.name, peer=conn.remote_addr)
                    conn.close()

    async def stop(self) -> None:
        if self.idle_poller is not None:
            self.idle_poller.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        await self.dispatcher.close()
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
