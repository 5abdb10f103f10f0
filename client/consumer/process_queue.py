"""ProcessQueue: the client-side mirror of one message queue being consumed.

It holds the messages pulled but not yet finished, ordered by queue offset, which gives:

- flow control: `msg_count`, `msg_size` and `max_span()` tell the pull loop when to pause;
- the commit point: `remove_messages` returns the lowest offset still unfinished (or one past the
  highest seen when nothing is left), so offsets never advance past a message in progress;
- orderly consumption: `take_messages` moves messages to a "consuming" set that `commit`,
  `rollback` and `make_message_to_consume_again` resolve; `locked` / `last_lock_timestamp`
  mirror the broker-side queue lock.

Everything runs on the consumer's event loop thread: no locks needed besides `consume_lock`,
the asyncio lock an orderly listener call holds (rebalance waits on it before unlocking).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import operator
import time
from collections.abc import Iterable, Sequence
from typing import Any

from remoting.body import ProcessQueueInfo
from remoting.message import MessageConst, MessageExt

# RocketMQ's defaults (system properties rocketmq.client.rebalance.lockMaxLiveTime / lockInterval,
# rocketmq.client.pull.pullMaxIdleTime).
REBALANCE_LOCK_MAX_LIVE_TIME_MS = 30_000
REBALANCE_LOCK_INTERVAL_MS = 20_000
PULL_MAX_IDLE_TIME_MS = 120_000

__all__ = [
    "PULL_MAX_IDLE_TIME_MS",
    "REBALANCE_LOCK_INTERVAL_MS",
    "REBALANCE_LOCK_MAX_LIVE_TIME_MS",
    "ProcessQueue",
]


_body_length = operator.attrgetter("stored_body_length")  # C-speed per message in sum(map(...))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ProcessQueue:
    """Messages of one queue between pull and consume-done (see the module doc)."""

    def __init__(self, *, lock_max_live_time_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS) -> None:
        self._msgs: dict[int, MessageExt] = {}
        self._offsets: list[int] = []  # sorted keys of _msgs
        self._consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        self.msg_count = 0
        self.msg_size = 0
        self.msg_count_high_watermark = 0
        self.queue_offset_max = 0
        self.dropped = False
        # Orderly, dropped by a rebalance that unlocks it at the broker once no listener call holds it:
        # until then the lock is still ours, so the call in flight commits what it consumed.
        self.releasing = False
        self.locked = False
        self.last_lock_timestamp = now_ms()
        self.last_pull_timestamp = now_ms()
        self.last_consume_timestamp = now_ms()
        self.consuming = False
        self.msg_acc_cnt = 0
        self.try_unlock_times = 0
        self.lock_max_live_time_ms = lock_max_live_time_ms
        self._consume_lock: asyncio.Lock | None = None
        # Concurrent mode: messages put here but not yet handed to a listener call.
        self.pending: collections.deque[MessageExt] = collections.deque()
        self.ready = False  # queued for a consume worker
        # What ConsumerStatsManager reports (one increment each where it happens): round trips of the pulls
        # that found messages (ms) and how many, messages pulled, listener call time (ms) and calls,
        # messages consumed and failed.
        self.pull_rt_ms = 0.0
        self.pull_found = 0
        self.pulled_msgs = 0
        self.consume_rt_ms = 0.0
        self.consume_calls = 0
        self.consume_ok = 0
        self.consume_failed = 0

    # ------------------------------------------------------------------ state
    @property
    def consume_lock(self) -> asyncio.Lock:
        if self._consume_lock is None:
            self._consume_lock = asyncio.Lock()
        return self._consume_lock

    def is_lock_expired(self) -> bool:
        return now_ms() - self.last_lock_timestamp > self.lock_max_live_time_ms

    def is_pull_expired(self) -> bool:
        return now_ms() - self.last_pull_timestamp > PULL_MAX_IDLE_TIME_MS

    def set_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock_timestamp = now_ms()

    # ------------------------------------------------------------------ cache
    def put_messages(self, msgs: Sequence[MessageExt], max_offset: int | None = None) -> bool:
        """Cache pulled messages; True when an orderly consumer must start consuming this queue.
        `max_offset` is the queue's max offset from the pull (else read from the last message's
        MAX_OFFSET property)."""
        if not msgs:
            return self._start_consuming()
        offs = [m.queue_offset for m in msgs]
        cached = self._offsets
        if (
            (not cached or offs[0] > cached[-1])
            and (not self._consuming or offs[0] > self.queue_offset_max)
            and (len(offs) == 1 or (offs == sorted(offs) and len(set(offs)) == len(offs)))
        ):
            # A pull answer: ascending offsets past everything cached -- no duplicates, no sorting.
            self._msgs.update(zip(offs, msgs, strict=True))
            cached.extend(offs)
            valid = len(offs)
            if offs[-1] > self.queue_offset_max:
                self.queue_offset_max = offs[-1]
            self.msg_size += sum(map(_body_length, msgs))
        else:
            valid = 0
            for m in msgs:
                off = m.queue_offset
                if off in self._msgs or off in self._consuming:
                    continue
                self._msgs[off] = m
                if not cached or off > cached[-1]:
                    cached.append(off)
                else:
                    bisect.insort(cached, off)
                valid += 1
                self.queue_offset_max = max(self.queue_offset_max, off)
                self.msg_size += m.stored_body_length
        self.msg_count += valid
        self.msg_count_high_watermark = max(self.msg_count_high_watermark, self.msg_count)
        dispatch = self._start_consuming()
        last = msgs[-1]
        if max_offset is None:
            prop = last.properties.get(MessageConst.PROPERTY_MAX_OFFSET)
            if prop is not None:
                try:
                    max_offset = int(prop)
                except ValueError:
                    max_offset = None
        if max_offset is not None:
            acc = max_offset - last.queue_offset
            if acc > 0:
                self.msg_acc_cnt = acc
        return dispatch

    def _start_consuming(self) -> bool:
        if self._msgs and not self.consuming:
            self.consuming = True
            return True
        return False

    def max_span(self) -> int:
        return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    def first_offset(self) -> int | None:
        return self._offsets[0] if self._offsets else None

    def process_queue_info(self, commit_offset: int) -> ProcessQueueInfo:
        """Java's fillProcessQueueInfo: what ConsumerRunningInfo.mqTable reports of this queue."""
        taken = sorted(self._consuming)
        return ProcessQueueInfo(
            commit_offset=commit_offset,
            cached_msg_min_offset=self._offsets[0] if self._offsets else 0,
            cached_msg_max_offset=self._offsets[-1] if self._offsets else 0,
            cached_msg_count=len(self._offsets),
            cached_msg_size_in_mib=self.msg_size // (1024 * 1024),
            transaction_msg_min_offset=taken[0] if taken else 0,
            transaction_msg_max_offset=taken[-1] if taken else 0,
            transaction_msg_count=len(taken),
            locked=self.locked,
            try_unlock_times=self.try_unlock_times,
            last_lock_timestamp=self.last_lock_timestamp,
            droped=self.dropped,
            last_pull_timestamp=self.last_pull_timestamp,
            last_consume_timestamp=self.last_consume_timestamp,
        )

    def first_message(self) -> MessageExt | None:
        return self._msgs[self._offsets[0]] if self._offsets else None

    def contains(self, offset: int) -> bool:
        return offset in self._msgs

    def _remove_key(self, off: int) -> MessageExt | None:
        m = self._msgs.pop(off, None)
        if m is None:
            return None
        if self._offsets and self._offsets[0] == off:
            del self._offsets[0]
        else:
            i = bisect.bisect_left(self._offsets, off)
            if i < len(self._offsets) and self._offsets[i] == off:
                del self._offsets[i]
        return m

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Forget finished messages; the offset to commit (lowest unfinished, or max seen + 1), or
        -1 when nothing was cached."""
        self.last_consume_timestamp = now_ms()
        if not self._msgs:
            return -1
        result = self.queue_offset_max + 1
        offs = [m.queue_offset for m in msgs]
        cached = self._offsets
        n = len(offs)
        if n and cached[:n] == offs:
            # The oldest cached messages finished (the usual case): cut them off the front at once.
            pop = self._msgs.pop
            removed = [pop(off) for off in offs]
            del cached[:n]
            self.msg_count -= n
            self.msg_size -= sum(map(_body_length, removed))
        else:
            for off in offs:
                prev = self._remove_key(off)
                if prev is not None:
                    self.msg_count -= 1
                    self.msg_size -= prev.stored_body_length
        if cached:
            result = cached[0]
        return result

    def has_temp_message(self) -> bool:
        return bool(self._msgs)

    def clear(self) -> None:
        self._msgs.clear()
        self._offsets.clear()
        self._consuming.clear()
        self.pending.clear()
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0

    # ------------------------------------------------------------------ orderly
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """The lowest `batch_size` cached messages, moved to the consuming set. Empty -> not consuming."""
        self.last_consume_timestamp = now_ms()
        out: list[MessageExt] = []
        while self._offsets and len(out) < batch_size:
            off = self._offsets.pop(0)
            m = self._msgs.pop(off)
            self._consuming[off] = m
            out.append(m)
        if not out:
            self.consuming = False
        return out

    def commit(self) -> int:
        """The consuming set is done: the offset after it, or -1 when it was empty."""
        if not self._consuming:
            return -1
        last = max(self._consuming)
        self.msg_count -= len(self._consuming)
        self.msg_size -= sum(map(_body_length, self._consuming.values()))
        self._consuming.clear()
        return last + 1

    def rollback(self) -> None:
        self.put_back(list(self._consuming.values()))

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        self.put_back(msgs)

    def put_back(self, msgs: Iterable[MessageExt]) -> None:
        for m in msgs:
            off = m.queue_offset
            if self._consuming.pop(off, None) is None:
                continue
            self._msgs[off] = m
            bisect.insort(self._offsets, off)

    # ------------------------------------------------------------------ diagnostics
    def info(self) -> dict[str, Any]:
        """ProcessQueueInfo (Java field names) for GET_CONSUMER_RUNNING_INFO."""
        return {
            "cachedMsgMinOffset": self._offsets[0] if self._offsets else 0,
            "cachedMsgMaxOffset": self._offsets[-1] if self._offsets else 0,
            "cachedMsgCount": self.msg_count,
            "cachedMsgSizeInMiB": self.msg_size // (1024 * 1024),
            "transactionMsgMinOffset": min(self._consuming) if self._consuming else 0,
            "transactionMsgMaxOffset": max(self._consuming) if self._consuming else 0,
            "transactionMsgCount": len(self._consuming),
            "locked": self.locked,
            "tryUnlockTimes": self.try_unlock_times,
            "lastLockTimestamp": self.last_lock_timestamp,
            "droped": self.dropped,
            "lastPullTimestamp": self.last_pull_timestamp,
            "lastConsumeTimestamp": self.last_consume_timestamp,
        }
