"""bench_cq_page_crossing.py against real daemons: which chunk crosses a ConsumeQueue page, and that
every message it reports was stored. Not a timed test: the CPU figures are only checked for shape."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from client import Admin
from tests.support.daemons import Daemon

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_cq_page_crossing.py"
sys.path.insert(0, str(SCRIPT.parent))

from bench_cq_page_crossing import crosses_page  # noqa: E402


def test_crosses_page_marks_the_unit_that_spans_4_kib() -> None:
    assert not crosses_page(0, 203)  # units 0..203 end at byte 4079
    assert crosses_page(0, 204) and crosses_page(204, 204)  # unit 204 is bytes 4080..4099
    assert not crosses_page(205, 408)  # bytes 4100..8179: all in the second page
    assert crosses_page(205, 409)


def test_chunks_report_the_crossing_and_store_every_message(cluster: tuple[str, str, Daemon]) -> None:
    ns, _addr, broker = cluster
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "-n", ns, "--broker-pid", str(broker.proc.pid), "--topics", "2",
         "--per-queue", "60", "--chunks", "4", "--json", "--prefix", "PageX"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert [row["chunk"] for row in rows] == [0, 1, 2, 3]
    assert [row["crosses_page"] for row in rows] == [False, False, False, True]  # units 181..240
    assert all(row["msgs"] == 2 * 4 * 60 and row["msgs_s"] > 0 and row["broker_cpu_us"] >= 0 for row in rows)

    async def stored(topic: str) -> int:
        async with Admin(ns) as admin:
            for _ in range(50):  # dispatch may still be behind the last answers
                total = sum(q.max_offset for q in await admin.topic_status(topic))
                if total >= 4 + 4 * 4 * 60:
                    return total
                await asyncio.sleep(0.1)
            return total

    for t in ("PageX_0", "PageX_1"):  # one warm-up message per queue, then 4 x 60 per queue
        assert asyncio.run(stored(t)) == 4 + 4 * 4 * 60
