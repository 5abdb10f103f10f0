"""bench/bench_inproc.py times both sides of the 1 000-topic workload in one process and reports each
round's loop-thread CPU per message, the medians, and the N-topic side's extra cost and ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_inproc.py"


def _run(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, str(SCRIPT), *args, "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_both_sides_are_timed_round_by_round() -> None:
    out = _run("--topics", "20", "--rounds", "2", "--per", "400", "--group", "8")
    assert out["topics"] == 20
    assert set(out["rounds"]) == {"one", "many"}
    for side in ("one", "many"):
        rounds = out["rounds"][side]
        assert len(rounds) == 2 and all(0 < us < 10_000 for us in rounds)
        assert out["median_us"][side] == pytest.approx(sum(rounds) / 2)
    assert out["extra_us"] == round(out["median_us"]["many"] - out["median_us"]["one"], 2)
    assert out["ratio"] == round(out["median_us"]["one"] / out["median_us"]["many"], 3)


def test_one_side_alone() -> None:
    out = _run("--topics", "20", "--rounds", "1", "--per", "200", "--side", "many")
    assert list(out["rounds"]) == ["many"] and "ratio" not in out


def test_bad_arguments_are_refused() -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), "--topics", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--topics" in r.stderr
