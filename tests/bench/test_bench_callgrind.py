"""bench/bench_callgrind.py's measured part (the child run, without valgrind) still drives the broker's
send path: its warm-up asserts every send is answered SUCCESS and the timed part is dispatched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_callgrind.py"


@pytest.mark.parametrize(("workload", "flush", "topics"),
                         [("batch", "async", 1), ("single", "sync", 1), ("single", "async", 20)])
def test_child_run_stores_its_requests(workload: str, flush: str, topics: int) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--child", "--workload", workload, "--flush", flush,
         "--requests", "32", "--built", "48", "--topics", str(topics)],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
