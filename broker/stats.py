"""BrokerStatsManager: put/get counters and TPS for GET_BROKER_RUNTIME_INFO and admin tools.

Per topic and per subscription group it also keeps RocketMQ's StatsItems' windows, for VIEW_BROKER_STATS_DATA
(`mqadmin statsAll`): snapshots of the cumulative counts every 10 s (the minute's window, 6 kept), every
10 minutes (the hour's, 6) and every hour (the day's, 24). A window's figures are the counts now less its
first snapshot (RocketMQ's stop at its last snapshot, up to a period behind). A key is first snapshotted
within a second of its first count.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

from remoting.loop import cancel_and_wait

# TPS windows reported like RocketMQ's "putTps" (10 s, 1 min, 10 min).
_WINDOWS_S = (10, 60, 600)

# RocketMQ's BrokerStatsManager stats names served by view_stats, and how many snapshots each window keeps
# at what period (StatsItem's csListMinute / csListHour / csListDay).
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_WINDOWS = (("minute", 10.0, 6), ("hour", 600.0, 6), ("day", 3600.0, 24))  # (now is the last point)
# A snapshot: (monotonic seconds, messages, bytes, puts or pulls)
Snapshot = tuple[float, int, int, int]


@dataclass(slots=True)
class StatsWindow:
    """One window's figures (BrokerStatsItem): what was counted, a second on average, and per put or pull."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


class _Series:
    """The minute's, hour's and day's snapshots of one key's cumulative counts."""

    __slots__ = ("windows",)

    def __init__(self, first: Snapshot) -> None:
        self.windows = tuple(deque([first], maxlen=keep) for _, _, keep in STATS_WINDOWS)

    def view(self, now: Snapshot, field: int) -> tuple[StatsWindow, ...]:
        """Each window from its first snapshot to `now` (the counts as they stand, so a window is never a
        sampling period behind)."""
        t1, *b = now
        out = []
        for snaps in self.windows:
            t0, *a = snaps[0]
            total = b[field] - a[field]
            times = b[2] - a[2]
            out.append(StatsWindow(total, total / (t1 - t0) if t1 > t0 else 0.0, total / times if times > 0 else 0.0))
        return tuple(out)


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
        # topic -> [messages, bytes, puts less messages] put: one look-up a send, the cell updated in place
        # (with 1 000 topics each of two per-topic dicts, and a new int in each, was a cold cache line on
        # every send). The third count moves only for batches, so a single send does not touch it.
        self.topic_put: dict[str, list[int]] = {}
        # (group, topic) -> [messages, bytes, pulls] got
        self.group_get: dict[tuple[str, str], list[int]] = {}
        self.cluster_name = ""  # BROKER_PUT_NUMS / BROKER_GET_NUMS are keyed by it, as RocketMQ's
        self._series: dict[tuple[str, str], _Series] = {}  # ("topic", topic), ("group", topic@group), ("broker", "")
        self._last_window_sample = [0.0] * len(STATS_WINDOWS)
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

    @property
    def group_get_nums(self) -> dict[tuple[str, str], int]:
        """(group, topic) -> messages got (a snapshot)."""
        return {k: c[0] for k, c in self.group_get.items()}

    @property
    def group_get_size(self) -> dict[tuple[str, str], int]:
        """(group, topic) -> bytes got (a snapshot)."""
        return {k: c[1] for k, c in self.group_get.items()}

    def inc_put(self, topic: str, msgs: int, size: int) -> None:
        self.put_nums += msgs
        self.put_size += size
        c = self.topic_put.get(topic)
        if c is None:
            self.topic_put[topic] = [msgs, size, 1 - msgs]
        else:
            c[0] += msgs
            c[1] += size
            c[2] += 1 - msgs

    def inc_get(self, group: str, topic: str, msgs: int, size: int) -> None:
        self.get_nums += msgs
        self.get_size += size
        c = self.group_get.get((group, topic))
        if c is None:
            self.group_get[(group, topic)] = [msgs, size, 1]
        else:
            c[0] += msgs
            c[1] += size
            c[2] += 1

    def forget_topic(self, topic: str) -> None:
        self.topic_put.pop(topic, None)
        self._series.pop(("topic", topic), None)
        for key in [k for k in self.group_get if k[1] == topic]:
            self.group_get.pop(key, None)
            self._series.pop(("group", f"{topic}@{key[0]}"), None)

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
            self.sample_windows()

    # ------------------------------------------------------------------ RocketMQ's StatsItem windows
    def _keys(self) -> list[tuple[str, str]]:
        return [("topic", t) for t in self.topic_put] + [("group", f"{t}@{g}") for g, t in self.group_get] + [
            ("broker", "put"), ("broker", "get")]

    def _counts(self) -> dict[tuple[str, str], tuple[int, int, int]]:
        """Every key's (messages, bytes, puts or pulls)."""
        return {key: c for key in self._keys() if (c := self._count_of(key)) is not None}

    def _count_of(self, key: tuple[str, str]) -> tuple[int, int, int] | None:
        """One key's (messages, bytes, puts or pulls); a view asks for one, not every key's."""
        kind, name = key
        if kind == "topic":
            c = self.topic_put.get(name)
            return None if c is None else (c[0], c[1], c[0] + c[2])
        if kind == "group":
            topic, _, group = name.partition("@")  # (a topic name has no '@')
            c = self.group_get.get((group, topic))
            return None if c is None else (c[0], c[1], c[2])
        if name == "put":
            return self.put_nums, self.put_size, sum(c[0] + c[2] for c in self.topic_put.values())
        return self.get_nums, self.get_size, sum(c[2] for c in self.group_get.values())

    def sample_windows(self, now: float | None = None) -> None:
        """Snapshot every key into each window whose period has passed; a key new since the last call starts
        its windows from zero now (so what it counted before is in them)."""
        now = time.monotonic() if now is None else now
        due = [i for i, (_, period, _) in enumerate(STATS_WINDOWS) if now - self._last_window_sample[i] >= period]
        if not due:
            if len(self._series) != len(self.topic_put) + len(self.group_get) + 2:  # a new key
                for key in set(self._keys()) - self._series.keys():
                    self._series[key] = _Series((now, 0, 0, 0))
            return
        for i in due:
            self._last_window_sample[i] = now
        series = self._series
        for key, (n, size, times) in self._counts().items():
            s = series.get(key)
            if s is None:
                s = series[key] = _Series((now, 0, 0, 0))
            snap = (now, n, size, times)
            for i in due:
                s.windows[i].append(snap)

    def view_stats(self, stats_name: str, stats_key: str) -> tuple[StatsWindow, StatsWindow, StatsWindow] | None:
        """VIEW_BROKER_STATS_DATA: the minute's, hour's and day's figures of one stats item, up to now (None: no
        such item). Keys as RocketMQ's: a topic; topic@group; the cluster name."""
        if stats_name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            key = ("topic", stats_key)
        elif stats_name in (GROUP_GET_NUMS, GROUP_GET_SIZE):
            key = ("group", stats_key)
        elif stats_name in (BROKER_PUT_NUMS, BROKER_GET_NUMS) and stats_key == self.cluster_name:
            key = ("broker", "put" if stats_name == BROKER_PUT_NUMS else "get")
        else:
            return None
        s = self._series.get(key)
        counts = self._count_of(key)
        if s is None or counts is None:
            return None
        minute, hour, day = s.view((time.monotonic(), *counts), 1 if stats_name.endswith("_SIZE") else 0)
        return minute, hour, day

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
