"""BrokerStatsManager: put/get counters and TPS for GET_BROKER_RUNTIME_INFO and admin tools."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque

from remoting.loop import cancel_and_wait

# TPS windows reported like RocketMQ's "putTps" (10 s, 1 min, 10 min).
_WINDOWS_S = (10, 60, 600)


def _today_start(now: float) -> float:
    lt = time.localtime(now)
    return time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))


class BrokerStatsManager:
    def __init__(self) -> None:
        self.put_nums = 0
        self.put_size = 0
        self.get_nums = 0
        self.get_size = 0
        self.send_back_nums = 0
        # topic -> [messages, bytes] put: one look-up a send, the cell updated in place (with 1 000 topics
        # each of two per-topic dicts, and a new int in each, was a cold cache line on every send).
        self.topic_put: dict[str, list[int]] = {}
        self.group_get_nums: dict[tuple[str, str], int] = defaultdict(int)
        self.group_get_size: dict[tuple[str, str], int] = defaultdict(int)
        self.send_failures = 0
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=max(_WINDOWS_S) + 2)
        self._day_start = _today_start(time.time())
        self._put_at_day_start = 0
        self._get_at_day_start = 0
        self._put_at_yesterday_start = 0
        self._get_at_yesterday_start = 0
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ counting
    @property
    def topic_put_nums(self) -> dict[str, int]:
        """topic -> messages put (a snapshot)."""
        return {t: c[0] for t, c in self.topic_put.items()}

    @property
    def topic_put_size(self) -> dict[str, int]:
        """topic -> bytes put (a snapshot)."""
        return {t: c[1] for t, c in self.topic_put.items()}

    def inc_put(self, topic: str, msgs: int, size: int) -> None:
        self.put_nums += msgs
        self.put_size += size
        c = self.topic_put.get(topic)
        if c is None:
            self.topic_put[topic] = [msgs, size]
        else:
            c[0] += msgs
            c[1] += size

    def inc_get(self, group: str, topic: str, msgs: int, size: int) -> None:
        self.get_nums += msgs
        self.get_size += size
        self.group_get_nums[(group, topic)] += msgs
        self.group_get_size[(group, topic)] += size

    def forget_topic(self, topic: str) -> None:
        self.topic_put.pop(topic, None)
        for key in [k for k in self.group_get_nums if k[1] == topic]:
            self.group_get_nums.pop(key, None)
            self.group_get_size.pop(key, None)

    # ------------------------------------------------------------------ sampling
    def start(self) -> None:
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-stats")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.sample()

    def sample(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._samples.append((now, self.put_nums, self.get_nums))
        wall = time.time()
        if wall - self._day_start >= 86400:
            self._put_at_yesterday_start, self._get_at_yesterday_start = self._put_at_day_start, self._get_at_day_start
            self._put_at_day_start, self._get_at_day_start = self.put_nums, self.get_nums
            self._day_start = _today_start(wall)

    def _tps(self, idx: int, window_s: int) -> float:
        if len(self._samples) < 2:
            return 0.0
        last = self._samples[-1]
        first = self._samples[0]
        for s in self._samples:
            if last[0] - s[0] <= window_s:
                first = s
                break
        dt = last[0] - first[0]
        return (last[idx] - first[idx]) / dt if dt > 0 else 0.0

    def put_tps(self) -> str:
        return " ".join(f"{self._tps(1, w):.2f}" for w in _WINDOWS_S)

    def get_tps(self) -> str:
        return " ".join(f"{self._tps(2, w):.2f}" for w in _WINDOWS_S)

    def runtime_info(self) -> dict[str, str]:
        return {
            "msgPutTotalTodayNow": str(self.put_nums),
            "msgGetTotalTodayNow": str(self.get_nums),
            "msgPutTotalTodayMorning": str(self._put_at_day_start),
            "msgGetTotalTodayMorning": str(self._get_at_day_start),
            "msgPutTotalYesterdayMorning": str(self._put_at_yesterday_start),
            "msgGetTotalYesterdayMorning": str(self._get_at_yesterday_start),
            "putTps": self.put_tps(),
            "getTotalTps": self.get_tps(),
            "getFoundTps": self.get_tps(),
            "sendBackNums": str(self.send_back_nums),
        }
