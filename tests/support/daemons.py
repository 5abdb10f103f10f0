"""Real daemons as subprocesses on free loopback ports, stopped by PID, every wait bounded."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin"
PYTHON = sys.executable


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` so far, in seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A free TCP port on 127.0.0.1 whose neighbour (port + 1, the HA port) is free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65000:
            continue
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair found")


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where connections are refused for as long as the block runs.

    The socket stays bound but never listens, so the kernel answers connects with RST and no other
    process can take the port meanwhile (a port from free_port() alone could be reused under load).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def write_conf(path: Path, values: dict[str, object]) -> Path:
    lines = []
    for k, v in values.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        lines.append(f"{k}={v}")
    path.write_text("\n".join(lines) + "\n")
    return path


class Daemon:
    """A daemon subprocess whose output is collected; `wait_for` waits for a log line."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None):
        self.name = name
        self.argv = list(argv)
        full_env = dict(os.environ)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=str(cwd or ROOT),
            text=True,
            bufsize=1,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 20.0, start: int = 0) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines[start:]:
                    if needle in line:
                        return line
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode} before printing {needle!r}:\n"
                        + "\n".join(self.lines[-40:])
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{self.name} did not print {needle!r} within {timeout}s:\n" + "\n".join(self.lines[-40:])
                    )
                self._cond.wait(min(left, 0.2))

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait (bounded), then SIGKILL. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(2)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(2)


def start_namesrv(tmp: Path, port: int | None = None, extra: dict[str, object] | None = None) -> tuple[Daemon, str]:
    port = port or free_port()
    conf = {"listenPort": port, "kvConfigPath": str(tmp / "namesrv" / "kvConfig.json")}
    conf.update(extra or {})
    (tmp / "namesrv").mkdir(parents=True, exist_ok=True)
    path = write_conf(tmp / f"namesrv-{port}.conf", conf)
    d = Daemon(f"namesrv:{port}", [PYTHON, str(BIN / "mqnamesrv"), "-c", str(path)])
    d.wait_for("listening", 20)
    return d, f"127.0.0.1:{port}"


def start_broker(
    tmp: Path,
    namesrv_addr: str,
    *,
    name: str = "broker-a",
    port: int | None = None,
    extra: dict[str, object] | None = None,
    store_dir: Path | None = None,
) -> tuple[Daemon, str]:
    port = port or free_port()
    store = store_dir or (tmp / f"store-{name}")
    conf: dict[str, object] = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": name,
        "brokerId": 0,
        "brokerIP1": "127.0.0.1",
        "listenPort": port,
        "namesrvAddr": namesrv_addr,
        "storePathRootDir": str(store),
        "mappedFileSizeCommitLog": 16 * 1024 * 1024,
        "mappedFileSizeConsumeQueue": 30000 * 20,
        "maxHashSlotNum": 50000,
        "maxIndexNum": 200000,
    }
    conf.update(extra or {})
    path = write_conf(tmp / f"{name}-{port}.conf", conf)
    d = Daemon(f"broker:{name}:{port}", [PYTHON, str(BIN / "mqbroker"), "-c", str(path)])
    d.wait_for("listening", 30)
    return d, f"127.0.0.1:{port}"
