"""The threads a plain-function (blocking) listener runs in: a push consumer's message listener, a
transaction producer's local-transaction listener.

`run_in_executor` on a `concurrent.futures.ThreadPoolExecutor` cost a plain listener, per call, a
concurrent future, a wrapped asyncio future with callbacks both ways, and a wake-up of the event loop
for its outcome: a no-op listener topped out near 40k messages/s where an `async def` one runs at
~190k. Here the loop hands calls to the threads through one deque and the threads hand outcomes back
through another, which the loop empties in one callback for every outcome that arrived meanwhile:
one wake-up of the loop for many calls. A queued call wakes an idle thread (or starts one, up to the
limit), as a pool's submit does, so listeners that block (I/O) still run side by side.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ListenerThreads"]

_Outcome = tuple["asyncio.Future[Any]", Any, "BaseException | None"]


class ListenerThreads:
    """Up to `max_threads` threads (started as calls need them, named `name`_1, _2, ...) calling
    `fn(msgs, context)` (submit), or any function (submit_call)."""

    def __init__(self, fn: Callable[..., Any] | None, max_threads: int, name: str) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {max_threads}")
        self.fn = fn
        self.max_threads = max_threads
        self.name = name
        self._cv = threading.Condition(threading.Lock())
        # Calls waiting for a thread, (future, function, arguments); bounded by the callers (the consume
        # service's workers, one call each; a transaction producer's sends in flight).
        self._calls: collections.deque[tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._idle = 0  # threads waiting on _cv for a call
        self._threads: list[threading.Thread] = []
        self._closed = False
        # Outcomes on their way back to the loop; _deliver_scheduled: a _deliver is queued on the loop.
        self._outcomes: collections.deque[_Outcome] = collections.deque()
        self._deliver_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def threads(self) -> int:
        return len(self._threads)

    def submit(self, msgs: Any, context: Any) -> asyncio.Future[Any]:
        """Queue a listener call (on the loop thread); the future gets what it returns or raises.
        Cancelling the future before a thread takes the call skips it."""
        return self.submit_call(self.fn, msgs, context)  # type: ignore[arg-type]

    def submit_call(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """submit() for fn(*args)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._cv:
            if self._closed:
                raise RuntimeError(f"the listener threads of {self.name} are shut down")
            self._calls.append((fut, fn, args))
            if self._idle:
                self._cv.notify()
            elif len(self._threads) < self.max_threads:
                t = threading.Thread(target=self._run, name=f"{self.name}_{len(self._threads) + 1}", daemon=True)
                self._threads.append(t)
                t.start()
        return fut

    def _run(self) -> None:
        cv = self._cv
        calls = self._calls
        outcomes = self._outcomes
        while True:
            with cv:
                while not calls:
                    if self._closed:
                        return
                    self._idle += 1
                    try:
                        cv.wait()
                    finally:
                        self._idle -= 1
                fut, fn, args = calls.popleft()
            if fut.cancelled():  # (a plain attribute read: safe from this thread)
                continue
            try:
                outcome: _Outcome = (fut, fn(*args), None)
            except BaseException as e:  # noqa: BLE001 - the awaiting coroutine gets it, as run_in_executor's
                outcome = (fut, None, e)
            outcomes.append(outcome)
            if not self._deliver_scheduled:
                self._deliver_scheduled = True
                try:
                    fut.get_loop().call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody waits for the outcome any more
                    self._deliver_scheduled = False

    def _deliver(self) -> None:
        self._deliver_scheduled = False  # (first: an outcome appended from now on schedules the next one)
        outcomes = self._outcomes
        while outcomes:
            fut, result, exc = outcomes.popleft()
            if fut.done():  # cancelled meanwhile
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

    def shutdown(self) -> None:
        """Refuse new calls, cancel the queued ones; calls under way finish, then the threads end."""
        with self._cv:
            self._closed = True
            queued = list(self._calls)
            self._calls.clear()
            self._cv.notify_all()
        for fut, _fn, _args in queued:
            loop = fut.get_loop()
            try:
                loop.call_soon_threadsafe(fut.cancel)
            except RuntimeError:  # the loop is closed
                pass
