"""Deadlines without a timer each (Java's scanResponseTable, but exact): the connection's request
time-outs and the broker's held pulls.

Entries go into one insertion-ordered dict per time-out value, so the deadlines in one only grow, and one
loop timer fires at the earliest unfinished deadline. An entry answered before its deadline is taken out
at once (`discard`, O(1)); one finished without being discarded is dropped when the time-out scan reaches
it. (A FIFO deque, dropping finished entries only at its head, kept every entry answered behind one
still waiting: a broker holding a pull for 15 s on an idle queue while it answers 8 000 pulls a second on
busy ones kept thousands of answered pulls, with their requests, and compacting them freed them all at
once, 2-3 ms of loop time every ~0.6 s.)
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar


class Expirable(Protocol):
    """An entry: hashed by identity (a dict key; a class defining __eq__ would merge or refuse entries)."""

    finished: bool
    deadline: float  # time.monotonic()


E = TypeVar("E", bound=Expirable)

_SHRINK_BYTES = 256 * 1024  # a time-out dict this large ...
_SHRINK_LIVE = 1024  # ... holding fewer entries is copied by the scan


class DeadlineFifos(Generic[E]):
    __slots__ = ("_queues", "_handle", "_due", "_on_expired", "_slack")

    def __init__(self, on_expired: Callable[[list[E], float], None], *, slack: float = 0.0) -> None:
        """on_expired(entries, now) gets the entries whose deadline passed, in deadline order per time-out
        value, after the scan (it may add new entries). slack: expire what is due within it too (the loop's
        clock has ms resolution: no re-arming for a sliver)."""
        # Per time-out value, the entries in deadline order (a dict: ordered, O(1) removal anywhere).
        self._queues: dict[Hashable, dict[E, None]] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._on_expired = on_expired
        self._slack = slack

    def add(self, key: Hashable, entry: E) -> None:
        """Track `entry`; `key` is its time-out value (entries of one key must come in deadline order). An
        entry object used again (a request state reused for the next request) moves to the back."""
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = {}
        elif entry in q:
            del q[entry]
        q[entry] = None
        if self._handle is None or entry.deadline < self._due:
            self._arm(entry.deadline)

    def discard(self, key: Hashable, entry: E) -> None:
        """Stop tracking `entry` (answered before its deadline); nothing if it is not tracked under `key`."""
        q = self._queues.get(key)
        if q is not None:
            q.pop(entry, None)

    def __len__(self) -> int:
        """Entries tracked (finished ones not discarded included, until the scan drops them)."""
        return sum(len(q) for q in self._queues.values())

    def clear(self) -> None:
        """Forget every entry and stop the timer."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._queues.clear()

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
        queues = self._queues
        for key in list(queues):
            q = queues[key]
            gone: list[E] = []
            for e in q:
                if e.finished:
                    gone.append(e)
                elif e.deadline <= limit:
                    gone.append(e)
                    expired.append(e)
                else:
                    due = min(due, e.deadline)
                    break
            for e in gone:
                del q[e]
            if not q:
                del queues[key]
            elif sys.getsizeof(q) > _SHRINK_BYTES and len(q) < _SHRINK_LIVE:
                # A dict keeps its size after a burst drains (200k in flight: ~10 MB for one entry left), and
                # each scan walks its emptied front: a copy is sized for what is left.
                queues[key] = dict(q)
        try:
            if expired:
                self._on_expired(expired, now)
        finally:  # a raising callback must not leave the rest without a timer
            if due != float("inf") and (self._handle is None or due < self._due):
                self._arm(due)
