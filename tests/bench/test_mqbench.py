"""mqbench end to end against real daemons: a few hundred messages each way, JSON summaries checked.

Not a timed test: only counts, failures and the shape of the output are asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.daemons import BIN, Daemon, start_broker

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


def _produce_to_a_waiting_consumer(
    consumer_args: list[str], producer_args: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start `mqbench consumer`, wait for its first report (by then it has started and rebalanced), run
    `mqbench producer` to the end, then wait for the consumer: (producer summary, consumer summary)."""
    consumer = subprocess.Popen(
        MQBENCH + ["consumer", *consumer_args, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        assert consumer.stdout is not None
        first = consumer.stdout.readline()
        assert first.startswith("{"), first
        rc, lines, out = _run(["producer", *producer_args, "--json"])
        assert rc == 0, out
        produced = _summary(lines, out)
        rest, _ = consumer.communicate(timeout=90)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    assert consumer.returncode == 0, rest
    return produced, _summary([json.loads(ln) for ln in (first + rest).splitlines() if ln.startswith("{")], rest)


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
    s, c = _produce_to_a_waiting_consumer(
        ["-n", ns, "-t", "BenchE2E", "-g", "bench_e2e", "--mode", "push", "--e2e", "--count", "301", "--duration", "60"],
        ["-n", ns, "-t", "BenchE2E", "--mode", "async", "--inflight", "8", "--rate", "600", "--count", "300", "--e2e"],
    )
    assert s["msgs"] == 300 and s["failures"] == 0
    # 300 messages at 600 msg/s take about half a second; without pacing they would take a few ms.
    assert s["seconds"] >= 0.3, s
    assert c["msgs"] == 301 and c["failures"] == 0
    assert "e2e_p99_ms" in c and c["e2e_max_ms"] >= c["e2e_p50_ms"] > 0


def test_a_bad_idle_poll_value_names_the_option(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    rc, _lines, out = _run(["producer", "-n", ns, "-t", "BenchTopicT", "--count", "1", "--idle-poll-us", "-1"])
    assert rc != 0 and "--idle-poll-us" in out, out


def _admin_json(args: list[str]) -> Any:
    p = subprocess.run([sys.executable, str(BIN / "mqadmin"), *args, "--json"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_message_and_consumer_options(cluster: tuple[str, str, Daemon]) -> None:
    """RocketMQ's benchmark options: what the producer's messages carry (tags, keys, user properties), and
    the consumer's tag filter, consume threads, plain and orderly listeners and failing calls."""
    ns, _broker, _d = cluster
    topic = "BenchOpts"
    p = subprocess.run([sys.executable, str(BIN / "mqadmin"), "updateTopic", "-n", ns, "-c", "DefaultCluster",
                        "-t", topic, "-r", "4", "-w", "4"], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    sent_at = time.time()
    rc, lines, out = _run(["producer", "-n", ns, "-t", topic, "--mode", "async", "--inflight", "16", "--count",
                           "100", "--tag-count", "1", "--keys", "--property-size", "40", "--json"])
    assert rc == 0 and _summary(lines, out)["msgs"] == 100, out
    rc, lines, out = _run(["producer", "-n", ns, "-t", topic, "--mode", "async", "--count", "60", "--json"])
    assert rc == 0 and _summary(lines, out)["msgs"] == 60, out

    # The first message of queue 0 is one of the first run's: tag0, the send second as its key, and user
    # properties prop0=hello<v>, prop1=<v>, ... past 40 characters.
    m = _admin_json(["queryMsgByOffset", "-n", ns, "-t", topic, "-b", "broker-a", "-i", "0", "-o", "0"])
    props = m["properties"]
    assert props["TAGS"] == "tag0"
    assert abs(int(props["KEYS"]) - sent_at) < 60, props
    user = {k: v for k, v in props.items() if k.startswith("prop")}
    assert sum(len(k) + len(v) for k, v in user.items()) > 40, props
    v = int(props["prop1"])
    assert props["prop0"] == f"hello{v}" and props["prop2"] == f"hello{v + 2}" and props["prop3"] == str(v + 2)

    # The broker filters by tag: only the 100 tagged messages reach a plain listener in 2 consume threads.
    rc, lines, out = _run(["consumer", "-n", ns, "-t", topic, "-g", "bench_tag0", "--from-first", "-e", "tag0",
                           "--listener", "thread", "--threads", "2", "--duration", "8", "--json"])
    assert rc == 0, out
    s = _summary(lines, out)
    assert s["msgs"] == 100 and s["failures"] == 0, s

    # Every call fails: each message is counted once received and once failed (then goes to the retry topic).
    rc, lines, out = _run(["consumer", "-n", ns, "-t", topic, "-g", "bench_fail", "--from-first", "--fail-rate",
                           "1", "--count", "160", "--duration", "60", "--json"])
    assert rc == 0, out
    s = _summary(lines, out)
    assert s["msgs"] >= 160 and s["failures"] == s["msgs"], s

    rc, lines, out = _run(["consumer", "-n", ns, "-t", topic, "-g", "bench_orderly", "--from-first", "--orderly",
                           "--listener", "thread", "--count", "160", "--duration", "60", "--json"])
    assert rc == 0, out
    s = _summary(lines, out)
    assert s["msgs"] == 160 and s["failures"] == 0, s

    rc, _lines, out = _run(["producer", "-n", ns, "-t", topic, "--mode", "batch", "--delay-level", "1", "--count", "1"])
    assert rc != 0 and "--delay-level" in out, out
    rc, _lines, out = _run(["consumer", "-n", ns, "-t", topic, "--mode", "litepull", "--fail-rate", "0.5"])
    assert rc != 0 and "--fail-rate" in out, out


def test_delayed_messages_arrive_a_level_later(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    topic = "BenchDelay"
    p = subprocess.run([sys.executable, str(BIN / "mqadmin"), "updateTopic", "-n", ns, "-c", "DefaultCluster",
                        "-t", topic], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    s, c = _produce_to_a_waiting_consumer(
        ["-n", ns, "-t", topic, "-g", "bench_delay", "--e2e", "--count", "5", "--duration", "60", "--report-interval",
         "0.5"],
        ["-n", ns, "-t", topic, "--mode", "async", "--inflight", "5", "--count", "5", "--delay-level", "1", "--e2e"],
    )
    assert s["failures"] == 0
    # Level 1 is 1 s (messageDelayLevel "1s 5s ..."): without the delay they would arrive in milliseconds.
    assert c["msgs"] == 5 and 900 <= c["e2e_p50_ms"] <= 5000, c


def test_sql92_consumer_filter(namesrv: str, tmp_path: Path) -> None:
    """`-f SQL92`: the broker evaluates the expression on each message's properties (RocketMQ's benchmark
    consumer's -f/-e); a broker without enablePropertyFilter makes the consumer fail at start, saying why."""
    topic = "BenchSql"
    d, _addr = start_broker(tmp_path, namesrv, extra={"enablePropertyFilter": "true"})
    try:
        p = subprocess.run([sys.executable, str(BIN / "mqadmin"), "updateTopic", "-n", namesrv, "-c",
                            "DefaultCluster", "-t", topic, "-r", "2", "-w", "2"], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout + p.stderr
        for extra in (["--tag-count", "1", "--property-size", "20"], []):
            rc, lines, out = _run(["producer", "-n", namesrv, "-t", topic, "--mode", "async", "--count", "50",
                                   *extra, "--json"])
            assert rc == 0 and _summary(lines, out)["msgs"] == 50, out
        rc, lines, out = _run(["consumer", "-n", namesrv, "-t", topic, "-g", "bench_sql", "--from-first", "-f",
                               "SQL92", "-e", "TAGS = 'tag0' AND prop0 STARTSWITH 'hello'", "--duration", "6",
                               "--json"])
        assert rc == 0, out
        assert _summary(lines, out)["msgs"] == 50  # the 50 tagged ones, with user properties
    finally:
        d.terminate()
    d, addr = start_broker(tmp_path, namesrv, name="broker-plain")
    try:
        p = subprocess.run([sys.executable, str(BIN / "mqadmin"), "updateTopic", "-n", namesrv, "-b", addr,
                            "-t", topic], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout + p.stderr
        rc, _lines, out = _run(["consumer", "-n", namesrv, "-t", topic, "-g", "bench_sql2", "-f", "SQL92",
                                "-e", "a > 1", "--duration", "3"])
        assert rc != 0 and "enablePropertyFilter" in out and "Traceback" not in out, out
    finally:
        d.terminate()
