"""bench/bench_churn.py: producers and consumers that start, work and stop round after round against real
daemons get back every message they sent, and the broker's descriptors stay flat once every topic exists
(each client's connection is closed, each queue file opened once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_churn.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # In a session of its own: if it hangs, the script and the daemons it started go down together.
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_every_round_gets_its_messages_and_descriptors_stay_flat() -> None:
    r = _run("--rounds", "30", "--every", "10", "--topics", "10", "--messages", "3", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["short_rounds"] == 0, out["short"]
    points = out["points"]
    assert [p["round"] for p in points] == [0, 10, 20, 30]
    assert all(p["anon_mib"] > 0 and 0 < p["sockets"] < p["fds"] for p in points)
    # After round 10 every topic's queue files are open; 20 more rounds, each with three fresh clients,
    # add no descriptor (a connection closing as a sample is taken may still count: a leak adds ~20).
    assert points[3]["sockets"] - points[1]["sockets"] <= 2, points
    assert points[3]["fds"] - points[1]["fds"] <= 2, points


def test_bad_arguments_are_refused() -> None:
    r = _run("--rounds", "0")
    assert r.returncode == 2 and "--rounds must be at least 1" in r.stderr
