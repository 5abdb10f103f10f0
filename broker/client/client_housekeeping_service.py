"""ClientHousekeepingService: drops clients whose connection closed or who stopped heartbeating."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from remoting.connection import RemotingConnection
from remoting.loop import cancel_and_wait

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

SCAN_INTERVAL_S = 10.0


class ClientHousekeepingService:
    def __init__(self, controller: BrokerController, scan_interval_s: float = SCAN_INTERVAL_S) -> None:
        self.controller = controller
        self.scan_interval_s = scan_interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="client-housekeeping")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                self.scan_exception_channel()
            except Exception:
                log.exception("client_housekeeping_failed")

    def scan_exception_channel(self) -> None:
        c = self.controller
        expired = c.consumer_manager.scan_not_active_channel()
        expired += c.producer_manager.scan_not_active_channel()
        for conn in set(expired):
            conn.close()

    def on_channel_close(self, conn: RemotingConnection) -> None:
        """A client connection closed: forget every producer and consumer on it now."""
        c = self.controller
        c.producer_manager.do_channel_close_event(conn)
        c.consumer_manager.do_channel_close_event(conn)
        c.pull_request_hold_service.on_channel_close(conn)
