"""Side-by-side comparison: this project's broker vs Redis Streams vs NATS JetStream, same workloads.

One command (as root, from the repository root; it installs what the peers need on first use):

    .venv/bin/python bench/compare.py                      # everything, 3 runs each (~10 min)
    .venv/bin/python bench/compare.py --runs 1 --count 20000 --workloads async_send,sync_send
    .venv/bin/python bench/compare.py --no-peers           # only this project

What it does:
1. Set-up (skipped when present): `apt-get install -y redis-server nats-server` and a separate venv
   build/venv-bench with redis, hiredis, nats-py, uvloop and matplotlib. `make test` never needs them.
2. Starts this project's cluster itself (bin/mqnamesrv + bin/mqbroker, ASYNC_FLUSH; a second pair
   with SYNC_FLUSH for sync_flush_batch), redis-server (no persistence, or AOF with the fsync policy of
   --redis-appendfsync; AOF appendfsync always for sync_flush_batch) and nats-server -js (file storage),
   all on free 127.0.0.1 ports with temporary data directories; every server is stopped by its PID
   at the end.
3. Runs each workload --runs times per system, interleaved (this, redis, nats, this, ...), each run
   a fresh client process: bench/wl_rocketmq.py in the project venv, bench/wl_peers.py in
   build/venv-bench. Server CPU per message comes from /proc/PID/stat around each run; so does the
   CPU the servers not under test used meanwhile (`others_cpu_s`). Before each run the harness waits
   until every server is idle, so background work one run leaves behind does not land in the next.
4. Writes bench/RESULTS.md (medians, ratios this/peer from the same invocation, targets, date,
   machine, versions, load average), bench/results.json and bench/results.png (msgs/s and p99).

Workloads (1 KiB bodies; see wl_rocketmq.py / wl_peers.py for exactly what each peer does):
batch_send, async_send, sync_send, sync_flush_batch, litepull_consume, push_consume, e2e (send ->
push listener at --rate msgs/s, latency), topics (--topics topics x 4 queues, async_send; each run
alternates with async_send to 1 topic x 4 queues on the same warm broker, and the target is the
median of the runs' ratios); async_send_autobatch and e2e_autobatch are async_send and e2e with this
project's producer auto-batching its single sends (Producer(auto_batch=True)), against the same peer
workloads. Client and servers share this machine's cores: figures are
a property of the machine *and* its load at the time; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.daemons import (  # noqa: E402
    Daemon,
    free_port,
    process_cpu_seconds,
    start_broker,
    start_namesrv,
)

BENCH = ROOT / "bench"
VENV_BENCH = ROOT / "build" / "venv-bench"
PEER_PY = VENV_BENCH / "bin" / "python"
PEER_PKGS = ["redis", "hiredis", "nats-py", "uvloop", "matplotlib"]
PY = sys.executable
BASE_PY = getattr(sys, "_base_executable", sys.executable)  # the interpreter behind this venv

WORKLOADS = [
    "batch_send", "async_send", "async_send_autobatch", "sync_send", "sync_flush_batch",
    "litepull_consume", "push_consume", "e2e", "e2e_autobatch", "topics",
]
# A row whose name ends so runs its workload with this project's producer gathering its single sends into
# batches (Producer(auto_batch=True), RocketMQ 5's autoBatch): the application still sends and is answered
# one message at a time. The peers run the workload without the suffix: pipelining is already their
# best set-up, and neither offers more for one-message publishes.
AUTO_BATCH_SUFFIX = "_autobatch"


def base_workload(w: str) -> str:
    return w.removesuffix(AUTO_BATCH_SUFFIX)


TITLES = {
    "batch_send": "batch send (32/batch)",
    "async_send": "single send, pipelined",
    "async_send_autobatch": "single send, pipelined, auto-batch",
    "sync_send": "sync send, one at a time",
    "sync_flush_batch": "SYNC_FLUSH batch send",
    "litepull_consume": "lite pull consume",
    "push_consume": "push consume (no-op listener)",
    "e2e": "end to end at RATE msg/s",
    "e2e_autobatch": "end to end at RATE msg/s, auto-batch",
    "topics": "TOPICS topics x 4 queues (async send)",
}
# (kind, threshold): "rate" = msgs/s >=, "lat" = (p50 <=, p99 <=), "ratio" = fraction of the 1-topic rate
TARGETS: dict[str, tuple[str, Any]] = {
    "batch_send": ("rate", 200_000),
    "async_send": ("rate", 60_000),
    "async_send_autobatch": ("rate", 60_000),
    "sync_send": ("lat", (0.3, 2.0)),
    "sync_flush_batch": ("rate", 100_000),
    "litepull_consume": ("rate", 300_000),
    "push_consume": ("rate", 150_000),
    "e2e": ("lat", (None, 5.0)),
    "e2e_autobatch": ("lat", (None, 5.0)),
    "topics": ("ratio", 0.8),
}


def cpu_seconds(pid: int) -> float:
    try:
        return process_cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def cpu_since(pids: dict[str, int], snapshot: dict[str, float]) -> dict[str, float]:
    """CPU seconds each process used since `snapshot` (cpu_snapshot of the same pids)."""
    return {name: round(cpu_seconds(pid) - snapshot[name], 2) for name, pid in pids.items()}


def wait_idle(pids: list[int], busy: float = 0.05, window: float = 0.5, timeout: float = 30.0) -> float:
    """Wait until every process uses under `busy` of a CPU over `window` seconds (at most `timeout`):
    an idle broker reads its CommitLog files ahead of the writer into the page cache on a thread, and a
    timed run that overlaps that background work measures it too. Returns the wait."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        c0 = [cpu_seconds(p) for p in pids]
        time.sleep(window)
        if all(cpu_seconds(p) - c < busy * window for p, c in zip(pids, c0, strict=True)):
            break
    return time.monotonic() - t0


