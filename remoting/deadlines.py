"""Deadlines without a timer each (Java's scanResponseTable, but exact): the connection's request
time-outs and the broker's held pulls.

Entries go into one FIFO per time-out value, so the deadlines in a FIFO only grow; finished heads are
dropped as new entries arrive, and one loop timer fires at the earliest unfinished deadline. An
unfinished head keeps finished entries behind it; a FIFO that doubles past its last compaction is
compacted, so it stays about as long as what is unfinished.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar


class Expirable(Protocol):
    finished: bool
    deadline: float  # time.monotonic()


E = TypeVar("E", bound=Expirable)

COMPACT_MIN = 4096  # smallest FIFO worth compacting


class DeadlineFifos(Generic[E]):
    __slots__ = ("_queues", "_compact_at", "_handle", "_due", "_on_expired", "_slack")

    def __init__(self, on_expired: Callable[[list[E], float], None], *, slack: float = 0.0) -> None:
        """on_expired(entries, now) gets the entries whose deadline passed, in deadline order per FIFO,
        after the scan (it may add new entries). slack: expire what is due within it too (the loop's
        clock has ms resolution: no re-arming for a sliver)."""
        self._queues: dict[Hashable, deque[E]] = {}
        self._compact_at: dict[Hashable, int] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._on_expired = on_expired
        self._slack = slack

    def add(self, key: Hashable, entry: E) -> None:
        """Track `entry`; `key` is its time-out value (entries of one key must come in deadline order)."""
        dq = self._queues.get(key)
        if dq is None:
            dq = self._queues[key] = deque()
        else:
            while dq and dq[0].finished:  # amortised O(1)
                dq.popleft()
            if len(dq) >= self._compact_at.get(key, COMPACT_MIN):
                dq = self._queues[key] = deque(e for e in dq if not e.finished)
                self._compact_at[key] = max(COMPACT_MIN, 2 * len(dq))
        dq.append(entry)
        if self._handle is None or entry.deadline < self._due:
            self._arm(entry.deadline)

    def clear(self) -> None:
        """Forget every entry and stop the timer."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._queues.clear()
        self._compact_at.clear()

    def _arm(self, due: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._due = due
        loop = asyncio.get_running_loop()
        # call_at takes loop.time(); deadlines are time.monotonic() (one clock on Linux; convert anyway).
        self._handle = loop.call_at(loop.time() + max(0.0, due - time.monotonic()), self._scan)

    def _scan(self) -> None:
        self._handle = None
        now = time.monotonic()
        limit = now + self._slack
        due = float("inf")
        expired: list[E] = []
        for key in list(self._queues):
            dq = self._queues[key]
            while dq:
                e = dq[0]
                if e.finished:
                    dq.popleft()
                elif e.deadline <= limit:
                    dq.popleft()
                    expired.append(e)
                else:
                    due = min(due, e.deadline)
                    break
            if not dq:
                del self._queues[key]
                self._compact_at.pop(key, None)
        if expired:
            self._on_expired(expired, now)
        if due != float("inf") and (self._handle is None or due < self._due):
            self._arm(due)
