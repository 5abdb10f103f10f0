"""Broker memory and descriptors under client churn: round after round a producer, a push consumer and a
lite pull consumer each start, do a little work and shut down, as short-lived scripts, Spark tasks and
restarted services do, while the broker's RSS less file mappings (RssAnon + RssShmem) and its open file
descriptors are sampled. Starts its own NameServer and broker (a temp store) unless -n/--broker-pid are
given. Not a test.

    .venv/bin/python bench/bench_churn.py --rounds 16000 --every 1000

Round r: a producer of a group used once (`churn-p<r>`) sends `--messages` messages to topic
`BenchChurn<r % topics>`; a push consumer of group `churn-c<r % topics>` (so each group reads one topic)
consumes them from its committed offset and shuts down (committing it); a lite pull consumer of group
`churn-l<r % topics>` polls them and shuts down. Every consumer is a fresh client: a new connection, a
new subscription version, new pull headers. Each round must get back exactly the messages it sent,
push and lite pull; the JSON line's `short_rounds` counts the rounds that did not (each wait is bounded).

What should stay flat: the broker's sockets (each client's connection is closed at its shutdown), and once
every topic exists its other descriptors, but for a CommitLog or index file the store rolls to (the
broker this script starts has the test suite's small files: 16 MiB CommitLog files). What may grow, up to a bound: the header memos the frame decoder keeps per producer queue
and per consumer queue (remoting.codec, 16 384 entries each, cleared when full), since a restarted
consumer's pulls carry a new subscription version.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_memory import cluster_unless_given, status_kib  # noqa: E402

from client import (  # noqa: E402
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    Producer,
    PushConsumer,
)
from remoting.log import configure_logging  # noqa: E402
from remoting.loop import run  # noqa: E402

WAIT_S = 10.0  # at most this long for a round's messages, per consumer


def sample(pid: int) -> dict[str, Any]:
    """The broker's RSS less file mappings (MiB), its open file descriptors and how many are sockets."""
    kib = status_kib(pid)
    fds = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        fds += 1
        sockets += target.startswith("socket:")
    return {"anon_mib": round((kib["RssAnon"] + kib["RssShmem"]) / 1024, 1), "fds": fds, "sockets": sockets}


async def push_round(ns: str, group: str, topic: str, want: int) -> int:
    got: list[Any] = []
    enough = asyncio.Event()

    async def listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        if len(got) >= want:
            enough.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, ns, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    await consumer.start()
    try:
        await asyncio.wait_for(enough.wait(), WAIT_S)
    except TimeoutError:
        pass
    finally:
        await consumer.shutdown()
    return len(got)


async def lite_pull_round(ns: str, group: str, topic: str, want: int) -> int:
    consumer = LitePullConsumer(group, ns, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, "*")
    await consumer.start()
    got = 0
    try:
        deadline = time.monotonic() + WAIT_S
        while got < want and (left := deadline - time.monotonic()) > 0:
            got += len(await consumer.poll(timeout=min(left, 1.0)))
        await consumer.commit()
    finally:
        await consumer.shutdown()
    return got


async def churn(ns: str, pid: int, rounds: int, every: int, topics: int, messages: int) -> dict[str, Any]:
    def point(r: int, seconds: float) -> dict[str, Any]:
        pt = {"round": r, "seconds": round(seconds, 1), **sample(pid)}
        print(f"{pt['round']:>8} {pt['seconds']:>6.1f} {pt['anon_mib']:>13.1f} {pt['fds']:>5} {pt['sockets']:>8}",
              flush=True)
        return pt

    print(f"{'round':>8} {'s':>6} {'RSS-file MiB':>13} {'fds':>5} {'sockets':>8}", flush=True)
    points = [point(0, 0.0)]
    short: list[dict[str, int]] = []
    t0 = time.monotonic()
    for r in range(rounds):
        topic = f"BenchChurn{r % topics}"
        async with Producer(f"churn-p{r}", ns) as producer:
            for i in range(messages):
                await producer.send(Message(topic, b"c" * 100, tags="T", keys=f"k{r}-{i}"))
        pushed = await push_round(ns, f"churn-c{r % topics}", topic, messages)
        pulled = await lite_pull_round(ns, f"churn-l{r % topics}", topic, messages)
        if pushed != messages or pulled != messages:
            short.append({"round": r, "push": pushed, "lite_pull": pulled})
        if (r + 1) % every == 0 or r + 1 == rounds:
            points.append(point(r + 1, time.monotonic() - t0))
    return {"rounds": rounds, "topics": topics, "messages_per_round": messages, "points": points,
            "short_rounds": len(short), "short": short[:20]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4000)
    ap.add_argument("--every", type=int, default=500, help="sample the broker every this many rounds")
    ap.add_argument("--topics", type=int, default=50, help="topics (and consumer groups of each kind) cycled through")
    ap.add_argument("--messages", type=int, default=5, help="messages sent and consumed per round")
    ap.add_argument("-n", "--namesrv", default=None)
    ap.add_argument("--broker-pid", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="end with one JSON line of every sample")
    a = ap.parse_args()
    for name in ("rounds", "every", "topics", "messages"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    configure_logging(level="ERROR")
    with cluster_unless_given(a.namesrv, a.broker_pid, "bench-churn-") as (ns, pid):
        out = run(churn(ns, pid, a.rounds, a.every, a.topics, a.messages))
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
