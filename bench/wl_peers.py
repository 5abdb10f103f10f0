"""The peers' side of bench/compare.py: Redis Streams and NATS JetStream, one workload per run.

Runs in build/venv-bench (redis + hiredis, nats-py, uvloop), against servers compare.py started:

    build/venv-bench/bin/python bench/wl_peers.py --system redis --addr 127.0.0.1:16379 --workload async_send

Each workload mirrors bench/wl_rocketmq.py with the peer's best Python set-up (uvloop; hiredis for
Redis). Prints one JSON line; `{"skip": reason}` where the peer has no equivalent.

Redis Streams: batch_send = pipelines of --batch XADDs, --inflight pipelines at once (each on its
own connection); async_send = pipelines of --inflight single XADDs (every XADD individually
answered); sync_send = one XADD at a time; sync_flush_batch = batch_send with AOF appendfsync always;
litepull_consume = XREADGROUP COUNT 1000 + XACK of the batch; e2e = paced XADD, XREADGROUP BLOCK
in the same process; topics = async_send spread over --topics streams.
NATS JetStream (file storage): async_send = js.publish_async with --inflight pending;
sync_send = js.publish; litepull_consume = pull consumer fetch(500), AckPolicy.ALL (ack the
batch's last message, like a committed offset); push_consume = push consumer, AckPolicy.ALL,
ack every 64th and the last; e2e = paced publish_async, push consumer in the same process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from typing import Any

import uvloop

STAMP = "ts"
REDIS_APPENDFSYNC = ("off", "no", "everysec")


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


async def paced(count: int, rate: float, send_due: Any) -> None:
    """Every ~1 ms tick, send the messages that are due by then at `rate` msgs/s (same as wl_rocketmq)."""
    start = time.monotonic()
    sent = 0
    while sent < count:
        due = min(count, int((time.monotonic() - start) * rate) + 1)
        if due > sent:
            await send_due(due - sent)
            sent = due
        await asyncio.sleep(0.001)


# ------------------------------------------------------------------ Redis Streams


async def set_redis_persistence(r: Any, appendfsync: str) -> None:
    """AOF off ("off") or on with that fsync policy, taking effect before the timed run: turning the AOF on
    starts a rewrite, and until it has finished Redis is not yet logging writes the new way."""
    if appendfsync == "off":
        await r.config_set("appendonly", "no")
        return
    await r.config_set("appendfsync", appendfsync)
    await r.config_set("appendonly", "yes")
    deadline = time.monotonic() + 30
    while True:
        info = await r.info("persistence")
        if info.get("aof_enabled") == 1 and not info.get("aof_rewrite_in_progress"):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("redis AOF did not come on within 30 s")
        await asyncio.sleep(0.01)


async def redis_workload(a: argparse.Namespace, body: bytes) -> dict[str, Any]:
    import redis.asyncio as aredis

    host, port = a.addr.rsplit(":", 1)
    r = aredis.Redis(host=host, port=int(port), max_connections=max(64, a.inflight + 8))
    stream = f"bench:{a.workload}:{time.time_ns()}"
    w = a.workload
    lat: list[float] = []
    try:
        await r.ping()
        fsync = "always" if w == "sync_flush_batch" else a.redis_appendfsync
        await set_redis_persistence(r, fsync)

        async def pipelined(stream_of: Any, total: int, per_pipe: int, concurrency: int) -> None:
            left = [total]

            async def one() -> None:
                i = 0
                while left[0] > 0:
                    n = min(per_pipe, left[0])
                    left[0] -= n
                    p = r.pipeline(transaction=False)
                    for _ in range(n):
                        p.xadd(stream_of(i), {"b": body})
                        i += 1
                    await p.execute()

            await asyncio.gather(*(one() for _ in range(concurrency)))

        if w in ("batch_send", "sync_flush_batch", "async_send", "sync_send", "topics"):
            await r.xadd(stream, {"b": body})
            c0, t0 = time.process_time(), time.perf_counter()
            if w in ("batch_send", "sync_flush_batch"):
                await pipelined(lambda i: stream, a.count, a.batch, a.batch_inflight)
            elif w == "async_send":
                await pipelined(lambda i: stream, a.count, a.inflight, 1)
            elif w == "topics":
                names = [f"{stream}:{k}" for k in range(a.topics)]
                await pipelined(lambda i: names[i % len(names)], a.count, a.inflight, 1)
            else:
                for _ in range(a.count):
                    s = time.perf_counter()
                    await r.xadd(stream, {"b": body})
                    lat.append((time.perf_counter() - s) * 1000.0)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            return {"msgs": a.count, "seconds": dt, "client_cpu_s": cpu, **percentiles(lat)}

        if w == "litepull_consume":
            await pipelined(lambda i: stream, a.count, 1000, 1)
            await r.xgroup_create(stream, "g", id="0")
            got = 0
            c0, t0 = time.process_time(), time.perf_counter()
            while got < a.count:
                res = await r.xreadgroup("g", "c", {stream: ">"}, count=1000)
                if not res:
                    break
                entries = res[0][1]
                got += len(entries)
                await r.xack(stream, "g", *[e[0] for e in entries])
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            return {"msgs": got, "seconds": dt, "client_cpu_s": cpu}

        if w == "e2e":
            await r.xadd(stream, {"b": body})
            await r.xgroup_create(stream, "g", id="$")
            got = 0

            async def consume() -> None:
                nonlocal got
                rc = aredis.Redis(host=host, port=int(port))
                try:
                    while got < a.count:
                        res = await rc.xreadgroup("g", "c", {stream: ">"}, count=100, block=1000)
                        now = time.time_ns()
                        if not res:
                            continue
                        entries = res[0][1]
                        for _id, fields in entries:
                            lat.append((now - int(fields[b"ts"])) / 1e6)
                        got += len(entries)
                        await rc.xack(stream, "g", *[e[0] for e in entries])
                finally:
                    await rc.aclose()

            ct = asyncio.ensure_future(consume())
            await asyncio.sleep(0.2)
            c0, t0 = time.process_time(), time.perf_counter()
            async def send_due(n: int) -> None:  # one pipeline per tick
                p = r.pipeline(transaction=False)
                for _ in range(n):
                    p.xadd(stream, {"b": body, STAMP: str(time.time_ns())})
                await p.execute()

            await paced(a.count, a.rate, send_due)
            await asyncio.wait_for(ct, 60)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            return {"msgs": got, "seconds": dt, "client_cpu_s": cpu, **percentiles(lat)}
        return {"skip": "Redis Streams has no push delivery (XREADGROUP BLOCK is a pull)"}
    finally:
        try:
            await r.delete(stream)
            await r.config_set("appendonly", "no")
        finally:
            await r.aclose()


# ------------------------------------------------------------------ NATS JetStream


async def nats_workload(a: argparse.Namespace, body: bytes) -> dict[str, Any]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

    w = a.workload
    if w in ("batch_send", "sync_flush_batch", "topics"):
        return {
            "batch_send": {"skip": "JetStream 2.9 has no batch publish"},
            "sync_flush_batch": {"skip": "JetStream 2.9 cannot fsync each write (sync_interval is 2.10+)"},
            "topics": {"skip": "not measured for JetStream"},
        }[w]
    nc = await nats.connect(f"nats://{a.addr}")
    js = nc.jetstream(publish_async_max_pending=a.inflight)
    name = f"BENCH{time.time_ns()}"
    subject = f"{name.lower()}.x"
    lat: list[float] = []
    try:
        await js.add_stream(StreamConfig(name=name, subjects=[subject], storage=StorageType.FILE))
        await js.publish(subject, body)  # warm up
        if w in ("async_send", "sync_send"):
            c0, t0 = time.process_time(), time.perf_counter()
            if w == "async_send":
                for _ in range(a.count):
                    await js.publish_async(subject, body)
                await js.publish_async_completed()
            else:
                for _ in range(a.count):
                    s = time.perf_counter()
                    await js.publish(subject, body)
                    lat.append((time.perf_counter() - s) * 1000.0)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            return {"msgs": a.count, "seconds": dt, "client_cpu_s": cpu, **percentiles(lat)}

        if w in ("litepull_consume", "push_consume"):
            for _ in range(a.count - 1):  # the warm-up message counts as the first one
                await js.publish_async(subject, body)
            await js.publish_async_completed()
            got = 0
            if w == "litepull_consume":
                sub = await js.pull_subscribe(subject, durable="puller",
                                              config=ConsumerConfig(ack_policy=AckPolicy.ALL, max_ack_pending=-1))
                c0, t0 = time.process_time(), time.perf_counter()
                while got < a.count:
                    msgs = await sub.fetch(500, timeout=5)
                    got += len(msgs)
                    await msgs[-1].ack()
            else:
                done = asyncio.Event()

                async def cb(m: Any) -> None:
                    nonlocal got
                    got += 1
                    if got % 64 == 0 or got >= a.count:
                        await m.ack()
                    if got >= a.count:
                        done.set()

                c0, t0 = time.process_time(), time.perf_counter()
                await js.subscribe(subject, cb=cb, durable="pusher", manual_ack=True,
                                   config=ConsumerConfig(ack_policy=AckPolicy.ALL, max_ack_pending=-1,
                                                         deliver_policy=DeliverPolicy.ALL),
                                   pending_msgs_limit=1_000_000, pending_bytes_limit=1 << 30)
                await asyncio.wait_for(done.wait(), 120)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            return {"msgs": got, "seconds": dt, "client_cpu_s": cpu}

        if w == "e2e":
            got = 0
            done = asyncio.Event()

            async def ecb(m: Any) -> None:
                nonlocal got
                ts = (m.headers or {}).get(STAMP)
                if ts is not None:
                    lat.append((time.time_ns() - int(ts)) / 1e6)
                    got += 1
                    if got % 64 == 0 or got >= a.count:
                        await m.ack()
                    if got >= a.count:
                        done.set()

            await js.subscribe(subject, cb=ecb, durable="e2e", manual_ack=True,
                               config=ConsumerConfig(ack_policy=AckPolicy.ALL, max_ack_pending=-1,
                                                     deliver_policy=DeliverPolicy.NEW))
            await asyncio.sleep(0.2)
            c0, t0 = time.process_time(), time.perf_counter()
            async def send_due(n: int) -> None:
                for _ in range(n):
                    await js.publish_async(subject, body, headers={STAMP: str(time.time_ns())})

            await paced(a.count, a.rate, send_due)
            await js.publish_async_completed()
            await asyncio.wait_for(done.wait(), 60)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            return {"msgs": got, "seconds": dt, "client_cpu_s": cpu, **percentiles(lat)}
        return {"skip": f"unknown workload {w}"}
    finally:
        try:
            await js.delete_stream(name)
        finally:
            await nc.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["redis", "nats"], required=True)
    ap.add_argument("--addr", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--batch-inflight", type=int, default=8)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=10000)
    ap.add_argument("--redis-appendfsync", choices=REDIS_APPENDFSYNC, default="off",
                    help="Redis persistence for every workload but sync_flush_batch (which is AOF fsync always): "
                    "off = no AOF (an acknowledged message is lost when the server stops); no = AOF written to the "
                    "kernel before the reply (kept when the server process dies, as ASYNC_FLUSH's mapped writes are), "
                    "flushed by the OS; everysec = the same, fsynced every second (a write may then wait up to 2 s "
                    "behind a slow fsync while replies go out)")
    a = ap.parse_args()
    body = b"x" * a.size
    fn = redis_workload if a.system == "redis" else nats_workload
    gc.freeze()  # as remoting.loop.run does for this project's client: start-up objects out of gc's sight
    r = uvloop.run(fn(a, body))
    r.update(workload=a.workload, system=a.system)
    if "skip" not in r:
        r["msgs_s"] = round(r["msgs"] / r["seconds"], 1)
        r["client_cpu_us"] = round(r.pop("client_cpu_s") / max(1, r["msgs"]) * 1e6, 1)
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
