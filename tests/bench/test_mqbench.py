"""mqbench end to end against real daemons: a few hundred messages each way, JSON summaries checked.

Not a timed test: only counts, failures and the shape of the output are asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.daemons import BIN, Daemon

MQBENCH = [sys.executable, str(BIN / "mqbench")]


def _run(args: list[str], timeout: float = 90.0) -> tuple[int, list[dict[str, Any]], str]:
    p = subprocess.run(
        MQBENCH + args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p.returncode, lines, p.stdout + p.stderr


def _summary(lines: list[dict[str, Any]], out: str) -> dict[str, Any]:
    finals = [d for d in lines if d["final"]]
    assert len(finals) == 1, out
    return finals[0]


def test_producer_modes_then_both_consumers(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    sent = 0
    # (the sync run with client idle polling: ClientConfig.idle_poll_us through the CLI)
    # (and an async run with the producer's auto-batching: Producer(auto_batch=True) through the CLI)
    for mode, extra in (("sync", ["--threads", "4", "--idle-poll-us", "200"]), ("async", ["--inflight", "32"]),
                        ("async", ["--inflight", "64", "--auto-batch"]), ("batch", ["--batch", "16"]),
                        ("oneway", [])):  # (oneway's RT: the send call, as RocketMQ's benchmark times it)
        rc, lines, out = _run(
            ["producer", "-n", ns, "-t", "BenchTopicT", "--size", "256", "--mode", mode, "--count", "200",
             "--json", *extra]
        )
        assert rc == 0, out
        s = _summary(lines, out)
        assert s["role"] == "producer" and s["mode"] == mode
        assert s["msgs"] == 200 and s["failures"] == 0, out
        assert s["tps"] > 0 and s["rt_max_ms"] >= s["rt_p50_ms"] > 0
        sent += s["msgs"]

    for mode in ("litepull", "push"):
        rc, lines, out = _run(
            ["consumer", "-n", ns, "-t", "BenchTopicT", "-g", f"bench_{mode}", "--mode", mode, "--from-first",
             "--count", str(sent), "--duration", "60", "--json", *(["--idle-poll-us", "100"] if mode == "push" else [])]
        )
        assert rc == 0, out
        s = _summary(lines, out)
        assert s["role"] == "consumer" and s["mode"] == mode
        assert s["msgs"] == sent and s["failures"] == 0, out
        assert s["mb_s"] > 0
        # S2C, RocketMQ's store-to-consume latency: the backlog was stored before the consumer started.
        assert "rt_p50_ms" not in s and s["s2c_max_ms"] >= s["s2c_p99_ms"] >= s["s2c_p50_ms"] >= 1, s
        assert all("s2c_avg_ms" in d for d in lines)


def test_e2e_with_rate_limit(cluster: tuple[str, str, Daemon], tmp_path: Path) -> None:
    ns, _broker, _d = cluster
    # One unstamped message creates the topic; a new group on a fresh queue starts from offset 0
    # (RocketMQ's rule), so the consumer sees it too: 301 messages, 300 of them with a latency.
    rc, _lines, out = _run(["producer", "-n", ns, "-t", "BenchE2E", "--count", "1", "--json"])
    assert rc == 0, out
    consumer = subprocess.Popen(
        MQBENCH + ["consumer", "-n", ns, "-t", "BenchE2E", "-g", "bench_e2e", "--mode", "push", "--e2e",
                   "--count", "301", "--duration", "60", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        # Wait for its first one-second report: by then it has started and rebalanced.
        assert consumer.stdout is not None
        first = consumer.stdout.readline()
        assert first.startswith("{"), first
        rc, lines, out = _run(
            ["producer", "-n", ns, "-t", "BenchE2E", "--mode", "async", "--inflight", "8", "--rate", "600",
             "--count", "300", "--e2e", "--json"]
        )
        assert rc == 0, out
        s = _summary(lines, out)
        assert s["msgs"] == 300 and s["failures"] == 0
        # 300 messages at 600 msg/s take about half a second; without pacing they would take a few ms.
        assert s["seconds"] >= 0.3, s
        rest, _ = consumer.communicate(timeout=90)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    assert consumer.returncode == 0, rest
    clines = [json.loads(ln) for ln in (first + rest).splitlines() if ln.startswith("{")]
    c = _summary(clines, rest)
    assert c["msgs"] == 301 and c["failures"] == 0
    assert "e2e_p99_ms" in c and c["e2e_max_ms"] >= c["e2e_p50_ms"] > 0


def test_a_bad_idle_poll_value_names_the_option(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    rc, _lines, out = _run(["producer", "-n", ns, "-t", "BenchTopicT", "--count", "1", "--idle-poll-us", "-1"])
    assert rc != 0 and "--idle-poll-us" in out, out
