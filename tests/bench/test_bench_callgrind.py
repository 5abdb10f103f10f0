"""bench/bench_callgrind.py's measured part (the child run, without valgrind) still drives the broker's
send path: its warm-up asserts every send is answered SUCCESS and the timed part is dispatched; and its
requests decode as our producer's sends do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from remoting.codec import FrameDecoder
from tests.support.bench_scripts import load_bench_script

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


@pytest.mark.parametrize(("workload", "topics"), [("single", 3), ("batch", 1)])
def test_frames_take_the_producers_send_path(workload: str, topics: int) -> None:
    """The harness's requests reach the send processor as our producer's do: decoded by the broker's frame
    decoder with their constant header part memoized (a SendFixed) and the born timestamp and properties
    read apart (send_gi), which is the path whose cost the harness is there to count."""
    harness = load_bench_script("bench_callgrind")
    reads = harness.build_frames(harness.build_requests(workload, 6, 0, topics), 4)
    assert len(reads) == 2  # 4 frames, then 2
    decoder = FrameDecoder()
    cmds = [cmd for read in reads for cmd in decoder.feed(read)]
    assert len(cmds) == 6 and decoder.buffered == 0
    assert all(cmd.send_fixed is not None and cmd.send_gi is not None for cmd in cmds)
    # The memoized part: b the topic, e the queue id, m whether a batch (the header's one-letter keys).
    assert all(cmd.send_fixed.ext["m"] == ("true" if workload == "batch" else "false") for cmd in cmds)
    expected = ["CallgrindT"] * 6 if topics == 1 else [f"CallgrindT_{k % topics}" for k in range(6)]
    assert [cmd.send_fixed.ext["b"] for cmd in cmds] == expected