def sh(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


# ------------------------------------------------------------------ set-up


def setup_peers() -> None:
    if not (shutil.which("redis-server") and shutil.which("nats-server")):
        print("installing redis-server and nats-server (apt-get)...", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "redis-server", "nats-server"]):
            r = sh(cmd, env=env, timeout=600)
            if r.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    stamp = VENV_BENCH / ".installed"
    if not stamp.exists():
        print(f"creating {VENV_BENCH} ({', '.join(PEER_PKGS)})...", flush=True)
        if not PEER_PY.exists():
            # The interpreter this project's side runs on, so both sides' Python clients run on the same
            # build (a PGO/LTO build ran the broker 5-17% cheaper than a plain one: see bench/README.md).
            r = sh([BASE_PY, "-m", "venv", str(VENV_BENCH)], timeout=300)
            if r.returncode != 0:
                raise SystemExit(f"{BASE_PY} -m venv failed: {r.stderr.strip()[-500:]}")
        r = sh([str(PEER_PY), "-m", "pip", "install", "-q", *PEER_PKGS], timeout=900)
        if r.returncode != 0:
            raise SystemExit(f"pip install into {VENV_BENCH} failed: {r.stderr.strip()[-500:]}")
        stamp.write_text("\n".join(PEER_PKGS) + "\n")


