"""The example pipeline (spark_connector/examples/window_agg.py) end to end on a small input."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from pathlib import Path
from typing import Any

from spark_connector.examples import window_agg

from .conftest import Cluster, topic_name


def test_window_aggregation_pipeline_end_to_end(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    src, dst = topic_name("Events"), topic_name("Agg")
    events = window_agg.send_demo_events(rmq.namesrv, src, 80, seed=3)
    q = window_agg.start_pipeline(
        spark,
        namesrv=rmq.namesrv,
        source=src,
        sink=dst,
        checkpoint=str(tmp_path / "ck"),
        window="10 seconds",
        available_now=True,
        group=None,
    )
    assert q.awaitTermination(180), "the pipeline did not finish"
    assert q.exception() is None

    want: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in events:
        want[(e["key"], e["ts"] // 10_000 * 10_000)].append(e["value"])
    got = window_agg.latest_aggregates(rmq.namesrv, dst)
    by_window = {
        (k, int(dt.datetime.fromisoformat(ws).timestamp() * 1000)): rec for (k, ws), rec in got.items()
    }
    assert set(by_window) == set(want)
    for key, values in want.items():
        rec = by_window[key]
        assert rec["count"] == len(values)
        assert rec["sum"] == sum(values)
        assert abs(rec["avg"] - sum(values) / len(values)) < 1e-9
