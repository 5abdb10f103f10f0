"""bench/compare.py reports the CPU steal of its run, so a RESULTS.md taken on a busy host says so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "compare.py"


def load_compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_compare", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_steal_percent_is_the_steal_share_of_all_cpu_time() -> None:
    c = load_compare()
    assert c.steal_percent((100, 10_000), (150, 11_000)) == 5.0
    assert c.steal_percent((100, 10_000), (100, 12_000)) == 0.0
    assert c.steal_percent(None, (1, 2)) is None
    assert c.steal_percent((5, 10), (5, 10)) is None  # no time passed: no share
    assert c._steal_text(None) == "not measured" and c._steal_text(7.25) == "7.2%"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_cpu_ticks_reads_proc_stat() -> None:
    c = load_compare()
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]  # user .. steal
    steal, total = c.cpu_ticks()  # read after: counters only grow
    assert 0 <= steal <= total and steal >= fields[7] and total >= sum(fields)
