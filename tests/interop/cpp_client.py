"""Drive the real RocketMQ C++ client core (PyPI rocketmq-python-cvs, in build/venv-cpp) from tests.

It runs only in subprocesses of build/venv-cpp/bin/python running the scripts in ./cpp, never in
the pytest process (its package is named `rocketmq` and must not shadow anything of ours). Each
subprocess gets a scratch HOME (the core writes logs under $HOME/logs) and a hard deadline, and
is killed in a `finally`.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemons import ROOT

CPP_PY = ROOT / "build" / "venv-cpp" / "bin" / "python"
SCRIPTS = Path(__file__).parent / "cpp"

needs_cpp = pytest.mark.skipif(
    not CPP_PY.exists(),
    reason=f"the real RocketMQ C++ client is not installed ({CPP_PY} is missing; `make test` installs it)",
)

_seq = iter(range(1_000_000))


def _env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    return env


def _spec_file(home: Path, kind: str, spec: dict[str, Any]) -> Path:
    path = home / f"{kind}-{next(_seq)}.json"
    path.write_text(json.dumps(spec))
    return path


def run_producer(
    home: Path,
    namesrv: str,
    sends: list[dict[str, Any]],
    *,
    group: str = "PID-interop",
    timeout: float = 90.0,
) -> list[dict[str, Any]]:
    """Send `sends` ({"topic", "body", "tags", "keys", "props", "order_arg"}) with the real producer;
    returns one result dict per send ({"status", "msg_id", "offset", "queue"} or {"error"})."""
    spec = _spec_file(home, "producer", {"namesrv": namesrv, "group": group, "sends": sends})
    proc = subprocess.Popen(
        [str(CPP_PY), str(SCRIPTS / "producer.py"), str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(home),
        cwd=str(home),
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    results = [x for x in lines if "i" in x]
    assert proc.returncode == 0 and lines and lines[-1].get("done") == len(sends), (
        f"real producer exited with {proc.returncode} after {len(results)}/{len(sends)} sends:\n"
        f"{out[-2000:]}\n{err[-3000:]}"
    )
    return results


def run_pull_consumer(
    home: Path,
    namesrv: str,
    group: str,
    topic: str,
    *,
    expression: str = "*",
    props: Iterable[str] = (),
    timeout: float = 60.0,
) -> list[dict[str, Any]]:
    """Read every queue of `topic` once from offset 0 with the real PullConsumer; returns the messages."""
    spec = _spec_file(
        home,
        "pull",
        {"namesrv": namesrv, "group": group, "topic": topic, "expression": expression, "props": list(props)},
    )
    proc = subprocess.Popen(
        [str(CPP_PY), str(SCRIPTS / "pull_consumer.py"), str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(home),
        cwd=str(home),
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert proc.returncode == 0 and lines and "done" in lines[-1], (
        f"real pull consumer failed:\n{out[-2000:]}\n{err[-3000:]}"
    )
    return [x for x in lines if "body" in x]


class CppProcess:
    """A long-running real-client script in a subprocess, printing JSON lines, ended by closing its
    stdin (the scripts then leave with os._exit(0)) or killed. Use as a context manager."""

    def __init__(self, home: Path, script: str, spec: dict[str, Any], name: str) -> None:
        path = _spec_file(home, Path(script).stem, spec)
        self.name = name
        self._stderr = open(home / f"{path.stem}.stderr", "w+")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [str(CPP_PY), str(SCRIPTS / script), str(path)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.PIPE,
            env=_env(home),
            cwd=str(home),
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, name=self.name, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                obj = json.loads(line)
                with self._cond:
                    self.lines.append(obj)
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_lines(
        self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str
    ) -> list[dict[str, Any]]:
        """Wait (bounded) until pred(lines so far) holds; returns the lines."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if pred(self.lines):
                    return list(self.lines)
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(
                        f"{self.name} exited ({self.proc.returncode}) before {what}:\n{self.stderr()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{self.name}: timed out after {timeout}s waiting for {what}; "
                        f"output so far: {self.lines[-5:]}"
                    )
                self._cond.wait(min(left, 0.2))

    def stderr(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-3000:]

    def close(self, timeout: float = 10.0) -> None:
        """Close its stdin (it then exits at once); kill it if it does not."""
        try:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(5)
        self._stderr.close()

    def __enter__(self) -> CppProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CppConsumer(CppProcess):
    """A real push consumer (cpp/consumer.py); `deliveries` are the messages it got, in order."""

    def __init__(
        self,
        home: Path,
        namesrv: str,
        group: str,
        topic: str,
        *,
        expression: str = "*",
        orderly: bool = False,
        props: Iterable[str] = (),
        fail_first: bool = False,
        threads: int | None = None,
        instance: str | None = None,
        max_s: float = 120.0,
    ) -> None:
        spec = {
            "namesrv": namesrv,
            "group": group,
            "topic": topic,
            "expression": expression,
            "orderly": orderly,
            "props": list(props),
            "fail_first": fail_first,
            "threads": threads,
            "instance": instance,
            "max_s": max_s,
        }
        super().__init__(home, "consumer.py", spec, f"cpp-consumer:{group}:{instance or ''}")

    def __enter__(self) -> CppConsumer:
        return self

    def snapshot(self) -> list[dict[str, Any]]:
        with self._cond:
            return [x for x in self.lines if "body" in x]

    def bodies(self) -> list[str]:
        return [d["body"] for d in self.snapshot()]

    def wait_for(
        self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str
    ) -> list[dict[str, Any]]:
        """Wait (bounded) until pred(deliveries so far) holds; returns the deliveries."""
        lines = self.wait_lines(lambda ls: pred([x for x in ls if "body" in x]), timeout, what)
        return [x for x in lines if "body" in x]

    def wait_started(self, timeout: float = 20.0) -> None:
        self.wait_lines(lambda ls: any(x.get("started") for x in ls), timeout, "its start")


def wait_until(pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return
        except Exception:  # noqa: BLE001 - retried until the deadline; the last failure is reported
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
