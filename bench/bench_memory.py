"""Broker memory with many messages stored: RSS less file mappings (RssAnon + RssShmem from
/proc/PID/status) at checkpoints while batch-sending small messages. Starts its own NameServer and
broker (1 GiB CommitLog files, a temp store) unless -n/--broker-pid are given. Not a test.

    .venv/bin/python bench/bench_memory.py --checkpoints 1000000,3000000,10000000 [--body 100]

Writes bench/memory.json (read by compare.py's RESULTS.md) and prints one line per checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from client import Admin, Message, Producer  # noqa: E402
from remoting.log import configure_logging  # noqa: E402
from remoting.loop import run  # noqa: E402

TOPIC = "BenchMemory"


def status_kib(pid: int) -> dict[str, int]:
    out = {}
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = ln.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[k] = int(v.split()[0])
    return out


@contextlib.contextmanager
def cluster_unless_given(namesrv: str | None, broker_pid: int | None, prefix: str,
                         extra: dict[str, object] | None = None) -> Iterator[tuple[str, int]]:
    """(NameServer address, broker pid): the given ones, or a NameServer and a broker of our own on a temporary
    store (with `extra` broker config), stopped and removed on the way out."""
    if namesrv is not None and broker_pid is not None:
        yield namesrv, broker_pid
        return
    from tests.support.daemons import start_broker, start_namesrv

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    daemons = []
    try:
        nsd, ns = start_namesrv(tmp)
        daemons.append(nsd)
        br, _ = start_broker(tmp, ns, extra=extra)
        daemons.append(br)
        yield ns, br.pid
    finally:
        for d in reversed(daemons):
            d.terminate()
        shutil.rmtree(tmp, ignore_errors=True)


def point(pid: int, messages: int, body: int, seconds: float) -> dict[str, Any]:
    s = status_kib(pid)
    return {
        "messages": messages,
        "body": body,
        "seconds": round(seconds, 1),
        "rss_mib": s["VmRSS"] / 1024,
        "file_mib": s["RssFile"] / 1024,
        "anon_mib": (s["RssAnon"] + s["RssShmem"]) / 1024,
    }


async def fill(ns: str, pid: int, checkpoints: list[int], body_size: int, batch: int, inflight: int,
               queues: int, out: Path, note: str) -> list[dict[str, Any]]:
    async with Admin(ns) as admin:
        await admin.create_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
    body = b"m" * body_size
    points = [point(pid, 0, body_size, 0.0)]
    print(f"{0:>12,} msgs  RSS {points[0]['rss_mib']:7.1f} MiB  file {points[0]['file_mib']:7.1f} MiB  "
          f"RSS-file {points[0]['anon_mib']:6.1f} MiB", flush=True)
    sent = 0
    t0 = time.monotonic()
    async with Producer("bench_memory", ns, max_async_inflight=inflight, send_msg_timeout=30000) as p:
        pending: set[asyncio.Future[Any]] = set()
        for target in checkpoints:
            while sent < target:
                n = min(batch, target - sent)
                pending.add(p.send_batch_async([Message(TOPIC, body) for _ in range(n)]))
                sent += n
                if len(pending) >= inflight:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for f in done:
                        f.result()
            if pending:
                await asyncio.gather(*pending)
                pending = set()
            # Measure at rest: once the dispatcher (consume queues, index) has caught up, since what
            # it has not dispatched yet is held in memory (bounded) and would count here.
            async with Admin(ns) as admin:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    try:
                        if sum(r.max_offset for r in await admin.topic_status(TOPIC)) >= sent:
                            break
                    except Exception:  # noqa: BLE001 - stats are answered once dispatch caught up
                        pass
                    await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)
            pt = point(pid, sent, body_size, time.monotonic() - t0)
            points.append(pt)
            print(f"{sent:>12,} msgs  RSS {pt['rss_mib']:7.1f} MiB  file {pt['file_mib']:7.1f} MiB  "
                  f"RSS-file {pt['anon_mib']:6.1f} MiB  ({sent / pt['seconds']:,.0f} msg/s)", flush=True)
            out.write_text(json.dumps({"points": points, "note": note}, indent=1))
    return points


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", default="1000000,3000000,10000000")
    ap.add_argument("--body", type=int, default=100, help="body bytes")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("-n", "--namesrv", default=None)
    ap.add_argument("--broker-pid", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "bench" / "memory.json"))
    a = ap.parse_args()
    configure_logging(level="ERROR")
    checkpoints = sorted(int(x) for x in a.checkpoints.split(","))
    note = (f"{a.body}-byte bodies, send_batch of {a.batch}, {a.queues} queues, one broker; RSS less file "
            "mappings = RssAnon + RssShmem from /proc/PID/status (CommitLog, ConsumeQueue and index mappings "
            "are file-backed and excluded).")
    with cluster_unless_given(a.namesrv, a.broker_pid, "bench-memory-",
                              {"mappedFileSizeCommitLog": 1024 * 1024 * 1024}) as (ns, pid):
        run(fill(ns, pid, checkpoints, a.body, a.batch, a.inflight, a.queues, Path(a.out), note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
