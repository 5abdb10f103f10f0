"""BrokerStatsManager's StatsItem windows (VIEW_BROKER_STATS_DATA, `mqadmin statsAll`)."""

from __future__ import annotations

from broker import stats as stats_module
from broker.stats import BrokerStatsManager


def test_windows_sum_rate_and_per_put(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    clock = [5000.0]
    monkeypatch.setattr(stats_module.time, "monotonic", lambda: clock[0])
    s = BrokerStatsManager()
    s.cluster_name = "DefaultCluster"
    s.inc_put("T", 1, 100)
    s.sample_windows()  # the first call: every window takes its first snapshot (T from zero)
    for _ in range(3):
        s.inc_put("T", 1, 100)
    s.inc_put("T", 5, 500)  # a batch: one put of 5 messages
    s.inc_get("G", "T", 4, 400)
    s.sample_windows()  # a second later: G's key is new, its windows start now
    s.inc_get("G", "T", 2, 200)
    clock[0] += 10
    minute, hour, day = s.view_stats("TOPIC_PUT_NUMS", "T")  # type: ignore[misc]
    assert (minute.sum, minute.tps, minute.avgpt) == (9, 0.9, 9 / 5)  # 9 messages, 5 puts, over 10 s
    assert hour.sum == day.sum == 9
    assert s.view_stats("TOPIC_PUT_SIZE", "T")[0].sum == 900  # type: ignore[index]
    got = s.view_stats("GROUP_GET_NUMS", "T@G")[0]  # type: ignore[index]
    assert (got.sum, got.avgpt) == (6, 3.0)  # 2 pulls
    assert s.view_stats("BROKER_PUT_NUMS", "DefaultCluster")[0].sum == 9  # type: ignore[index]
    assert s.view_stats("BROKER_GET_NUMS", "DefaultCluster")[0].sum == 6  # type: ignore[index]
    assert s.view_stats("BROKER_PUT_NUMS", "OtherCluster") is None
    assert s.view_stats("TOPIC_PUT_NUMS", "Unknown") is None and s.view_stats("NO_SUCH_STATS", "T") is None
    # a minute on, the minute's window has moved past that work; the hour's and day's still hold it
    for _ in range(6):
        clock[0] += 10
        s.sample_windows()
    s.inc_put("T", 1, 100)
    minute, hour, day = s.view_stats("TOPIC_PUT_NUMS", "T")  # type: ignore[misc]
    assert minute.sum == 1 and hour.sum == day.sum == 10
    s.forget_topic("T")
    assert s.view_stats("TOPIC_PUT_NUMS", "T") is None and s.view_stats("GROUP_GET_NUMS", "T@G") is None
