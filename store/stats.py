"""StoreStatsService: counters plus once-a-second samples for TPS over 10 s / 60 s / 600 s."""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import deque

_WINDOWS = (10, 60, 600)
# RocketMQ's put-latency buckets (StoreStatsService.PUT_MESSAGE_ENTIRE_TIME_MAX_DESC): a put of v ms falls in
# the first bucket whose upper bound exceeds v, "[<=0ms]" taking v <= 0.
_PUT_TIME_UPPER_MS = (1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
_PUT_TIME_DESC = (
    "[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]", "[500ms~1s]",
    "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]",
)
# The distribution reported is that of the last whole window, as RocketMQ's (which rotates it each minute).
PUT_TIME_WINDOW_S = 60.0


class StoreStatsService:
    def __init__(self, put_time_window_s: float = PUT_TIME_WINDOW_S) -> None:
        self.boot_timestamp = int(time.time() * 1000)
        self.put_message_times_total = 0
        self.put_message_size_total = 0
        self.put_message_failed_times = 0
        self.put_message_entire_time_max = 0
        self.get_message_times_total_found = 0
        self.get_message_times_total_miss = 0
        self.get_message_transfered_msg_count = 0
        self.get_message_entire_time_max = 0
        self.dispatch_max_buffer = 0
        self.put_times = [0] * len(_PUT_TIME_DESC)  # this window's counts per bucket (the store adds to [0] itself)
        self._last_put_times: list[int] | None = None
        self._put_times_since = time.monotonic()
        self._put_time_window_s = put_time_window_s
        # (monotonic seconds, puts, found, miss, transferred)
        self._samples: deque[tuple[float, int, int, int, int]] = deque(maxlen=_WINDOWS[-1] + 1)
        self._append_sample(time.monotonic())

    def record_put_time(self, elapsed_ms: int, messages: int) -> None:
        """One store round of `messages` puts took `elapsed_ms` (each of its puts waited that long)."""
        if elapsed_ms > self.put_message_entire_time_max:
            self.put_message_entire_time_max = elapsed_ms
        self.put_times[bisect_right(_PUT_TIME_UPPER_MS, elapsed_ms)] += messages

    def put_time_distribution(self) -> str:
        """RocketMQ's putMessageDistributeTime: "[<=0ms]:N [0~10ms]:N ... [10s~]:N " for the last whole
        window (the current one until a window has passed)."""
        times = self._last_put_times if self._last_put_times is not None else self.put_times
        return "".join(f"{desc}:{n} " for desc, n in zip(_PUT_TIME_DESC, times, strict=True))

    def sample(self, dispatch_behind_bytes: int = 0) -> None:
        """Once a second: a TPS sample, the dispatch backlog's high mark, and the put-latency window."""
        if dispatch_behind_bytes > self.dispatch_max_buffer:
            self.dispatch_max_buffer = dispatch_behind_bytes
        now = time.monotonic()
        if now - self._put_times_since >= self._put_time_window_s:
            self._last_put_times, self.put_times = self.put_times, [0] * len(_PUT_TIME_DESC)
            self._put_times_since = now
        self._append_sample(now)

    def _append_sample(self, now: float) -> None:
        self._samples.append(
            (
                now,
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
            "putMessageDistributeTime": self.put_time_distribution(),
            "dispatchMaxBuffer": str(self.dispatch_max_buffer),
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
