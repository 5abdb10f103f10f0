"""The 1 000-topic workload's extra cost, in-process: the broker's send path timed on the event loop
thread's CPU clock, in alternating rounds of 1 topic x 4 queues and N topics x 4 queues.

    .venv/bin/python bench/bench_inproc.py                     # 1 000 topics, 6 rounds of 32 000 a side
    .venv/bin/python bench/bench_inproc.py --root /tmp/other   # another checkout, same harness
    .venv/bin/python bench/bench_inproc.py --side many         # only the N-topic side (for a profiler)

The path is bench_callgrind.py's: a real BrokerController and store in a temporary directory, single
sends encoded as our producer puts them on the wire, decoded by the broker's FrameDecoder a read at a
time, processed, stored and dispatched. No client and no sockets share the machine's two CPUs with it,
so it separates what the broker's own per-queue state costs from what the daemons' run adds (socket
buffers, the client's CPU): a side's median moves by ~0.2 us a message between runs here, against ~1 us
for two broker daemons measured alternately (bench/README.md). The figure is the loop thread's CPU only:
the CommitLog warm-ahead and flush threads are not in it, as they are in compare.py's broker CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


async def measure(n_topics: int, rounds: int, per: int, group: int, sides: tuple[str, ...], tag_count: int = 0,
                  keys: bool = False) -> dict[str, Any]:
    """Loop-thread CPU microseconds per message of each round, per side ("one", "many")."""
    import bench_callgrind as harness

    from remoting.codec import FrameDecoder

    names = {"one": harness.topic_names(1), "many": harness.topic_names(n_topics)}
    async with harness.in_process_broker("inproc", dict.fromkeys(names["one"] + names["many"], 4)) as c:
        proc = c.send_message_processor
        reput = c.message_store.reput_message_service
        ctx = harness.request_context()
        decoder = FrameDecoder()
        seq = 0
        sent = {"one": 0, "many": 0}

        def frames(side: str, n: int) -> list[bytes]:
            nonlocal seq
            reqs = harness.build_requests("single", n, seq, len(names[side]), tag_count=tag_count, keys=keys)
            seq += n
            sent[side] += n
            return harness.build_frames(reqs, group)

        async def run(reads: list[bytes]) -> float:
            c0 = time.thread_time()
            for read in reads:
                cmds = decoder.feed(read)
                if cmds[0].send_fixed is None:
                    raise SystemExit("the broker's frame decoder did not take the requests as a producer's sends")
                await proc.process_requests(ctx, cmds)
                await asyncio.sleep(0)
            await reput.wait_caught_up(60)
            return time.thread_time() - c0

        # Every queue of both sides once (their consume queue files exist), then a round of each untimed.
        await run(frames("many", 4 * n_topics))
        await run(frames("one", 4 * group))
        for side in sides:
            await run(frames(side, min(per, 8000)))
        gc.collect()
        gc.freeze()  # as remoting.loop.run does in the daemons
        us: dict[str, list[float]] = {s: [] for s in sides}
        for _ in range(rounds):
            for side in sides:
                reads = frames(side, per)
                us[side].append(round(await run(reads) / per * 1e6, 2))
        store = c.message_store
        for side, n in sent.items():
            stored = sum(store.get_max_offset_in_queue(t, q) for t in names[side] for q in range(4))
            if stored != n:  # a refused send would make the figures meaningless
                raise SystemExit(f"{stored} messages in the {side} side's queues, {n} sent")
        return us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per", type=int, default=32000, help="messages per round and side")
    ap.add_argument("--group", type=int, default=32, help="frames per read (the broker answers every 32)")
    ap.add_argument("--side", choices=("both", "one", "many"), default="both")
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure (default: this one)")
    ap.add_argument("--tag-count", type=int, default=0, help="tag the messages tag0..tagN-1 in turn")
    ap.add_argument("--keys", action="store_true", help="a key per message (as mqbench --keys: the send second)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.topics < 2 or a.rounds < 1 or a.per < 1 or a.group < 1:
        raise SystemExit("--topics >= 2, --rounds, --per and --group >= 1")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(a.root.resolve()))
    from remoting.log import configure_logging

    configure_logging(level="ERROR")
    import uvloop

    sides = ("one", "many") if a.side == "both" else (a.side,)
    us = uvloop.run(measure(a.topics, a.rounds, a.per, a.group, sides, a.tag_count, a.keys))
    out: dict[str, Any] = {"root": str(a.root), "topics": a.topics, "rounds": us}
    med = {s: statistics.median(v) for s, v in us.items()}
    out["median_us"] = med
    if len(sides) == 2:
        out["extra_us"] = round(med["many"] - med["one"], 2)
        out["ratio"] = round(med["one"] / med["many"], 3)  # throughput ratio, were the loop the only limit
    if a.json:
        print(json.dumps(out))
    else:
        for s, v in us.items():
            n = 1 if s == "one" else a.topics
            print(f"{n:5d} topic(s) x 4 queues: median {med[s]:.2f} us/msg of loop-thread CPU, rounds {v}")
        if len(sides) == 2:
            print(f"extra for {a.topics} topics: {out['extra_us']:.2f} us/msg; ratio {out['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
