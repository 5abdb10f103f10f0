"""Producer throughput against real daemons: msgs/s for send (sequential), send_async with many in
flight, and send_batch(32), 1 KiB bodies; and a fresh producer's first burst: `--count` send_async
fired at once right after start() by a producer with its own client instance (the route unknown, no
broker connection open), its wall time and the process's CPU a send, against the same producer's next
burst; and the blocking facade (client.sync, as a thread without an event loop uses it): send one at a
time, and send_async with `--inflight` in flight. Starts its own NameServer and broker (subprocesses on free loopback ports, store in a temp dir)
unless -n is given. Not a test: figures vary by machine.

    .venv/bin/python bench/bench_producer.py [--count 5000] [--inflight 256] [--runs 3] [-n ADDR]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client import Admin, Message, Producer  # noqa: E402
from remoting.log import configure_logging  # noqa: E402
from remoting.loop import run  # noqa: E402

TOPIC = "BenchProducer"


async def burst(p: Producer, count: int, body: bytes) -> tuple[float, float]:
    """count send_async at once: (ms of wall time, us of process CPU a send)."""
    t, c = time.perf_counter(), time.process_time()
    await asyncio.gather(*(p.send_async(Message(TOPIC, body)) for _ in range(count)))
    return (time.perf_counter() - t) * 1e3, (time.process_time() - c) / count * 1e6


async def first_bursts(addr: str, count: int, inflight: int, runs: int, body: bytes) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"first_ms": [], "first_cpu_us": [], "next_ms": [], "next_cpu_us": []}
    for r in range(runs):
        # Its own instance name: a client instance of its own, with no route and no connection yet.
        async with Producer("bench_first_burst", addr, max_async_inflight=inflight, instance_name=f"first{r}") as p:
            for k, v in zip(("first_ms", "first_cpu_us"), await burst(p, count, body), strict=True):
                out[k].append(v)
            for k, v in zip(("next_ms", "next_cpu_us"), await burst(p, count, body), strict=True):
                out[k].append(v)
        print(f"first burst {r + 1}: {out['first_ms'][-1]:.1f} ms, {out['first_cpu_us'][-1]:.1f} us CPU a send; "
              f"the next {out['next_ms'][-1]:.1f} ms, {out['next_cpu_us'][-1]:.1f} us", flush=True)
    return out


async def bench(addr: str, count: int, inflight: int, runs: int, size: int) -> dict[str, list[float]]:
    body = b"x" * size
    results: dict[str, list[float]] = {"send": [], "send_async": [], "send_batch(32)": []}
    async with Admin(addr) as admin:
        await admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=8, write_queue_nums=8)
    firsts = await first_bursts(addr, count, inflight, runs, body)
    async with Producer("bench_producer", addr, max_async_inflight=inflight) as p:
        for _ in range(200):  # warm up: route, connection, broker's first mapped file
            await p.send(Message(TOPIC, body))
        for r in range(runs):
            t = time.perf_counter()
            for _ in range(count):
                await p.send(Message(TOPIC, body))
            results["send"].append(count / (time.perf_counter() - t))

            t = time.perf_counter()
            await asyncio.gather(*(p.send_async(Message(TOPIC, body)) for _ in range(count)))
            results["send_async"].append(count / (time.perf_counter() - t))

            batches = max(1, count // 32)
            t = time.perf_counter()
            for _ in range(batches):
                await p.send_batch([Message(TOPIC, body) for _ in range(32)])
            results["send_batch(32)"].append(batches * 32 / (time.perf_counter() - t))
            print(
                f"run {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s" for k, v in results.items()),
                flush=True,
            )
    return results | firsts


def bench_blocking(addr: str, count: int, inflight: int, runs: int, size: int) -> dict[str, list[float]]:
    """The blocking facade from this (plain) thread: msgs/s of send() and of send_async() with at most
    `inflight` unfinished, waited for one by one as a thread would."""
    import threading

    from client import sync as blocking

    body = b"x" * size
    out: dict[str, list[float]] = {"blocking send": [], "blocking send_async": []}
    with blocking.Producer("bench_blocking", addr, max_async_inflight=inflight) as p:
        for _ in range(200):
            p.send(Message(TOPIC, body))
        for r in range(runs):
            n = max(1, count // 5)
            t = time.perf_counter()
            for _ in range(n):
                p.send(Message(TOPIC, body))
            out["blocking send"].append(n / (time.perf_counter() - t))
            room = threading.BoundedSemaphore(inflight)
            t = time.perf_counter()
            futs = []
            for _ in range(count):
                room.acquire()
                f = p.send_async(Message(TOPIC, body))
                f.add_done_callback(lambda _f, room=room: room.release())
                futs.append(f)
            for f in futs:
                f.result()
            out["blocking send_async"].append(count / (time.perf_counter() - t))
            print(f"blocking run {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s" for k, v in out.items()), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=5000, help="messages per mode per run")
    ap.add_argument("--inflight", type=int, default=256, help="max_async_inflight for send_async")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("-n", "--namesrv", default=None, help="use a running cluster instead of starting one")
    args = ap.parse_args()
    configure_logging(level="ERROR")
    daemons = []
    tmp: Path | None = None
    addr = args.namesrv
    if addr is None:
        from tests.support.daemons import start_broker, start_namesrv

        tmp = Path(tempfile.mkdtemp(prefix="bench-producer-"))
        ns, addr = start_namesrv(tmp)
        daemons.append(ns)
        br, _ = start_broker(tmp, addr, extra={"mappedFileSizeCommitLog": 256 * 1024 * 1024})
        daemons.append(br)
    try:
        res = run(bench(addr, args.count, args.inflight, args.runs, args.size))
        res |= bench_blocking(addr, args.count, args.inflight, args.runs, args.size)
    finally:
        for d in reversed(daemons):
            d.terminate()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # (a 256 MiB CommitLog file or more)
    print(
        f"medians ({args.size} B bodies, {args.count} msgs/run, {args.runs} runs, async in flight {args.inflight}):"
    )
    for k, v in res.items():
        if k.endswith("_ms"):
            print(f"  {k:<20} {statistics.median(v):>10,.1f} ms ({args.count} send_async)")
        elif k.endswith("_us"):
            print(f"  {k:<20} {statistics.median(v):>10,.1f} us of client CPU a send")
        else:
            print(f"  {k:<20} {statistics.median(v):>10,.0f} msg/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
