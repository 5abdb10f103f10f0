"""RebalanceLockManager: which client holds each queue of a group (orderly consumption).

A lock lasts REBALANCE_LOCK_MAX_LIVE_TIME (60 s) after its holder last renewed it; clients renew
every 20 s. Everything runs on the event loop, so no lock object is needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import structlog

from remoting.body import MessageQueue

log = structlog.get_logger(__name__)

REBALANCE_LOCK_MAX_LIVE_TIME_MS = 60000


class _LockEntry:
    __slots__ = ("client_id", "last_update")

    def __init__(self, client_id: str, now: float) -> None:
        self.client_id = client_id
        self.last_update = now

    def is_expired(self, now: float, max_live_s: float) -> bool:
        return now - self.last_update > max_live_s


class RebalanceLockManager:
    def __init__(self, max_live_time_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS) -> None:
        self.mq_lock_table: dict[str, dict[MessageQueue, _LockEntry]] = {}
        self.max_live_s = max_live_time_ms / 1000.0

    def is_locked(self, group: str, mq: MessageQueue, client_id: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        entry = self.mq_lock_table.get(group, {}).get(mq)
        if entry is not None and entry.client_id == client_id and not entry.is_expired(now, self.max_live_s):
            entry.last_update = now
            return True
        return False

    def try_lock(self, group: str, mq: MessageQueue, client_id: str, now: float | None = None) -> bool:
        return mq in self.try_lock_batch(group, [mq], client_id, now)

    def try_lock_batch(
        self, group: str, mqs: Iterable[MessageQueue], client_id: str, now: float | None = None
    ) -> set[MessageQueue]:
        now = time.monotonic() if now is None else now
        table = self.mq_lock_table.setdefault(group, {})
        locked: set[MessageQueue] = set()
        for mq in mqs:
            entry = table.get(mq)
            if entry is None:
                table[mq] = _LockEntry(client_id, now)
                locked.add(mq)
                log.debug("mq_locked", group=group, client_id=client_id, mq=mq.key_json())
            elif entry.client_id == client_id:
                entry.last_update = now
                locked.add(mq)
            elif entry.is_expired(now, self.max_live_s):
                log.info("mq_lock_taken_over", group=group, old=entry.client_id, new=client_id, mq=mq.key_json())
                entry.client_id = client_id
                entry.last_update = now
                locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        table = self.mq_lock_table.get(group)
        if not table:
            return
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry.client_id == client_id:
                del table[mq]
        if not table:
            del self.mq_lock_table[group]
