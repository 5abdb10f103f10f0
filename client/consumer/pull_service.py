"""PullMessageService: one pull loop per assigned queue.

RocketMQ runs one thread that takes PullRequests off a queue and fires asynchronous pulls whose
callbacks queue the next pull. Here a queue's loop is driven the same way: `start_pull(request)`
(the consumer's synchronous pull start) sends the pull and returns PULL_SENT, and the response
callback calls `pull_done(request, delay)`, which sends the next pull at once from inside that
callback (no Task, Future or loop turn per pull; long polling makes "at once" cheap: the broker holds
the request up to 15 s until a message arrives). When a pull cannot start without awaiting
(connecting, a route lookup, orderly locking, a custom offset store) start_pull returns PULL_ASYNC
and the consumer's coroutine `pull_once(request)` runs in a Task instead. Either returns how long to
wait before the next pull (0 = at once) or None to end the loop.
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

_YIELD_EVERY = 16  # async path: back-to-back pulls of one queue between forced yields to the loop

__all__ = ["PULL_ASYNC", "PULL_SENT", "PullMessageService", "PullRequest"]


@dataclass(eq=False, slots=True)
class PullRequest:
    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    previously_locked: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # The service's loop driving this request (set by PullMessageService): an answer finds its loop
    # without a lookup by queue.
    pull_loop: Any = field(default=None, repr=False)

    def __str__(self) -> str:
        return (
            f"PullRequest [consumerGroup={self.consumer_group}, messageQueue={self.message_queue}, "
            f"nextOffset={self.next_offset}]"
        )


PullOnce = Callable[[PullRequest], Awaitable[float | None]]


PULL_SENT = object()  # start_pull: a pull is in flight; its callback calls pull_done
PULL_ASYNC = object()  # start_pull: this pull must await something: run pull_once in a Task
StartPull = Callable[[PullRequest], Any]  # -> PULL_SENT | PULL_ASYNC | delay (float) | None (stop)


class _PullLoop:
    """One queue's loop: its request and whatever drives it now (a timer, a Task or a pull in flight)."""

    __slots__ = ("req", "timer", "task", "active")

    def __init__(self, req: PullRequest) -> None:
        self.req = req
        self.timer: asyncio.Handle | None = None
        self.task: asyncio.Task[None] | None = None
        self.active = True


