"""bench/compare.py's auto-batch rows: this project's run gets the producer's auto-batching and the base
workload's settings; the peers run the base workload itself."""

from __future__ import annotations

import argparse

import pytest

from tests.support.bench_scripts import load_bench_script, record_compare_runs


def _args() -> argparse.Namespace:
    return argparse.Namespace(count=1000, sync_count=100, rate=2000.0, e2e_seconds=1.5, topics=10, inflight=256,
                              batch_inflight=8, redis_appendfsync="off")


@pytest.mark.parametrize(("row", "base", "count"), [("async_send_autobatch", "async_send", "1000"),
                                                     ("e2e_autobatch", "e2e", "3000")])
def test_auto_batch_rows_run_the_base_workload(monkeypatch: pytest.MonkeyPatch, row: str, base: str, count: str) -> None:
    c = load_bench_script("compare")
    assert row in c.WORKLOADS and row in c.TITLES and c.TARGETS[row] == c.TARGETS[base]
    seen, env = record_compare_runs(c, monkeypatch)
    for system in ("this", "redis", "nats"):
        assert c.run_one(system, row, _args(), env)["workload"] == row
    for cmd in seen:
        i = cmd.index("--workload")
        assert cmd[i + 1] == base
        assert cmd[cmd.index("--count") + 1] == count
    this_cmd, redis_cmd, nats_cmd = seen
    assert "--auto-batch" in this_cmd
    assert "--auto-batch" not in redis_cmd and "--auto-batch" not in nats_cmd
    seen.clear()
    c.run_one("this", base, _args(), env)
    assert "--auto-batch" not in seen[0]
