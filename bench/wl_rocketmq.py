"""This project's side of bench/compare.py: one workload, one run, one JSON line on stdout.

Runs in the project's venv against a cluster compare.py started (or any: -n ADDR):

    .venv/bin/python bench/wl_rocketmq.py -n 127.0.0.1:9876 --workload async_send --count 50000

Workloads (1 KiB bodies): batch_send (send_batch of --batch, --inflight batches in flight),
async_send (send_async, --inflight in flight), sync_send (send, one at a time; p50/p99),
litepull_consume / push_consume (--count messages preloaded, then read by a new group; the clock
starts when the consumer has started), e2e (send_async paced at --rate msgs/s, a push listener
measures send -> receive latency), topics (async_send spread over --topics topics of 4 queues,
alternating --rounds times with async_send to 1 topic of 4 queues in the same process; reports both
rates and their ratio).
Times are wall clock; `client_cpu_us` is this process's CPU time per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client import Admin, Message, Producer  # noqa: E402
from client.consumer import (  # noqa: E402
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    LitePullConsumer,
    PushConsumer,
)
from remoting.log import configure_logging  # noqa: E402
from remoting.loop import run  # noqa: E402

STAMP = "__BENCH_SEND_NS"


def percentiles(lat_ms: list[float]) -> dict[str, float]:
    if not lat_ms:
        return {}
    s = sorted(lat_ms)
    n = len(s)
    return {
        "p50_ms": round(s[n // 2], 3),
        "p99_ms": round(s[min(n - 1, int(n * 0.99))], 3),
        "max_ms": round(s[-1], 3),
        "avg_ms": round(sum(s) / n, 3),
    }


async def windowed(start: Any, n: int, window: int) -> None:
    """Call start() n times keeping at most `window` of its futures pending; done callbacks refill
    the window (no per-completion scan of the pending set). Raises the first failure at the end."""
    done_ev = asyncio.Event()
    st = {"inflight": 0, "left": n}
    errors: list[BaseException] = []

    def on_done(f: asyncio.Future[Any]) -> None:
        st["inflight"] -= 1
        if f.cancelled():
            errors.append(asyncio.CancelledError())
        elif f.exception() is not None:
            errors.append(f.exception())  # type: ignore[arg-type]
        done_ev.set()

    while st["left"] > 0 or st["inflight"] > 0:
        while st["inflight"] < window and st["left"] > 0:
            st["left"] -= 1
            st["inflight"] += 1
            start().add_done_callback(on_done)
        done_ev.clear()
        if st["inflight"]:
            await done_ev.wait()
    if errors:
        raise errors[0]


async def paced(count: int, rate: float, send_due: Any) -> None:
    """Every ~1 ms tick, send the messages that are due by then at `rate` msgs/s (same as wl_peers)."""
    start = time.monotonic()
    sent = 0
    while sent < count:
        due = min(count, int((time.monotonic() - start) * rate) + 1)
        if due > sent:
            await send_due(due - sent)
            sent = due
        await asyncio.sleep(0.001)


async def ensure_topic(ns: str, topic: str, queues: int) -> None:
    """Create the topic and wait (bounded) until the NameServer routes it: the broker registers new
    topics asynchronously, and a consumer that looks the route up too early waits for its next
    periodic refresh (30 s)."""
    async with Admin(ns) as admin:
        await admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
        deadline = time.monotonic() + 10
        while True:
            try:
                if (await admin.topic_route(topic)).queue_datas:
                    return
            except Exception:  # not routed yet
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} has no route after 10 s")
            await asyncio.sleep(0.05)


async def preload(ns: str, topic: str, count: int, body: bytes) -> None:
    async with Producer("bench_preload", ns, max_async_inflight=8) as p:
        pending: set[asyncio.Future[Any]] = set()
        for i in range(0, count, 32):
            n = min(32, count - i)
            pending.add(p.send_batch_async([Message(topic, body) for _ in range(n)]))
            if len(pending) >= 8:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for f in done:
                    f.result()
        for f in asyncio.as_completed(pending):
            await f


async def w_send(ns: str, topic: str, count: int, body: bytes, mode: str, inflight: int, batch: int,
                 auto_batch: bool = False) -> dict[str, Any]:
    lat: list[float] = []
    async with Producer("bench_producer", ns, max_async_inflight=max(1, inflight), auto_batch=auto_batch) as p:
        await p.send(Message(topic, body))  # warm up: route, connection, the broker's first mapped file
        for _ in range(50):
            await p.send(Message(topic, body))
        c0, t0 = time.process_time(), time.perf_counter()
        if mode == "sync":
            for _ in range(count):
                s = time.perf_counter()
                await p.send(Message(topic, body))
                lat.append((time.perf_counter() - s) * 1000.0)
        elif mode == "async":
            await windowed(lambda: p.send_async(Message(topic, body)), count, inflight)
        else:
            await windowed(
                lambda: p.send_batch_async([Message(topic, body) for _ in range(batch)]), count // batch, inflight
            )
            if count % batch:
                await p.send_batch([Message(topic, body) for _ in range(count % batch)])
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
    return {"msgs": count, "seconds": dt, "client_cpu_s": cpu, **percentiles(lat)}


def proc_cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of process `pid` in seconds."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(f[11]) / tck, int(f[12]) / tck


def proc_cpu_s(pid: int | None) -> float:
    """utime + stime of process `pid` in seconds (0 without a pid)."""
    return sum(proc_cpu_times(pid)) if pid else 0.0


async def wait_dispatched(ns: str, topic: str, queues: int, timeout_s: float) -> bool:
    """Wait (bounded) until every queue of `topic` shows a message: the broker creates new queues' files
    as it dispatches, behind the sends. False when the time ran out."""
    deadline = time.monotonic() + timeout_s
    async with Admin(ns) as admin:
        while time.monotonic() < deadline:
            try:
                rows = await admin.topic_status(topic)
            except Exception:  # noqa: BLE001 - the broker answers stats only once dispatch caught up
                rows = []
            if len(rows) == queues and all(r.max_offset >= 1 for r in rows):
                return True
            await asyncio.sleep(0.2)
    return False


async def w_topics(ns: str, single: str, topics: list[str], count: int, body: bytes, inflight: int,
                   rounds: int, broker_pid: int | None = None, auto_batch: bool = False) -> dict[str, Any]:
    """The 1 000-topic target is a ratio, so both sides are measured here, alternately, by one
    producer on the same warm broker: `rounds` pairs of (1 topic x 4 queues, then N topics x 4
    queues), count // rounds messages each. Measuring the 1-topic side in another run (earlier, on a
    broker with less state, under other load) made the ratio swing 39-91% between harness runs."""
    per = max(1, count // rounds)
    sides: dict[str, list[tuple[float, float]]] = {"single": [], "many": []}  # (seconds, cpu seconds)
    broker_cpu = {"single": 0.0, "many": 0.0}
    async with Producer("bench_producer", ns, max_async_inflight=max(1, inflight), auto_batch=auto_batch) as p:
        for t in [single, *topics]:  # routes and connection
            await p.send(Message(t, body))
        # Every queue of every topic once, so the broker's consume queue files exist and the runs
        # measure steady state, not file creation.
        every = [single] * 4 + [t for t in topics for _ in range(4)]
        seq = iter(range(len(every)))
        await windowed(lambda: p.send_async(Message(every[next(seq)], body)), len(every), 64)
        # The broker creates those files as it dispatches, behind the sends: wait (bounded) until the
        # last topic's queues show their message, so neither side's timed rounds pay for that.
        w0 = time.monotonic()
        await wait_dispatched(ns, topics[-1], 4, 60)
        dispatch_wait_s = time.monotonic() - w0
        await asyncio.sleep(1.0)  # let the broker's config persistence and registration settle
        for _ in range(rounds):
            for side, ts in (("single", [single]), ("many", topics)):
                nt = len(ts)
                seq = iter(range(per))
                b0, c0, t0 = proc_cpu_s(broker_pid), time.process_time(), time.perf_counter()
                await windowed(lambda ts=ts, nt=nt, seq=seq: p.send_async(Message(ts[next(seq) % nt], body)),
                               per, inflight)
                sides[side].append((time.perf_counter() - t0, time.process_time() - c0))
                broker_cpu[side] += proc_cpu_s(broker_pid) - b0
    rates = {k: [per / s for s, _ in v] for k, v in sides.items()}
    many_s = sum(s for s, _ in sides["many"])
    single_s = sum(s for s, _ in sides["single"])
    out: dict[str, Any] = {
        "msgs": per * rounds, "seconds": many_s, "client_cpu_s": sum(c for _, c in sides["many"]),
        "single_msgs_s": round(per * rounds / single_s, 1),
        "ratio": round(single_s / many_s, 3),  # same message count on both sides
        "round_ratios": [round(m / s, 3) for s, m in zip(rates["single"], rates["many"], strict=True)],
        "topics": len(topics),
        "dispatch_wait_s": round(dispatch_wait_s, 2),
        "single_client_cpu_us": round(sum(c for _, c in sides["single"]) / (per * rounds) * 1e6, 1),
    }
    if broker_pid:
        out.update({f"{k}_broker_cpu_us": round(v / (per * rounds) * 1e6, 1) for k, v in broker_cpu.items()})
    return out


async def w_litepull(ns: str, topic: str, count: int, group: str, blocking: bool = False) -> dict[str, Any]:
    """Lite pull consumption; `blocking`: client.sync's LitePullConsumer polled from a plain thread."""
    kw: dict[str, Any] = dict(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, pull_batch_size=256,
                              pull_threshold_for_queue=4096, pull_threshold_for_all=40960)
    if blocking:
        return await asyncio.to_thread(_blocking_litepull, ns, topic, count, group, kw)
    c = LitePullConsumer(group, ns, **kw)
    c.subscribe(topic, "*")
    await c.start()
    got = 0
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + 120
        while got < count and time.perf_counter() < deadline:
            got += len(await c.poll(timeout=1.0))
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
    finally:
        await c.shutdown()
    return {"msgs": got, "seconds": dt, "client_cpu_s": cpu}


