"""bench/bench_e2e_tick.py's measured part (the child run, without valgrind) still makes the broker do an
e2e tick: its pulls are held and then answered once a tick, everything sent is stored (the child checks
both); and its pulls decode as our push consumer's do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from remoting.codec import FrameDecoder
from tests.support.bench_scripts import load_bench_script

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_e2e_tick.py"


def test_child_run_holds_and_answers_every_tick() -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), "--child", "--ticks", "20", "--built", "30"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_pulls_take_the_consumers_pull_path() -> None:
    """The harness's pulls reach the pull processor as our push consumer's do: decoded by the frame
    decoder's PULL_MESSAGE path with their constant header part memoized."""
    harness = load_bench_script("bench_e2e_tick")
    decoder = FrameDecoder()
    cmds = decoder.feed(harness.pull_frames(3, [5, 6, 7], 100))
    assert [c.code for c in cmds] == [11, 11, 11] and decoder.buffered == 0
    assert all(c.send_fixed is not None for c in cmds)  # the memoized constant part
    assert [c.ext_fields["queueOffset"] for c in cmds] == ["5", "6", "7"]
    assert [c.ext_fields["queueId"] for c in cmds] == ["0", "1", "2"]
    assert [c.opaque for c in cmds] == [100, 101, 102]
