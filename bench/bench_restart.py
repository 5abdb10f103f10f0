"""Broker restart time with messages stored: from starting `bin/mqbroker` on an existing store to its
"listening" line, after a crash (kill -9: abnormal recovery, which checks the CommitLog from the file the
checkpoint points at, as RocketMQ's recoverAbnormally does, and dispatches again from the first record a
consume queue lacks, or the index's end), after a clean stop (normal recovery: the last 3 CommitLog files
checked), and after an OS crash (kill -9, then the abort file made another boot's, as after a power cut: the
consume queue units from the checkpoint's file on and the index files from the checkpoint's on are built
again). Not a test.

    .venv/bin/python bench/bench_restart.py [--messages 1000000] [--size 1024] [--runs 2]

Starts its own NameServer and broker (compare.py's store sizes: 1 GiB CommitLog files) on a temporary
store, fills it with `--messages` messages over 8 queues (batches of 32), then restarts the broker `--runs`
times each way, alternating, and checks after every restart that every message is still in its queue.
Prints one line per restart (seconds to listening, the broker's CPU seconds by then) and the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from compare import BROKER_STORE_SIZES  # noqa: E402
from wl_rocketmq import ensure_topic, preload  # noqa: E402

from client import Admin  # noqa: E402
from client.message import MessageQueue  # noqa: E402
from remoting.log import configure_logging  # noqa: E402
from remoting.loop import run  # noqa: E402
from tests.support.daemons import free_port, process_cpu_seconds, start_broker, start_namesrv  # noqa: E402

TOPIC = "BenchRestart"
QUEUES = 8


async def stored(ns: str) -> int:
    async with Admin(ns) as admin:
        return sum([await admin.max_offset(MessageQueue(TOPIC, "broker-a", q)) for q in range(QUEUES)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--runs", type=int, default=2, help="restarts of each kind")
    a = ap.parse_args()
    configure_logging(level="ERROR")
    tmp = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    store = tmp / "store"
    port = free_port()
    ns, ns_addr = start_namesrv(tmp)
    broker = None
    try:
        broker, _ = start_broker(tmp, ns_addr, port=port, extra=BROKER_STORE_SIZES, store_dir=store)

        async def fill() -> float:
            await ensure_topic(ns_addr, TOPIC, QUEUES)
            t0 = time.perf_counter()
            await preload(ns_addr, TOPIC, a.messages, b"x" * a.size)
            return time.perf_counter() - t0

        print(f"filled {a.messages:,} messages of {a.size} bytes in {run(fill()):.1f} s", flush=True)
        have = run(stored(ns_addr))
        if have != a.messages:
            raise SystemExit(f"{have} messages stored, {a.messages} sent")
        times: dict[str, list[float]] = {"kill -9": [], "clean stop": [], "OS crash": []}
        for _ in range(a.runs):
            for kind in times:
                if kind == "clean stop":
                    broker.terminate()
                else:
                    broker.kill()
                if kind == "OS crash":
                    (store / "abort").write_text("a boot before this one")
                t0 = time.perf_counter()
                broker, _ = start_broker(tmp, ns_addr, port=port, extra=BROKER_STORE_SIZES, store_dir=store)
                took = time.perf_counter() - t0
                cpu = process_cpu_seconds(broker.pid)
                have = run(stored(ns_addr))
                if have != a.messages:
                    raise SystemExit(f"after {kind}: {have} messages in the queues, {a.messages} stored")
                times[kind].append(took)
                print(f"restart after {kind}: {took:.2f} s to listening, broker CPU {cpu:.2f} s", flush=True)
        for kind, ts in times.items():
            print(f"median restart after {kind}: {statistics.median(ts):.2f} s "
                  f"({a.messages:,} messages, {a.messages * (a.size + 150) / 2**30:.2f} GiB of CommitLog)")
    finally:
        if broker is not None:
            broker.terminate()
        ns.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