def _blocking_litepull(ns: str, topic: str, count: int, group: str, kw: dict[str, Any]) -> dict[str, Any]:
    from client.sync import LitePullConsumer as BlockingLitePullConsumer

    c = BlockingLitePullConsumer(group, ns, **kw)
    c.subscribe(topic, "*")
    c.start()
    got = 0
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + 120
        while got < count and time.perf_counter() < deadline:
            got += len(c.poll(1.0))
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
    finally:
        c.shutdown()
    return {"msgs": got, "seconds": dt, "client_cpu_s": cpu}


async def w_push(ns: str, topic: str, count: int, group: str, body: bytes, rate: float | None,
                 role: str = "both", stamps: list[tuple[int, int]] | None = None,
                 auto_batch: bool = False, thread_listener: bool = False, consume_batch: int = 32,
                 orderly: bool = False, threads: int = 20) -> dict[str, Any]:
    """Push consumption; with `rate`, e2e (each message's latency from its send stamp). `stamps` also gets
    each message's (send ns, arrival ns) (bench/read_timeline.py). push_consume only: `thread_listener`, a
    plain-function listener, run in the consumer's `threads` threads as a blocking listener would be;
    `orderly`, an orderly listener (one call per queue at a time)."""
    got = 0
    lat: list[float] = []
    done = asyncio.Event()
    first_stamp = [0]
    last_recv = [0.0]

    async def listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:  # on the loop, no thread hop
        nonlocal got
        if rate:
            now = time.time_ns()
            for m in msgs:
                ts = m.properties.get(STAMP)
                if ts is not None:
                    t = int(ts)
                    lat.append((now - t) / 1e6)
                    if stamps is not None:
                        stamps.append((t, now))
                    got += 1
                    if not first_stamp[0] or t < first_stamp[0]:
                        first_stamp[0] = t
            last_recv[0] = now / 1e9
        else:
            got += len(msgs)
        if got >= count:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    loop = asyncio.get_running_loop()
    lock = threading.Lock()

    def plain_listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:  # in a consume thread
        nonlocal got
        with lock:
            got += len(msgs)
            if got >= count:
                loop.call_soon_threadsafe(done.set)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def orderly_listener(msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        await listener(msgs, ctx)
        return ConsumeOrderlyStatus.SUCCESS

    def plain_orderly_listener(msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        plain_listener(msgs, ctx)
        return ConsumeOrderlyStatus.SUCCESS

    cfw = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET if rate else ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    c = PushConsumer(group, ns, consume_from_where=cfw, pull_batch_size=64, consume_message_batch_max_size=consume_batch,
                     consume_thread_min=threads, consume_thread_max=threads)
    c.subscribe(topic, "*")
    plain = thread_listener and not rate
    if orderly and not rate:
        c.register_listener(plain_orderly_listener if plain else orderly_listener, orderly=True)
    else:
        c.register_listener(plain_listener if plain else listener)
    await c.start()
    try:
        if rate and role == "consumer":
            await asyncio.sleep(1.0)  # let the rebalance settle and the first long polls park
            print("READY", flush=True)  # compare.py starts the producer process now
            c0, t0 = time.process_time(), time.perf_counter()
            await asyncio.wait_for(done.wait(), 90)
        elif rate:
            await asyncio.sleep(1.0)  # let the rebalance settle and the first long polls park
            c0, t0 = time.process_time(), time.perf_counter()
            await e2e_send(ns, topic, count, body, rate, auto_batch)
            await asyncio.wait_for(done.wait(), 60)
        else:
            c0, t0 = time.process_time(), time.perf_counter()
            await asyncio.wait_for(done.wait(), 120)
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
    finally:
        await c.shutdown()
    out = {"msgs": got, "seconds": dt, "client_cpu_s": cpu, **percentiles(lat)}
    if rate and role == "consumer":
        out["seconds"] = max(1e-6, last_recv[0] - first_stamp[0] / 1e9)  # first send -> last receive
    return out


async def e2e_send(ns: str, topic: str, count: int, body: bytes, rate: float, auto_batch: bool = False) -> dict[str, Any]:
    """The producer half of e2e: `count` stamped messages paced at `rate` msgs/s, all acknowledged."""
    async with Producer("bench_e2e", ns, max_async_inflight=256, instance_name="bench_e2e_producer",
                        auto_batch=auto_batch) as p:
        await p.send(Message(topic, body))  # route + connection, outside the stamped run
        c0, t0 = time.process_time(), time.perf_counter()
        # Count completions in a callback: gathering 50 000 futures at the end would stall the loop
        # (and, in-process, the listener) for a moment and show up as latency.
        acked = asyncio.Event()
        st = {"left": count, "errors": 0}

        def on_ack(f: asyncio.Future[Any]) -> None:
            st["left"] -= 1
            if f.cancelled() or f.exception() is not None:
                st["errors"] += 1
            if st["left"] == 0:
                acked.set()

        async def send_due(n: int) -> None:
            for _ in range(n):
                p.send_async(Message(topic, body, properties={STAMP: str(time.time_ns())})).add_done_callback(on_ack)

        await paced(count, rate, send_due)
        await asyncio.wait_for(acked.wait(), 60)
        if st["errors"]:
            raise RuntimeError(f"{st['errors']} of {count} sends failed")
        return {"msgs": count, "seconds": time.perf_counter() - t0, "client_cpu_s": time.process_time() - c0}


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    body = b"x" * a.size
    w = a.workload
    topic = a.topic or f"Bench_{a.workload}"
    if a.topic is None and w in ("litepull_consume", "push_consume", "e2e") and a.role == "both":
        topic = f"{topic}_{time.time_ns() % 10**12}"  # a fresh topic per run: nothing left from earlier runs
    if w == "topics":
        topics = [f"{topic}_{i}" for i in range(a.topics)]
        single = f"{topic}_single"
        for i in range(0, len(topics), 50):
            await asyncio.gather(*(ensure_topic(a.namesrv, t, 4) for t in topics[i:i + 50]))
        await ensure_topic(a.namesrv, single, 4)
        return await w_topics(a.namesrv, single, topics, a.count, body, a.inflight, a.rounds, a.broker_pid, a.auto_batch)
    await ensure_topic(a.namesrv, topic, a.queues)
    if w == "batch_send":
        return await w_send(a.namesrv, topic, a.count, body, "batch", a.inflight, a.batch, a.auto_batch)
    if w == "async_send":
        return await w_send(a.namesrv, topic, a.count, body, "async", a.inflight, 1, a.auto_batch)
    if w == "sync_send":
        return await w_send(a.namesrv, topic, a.count, body, "sync", 1, 1, a.auto_batch)
    if w in ("litepull_consume", "push_consume"):
        if not a.no_preload:
            await preload(a.namesrv, topic, a.count, body)
        group = f"bench_{w}_{time.time_ns()}"
        if w == "litepull_consume":
            return await w_litepull(a.namesrv, topic, a.count, group, a.blocking)
        return await w_push(a.namesrv, topic, a.count, group, body, None, thread_listener=a.listener == "thread",
                            consume_batch=a.consume_batch, orderly=a.orderly, threads=a.consume_threads)
    if w == "e2e":
        if a.role == "producer":
            return await e2e_send(a.namesrv, topic, a.count, body, a.rate, a.auto_batch)
        return await w_push(a.namesrv, topic, a.count, f"bench_e2e_{time.time_ns()}", body, a.rate, a.role,
                            auto_batch=a.auto_batch)
    raise SystemExit(f"unknown workload {w}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--namesrv", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=10000)
    ap.add_argument("--topic", default=None)
    ap.add_argument("--rounds", type=int, default=3, help="topics: alternating 1-topic / N-topic pairs")
    ap.add_argument("--broker-pid", type=int, default=None,
                    help="topics: also report this (local) broker's CPU per message for each side")
    ap.add_argument("--no-preload", action="store_true")
    ap.add_argument("--auto-batch", action="store_true",
                    help="the sending workloads' producer gathers its sends into batches (Producer(auto_batch=True))")
    ap.add_argument("--listener", choices=["async", "thread"], default="async",
                    help="push_consume: an async def listener on the loop, or a plain function in the consume threads")
    ap.add_argument("--consume-batch", type=int, default=32,
                    help="push_consume: messages per listener call (consumeMessageBatchMaxSize)")
    ap.add_argument("--consume-threads", type=int, default=20,
                    help="push_consume: consume_thread_min/max (the plain listener's threads, the async one's workers)")
    ap.add_argument("--orderly", action="store_true", help="push_consume: an orderly listener")
    ap.add_argument("--blocking", action="store_true",
                    help="litepull_consume: client.sync's blocking LitePullConsumer, polled from a plain thread")
    ap.add_argument("--role", choices=["both", "consumer", "producer"], default="both",
                    help="e2e: both halves in this process, or one half (the consumer prints READY when subscribed)")
    a = ap.parse_args()
    configure_logging(level="ERROR")
    r = run(main_async(a))
    r.update(workload=a.workload, system="this", msgs_s=round(r["msgs"] / r["seconds"], 1))
    r["client_cpu_us"] = round(r.pop("client_cpu_s") / max(1, r["msgs"]) * 1e6, 1)
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
