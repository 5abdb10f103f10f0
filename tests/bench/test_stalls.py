"""bench/stalls.py finds runs of one unchanged stack in a py-spy speedscope timeline, longest first, and
leaves idle stacks (a waiting event loop or worker thread) out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "stalls.py"


def _speedscope(tmp_path: Path) -> Path:
    frames = [{"name": "Runner.run", "line": 118}, {"name": "do_reput", "line": 345},
              {"name": "put_key_hashes", "line": 479}, {"name": "_worker", "line": 81}]
    idle, reput, slot = [0], [0, 1], [0, 1, 2]
    main = [idle] * 40 + [reput] * 3 + [slot] * 32 + [reput] * 2 + [slot] * 6 + [idle] * 10
    worker = [[3]] * 50 + [[1]] * 7
    doc = {"shared": {"frames": frames}, "profiles": [
        {"name": "MainThread", "samples": main}, {"name": "worker", "samples": worker},
    ]}
    path = tmp_path / "out.json"
    path.write_text(json.dumps(doc))
    return path


def test_longest_runs_first_idle_left_out(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), str(_speedscope(tmp_path)), "--min", "5"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("MainThread: 93 samples, 38 in runs of >= 5")
    assert "32 samples from sample 43: Runner.run:118; do_reput:345; put_key_hashes:479" in lines[1]
    assert "6 samples from sample 77:" in lines[2]
    assert "from sample 0:" not in r.stdout and "from sample 83:" not in r.stdout  # idle: not reported
    assert lines[3].startswith("worker: 57 samples, 7 in runs of >= 5")  # the idle worker's 50 left out
    assert len(lines) == 5
