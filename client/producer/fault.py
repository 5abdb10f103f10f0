"""Producer-side broker fault avoidance: RocketMQ 4.x MQFaultStrategy and LatencyFaultToleranceImpl.

Off by default (`send_latency_fault_enable=False`): queue choice is then plain round robin that
skips the broker which just failed. When on, every send attempt reports its latency; a latency
at or over latency_max[i] makes the broker unavailable for not_available_duration[i], and a
failed attempt counts as 30 s (so 10 minutes of avoidance). Selection round-robins over queues
whose broker is available, else picks the least bad broker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..message import MessageQueue
from ..route import TopicPublishInfo

LATENCY_MAX: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000


def _now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(slots=True)
class FaultItem:
    name: str
    current_latency: float
    start_timestamp: float  # when the broker becomes available again (monotonic ms)

    def is_available(self, now: float | None = None) -> bool:
        return (now if now is not None else _now_ms()) >= self.start_timestamp

    def sort_key(self, now: float) -> tuple[int, float, float]:
        # available first, then lower latency, then the one that recovers sooner
        return (0 if self.is_available(now) else 1, self.current_latency, self.start_timestamp)


class LatencyFaultTolerance:
    """Per-broker fault items (Java's LatencyFaultToleranceImpl)."""

    def __init__(self) -> None:
        self._items: dict[str, FaultItem] = {}
        self._which_item_worst = 0

    def update_fault_item(self, name: str, current_latency: float, not_available_duration: float) -> None:
        start = _now_ms() + not_available_duration
        item = self._items.get(name)
        if item is None:
            self._items[name] = FaultItem(name, current_latency, start)
        else:
            item.current_latency = current_latency
            item.start_timestamp = start

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or item.is_available()

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """The least bad broker, rotating over the better half like Java."""
        if not self._items:
            return None
        now = _now_ms()
        items = sorted(self._items.values(), key=lambda i: i.sort_key(now))
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        self._which_item_worst += 1
        return items[self._which_item_worst % half].name

    def items(self) -> dict[str, FaultItem]:
        return dict(self._items)


class MQFaultStrategy:
    """Chooses the queue for the next send attempt and records each attempt's outcome."""

    def __init__(
        self,
        send_latency_fault_enable: bool = False,
        latency_max: tuple[int, ...] = LATENCY_MAX,
        not_available_duration: tuple[int, ...] = NOT_AVAILABLE_DURATION,
    ) -> None:
        if len(latency_max) != len(not_available_duration):
            raise ValueError("latency_max and not_available_duration must have the same length")
        self.send_latency_fault_enable = send_latency_fault_enable
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)
        self.fault_tolerance = LatencyFaultTolerance()

    def select_one_message_queue(self, info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue:
        if not self.send_latency_fault_enable:
            return info.select_one_message_queue(last_broker_name)
        queues = info.message_queues
        n = len(queues)
        index = info.next_index()
        for _ in range(n):
            mq = queues[index % n]
            index += 1
            if self.fault_tolerance.is_available(mq.broker_name):
                return mq
        not_best = self.fault_tolerance.pick_one_at_least()
        if not_best is not None:
            nums = info.queue_nums_of_broker(not_best)
            if nums > 0:
                # A new queue object: never mutate the shared list (Java's hazard).
                return MessageQueue(info.topic, not_best, info.next_index() % nums)
            self.fault_tolerance.remove(not_best)
        return info.select_one_message_queue()

    def compute_not_available_duration(self, current_latency: float) -> int:
        for i in range(len(self.latency_max) - 1, -1, -1):
            if current_latency >= self.latency_max[i]:
                return self.not_available_duration[i]
        return 0

    def update_fault_item(self, broker_name: str, current_latency: float, isolation: bool) -> None:
        if self.send_latency_fault_enable:
            duration = self.compute_not_available_duration(
                ISOLATION_LATENCY_MS if isolation else current_latency
            )
            self.fault_tolerance.update_fault_item(broker_name, current_latency, duration)
