"""In-process DefaultMessageStore throughput: put 1 KiB messages (single and batch), ASYNC and SYNC
flush, then get. Not a test; prints msg/s.

"put" is the put calls alone (the dispatcher runs when the loop is free); "put+dispatch" waits until
the consume queues and index have caught up too.

    .venv/bin/python bench/bench_store.py [--messages N] [--dir PATH] [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog  # noqa: E402

from remoting.message import encode_properties  # noqa: E402
from store.config import FlushDiskType, MessageStoreConfig  # noqa: E402
from store.message import MessageExtBrokerInner  # noqa: E402
from store.message_store import DefaultMessageStore  # noqa: E402

TOPIC = "BenchmarkTest"
BODY = b"x" * 1024


def make_messages(n: int, queues: int) -> list[MessageExtBrokerInner]:
    now = int(time.time() * 1000)
    out = []
    for i in range(n):
        props = {"TAGS": "TagA", "UNIQ_KEY": f"0A0B0C0D00002A9F{i:016X}", "WAIT": "true"}
        # The broker has the wire form of the properties already; pass it along like it would.
        ps = encode_properties(props)
        out.append(
            MessageExtBrokerInner(
                topic=TOPIC,
                body=BODY,
                queue_id=i % queues,
                properties=props,
                properties_string=ps,
                born_timestamp=now,
                born_host=("10.0.0.1", 50000),
                store_host=("10.0.0.2", 10911),
            )
        )
    return out


def config(root: str, flush: FlushDiskType) -> MessageStoreConfig:
    return MessageStoreConfig(
        storePathRootDir=root,
        flushDiskType=flush,
        mappedFileSizeCommitLog=256 * 1024 * 1024,
        mappedFileSizeConsumeQueue=300000 * 20,
        maxHashSlotNum=500000,
        maxIndexNum=2000000,
    )


async def bench_put(
    root: str, flush: FlushDiskType, n: int, batch: int, concurrency: int
) -> dict[str, float]:
    shutil.rmtree(root, ignore_errors=True)
    store = DefaultMessageStore(config(root, flush))
    await store.start()
    try:
        msgs = make_messages(n, 8)
        # Each producer owns one queue (a batch is one topic/queue, like a client batch send).
        per = [msgs[i::concurrency] for i in range(concurrency)]
        for p, lst in enumerate(per):
            for m in lst:
                m.queue_id = p % 8

        async def producer(lst: list[MessageExtBrokerInner]) -> None:
            if batch == 1:
                for m in lst:
                    r = await store.put_message(m)
                    if not r.is_ok:
                        raise RuntimeError(r)
            else:
                for i in range(0, len(lst), batch):
                    r = await store.put_messages(lst[i : i + batch])
                    if not r.is_ok:
                        raise RuntimeError(r)

        # The 1e5+ pre-built messages are a harness artifact (a broker drops each after its put): keep
        # the cyclic GC from rescanning them during the timed part.
        gc.collect()
        gc.freeze()
        t0 = time.perf_counter()
        c0 = time.thread_time()
        await asyncio.gather(*(producer(lst) for lst in per))
        t_put = time.perf_counter() - t0
        c_put = time.thread_time() - c0
        ok = await store.wait_dispatched(120)
        t_all = time.perf_counter() - t0
        c_all = time.thread_time() - c0
        assert ok
        total_in_cq = sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(8))
        assert total_in_cq == n, (total_in_cq, n)
        return {
            "put": n / t_put,
            "put+dispatch": n / t_all,
            "put cpu": n / c_put,
            "put+dispatch cpu": n / c_all,
        }
    finally:
        gc.unfreeze()
        await store.shutdown()


async def bench_get(root: str, n_reads: int, batch: int) -> tuple[float, float]:
    store = DefaultMessageStore(config(root, FlushDiskType.ASYNC_FLUSH))
    await store.start()
    try:
        total = 0
        t0 = time.perf_counter()
        c0 = time.thread_time()
        while total < n_reads:
            for q in range(8):
                off = 0
                maxq = store.get_max_offset_in_queue(TOPIC, q)
                while off < maxq and total < n_reads:
                    r = store.get_message("g", TOPIC, q, off, batch)
                    total += r.message_count
                    off = r.next_begin_offset
        dt = time.perf_counter() - t0
        dc = time.thread_time() - c0
        return total / dt, total / dc
    finally:
        await store.shutdown()


async def run_once(base: str, n: int) -> dict[str, float]:
    root = os.path.join(base, "store")
    results: dict[str, float] = {}
    r = await bench_put(root, FlushDiskType.ASYNC_FLUSH, n, 1, 1)
    results["async single put"] = r["put"]
    results["async single put+dispatch"] = r["put+dispatch"]
    results["async single put [loop cpu]"] = r["put cpu"]
    r = await bench_put(root, FlushDiskType.ASYNC_FLUSH, n, 32, 1)
    results["async batch32 put"] = r["put"]
    results["async batch32 put+dispatch"] = r["put+dispatch"]
    results["async batch32 put [loop cpu]"] = r["put cpu"]
    results["async batch32 put+dispatch [loop cpu]"] = r["put+dispatch cpu"]
    r = await bench_put(root, FlushDiskType.SYNC_FLUSH, n // 4, 1, 64)
    results["sync single put (64 concurrent)"] = r["put"]
    r = await bench_put(root, FlushDiskType.SYNC_FLUSH, n, 32, 8)
    results["sync batch32 put (8 concurrent)"] = r["put"]
    # Get reads what the last (SYNC batch) run left behind.
    g, gc_ = await bench_get(root, n, 32)
    results["get batch32"] = g
    results["get batch32 [loop cpu]"] = gc_
    return results


async def run(args: argparse.Namespace) -> None:
    base = args.dir or tempfile.mkdtemp(prefix="bench_store_")
    try:
        runs = []
        for i in range(args.repeat):
            res = await run_once(base, args.messages)
            runs.append(res)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:,.0f}" for k, v in res.items()), flush=True)
        print(f"median of {len(runs)} run(s), {args.messages} x 1 KiB messages:")
        for k in runs[0]:
            print(f"  {k:40s} {statistics.median(r[k] for r in runs):12,.0f} msg/s")
        print("  ([loop cpu]: messages per CPU-second of the event-loop thread -- what the loop could do")
        print("   on an otherwise idle core; wall-clock figures depend on what else the machine runs)")
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--uvloop", action="store_true")
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    if args.uvloop:
        import uvloop

        uvloop.run(run(args))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
