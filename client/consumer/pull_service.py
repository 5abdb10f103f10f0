"""PullMessageService: one pull loop per assigned queue.

RocketMQ runs one thread that takes PullRequests off a queue and fires asynchronous pulls; in
asyncio the natural shape is a task per queue. The service owns those tasks (start, delay, stop);
what one pull does is the consumer's `pull_once(request)`, which returns how long to wait before
the next pull (0 = at once; long polling makes "at once" cheap: the broker holds the request up
to 15 s until a message arrives) or None to end the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from ..message import MessageQueue
from .process_queue import ProcessQueue

log = structlog.get_logger(__name__)

__all__ = ["PullMessageService", "PullRequest"]

_YIELD_EVERY = 16  # back-to-back pulls of one queue between forced yields to the loop


@dataclass(eq=False, slots=True)
class PullRequest:
    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    previously_locked: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return (
            f"PullRequest [consumerGroup={self.consumer_group}, messageQueue={self.message_queue}, "
            f"nextOffset={self.next_offset}]"
        )


PullOnce = Callable[[PullRequest], Awaitable[float | None]]


class PullMessageService:
    """Runs `pull_once` in a loop per PullRequest until its ProcessQueue is dropped."""

    def __init__(self, pull_once: PullOnce, name: str = "pull") -> None:
        self._pull_once = pull_once
        self._name = name
        self._tasks: dict[MessageQueue, tuple[PullRequest, asyncio.Task[None]]] = {}
        self._later: set[asyncio.Task[Any]] = set()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def running_queues(self) -> list[MessageQueue]:
        return [mq for mq, (_r, t) in self._tasks.items() if not t.done()]

    def execute_pull_request_immediately(self, req: PullRequest) -> None:
        self.execute_pull_request_later(req, 0.0)

    def execute_pull_request_later(self, req: PullRequest, delay_s: float) -> None:
        """Start the queue's pull loop (after `delay_s`); a loop of an older request for the same
        queue is cancelled first (a queue has one loop at a time)."""
        if self._stopped:
            return
        mq = req.message_queue
        old = self._tasks.get(mq)
        if old is not None and not old[1].done():
            if old[0] is req:
                return
            old[1].cancel()
        task = asyncio.get_running_loop().create_task(self._run(req, delay_s), name=f"{self._name}:{mq}")
        self._tasks[mq] = (req, task)
        task.add_done_callback(lambda t, mq=mq: self._done(mq, t))

    def _done(self, mq: MessageQueue, task: asyncio.Task[None]) -> None:
        cur = self._tasks.get(mq)
        if cur is not None and cur[1] is task:
            del self._tasks[mq]
        if not task.cancelled() and task.exception() is not None:
            e = task.exception()
            log.error("pull_loop_crashed", mq=str(mq), error=f"{type(e).__name__}: {e}")

    async def _run(self, req: PullRequest, delay_s: float) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        pq = req.process_queue
        back_to_back = 0
        while not self._stopped and not pq.dropped:
            delay = await self._pull_once(req)
            if delay is None:
                return
            if delay > 0:
                back_to_back = 0
                await asyncio.sleep(delay)
            else:
                # The next pull goes out at once (a pull awaits its answer, so other queues' loops
                # run meanwhile); a yield every few back-to-back pulls guards against a pull_once
                # that returns without awaiting anything.
                back_to_back += 1
                if back_to_back >= _YIELD_EVERY:
                    back_to_back = 0
                    await asyncio.sleep(0)

    def stop_queue(self, mq: MessageQueue, pq: ProcessQueue | None = None) -> None:
        """Cancel the queue's loop (its ProcessQueue was dropped); with `pq`, only a loop feeding it."""
        cur = self._tasks.get(mq)
        if cur is None or (pq is not None and cur[0].process_queue is not pq):
            return
        del self._tasks[mq]
        cur[1].cancel()

    def execute_task_later(self, fn: Callable[[], Awaitable[Any]], delay_s: float) -> None:
        """Run a coroutine function after a delay (tracked: cancelled by shutdown)."""
        if self._stopped:
            return

        async def later() -> None:
            await asyncio.sleep(delay_s)
            await fn()

        t = asyncio.get_running_loop().create_task(later())
        self._later.add(t)

        def done(task: asyncio.Task[Any]) -> None:
            self._later.discard(task)
            if not task.cancelled() and task.exception() is not None:
                e = task.exception()
                log.warning("delayed_task_failed", error=f"{type(e).__name__}: {e}")

        t.add_done_callback(done)

    async def shutdown(self) -> None:
        self._stopped = True
        tasks = [t for _r, t in self._tasks.values()] + list(self._later)
        self._tasks.clear()
        self._later.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(tasks, timeout=5)
