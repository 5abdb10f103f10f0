"""bench/compare.py's --redis-appendfsync: the Redis peer's persistence outside the SYNC_FLUSH row reaches the
Redis client runs (and only those), and the report says which promise Redis was measured under."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from tests.support.bench_scripts import load_bench_script, record_compare_runs


def _args(**kw: Any) -> argparse.Namespace:
    base = dict(count=1000, sync_count=100, rate=10_000.0, e2e_seconds=1.0, topics=10, inflight=256,
                batch_inflight=8, redis_appendfsync="off")
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("fsync", ["off", "everysec"])
def test_only_redis_runs_get_the_persistence_flag(monkeypatch: pytest.MonkeyPatch, fsync: str) -> None:
    c = load_bench_script("compare")
    seen, env = record_compare_runs(c, monkeypatch)
    a = _args(redis_appendfsync=fsync)
    for system in ("this", "redis", "nats"):
        out = c.run_one(system, "async_send", a, env)
        assert out["workload"] == "async_send"
    this_cmd, redis_cmd, nats_cmd = seen
    i = redis_cmd.index("--redis-appendfsync")
    assert redis_cmd[i + 1] == fsync
    assert "--redis-appendfsync" not in this_cmd
    assert "--redis-appendfsync" not in nats_cmd


def test_report_names_the_redis_promise() -> None:
    c = load_bench_script("compare")
    off = c._redis_persistence_text("off")
    assert "without persistence" in off and "weaker promise than ASYNC_FLUSH" in off
    matched = c._redis_persistence_text("no")
    assert "AOF `appendfsync no`" in matched and "before its reply, as ASYNC_FLUSH's do" in matched
    every = c._redis_persistence_text("everysec")
    assert "AOF `appendfsync everysec`" in every and "holds writes back for up to 2 s" in every


def test_peer_script_refuses_an_unknown_policy(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    p = load_bench_script("wl_peers")
    assert p.REDIS_APPENDFSYNC == ("off", "no", "everysec")
    monkeypatch.setattr("sys.argv", ["wl_peers.py", "--system", "redis", "--addr", "127.0.0.1:1",
                                     "--workload", "async_send", "--redis-appendfsync", "always"])
    with pytest.raises(SystemExit):
        p.main()
    assert "--redis-appendfsync" in capsys.readouterr().err