class Server:
    """A peer server process started by PID, output to a log file, stopped with SIGTERM then SIGKILL."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self._log = log.open("w")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def wait_port(port: int, timeout: float = 20.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


# ------------------------------------------------------------------ running


SERVER_PID_KEYS = ("broker_pid", "broker_sync_pid", "redis_pid", "nats_pid")
# Upstream's store sizes (the test helper's defaults are small, for fast tests).
BROKER_STORE_SIZES: dict[str, object] = {
    "mappedFileSizeCommitLog": 1024 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 300_000 * 20,
    "maxHashSlotNum": 5_000_000,
    "maxIndexNum": 20_000_000,
}


def run_one(system: str, workload: str, a: argparse.Namespace, env: dict[str, Any]) -> dict[str, Any]:
    count = a.count
    base = base_workload(workload)
    if base == "sync_send":
        count = a.sync_count
    elif base == "e2e":
        count = int(a.rate * a.e2e_seconds)
    common = ["--workload", base, "--count", str(count), "--rate", str(a.rate), "--topics", str(a.topics)]
    if system == "this":
        ns = env["ns_sync"] if workload == "sync_flush_batch" else env["ns"]
        wl = "batch_send" if workload == "sync_flush_batch" else base
        common[1] = wl
        cmd = [PY, str(BENCH / "wl_rocketmq.py"), "-n", ns, *common, "--inflight",
               str(a.batch_inflight if wl == "batch_send" else a.inflight)]
        if base != workload:
            cmd.append("--auto-batch")
        pid = env["broker_sync_pid"] if workload == "sync_flush_batch" else env["broker_pid"]
        if workload == "topics":
            cmd += ["--broker-pid", str(pid)]
    else:
        cmd = [str(PEER_PY), str(BENCH / "wl_peers.py"), "--system", system, "--addr", env[f"{system}_addr"],
               *common, "--inflight", str(a.inflight), "--batch-inflight", str(a.batch_inflight)]
        if system == "redis":
            cmd += ["--redis-appendfsync", a.redis_appendfsync]
        pid = env[f"{system}_pid"]
    # The servers not under test should be idle; what they used anyway (a broker paging in its next
    # CommitLog file, a peer's background flush) competed with this run for the two CPUs.
    others = {k.removesuffix("_pid"): env[k] for k in SERVER_PID_KEYS if k in env and env[k] != pid}
    o0 = cpu_snapshot(others)
    c0 = cpu_seconds(pid)
    r = sh(cmd, timeout=600, cwd=str(ROOT))
    server_cpu = cpu_seconds(pid) - c0
    others_cpu = cpu_since(others, o0)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        err = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"system": system, "workload": workload, "error": err[:300]}
    out: dict[str, Any] = json.loads(lines[-1])
    out["workload"] = workload
    out["others_cpu_s"] = others_cpu
    if "skip" not in out and out.get("msgs"):
        out["server_cpu_us"] = round(server_cpu / out["msgs"] * 1e6, 1)
    return out


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in runs if key in r]
    return round(statistics.median(vals), 3) if vals else None


def summarize(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for w, by_sys in results.items():
        out[w] = {}
        for s, runs in by_sys.items():
            ok = [r for r in runs if "msgs_s" in r]
            if not ok:
                first = runs[0] if runs else {}
                out[w][s] = {"note": first.get("skip") or first.get("error") or "no result"}
                continue
            out[w][s] = {
                k: median_of(ok, k)
                for k in ("msgs_s", "p50_ms", "p99_ms", "max_ms", "client_cpu_us", "server_cpu_us", "ratio",
                          "single_msgs_s", "single_client_cpu_us", "single_broker_cpu_us", "many_broker_cpu_us")
                if median_of(ok, k) is not None
            }
            out[w][s]["runs"] = len(ok)
            out[w][s]["msgs_s_all"] = [r["msgs_s"] for r in ok]
            ratios = [r["ratio"] for r in ok if "ratio" in r]
            if ratios:
                out[w][s]["ratio_all"] = ratios
    return out


# ------------------------------------------------------------------ report


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat; None where there is none."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return f[7], sum(f)


def steal_percent(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of CPU time the hypervisor gave to other guests between two cpu_ticks()."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)


def _redis_persistence_text(appendfsync: str) -> str:
    """How the Redis peer kept its data outside the SYNC_FLUSH row (--redis-appendfsync)."""
    if appendfsync == "off":
        return ("Redis without persistence (no AOF, no RDB) outside the SYNC_FLUSH row (AOF `appendfsync always` "
                "there): a weaker promise than ASYNC_FLUSH, whose acknowledged messages outlive the broker process")
    if appendfsync == "no":
        return ("Redis with AOF `appendfsync no` (each write reaches the kernel before its reply, as ASYNC_FLUSH's "
                "do; `always` in the SYNC_FLUSH row)")
    return (f"Redis with AOF `appendfsync {appendfsync}` (each write reaches the kernel before its reply but while "
            "a slow fsync runs, when Redis holds writes back for up to 2 s; `always` in the SYNC_FLUSH row)")


def _steal_text(pct: float | None) -> str:
    return "not measured" if pct is None else f"{pct:.1f}%"


def machine_info() -> dict[str, str]:
    cpu = "?"
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {"nproc": str(os.cpu_count()), "cpu": cpu, "ram": mem, "kernel": platform.release()}


# What a compare writes: a previous run's uncommitted output is not a change to the code measured.
OUTPUTS = ("bench/RESULTS.md", "bench/results.json", "bench/results.png")


def git_commit() -> str | None:
    """The checkout's commit (short), "+ changes" when its tracked files differ from it (but for OUTPUTS);
    None outside git. RESULTS.md names it: the code measured is that commit's, not whatever is committed
    with the file."""
    if not shutil.which("git"):
        return None
    r = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    if r.returncode != 0:
        return None
    dirty = sh(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".",
                *(f":(exclude){p}" for p in OUTPUTS)])
    return r.stdout.strip() + (" + changes" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def versions() -> dict[str, str]:
    # Which interpreter build ran the Python processes matters as much as its version (bench/README.md).
    v = {"python": f"{platform.python_version()} ({os.path.realpath(BASE_PY)})"}
    try:
        import tomllib

        v["this project"] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, ValueError):
        pass
    commit = git_commit()
    if commit:
        v["this project"] = f"{v.get('this project', '?')} at {commit}"
    r = sh(["redis-server", "--version"]) if shutil.which("redis-server") else None
    if r is not None:
        v["redis-server"] = next((p[2:] for p in r.stdout.split() if p.startswith("v=")), r.stdout.strip())
    r = sh(["nats-server", "--version"]) if shutil.which("nats-server") else None
    if r is not None:
        v["nats-server"] = r.stdout.strip().split()[-1]
    if PEER_PY.exists():
        code = ("import importlib.metadata as m, json, os, platform, sys; print(json.dumps({**{p: m.version(p) for p "
                "in ['redis', 'hiredis', 'nats-py', 'uvloop']}, 'python': platform.python_version() + ' ('"
                " + os.path.realpath(getattr(sys, '_base_executable', sys.executable)) + ')'}))")
        r = sh([str(PEER_PY), "-c", code])
        if r.returncode == 0:
            peer = json.loads(r.stdout)
            peer_python = peer.pop("python")
            if peer_python != v["python"]:  # an older build/venv-bench: the clients differ in more than code
                v["python (peer clients)"] = peer_python
            v.update({f"{k} (py)": x for k, x in peer.items()})
    return v


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def target_text(w: str, summary: dict[str, dict[str, dict[str, Any]]], a: argparse.Namespace) -> tuple[str, str]:
    kind, t = TARGETS[w]
    me = summary.get(w, {}).get("this", {})
    if kind == "rate":
        v = me.get("msgs_s")
        return f">= {t:,} msg/s", "?" if v is None else ("met" if v >= t else f"NOT met ({v / t:.1%})")
    if kind == "lat":
        p50, p99 = t
        text = (f"p50 <= {p50} ms, " if p50 else "") + f"p99 <= {p99} ms"
        g50, g99 = me.get("p50_ms"), me.get("p99_ms")
        if g99 is None:
            return text, "?"
        ok = g99 <= p99 and (p50 is None or (g50 is not None and g50 <= p50))
        if base_workload(w) == "e2e" and me.get("msgs_s", 0) < 0.9 * a.rate:
            return text, f"NOT met (kept up with only {me.get('msgs_s', 0):,.0f} of {a.rate:,.0f} msg/s)"
        return text, "met" if ok else "NOT met"
    # wl_rocketmq measures the 1-topic side itself, alternating with the N-topic side (see w_topics).
    ratio = me.get("ratio")
    if ratio is None:
        return f">= {t:.0%} of 1 topic", "?"
    # Each figure is a median over the runs on its own: the ratio is the median of the runs' ratios, not
    # the quotient of the two median rates shown beside it (which come from different runs).
    runs = ", ".join(f"{r:.1%}" for r in me.get("ratio_all", []))
    return f">= {t:.0%} of 1 topic", ("met" if ratio >= t else "NOT met") + (
        f" (median of the runs' ratios {ratio:.1%}" + (f": {runs}" if runs else "")
        + f"; 1 topic {me.get('single_msgs_s', 0):,.0f} msg/s; broker CPU "
        f"{me.get('many_broker_cpu_us', '?')} vs {me.get('single_broker_cpu_us', '?')} us/msg)")


def _idle_poll_default() -> int:
    from broker.config import BrokerConfig

    return int(BrokerConfig.model_fields["serverIdlePollMicros"].default)


def write_report(summary: dict[str, Any], meta: dict[str, Any], a: argparse.Namespace, path: Path) -> None:
    systems = ["this", "redis", "nats"]
    title = {w: TITLES[w].replace("RATE", f"{a.rate:,.0f}").replace("TOPICS", f"{a.topics:,}") for w in TITLES}
    L = [
        "# Benchmark: this project vs Redis Streams vs NATS JetStream",
        "",
        f"Generated by `bench/compare.py` on {meta['date']} ({meta['elapsed_s']:.0f} s). "
        f"{a.runs} run(s) per workload and system, medians shown; 1 KiB bodies; client and servers on "
        "the same machine, loopback. Ratios are this/peer from this same invocation.",
        "",
        f"- Machine: {meta['machine']['nproc']} CPUs ({meta['machine']['cpu']}), {meta['machine']['ram']} RAM, "
        f"Linux {meta['machine']['kernel']}. Load average before/after: {meta['load_before']} / {meta['load_after']}; "
        f"CPU steal during the run: {_steal_text(meta.get('steal_pct'))} (other work on the machine, or on the "
        "host, inflates every figure).",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
        f"- Parameters: count {a.count:,} (sync_send {a.sync_count:,}; e2e {a.rate:,.0f} msg/s for "
        f"{a.e2e_seconds:g} s), {a.inflight} in flight for pipelined sends, {a.batch_inflight} batches of 32 in "
        "flight, this project's broker ASYNC_FLUSH (SYNC_FLUSH for that row), "
        + _redis_persistence_text(a.redis_appendfsync) + ".",
        "- This project's broker config: "
        + (
            "upstream defaults except " + ", ".join(f"`{k}={v}`" for k, v in a.broker_overrides.items())
            if a.broker_overrides
            else "upstream defaults (e.g. maxTransferCountOnMessageInMemory=32 per pull)"
        )
        + (
            ""
            if "serverIdlePollMicros" in a.broker_overrides
            else f", and ours: `serverIdlePollMicros={_idle_poll_default()}` (the loop polls up to that long after a "
            "connection's last read or write before it sleeps, adapted to the gaps between requests; "
            "remoting/idle_poll.py)"
        )
        + ".",
        "",
        "## Throughput (msgs/s) and latency",
        "",
        "| workload | this | Redis | NATS | this/Redis | this/NATS | this p50 / p99 ms | Redis p99 | NATS p99 | this client / broker CPU us/msg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in a.workload_list:
        row = summary.get(w, {})
        me, rd, nt = (row.get(s, {}) for s in systems)

        def cell(d: dict[str, Any]) -> str:
            return fmt_rate(d.get("msgs_s")) if "msgs_s" in d else f"n/a ({d.get('note', 'not run')})"

        def ratio(d: dict[str, Any], me: dict[str, Any] = me) -> str:
            if "msgs_s" in me and "msgs_s" in d and d["msgs_s"]:
                return f"{me['msgs_s'] / d['msgs_s']:.2f}x"
            return "-"

        lat = f"{fmt_ms(me.get('p50_ms'))} / {fmt_ms(me.get('p99_ms'))}" if "p99_ms" in me else "-"
        cpu = f"{me.get('client_cpu_us', '-')} / {me.get('server_cpu_us', '-')}" if "msgs_s" in me else "-"
        L.append(
            f"| {title[w]} | {cell(me)} | {cell(rd)} | {cell(nt)} | {ratio(rd)} | {ratio(nt)} | {lat} | "
            f"{fmt_ms(rd.get('p99_ms'))} | {fmt_ms(nt.get('p99_ms'))} | {cpu} |"
        )
    L += ["", "Broker CPU per message is the broker process's CPU over the whole client run divided by the "
          "messages of the timed phase: for the consume rows it includes preloading the messages (a "
          "batch send), for e2e both the send and the push delivery."]
    L += ["", "## Targets (this project)", "", "| workload | target | measured (median) | status |", "|---|---|---|---|"]
    for w in a.workload_list:
        me = summary.get(w, {}).get("this", {})
        t, status = target_text(w, summary, a)
        measured = fmt_rate(me.get("msgs_s")) + " msg/s"
        if "p99_ms" in me:
            measured += f", p50 {fmt_ms(me.get('p50_ms'))} ms, p99 {fmt_ms(me.get('p99_ms'))} ms"
        L.append(f"| {title[w]} | {t} | {measured} | {status} |")
    mem = BENCH / "memory.json"
    if mem.exists():
        m = json.loads(mem.read_text())
        L += ["", "## Broker memory (bench/bench_memory.py, last run)", "",
              "| messages stored | body bytes | RSS MiB | file-backed MiB | RSS less file mappings MiB | target |",
              "|---:|---:|---:|---:|---:|---|"]
        for p in m.get("points", []):
            L.append(f"| {p['messages']:,} | {p['body']} | {p['rss_mib']:.0f} | {p['file_mib']:.0f} | "
                     f"{p['anon_mib']:.0f} | <= 300 MiB at 10 M |")
        if m.get("note"):
            L += ["", m["note"]]
    L += [
        "",
        "## What each workload does",
        "",
        "See the docstrings of `bench/wl_rocketmq.py` (this project) and `bench/wl_peers.py` (peers). "
        "`n/a` means the peer has no equivalent with the same guarantee (NATS 2.9: no batch publish, no "
        "per-write fsync; Redis: no push delivery). Each run is a fresh client process; consumer timings "
        "start when the consumer has started (its first fetch is inside the clock). Before the first timed "
        "run every server gets a short warm-up send. Before every run the harness waits (at most 10 s) until "
        "all servers are idle: an idle broker reads the rest of its CommitLog file and the next one into the "
        "page cache on a thread (2.5-6 s of CPU per GiB here). The CPU other servers used during each run "
        "is in results.json (`others_cpu_s`).",
        "",
        "Individual runs (msgs/s): " + "; ".join(
            f"{w}/{s}: " + ", ".join(f"{x:,.0f}" for x in d.get("msgs_s_all", []))
            for w in a.workload_list for s, d in summary.get(w, {}).items() if d.get("msgs_s_all")
        ),
        "",
    ]
    path.write_text("\n".join(L))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=50_000, help="messages per throughput run")
    ap.add_argument("--sync-count", type=int, default=5_000, help="messages per sync_send run")
    ap.add_argument("--rate", type=float, default=10_000, help="e2e send rate, msgs/s")
    ap.add_argument("--e2e-seconds", type=float, default=5.0)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--batch-inflight", type=int, default=8)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--no-peers", action="store_true", help="only this project (no install, no peer servers)")
    ap.add_argument(
        "--broker-set", action="append", default=[], metavar="KEY=VALUE",
        help="a broker config override for this project's brokers (repeatable; shown in the report), "
        "e.g. maxTransferCountOnMessageInMemory=256",
    )
    ap.add_argument(
        "--redis-appendfsync", choices=("off", "no", "everysec"), default="off",
        help="Redis persistence outside the SYNC_FLUSH row: off (the default, no AOF: Redis at its fastest, "
        "but an acknowledged message is lost when its process dies, which ASYNC_FLUSH's is not), no (AOF "
        "written to the kernel before each reply and left to the OS to flush: ASYNC_FLUSH's promise), or "
        "everysec (the same, fsynced every second, but a write may wait up to 2 s behind a slow fsync)",
    )
    ap.add_argument("--out", default=str(BENCH), help="where RESULTS.md, results.json and results.png go")
    a = ap.parse_args()
    a.workload_list = [w for w in a.workloads.split(",") if w]
    a.broker_overrides = {}
    for kv in a.broker_set:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise SystemExit(f"--broker-set wants KEY=VALUE, got {kv!r}")
        a.broker_overrides[key.strip()] = value.strip()
    unknown = set(a.workload_list) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workload(s): {', '.join(sorted(unknown))}; known: {', '.join(WORKLOADS)}")
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not a.no_peers:
        setup_peers()
    systems = ["this"] if a.no_peers else ["this", "redis", "nats"]
    tmp = Path(tempfile.mkdtemp(prefix="mqcompare-"))
    daemons: list[Daemon] = []
    servers: list[Server] = []
    env: dict[str, Any] = {}
    t_start = time.monotonic()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    ticks_before = cpu_ticks()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        big = {**BROKER_STORE_SIZES, "flushDiskType": "ASYNC_FLUSH", **a.broker_overrides}
        ns, env["ns"] = start_namesrv(tmp / "a")
        daemons.append(ns)
        br, _ = start_broker(tmp / "a", env["ns"], extra=big)
        daemons.append(br)
        env["broker_pid"] = br.pid
        if "sync_flush_batch" in a.workload_list:
            ns2, env["ns_sync"] = start_namesrv(tmp / "b")
            daemons.append(ns2)
            br2, _ = start_broker(tmp / "b", env["ns_sync"], extra=dict(big, flushDiskType="SYNC_FLUSH"))
            daemons.append(br2)
            env["broker_sync_pid"] = br2.pid
        if not a.no_peers:
            rport, nport = free_port(), free_port()
            (tmp / "redis").mkdir()
            servers.append(Server("redis", ["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                                            "--save", "", "--appendonly", "no", "--auto-aof-rewrite-percentage", "0",
                                            "--dir", str(tmp / "redis")],
                                  tmp / "redis.log"))
            env["redis_pid"], env["redis_addr"] = servers[-1].pid, f"127.0.0.1:{rport}"
            servers.append(Server("nats", ["nats-server", "-a", "127.0.0.1", "-p", str(nport), "-js",
                                           "-sd", str(tmp / "nats")], tmp / "nats.log"))
            env["nats_pid"], env["nats_addr"] = servers[-1].pid, f"127.0.0.1:{nport}"
            wait_port(rport)
            wait_port(nport)
        # Warm-up, not recorded: the brokers' first mapped files, the peers' first allocations.
        for s in systems:
            run_one(s, "batch_send", argparse.Namespace(**dict(vars(a), count=2000)), env)
            if "ns_sync" in env and s == "this":
                run_one(s, "sync_flush_batch", argparse.Namespace(**dict(vars(a), count=2000)), env)
        server_pids = [env[k] for k in SERVER_PID_KEYS if k in env]
        for w in a.workload_list:
            results[w] = {s: [] for s in systems}
            for i in range(a.runs):
                for s in systems:
                    if results[w][s] and "skip" in results[w][s][0]:
                        continue
                    # Background work the start-up or a run leaves behind (a broker reading its next CommitLog
                    # file in while idle: 2.5-6 s of CPU per GiB here) settles before the next run.
                    idle_wait = wait_idle(server_pids, window=0.3, timeout=10.0)
                    r = run_one(s, w, a, env)
                    r["idle_wait_s"] = round(idle_wait, 1)
                    results[w][s].append(r)
                    shown = r.get("msgs_s", r.get("skip") or r.get("error"))
                    extra = f" p50={r['p50_ms']} p99={r['p99_ms']}" if "p99_ms" in r else ""
                    busy = ", ".join(f"{k} {v:.2f}" for k, v in r.get("others_cpu_s", {}).items() if v >= 0.05)
                    extra += f" (others' CPU s: {busy})" if busy else ""
                    extra += f" (waited {idle_wait:.1f} s for idle servers)" if idle_wait >= 1.0 else ""
                    print(f"{w:17s} {s:6s} run {i + 1}: {shown}{extra}", flush=True)
    finally:
        for srv in servers:
            srv.stop()
        for d in reversed(daemons):
            d.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarize(results)
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "elapsed_s": time.monotonic() - t_start,
        "machine": machine_info(),
        "versions": versions(),
        "load_before": load_before,
        "load_after": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        # Steal is CPU the hypervisor took for other guests: it slows every system alike, and above a few
        # percent the figures say more about the host than about the code.
        "steal_pct": steal_percent(ticks_before, cpu_ticks()),
        "params": {k: v for k, v in vars(a).items() if k not in ("workload_list", "broker_overrides")},
    }
    (out_dir / "results.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": results}, indent=1))
    write_report(summary, meta, a, out_dir / "RESULTS.md")
    if PEER_PY.exists():
        r = sh([str(PEER_PY), str(BENCH / "chart.py"), str(out_dir / "results.json"), str(out_dir / "results.png")])
        if r.returncode != 0:
            print(f"chart failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
    print((out_dir / "RESULTS.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
