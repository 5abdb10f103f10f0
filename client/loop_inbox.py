"""LoopInbox: items handed to an event loop from other threads, many per wake-up of the loop.

`call_soon_threadsafe` per item costs a write to the loop's wake-up pipe and a callback each. An inbox
appends items to a deque and schedules one drain for all that arrive before the loop gets to it: the
blocking facade's calls (client.sync.LoopThread), listener outcomes (client.listener_threads) and what
blocking pollers took (client.consumer.lite_pull_consumer).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LoopInbox"]

T = TypeVar("T")


class LoopInbox(Generic[T]):
    """Items `put` from any thread; `drain()` runs on `loop` once for every batch of them and empties
    `items` (popleft until empty). An item put while a drain runs gets a drain of its own."""

    __slots__ = ("items", "loop", "_drain", "_scheduled")

    def __init__(self, drain: Callable[[], None], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.items: collections.deque[T] = collections.deque()
        self.loop = loop  # (may be set later, before the first put)
        self._drain = drain
        self._scheduled = False

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: T) -> None:
        """Append `item` and have a drain scheduled; raises what call_soon_threadsafe raises (RuntimeError:
        the loop is closed), the item left undrained."""
        self.items.append(item)
        if not self._scheduled:
            self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._run)  # type: ignore[union-attr]
            except BaseException:
                self._scheduled = False
                raise

    def _run(self) -> None:
        self._scheduled = False  # (first: an item put from now on schedules the next drain)
        self._drain()
