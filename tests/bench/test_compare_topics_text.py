"""bench/compare.py's 1 000-topic target line says what its figures are: the median of the runs' ratios
(each run listed), beside median rates that need not come from the same run."""

from __future__ import annotations

import argparse

from tests.support.bench_scripts import load_bench_script


def test_topics_target_names_the_median_ratio_and_each_run() -> None:
    c = load_bench_script("compare")
    runs = [
        {"msgs_s": 61192.2, "ratio": 0.897, "single_msgs_s": 68206.6, "single_broker_cpu_us": 13.8,
         "many_broker_cpu_us": 16.4},
        {"msgs_s": 56614.0, "ratio": 0.914, "single_msgs_s": 61968.4, "single_broker_cpu_us": 18.6,
         "many_broker_cpu_us": 17.4},
        {"msgs_s": 59433.1, "ratio": 0.773, "single_msgs_s": 76875.6, "single_broker_cpu_us": 12.2,
         "many_broker_cpu_us": 17.0},
    ]
    summary = c.summarize({"topics": {"this": runs}})
    assert summary["topics"]["this"]["ratio"] == 0.897
    assert summary["topics"]["this"]["ratio_all"] == [0.897, 0.914, 0.773]
    target, status = c.target_text("topics", summary, argparse.Namespace(rate=10_000))
    assert target == ">= 80% of 1 topic"
    assert status.startswith("met (median of the runs' ratios 89.7%: 89.7%, 91.4%, 77.3%; 1 topic 68,207 msg/s;")
    runs[0]["ratio"] = 0.75
    _, status = c.target_text("topics", c.summarize({"topics": {"this": runs}}), argparse.Namespace(rate=10_000))
    assert status.startswith("NOT met (median of the runs' ratios 77.3%")