class PullMessageService:
    """Runs a pull loop per PullRequest until its ProcessQueue is dropped (see the module doc)."""

    def __init__(self, pull_once: PullOnce, name: str = "pull", start_pull: StartPull | None = None) -> None:
        self._pull_once = pull_once
        self._start_pull = start_pull
        self._name = name
        self._loops: dict[MessageQueue, _PullLoop] = {}
        self._later: set[asyncio.Task[Any]] = set()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def running_queues(self) -> list[MessageQueue]:
        return list(self._loops)

    def is_current(self, req: PullRequest) -> bool:
        """True while `req` drives its queue's loop (a pull answered after a stop is dropped)."""
        lp = req.pull_loop
        return lp is not None and lp.active and not self._stopped

    def execute_pull_request_immediately(self, req: PullRequest) -> None:
        self.execute_pull_request_later(req, 0.0)

    def execute_pull_request_later(self, req: PullRequest, delay_s: float) -> None:
        """Start the queue's pull loop (after `delay_s`); a loop of an older request for the same
        queue is stopped first (a queue has one loop at a time)."""
        if self._stopped:
            return
        mq = req.message_queue
        old = self._loops.get(mq)
        if old is not None:
            if old.req is req:
                return
            self._cancel(old)
        lp = self._loops[mq] = req.pull_loop = _PullLoop(req)
        loop = asyncio.get_running_loop()
        lp.timer = loop.call_later(delay_s, self._step, lp) if delay_s > 0 else loop.call_soon(self._step, lp)

    @staticmethod
    def _cancel(lp: _PullLoop) -> None:
        lp.active = False
        if lp.timer is not None:
            lp.timer.cancel()
            lp.timer = None
        if lp.task is not None:
            lp.task.cancel()
            lp.task = None

    def _end(self, lp: _PullLoop) -> None:
        lp.active = False
        mq = lp.req.message_queue
        if self._loops.get(mq) is lp:
            del self._loops[mq]

    def _step(self, lp: _PullLoop) -> None:
        """One pull of the loop's queue, now."""
        lp.timer = None
        if not lp.active:
            return
        if self._stopped or lp.req.process_queue.dropped:
            self._end(lp)
            return
        r: Any = PULL_ASYNC
        if self._start_pull is not None:
            try:
                r = self._start_pull(lp.req)
            except Exception as e:  # a bug in the pull start: end the loop loudly, as a crashed Task would
                log.error("pull_loop_crashed", mq=str(lp.req.message_queue), error=f"{type(e).__name__}: {e}")
                self._end(lp)
                return
        if r is PULL_SENT:
            return
        if r is PULL_ASYNC:
            task = lp.task = asyncio.get_running_loop().create_task(
                self._run_async(lp), name=f"{self._name}:{lp.req.message_queue}"
            )
            task.add_done_callback(lambda t, lp=lp: self._async_done(lp, t))
            return
        self._continue(lp, r, False)

    async def _run_async(self, lp: _PullLoop) -> None:
        pq = lp.req.process_queue
        back_to_back = 0
        while True:
            delay = await self._pull_once(lp.req)
            if not lp.active:
                return
            if self._start_pull is None and delay == 0 and not self._stopped and not pq.dropped:
                # No synchronous start: this Task keeps pulling (one Task per loop, not per pull); a
                # yield every few back-to-back pulls guards against a pull_once that never awaits.
                back_to_back += 1
                if back_to_back >= _YIELD_EVERY:
                    back_to_back = 0
                    await asyncio.sleep(0)
                continue
            lp.task = None
            self._continue(lp, delay, True)
            return

    def _async_done(self, lp: _PullLoop, task: asyncio.Task[None]) -> None:
        if lp.task is task:
            lp.task = None
        if task.cancelled():
            return
        e = task.exception()
        if e is not None:
            log.error("pull_loop_crashed", mq=str(lp.req.message_queue), error=f"{type(e).__name__}: {e}")
            self._end(lp)

    def pull_done(self, req: PullRequest, delay: float | None) -> None:
        """The answer of the pull start_pull sent was handled: continue the loop after `delay`."""
        lp = req.pull_loop
        if lp is not None and lp.active:
            self._continue(lp, delay, True)

    def _continue(self, lp: _PullLoop, delay: float | None, at_once_ok: bool) -> None:
        if delay is None or self._stopped or lp.req.process_queue.dropped:
            self._end(lp)
            return
        if delay > 0:
            lp.timer = asyncio.get_running_loop().call_later(delay, self._step, lp)
        elif at_once_ok:
            # Right from the previous pull's answer: the next pull goes out in this loop turn.
            self._step(lp)
        else:
            # Nothing was sent or awaited: a loop turn in between (no busy spin inside one callback).
            lp.timer = asyncio.get_running_loop().call_soon(self._step, lp)

    def wake(self, req: PullRequest) -> None:
        """Take the request's next pull now rather than at the end of the delay it is waiting out (the
        consumer's flow control found room again); nothing when a pull is in flight or the loop ended."""
        lp = req.pull_loop
        if lp is None or not lp.active or lp.timer is None or self._stopped:
            return
        lp.timer.cancel()
        lp.timer = asyncio.get_running_loop().call_soon(self._step, lp)

    def stop_queue(self, mq: MessageQueue, pq: ProcessQueue | None = None) -> None:
        """Stop the queue's loop (its ProcessQueue was dropped); with `pq`, only a loop feeding it."""
        lp = self._loops.get(mq)
        if lp is None or (pq is not None and lp.req.process_queue is not pq):
            return
        del self._loops[mq]
        self._cancel(lp)

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
        tasks = [lp.task for lp in self._loops.values() if lp.task is not None] + list(self._later)
        for lp in self._loops.values():
            self._cancel(lp)
        self._loops.clear()
        self._later.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(tasks, timeout=5)
