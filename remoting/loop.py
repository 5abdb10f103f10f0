"""Event loop helpers: uvloop where it imports (asyncio's default otherwise), and stopping a background task."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# How often a full collection looks at everything again (see LongLivedFreezer).
RESCAN_INTERVAL_S = 600.0


class LongLivedFreezer:
    """Keeps the cyclic collector's full collections proportional to what is new, not to all a process holds.

    A broker builds most of its long-lived objects after start-up: each queue of each topic is about a
    dozen tracked objects (ConsumeQueue, its files, mmaps, views, locks, the producer's memo). A full
    collection walks them all, on whatever thread triggered it: with 2 000 topics x 4 queues 10-24 ms
    with the loop stopped, every few seconds under load. So after each full collection what survived it
    is frozen (gc.freeze: still freed by reference counting, no longer walked), and the next one walks
    only what became long-lived since.

    The price: a cycle among frozen objects that later becomes garbage (a closed connection's objects,
    a deleted topic's queues) is not collected while frozen. So once every `rescan_interval_s` the frozen
    objects go back (gc.unfreeze) and the next full collection walks everything once, collects such
    cycles and freezes the rest again.
    """

    def __init__(self, rescan_interval_s: float = RESCAN_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.rescan_interval_s = rescan_interval_s
        self._clock = clock
        self._next_rescan = clock() + rescan_interval_s
        self._rescan_pending = False  # unfrozen: the next full collection walks everything, then freezes
        self.freezes = 0
        self.rescans = 0

    def install(self) -> None:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # At the end of a full collection the younger generations are empty: everything tracked is in
        # the oldest one, and reachable.
        if phase != "stop" or info["generation"] != 2:
            return
        now = self._clock()
        if not self._rescan_pending and now >= self._next_rescan:
            self._next_rescan = now + self.rescan_interval_s
            self._rescan_pending = True
            self.rescans += 1
            gc.unfreeze()  # the next full collection walks everything once
        else:
            # (After a rescan whatever the time: where full collections come further apart than the
            # interval, each would otherwise unfreeze and none freeze again.)
            self._rescan_pending = False
            self.freezes += 1
            gc.freeze()


def run(main: Coroutine[Any, Any, T]) -> T:
    # What is alive now (modules, classes, pydantic schemas: hundreds of thousands of objects) lives
    # as long as the process: move it out of the collector's sight so that full collections, which
    # the many short-lived objects of a busy client trigger, stop re-scanning it. Measured on the
    # pipelined send path: gc went from ~11 to ~3 us of ~44 us CPU per message. What becomes
    # long-lived later follows after the full collection it survives (LongLivedFreezer).
    gc.freeze()
    freezer = LongLivedFreezer()
    freezer.install()
    try:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a hard dependency on Linux
            return asyncio.run(main)
        return uvloop.run(main)
    finally:
        freezer.uninstall()


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def in_slices(items: Sequence[T], size: int) -> AsyncIterator[Sequence[T]]:
    """`items` a slice of `size` at a time, letting the loop run other tasks between slices: a pass over
    every queue of a broker with thousands of topics must not hold the loop for all of them at once."""
    for start in range(0, len(items), size):
        if start:
            await asyncio.sleep(0)
        yield items[start : start + size]


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a service's background task and wait until it has finished (a stop() step)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
