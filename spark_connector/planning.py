"""Micro-batch planning: admission control over queues and splitting ranges into Spark partitions.

Pure functions over `{MessageQueue: offset}` maps, so they are tested without Spark or a broker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from client.message import MessageQueue

__all__ = ["QueueRangePartition", "plan_partitions", "rate_limit"]


class QueueRangePartition(InputPartition):
    """Read queue `mq` from offset `start` (inclusive) to `end` (exclusive). Picklable."""

    def __init__(self, topic: str, broker_name: str, queue_id: int, start: int, end: int) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.start = start
        self.end = end

    @property
    def mq(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueueRangePartition) and (
            self.topic,
            self.broker_name,
            self.queue_id,
            self.start,
            self.end,
        ) == (other.topic, other.broker_name, other.queue_id, other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.topic, self.broker_name, self.queue_id, self.start, self.end))

    def __repr__(self) -> str:
        return f"QueueRangePartition({self.topic}/{self.broker_name}/{self.queue_id} [{self.start}, {self.end}))"


@dataclass(frozen=True, slots=True)
class _Share:
    mq: MessageQueue
    backlog: int


def rate_limit(
    start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int], limit: int
) -> dict[MessageQueue, int]:
    """End offsets that admit at most `limit` offsets in total, spread over queues by backlog.

    Like Spark's Kafka source, each queue gets a share proportional to its backlog (floor), and
    what rounding leaves over goes to the queues with the largest remainders, so exactly
    min(limit, total backlog) offsets are admitted and every batch makes progress. Queues absent
    from `start` begin at 0 (new queues); queues absent from `latest` keep their start offset.
    """
    if limit <= 0:
        raise ValueError("limit must be > 0")
    ends: dict[MessageQueue, int] = dict(start)
    shares: list[_Share] = []
    for mq, hi in latest.items():
        lo = start.get(mq, 0)
        ends[mq] = lo  # no backlog (or behind its start: the data-loss check is elsewhere) stays put
        if hi > lo:
            shares.append(_Share(mq, hi - lo))
    total = sum(s.backlog for s in shares)
    if total <= limit:
        for s in shares:
            ends[s.mq] = start.get(s.mq, 0) + s.backlog
        return ends
    granted: dict[MessageQueue, int] = {}
    fractions: list[tuple[float, MessageQueue]] = []
    for s in shares:
        exact = limit * s.backlog / total
        whole = min(s.backlog, math.floor(exact))
        granted[s.mq] = whole
        fractions.append((exact - whole, s.mq))
    left = limit - sum(granted.values())
    backlog = {s.mq: s.backlog for s in shares}
    # Largest remainder first; ties broken by queue order so planning is deterministic.
    for _, mq in sorted(fractions, key=lambda f: (-f[0], f[1])):
        if left <= 0:
            break
        if granted[mq] < backlog[mq]:
            granted[mq] += 1
            left -= 1
    for mq, n in granted.items():
        ends[mq] = start.get(mq, 0) + n
    return ends


def plan_partitions(
    start: Mapping[MessageQueue, int],
    end: Mapping[MessageQueue, int],
    *,
    max_records_per_partition: int,
    min_partitions: int | None = None,
) -> list[QueueRangePartition]:
    """One partition per queue with new offsets, split so none exceeds `max_records_per_partition`
    offsets and (when `min_partitions` is set) there are at least that many partitions in total
    (big ranges split first, never below one offset per partition). Queues absent from `start`
    begin at 0.
    """
    ranges: list[tuple[MessageQueue, int, int]] = []
    for mq in sorted(end):
        lo, hi = start.get(mq, 0), end[mq]
        if hi > lo:
            ranges.append((mq, lo, hi))
    if not ranges:
        return []
    pieces = [max(1, math.ceil((hi - lo) / max_records_per_partition)) for _, lo, hi in ranges]
    if min_partitions and sum(pieces) < min_partitions:
        total = sum(hi - lo for _, lo, hi in ranges)
        for i, (_, lo, hi) in enumerate(ranges):
            want = math.ceil(min_partitions * (hi - lo) / total)
            pieces[i] = max(pieces[i], min(hi - lo, want))
    out: list[QueueRangePartition] = []
    for (mq, lo, hi), n in zip(ranges, pieces, strict=True):
        size = hi - lo
        for k in range(n):
            a = lo + size * k // n
            b = lo + size * (k + 1) // n
            if b > a:
                out.append(QueueRangePartition(mq.topic, mq.broker_name, mq.queue_id, a, b))
    return out


def total_offsets(parts: Sequence[QueueRangePartition]) -> int:
    return sum(p.end - p.start for p in parts)
