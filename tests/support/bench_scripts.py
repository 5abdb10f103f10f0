"""Load a bench/ script as a module (bench/ is not a package the tests can import)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_script(name: str) -> ModuleType:
    """bench/NAME.py, executed afresh as a module of its own."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def record_compare_runs(compare: ModuleType, monkeypatch: Any) -> tuple[list[list[str]], dict[str, Any]]:
    """compare.py's client runs recorded instead of run (each answers one 1 000-message result), and an env of
    this process's pid for every server: (the commands run_one would have started, the env to pass it)."""
    seen: list[list[str]] = []

    def fake_sh(cmd: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, '{"msgs": 1000, "seconds": 1.0}\n', "")

    monkeypatch.setattr(compare, "sh", fake_sh)
    me = os.getpid()
    env = {"ns": "127.0.0.1:1", "broker_pid": me, "redis_pid": me, "redis_addr": "127.0.0.1:2",
           "nats_pid": me, "nats_addr": "127.0.0.1:3"}
    return seen, env
