"""What a pull's filter costs the broker: DefaultMessageStore.get_message over N stored 1 KiB messages
with no filter (`*`), a tag filter, and SQL92 selectors (broker.filter.sql92), in-process. Not a test;
prints the loop thread's CPU per message scanned (each consume queue unit read), medians of --repeat runs.

    .venv/bin/python bench/bench_filter.py [--messages N] [--repeat R]

A tag filter is decided on the consume queue unit (the tags hash code); an SQL92 selector needs the
record's properties, so the store decodes them for every unit it reads: that decode is most of its cost.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog  # noqa: E402

from broker.filter import ExpressionMessageFilter  # noqa: E402
from remoting.message import encode_properties  # noqa: E402
from store.config import FlushDiskType, MessageStoreConfig  # noqa: E402
from store.message import MessageExtBrokerInner  # noqa: E402
from store.message_store import DefaultMessageStore  # noqa: E402

TOPIC = "FilterBench"
QUEUES = 4
FILTERS: list[tuple[str, str, str]] = [
    ("none (*)", "*", "TAG"),
    ("tag, 1 of 2", "tag0", "TAG"),
    ("SQL92, all", "price >= 0", "SQL92"),
    ("SQL92, 1 of 2", "TAGS = 'tag0'", "SQL92"),
    ("SQL92, 3 terms, 1 of 10", "region = 'eu' AND price BETWEEN 10 AND 59 OR KEYS IS NULL", "SQL92"),
]


def make_messages(n: int) -> list[MessageExtBrokerInner]:
    now = int(time.time() * 1000)
    out = []
    for i in range(n):
        props = {
            "TAGS": f"tag{i % 2}", "KEYS": f"order-{i}", "UNIQ_KEY": f"0A0B0C0D00002A9F{i:016X}", "WAIT": "true",
            "price": str(i % 100), "region": ("eu", "us", "apac", "latam", "af")[i % 5],
        }
        out.append(MessageExtBrokerInner(
            topic=TOPIC, body=b"x" * 1024, queue_id=i % QUEUES, properties=props,
            properties_string=encode_properties(props), born_timestamp=now, born_host=("10.0.0.1", 50000),
            store_host=("10.0.0.2", 10911),
        ))
    return out


def scan(store: DefaultMessageStore, mf: ExpressionMessageFilter) -> tuple[int, int, float]:
    """Pull every queue from 0 to its end in pulls of 32: (units scanned, messages found, CPU seconds)."""
    scanned = found = 0
    c0 = time.thread_time()
    for q in range(QUEUES):
        off, end = 0, store.get_max_offset_in_queue(TOPIC, q)
        while off < end:
            r = store.get_message("g", TOPIC, q, off, 32, mf)
            found += r.message_count
            scanned += r.next_begin_offset - off
            off = r.next_begin_offset
            r.release()
    return scanned, found, time.thread_time() - c0


async def run(n: int, repeat: int) -> None:
    root = tempfile.mkdtemp(prefix="bench_filter_")
    store = DefaultMessageStore(MessageStoreConfig(
        storePathRootDir=root, flushDiskType=FlushDiskType.ASYNC_FLUSH, mappedFileSizeCommitLog=256 * 1024 * 1024,
        mappedFileSizeConsumeQueue=300000 * 20, maxHashSlotNum=500000, maxIndexNum=2000000,
    ))
    await store.start()
    try:
        msgs = make_messages(n)
        for m in msgs:
            r = await store.put_message(m)
            assert r.is_ok, r
        assert await store.wait_dispatched(120)
        del msgs
        gc.collect()
        filters = [(name, ExpressionMessageFilter.parse(expr, etype)) for name, expr, etype in FILTERS]
        per: dict[str, list[float]] = {name: [] for name, _ in filters}
        found_of: dict[str, int] = {}
        for _ in range(repeat):
            for name, mf in filters:  # alternating, so host noise spreads over all of them
                scanned, found, cpu = scan(store, mf)
                assert scanned == n, (name, scanned)
                per[name].append(cpu / scanned * 1e6)
                found_of[name] = found
        print(f"{n:,} messages of 1 KiB over {QUEUES} queues, pulls of 32, medians of {repeat} runs "
              "(loop thread CPU per message scanned):")
        base = statistics.median(per[filters[0][0]])
        for name, _ in filters:
            med = statistics.median(per[name])
            print(f"  {name:28s} {med:6.2f} us  ({med / base:4.1f}x none)  found {found_of[name]:,}")
    finally:
        await store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    asyncio.run(run(args.messages, args.repeat))


if __name__ == "__main__":
    main()
