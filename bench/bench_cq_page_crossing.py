"""ConsumeQueue page crossings under many queues: broker CPU per chunk of sends. Not a test.

    .venv/bin/python bench/bench_cq_page_crossing.py -n 127.0.0.1:9876 --broker-pid PID [--topics 1000]

Sends 1 KiB messages round-robin over TOPICS topics x 4 queues, in chunks of PER_QUEUE messages per
queue, and prints per chunk the send rate and the broker's CPU (user + kernel, from /proc/PID/stat)
per message. A ConsumeQueue unit is 20 bytes, so every queue crosses into a new 4 KiB page at the
same unit (204.8, 409.6, ...): with round-robin sends all queues cross in the same chunk, marked
`crosses_page`. That chunk used to cost ~500 us/msg of kernel time on a host with 8 MiB read-ahead
(each fault read the whole 6 MB file around it); ConsumeQueue maps are MADV_RANDOM since. Compare
the crossing chunk with its neighbours, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from wl_rocketmq import ensure_topic, proc_cpu_times, wait_dispatched, windowed  # noqa: E402

from client import Message, Producer  # noqa: E402
from remoting.log import configure_logging  # noqa: E402
from remoting.loop import run  # noqa: E402

UNIT = 20
PAGE = 4096
QUEUES = 4


def crosses_page(first_unit: int, last_unit: int) -> bool:
    """Whether units first..last (0-based, inclusive) of a queue touch more than one 4 KiB page."""
    return (first_unit * UNIT) // PAGE != ((last_unit + 1) * UNIT - 1) // PAGE


async def main(a: argparse.Namespace) -> list[dict[str, Any]]:
    topics = [f"{a.prefix}_{i}" for i in range(a.topics)]
    for i in range(0, len(topics), 50):
        await asyncio.gather(*(ensure_topic(a.namesrv, t, QUEUES) for t in topics[i:i + 50]))
    body = b"x" * 1024
    rows: list[dict[str, Any]] = []
    async with Producer(f"{a.prefix}_producer", a.namesrv, max_async_inflight=a.inflight) as p:
        # One message per queue first: every queue's first file exists before the timed chunks.
        warm = [t for t in topics for _ in range(QUEUES)]
        seq = iter(range(len(warm)))
        await windowed(lambda: p.send_async(Message(warm[next(seq)], body)), len(warm), 64)
        # Creating 4 000 queues' files takes the broker seconds, and dispatch waits for them: until the
        # last topic's queues show their message, or the first chunks would pay for that catch-up.
        if not await wait_dispatched(a.namesrv, topics[-1], QUEUES, 60.0):
            raise SystemExit(f"{topics[-1]}: warm-up not dispatched within 60 s")
        await asyncio.sleep(1.0)
        per = a.topics * QUEUES * a.per_queue
        unit = 1  # next unit index of every queue
        k = 0

        def send() -> Any:
            nonlocal k
            k += 1
            return p.send_async(Message(topics[k % a.topics], body))

        for c in range(a.chunks):
            (u0, s0), t0 = proc_cpu_times(a.broker_pid), time.perf_counter()
            await windowed(send, per, a.inflight)
            (u1, s1), t1 = proc_cpu_times(a.broker_pid), time.perf_counter()
            row = {
                "chunk": c, "units": [unit, unit + a.per_queue - 1],
                "crosses_page": crosses_page(unit, unit + a.per_queue - 1),
                "msgs": per, "msgs_s": round(per / (t1 - t0)),
                "broker_cpu_us": round(((u1 - u0) + (s1 - s0)) * 1e6 / per, 1),
                "broker_sys_us": round((s1 - s0) * 1e6 / per, 1),
            }
            unit += a.per_queue
            rows.append(row)
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                mark = "  <- page crossing" if row["crosses_page"] else ""
                print(f"chunk {c:3d} units {row['units'][0]:4d}-{row['units'][1]:4d} {row['msgs_s']:>8,} msg/s  "
                      f"broker {row['broker_cpu_us']:7.1f} us/msg (kernel {row['broker_sys_us']:6.1f}){mark}",
                      flush=True)
    return rows


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--namesrv", required=True)
    ap.add_argument("--broker-pid", type=int, required=True, help="the (local) broker's PID, for its CPU")
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--per-queue", type=int, default=10, help="messages per queue per chunk")
    ap.add_argument("--chunks", type=int, default=23, help="the default crosses the first page in chunk 20")
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--prefix", default="Crossing")
    ap.add_argument("--json", action="store_true", help="one JSON object per chunk")
    a = ap.parse_args(argv)
    if a.topics < 1 or a.per_queue < 1 or a.chunks < 1:
        ap.error("--topics, --per-queue and --chunks must be at least 1")
    return a


if __name__ == "__main__":
    args = parse()
    configure_logging(level="WARNING")
    run(main(args))
