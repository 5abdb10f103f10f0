"""bench/bench_callgrind.py's measured part (the child run, without valgrind) still drives the broker's
send path: its warm-up asserts every send is answered SUCCESS and the timed part is dispatched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_callgrind.py"


@pytest.mark.parametrize(("workload", "flush", "topics", "tags"),
                         [("batch", "async", 1, None), ("single", "sync", 1, None), ("single", "async", 20, None),
                          ("single", "async", 1, "TagA")])
def test_child_run_stores_its_requests(workload: str, flush: str, topics: int, tags: str | None) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--child", "--workload", workload, "--flush", flush,
         "--requests", "32", "--built", "48", "--topics", str(topics), *(["--tags", tags] if tags else [])],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
