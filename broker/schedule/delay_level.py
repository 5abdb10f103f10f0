"""messageDelayLevel: "1s 5s 10s ..." -> {level: delay in ms} (ScheduleMessageService.parseDelayLevel).

Levels are numbered from 1 in the order written. Units: s, m, h, d as in RocketMQ, plus ms (not in
RocketMQ) for sub-second levels. A bad value raises ValueError saying which entry is wrong.
"""

from __future__ import annotations

import re
from typing import Final

DEFAULT_MESSAGE_DELAY_LEVEL: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
# SCHEDULE_TOPIC_XXXX queue ids are bytes in the delayOffset checkpoint: keep the table sane.
MAX_DELAY_LEVELS: Final = 255

_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ENTRY = re.compile(r"^(\d+)(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> dict[int, int]:
    """{level (1-based): delay ms}; ValueError naming the bad entry."""
    entries = text.split()
    if not entries:
        raise ValueError("no delay level given (expected e.g. '1s 5s 10s 30s 1m ... 2h')")
    if len(entries) > MAX_DELAY_LEVELS:
        raise ValueError(f"{len(entries)} delay levels given; at most {MAX_DELAY_LEVELS} are supported")
    table: dict[int, int] = {}
    for i, entry in enumerate(entries, start=1):
        m = _ENTRY.match(entry)
        if m is None:
            raise ValueError(
                f"delay level {i} {entry!r} is not a number followed by a unit (ms, s, m, h or d), e.g. '10s'"
            )
        table[i] = int(m.group(1)) * _UNIT_MS[m.group(2)]
    return table


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1
