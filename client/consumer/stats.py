"""ConsumerStatsManager: a push consumer's pull and consume figures per topic, as RocketMQ reports them.

What `mqadmin consumerStatus` and the dashboard show for a client (ConsumerRunningInfo.statusTable): the
average pull round trip and consume call (ms) and the pulled, consumed and failed messages a second over the
last minute, and the messages that failed over the last hour. RocketMQ keeps those in StatsItems sampled
every 10 s (the minute's window) and every 10 minutes (the hour's).

The counting itself costs the hot paths one attribute increment each: every ProcessQueue counts its own
pulls and listener calls (see ProcessQueue.__init__), and this manager folds what each queue counted since
it last looked into per-topic totals when it samples, including queues a rebalance has dropped since.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from remoting.body import ConsumeStatus

if TYPE_CHECKING:
    from ..message import MessageQueue
    from .process_queue import ProcessQueue

MINUTE_SAMPLE_S = 10.0
HOUR_SAMPLE_S = 600.0
_KEEP = 7  # snapshots per window: 6 intervals, a minute of 10 s or an hour of 10 minutes

# The counters, in order: pull round trips (ms), pulls that found messages, messages pulled, listener call
# time (ms), listener calls, messages consumed, messages failed.
_N = 7
Counters = tuple[float, float, float, float, float, float, float]
_ZERO: Counters = (0.0,) * _N  # type: ignore[assignment]


def _counters(pq: ProcessQueue) -> Counters:
    return (pq.pull_rt_ms, pq.pull_found, pq.pulled_msgs, pq.consume_rt_ms, pq.consume_calls,
            pq.consume_ok, pq.consume_failed)


class ConsumerStatsManager:
    def __init__(self, queues: Callable[[], dict[MessageQueue, ProcessQueue]]) -> None:
        self._queues = queues
        self._seen: dict[ProcessQueue, tuple[str, Counters]] = {}
        self._totals: dict[str, list[float]] = {}
        now = time.monotonic()
        self._minute: deque[tuple[float, dict[str, Counters]]] = deque([(now, {})], maxlen=_KEEP)
        self._hour: deque[tuple[float, dict[str, Counters]]] = deque([(now, {})], maxlen=_KEEP)

    def _collect(self) -> None:
        """Fold each queue's counts since the last look into its topic's totals."""
        live = self._queues()
        seen = self._seen
        for mq, pq in live.items():
            if pq not in seen:
                seen[pq] = (mq.topic, _ZERO)
        live_queues = set(live.values())
        for pq, (topic, before) in list(seen.items()):
            now = _counters(pq)
            if now != before:
                totals = self._totals.setdefault(topic, [0.0] * _N)
                for i in range(_N):
                    totals[i] += now[i] - before[i]
            if pq.dropped or pq not in live_queues:
                del seen[pq]  # dropped: its counts are in; it counts no more
            else:
                seen[pq] = (topic, now)

    def _snapshot(self) -> dict[str, Counters]:
        return {t: tuple(v) for t, v in self._totals.items()}  # type: ignore[misc]

    def sample(self) -> None:
        """Every MINUTE_SAMPLE_S: a snapshot for the minute's window, and every HOUR_SAMPLE_S one for the hour's."""
        self._collect()
        now = time.monotonic()
        snap = self._snapshot()
        self._minute.append((now, snap))
        if now - self._hour[-1][0] >= HOUR_SAMPLE_S:
            self._hour.append((now, snap))

    def consume_status(self, topic: str) -> ConsumeStatus:
        """RocketMQ's ConsumeStatus for `topic`: the minute's averages and rates up to now, and the hour's failures."""
        self._collect()
        now = time.monotonic()
        cur = tuple(self._totals.get(topic, _ZERO))
        t0, first = self._minute[0]
        a = first.get(topic, _ZERO)
        d = [cur[i] - a[i] for i in range(_N)]
        dt = now - t0
        failed_in_hour = cur[6] - self._hour[0][1].get(topic, _ZERO)[6]
        return ConsumeStatus(
            pull_rt=d[0] / d[1] if d[1] else 0.0,
            pull_tps=d[2] / dt if dt > 0 else 0.0,
            consume_rt=d[3] / d[4] if d[4] else 0.0,
            consume_ok_tps=d[5] / dt if dt > 0 else 0.0,
            consume_failed_tps=d[6] / dt if dt > 0 else 0.0,
            consume_failed_msgs=int(failed_in_hour),
        )

