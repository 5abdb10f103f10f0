"""StoreStatsService: counters plus once-a-second samples for TPS over 10 s / 60 s / 600 s."""

from __future__ import annotations

import time
from collections import deque

_WINDOWS = (10, 60, 600)


class StoreStatsService:
    def __init__(self) -> None:
        self.boot_timestamp = int(time.time() * 1000)
        self.put_message_times_total = 0
        self.put_message_size_total = 0
        self.put_message_failed_times = 0
        self.put_message_entire_time_max = 0
        self.get_message_times_total_found = 0
        self.get_message_times_total_miss = 0
        self.get_message_transfered_msg_count = 0
        self.get_message_entire_time_max = 0
        # (monotonic seconds, puts, found, miss, transferred)
        self._samples: deque[tuple[float, int, int, int, int]] = deque(maxlen=_WINDOWS[-1] + 1)
        self.sample()

    def sample(self) -> None:
        self._samples.append(
            (
                time.monotonic(),
                self.put_message_times_total,
                self.get_message_times_total_found,
                self.get_message_times_total_miss,
                self.get_message_transfered_msg_count,
            )
        )

    def _tps(self, window: int, field: int) -> float:
        if len(self._samples) < 2:
            return 0.0
        last = self._samples[-1]
        first = self._samples[max(0, len(self._samples) - 1 - window)]
        dt = last[0] - first[0]
        if dt <= 0:
            return 0.0
        return (last[field] - first[field]) / dt

    def tps_string(self, field: int) -> str:
        return " ".join(f"{self._tps(w, field):.2f}" for w in _WINDOWS)

    def put_tps(self, window: int = 10) -> float:
        return self._tps(window, 1)

    def runtime_info(self) -> dict[str, str]:
        now = int(time.time() * 1000)
        puts = self.put_message_times_total
        return {
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": _runtime_str(now - self.boot_timestamp),
            "putMessageTimesTotal": str(puts),
            "putMessageSizeTotal": str(self.put_message_size_total),
            "putMessageFailedTimes": str(self.put_message_failed_times),
            "putMessageAverageSize": f"{(self.put_message_size_total / puts) if puts else 0.0:.2f}",
            "putMessageEntireTimeMax": str(self.put_message_entire_time_max),
            "getMessageEntireTimeMax": str(self.get_message_entire_time_max),
            "getMessageTimesTotalFound": str(self.get_message_times_total_found),
            "getMessageTimesTotalMiss": str(self.get_message_times_total_miss),
            "getMessageTransferedMsgCount": str(self.get_message_transfered_msg_count),
            "putTps": self.tps_string(1),
            "getFoundTps": self.tps_string(2),
            "getMissTps": self.tps_string(3),
            "getTransferedTps": self.tps_string(4),
            "getTotalTps": " ".join(f"{self._tps(w, 2) + self._tps(w, 3):.2f}" for w in _WINDOWS),
        }


def _runtime_str(ms: int) -> str:
    s = ms // 1000
    return f"[ {s // 86400} days, {(s // 3600) % 24} hours, {(s // 60) % 60} minutes, {s % 60} seconds ]"
