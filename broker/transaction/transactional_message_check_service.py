"""TransactionalMessageCheckService: runs a check round every `transactionCheckInterval` ms.

Each round asks producers about half messages older than `transactionTimeOut` (or their
CHECK_IMMUNITY_TIME_IN_SECONDS) that have no decision yet, and gives up on those already asked
`transactionCheckMax` times. Both keys are read at every round, so UPDATE_BROKER_CONFIG applies at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import structlog

from store.message_store import StoreNotAvailableError

from .transactional_message_check_listener import TransactionalMessageCheckListener
from .transactional_message_service import TransactionalMessageService

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)


class TransactionalMessageCheckService:
    def __init__(
        self,
        controller: BrokerController,
        service: TransactionalMessageService,
        listener: TransactionalMessageCheckListener | None = None,
    ) -> None:
        self.c = controller
        self.service = service
        self.listener = listener or TransactionalMessageCheckListener(controller)
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self.rounds = 0

    def start(self) -> None:
        if self._task is not None:
            return
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="transaction-check")
        log.info("transaction_check_service_started", interval_ms=self.c.broker_config.transactionCheckInterval)

    def wakeup(self) -> None:
        """Run a round now instead of at the end of the interval."""
        if self._wakeup is not None:
            self._wakeup.set()

    async def _run(self) -> None:
        assert self._wakeup is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.c.broker_config.transactionCheckInterval / 1000.0)
            self._wakeup.clear()
            await self.check_once()

    async def check_once(self) -> int:
        bc = self.c.broker_config
        t0 = time.monotonic()
        try:
            asked = await self.service.check(bc.transactionTimeOut, bc.transactionCheckMax, self.listener)
        except StoreNotAvailableError:
            return 0
        except Exception:
            log.exception("transaction_check_failed")
            return 0
        self.rounds += 1
        if asked:
            log.info("transaction_check_done", asked=asked, ms=int((time.monotonic() - t0) * 1000))
        return asked

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
