"""bench/compare.py reports the CPU steal of its run, so a RESULTS.md taken on a busy host says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.bench_scripts import load_bench_script


def test_steal_percent_is_the_steal_share_of_all_cpu_time() -> None:
    c = load_bench_script("compare")
    assert c.steal_percent((100, 10_000), (150, 11_000)) == 5.0
    assert c.steal_percent((100, 10_000), (100, 12_000)) == 0.0
    assert c.steal_percent(None, (1, 2)) is None
    assert c.steal_percent((5, 10), (5, 10)) is None  # no time passed: no share
    assert c._steal_text(None) == "not measured" and c._steal_text(7.25) == "7.2%"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_cpu_ticks_reads_proc_stat() -> None:
    c = load_bench_script("compare")
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]  # user .. steal
    steal, total = c.cpu_ticks()  # read after: counters only grow
    assert 0 <= steal <= total and steal >= fields[7] and total >= sum(fields)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/stat is Linux's")
def test_cpu_since_charges_the_busy_process_not_the_idle_one() -> None:
    import subprocess
    import time

    c = load_bench_script("compare")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pids = {"busy": busy.pid, "idle": idle.pid}
        time.sleep(0.2)  # past the interpreters' start-up
        snap = c.cpu_snapshot(pids)
        time.sleep(0.5)
        used = c.cpu_since(pids, snap)
        assert used["busy"] >= 0.1 and used["idle"] < 0.05, used
        # wait_idle gives up on a process that stays busy, and returns at once for an idle one.
        assert c.wait_idle([busy.pid], window=0.1, timeout=0.4) >= 0.4
        assert c.wait_idle([idle.pid], window=0.1, timeout=5.0) < 1.0
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait(timeout=10)
