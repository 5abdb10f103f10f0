"""The threads a plain-function (blocking) listener runs in: a push consumer's message listener, a
transaction producer's local-transaction listener.

`run_in_executor` on a `concurrent.futures.ThreadPoolExecutor` cost a plain listener, per call, a
concurrent future, a wrapped asyncio future with callbacks both ways, and a wake-up of the event loop
for its outcome: a no-op listener topped out near 40k messages/s where an `async def` one runs at
~190k. Here the loop hands calls to the threads through a queue.SimpleQueue and the threads hand
outcomes back through a LoopInbox, which the loop empties in one callback for every outcome that
arrived meanwhile: one wake-up of the loop for many calls. A queued call wakes an idle thread (or starts one, up
to the limit, when none is idle), as a pool's submit does, so listeners that block (I/O) still run side
by side.

A caller that needs no awaitable (the push consumer's plain-listener path) queues a call with a callback
instead (`submit_callback`): no future, and the outcome handed to it directly in that same callback.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeAlias

import structlog

from .loop_inbox import LoopInbox

__all__ = ["ListenerThreads", "OutcomeCallback"]

log = structlog.get_logger(__name__)

# Called on the loop with (result, None) or (None, the exception); a queued call dropped by shutdown()
# gets (None, asyncio.CancelledError()).
OutcomeCallback: TypeAlias = Callable[[Any, "BaseException | None"], None]
# Where a call's outcome goes: the future submit() returned, or a submit_callback() callback.
_Target: TypeAlias = "asyncio.Future[Any] | OutcomeCallback"
_Outcome: TypeAlias = tuple[_Target, Any, "BaseException | None"]
_Future = asyncio.Future


class ListenerThreads:
    """Up to `max_threads` threads (started as calls need them, named `name`_1, _2, ...) calling
    `fn(msgs, context)` (submit), or any function (submit_call)."""

    def __init__(self, fn: Callable[..., Any] | None, max_threads: int, name: str) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {max_threads}")
        self.fn = fn
        self.max_threads = max_threads
        self.name = name
        # Calls waiting for a thread, (future or callback, function, arguments), and one None per thread
        # once shut down; bounded by the callers (the consume service's calls in flight, a transaction
        # producer's sends in flight). A SimpleQueue: its put and get are C calls that wake one waiting
        # thread, not a Python-level Condition on the loop's path.
        self._calls: queue.SimpleQueue[tuple[_Target, Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._idle = 0  # threads waiting in _calls.get (or woken from it and not yet running)
        self._threads: list[threading.Thread] = []
        self._closed = False
        # Outcomes on their way back to the loop, delivered many per wake-up of it.
        self._outcomes: LoopInbox[_Outcome] = LoopInbox(self._deliver)
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
            loop = self._loop = self._outcomes.loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue(fut, fn, args)
        return fut

    def submit_callback(self, fn: Callable[..., Any], args: tuple[Any, ...], done: OutcomeCallback) -> None:
        """Queue fn(*args) (on the loop thread); `done(result, exc)` is called on the loop with its outcome."""
        if self._loop is None:
            self._loop = self._outcomes.loop = asyncio.get_running_loop()
        self._queue(done, fn, args)

    def _queue(self, target: _Target, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if self._closed:
            raise RuntimeError(f"the listener threads of {self.name} are shut down")
        calls = self._calls
        calls.put((target, fn, args))
        # No thread idle: one more (up to the limit), as ThreadPoolExecutor's submit starts one. Not one
        # per call waiting: short calls (the usual listener) run best on few threads, since each thread
        # more is one more contender for the GIL (a transaction listener's calls: ~5% fewer a second).
        if not self._idle and len(self._threads) < self.max_threads:
            t = threading.Thread(target=self._run, name=f"{self.name}_{len(self._threads) + 1}", daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self) -> None:
        get = self._calls.get
        outcomes = self._outcomes
        while True:
            self._idle += 1
            try:
                item = get()
            finally:
                self._idle -= 1
            if item is None:  # shut down
                return
            target, fn, args = item
            if target.__class__ is _Future and target.cancelled():  # (an attribute read: safe from this thread)
                continue
            try:
                outcome: _Outcome = (target, fn(*args), None)
            except BaseException as e:  # noqa: BLE001 - the awaiting coroutine gets it, as run_in_executor's
                outcome = (target, None, e)
            try:
                outcomes.put(outcome)
            except RuntimeError:  # the loop is closed: nobody waits for the outcome any more
                pass

    def _deliver(self) -> None:
        outcomes = self._outcomes.items
        while outcomes:
            target, result, exc = outcomes.popleft()
            if target.__class__ is not _Future:
                _call_back(target, result, exc)  # type: ignore[arg-type]
            elif target.done():  # cancelled meanwhile
                continue
            elif exc is not None:
                target.set_exception(exc)  # type: ignore[union-attr]
            else:
                target.set_result(result)  # type: ignore[union-attr]

    def shutdown(self) -> None:
        """Refuse new calls, cancel the queued ones; calls under way finish, then the threads end."""
        self._closed = True
        calls = self._calls
        queued = []
        while True:
            try:
                item = calls.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                queued.append(item)
        for _ in self._threads:
            calls.put(None)
        loop = self._loop
        for target, _fn, _args in queued:
            try:
                if target.__class__ is _Future:
                    loop.call_soon_threadsafe(target.cancel)  # type: ignore[union-attr]
                else:
                    loop.call_soon_threadsafe(_call_back, target, None, asyncio.CancelledError())  # type: ignore[union-attr]
            except RuntimeError:  # the loop is closed
                pass


def _call_back(done: OutcomeCallback, result: Any, exc: BaseException | None) -> None:
    try:
        done(result, exc)
    except Exception:  # one caller's bug must not lose the other outcomes of this delivery
        log.exception("listener_outcome_callback_failed", callback=getattr(done, "__qualname__", repr(done)))
