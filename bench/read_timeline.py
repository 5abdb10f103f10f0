"""Where an end-to-end run's slowest messages come from: every read the broker and the client handle, timed.

    .venv/bin/python bench/read_timeline.py                    # fresh NameServer + broker, e2e 10k msg/s, 5 s
    .venv/bin/python bench/read_timeline.py --runs 3 --top 10 --json build/read-timeline.json

Both processes load bench/read_probe/sitecustomize.py (through PYTHONPATH), which times every
RemotingConnection.data_received: wall time, the thread's CPU time and getrusage's context switches
meanwhile, and the bytes read; and every cyclic-gc collection. The client process runs the e2e workload
of compare.py (send_async paced at --rate in 1 ms ticks, a push consumer, 8 queues) and stamps each message
at send and at the listener. The report, per run:

- latency percentiles;
- per process, the reads that took longest, each marked by what the thread did meanwhile: `cpu` (it ran
  throughout: a computation, or a gc collection inside it, shown), `preempted` (involuntary switches and
  wall well above CPU: another task had the CPU) or `blocked` (voluntary switches: it waited, on the GIL,
  a lock or I/O); and the gc collections per generation;
- the slowest 1% of messages grouped into episodes (sends less than 5 ms apart), each with the long reads
  of both processes from 3 ms before its first send to its last arrival.

A py-spy profile sums time by function and hides a 2 ms pause every 0.6 s; this finds it (2026-11-24: the
broker's held-pull time-outs freeing ~4 000 answered pulls at once, bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from compare import BROKER_STORE_SIZES, wait_idle  # noqa: E402

from tests.support.daemons import start_broker, start_namesrv  # noqa: E402

PROBE_DIR = HERE / "read_probe"
LONG_READ_NS = 500_000  # reads listed around an episode


# ------------------------------------------------------------------ the client process


async def client_run(ns: str, rate: float, seconds: float, queues: int, out: Path) -> None:
    """compare.py's e2e workload (wl_rocketmq.w_push), each message's (send ns, arrival ns) written to `out`."""
    import wl_rocketmq as wl

    topic = f"ReadTimeline_{time.time_ns()}"
    await wl.ensure_topic(ns, topic, queues)
    stamps: list[tuple[int, int]] = []
    await wl.w_push(ns, topic, int(rate * seconds), f"read_timeline_{time.time_ns()}", b"x" * 1024, rate,
                    stamps=stamps)
    out.write_text(json.dumps(stamps))


# ------------------------------------------------------------------ analysis


def load_probe(path: Path, t0: int, t1: int) -> dict[str, Any]:
    d = json.loads(path.read_text())
    return {
        "reads": [r for r in d["reads"] if t0 <= r[0] <= t1],
        "gc": [g for g in d["gc"] if t0 <= g[0] <= t1],
    }


def kind_of(read: list[int]) -> str:
    _w0, wall, cpu, vol, invol, _n = read
    if wall <= 1.5 * cpu:
        return "cpu"
    if invol:
        return "preempted"
    if vol:
        return "blocked"
    return "off-cpu"  # no switch counted: the vCPU itself was descheduled by the host, or a fault waited


def describe(read: list[int], gcs: list[list[int]], t0: int) -> str:
    w0, wall, cpu, vol, invol, n = read
    inside = [g for g in gcs if w0 <= g[0] <= w0 + wall]
    gc_s = "".join(f", gc{g[2]} {g[1] / 1e6:.2f} ms" for g in inside)
    return (f"at {(w0 - t0) / 1e6:8.1f} ms: {wall / 1e6:5.2f} ms wall, {cpu / 1e6:5.2f} cpu, {n:6d} bytes, "
            f"{kind_of(read)} (switches {vol}/{invol}){gc_s}")


def percentile(sorted_vals: list[float], q: float) -> float:
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * q))]


def analyse(stamps: list[list[int]], procs: dict[str, dict[str, Any]], top: int) -> dict[str, Any]:
    stamps.sort()
    t0 = stamps[0][0]
    lat = sorted((r - s) / 1e6 for s, r in stamps)
    out: dict[str, Any] = {
        "messages": len(lat), "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
        "p999_ms": percentile(lat, 0.999), "max_ms": lat[-1], "processes": {}, "episodes": [],
    }
    lines: list[str] = [f"{len(lat)} messages: p50 {out['p50_ms']:.2f} p99 {out['p99_ms']:.2f} "
                        f"p99.9 {out['p999_ms']:.2f} max {out['max_ms']:.2f} ms"]
    for name, p in procs.items():
        reads, gcs = p["reads"], p["gc"]
        by_gen = {g: [x[1] / 1e6 for x in gcs if x[2] == g] for g in range(3)}
        longest = sorted(reads, key=lambda r: -r[1])[:top]
        kinds = {k: sum(1 for r in reads if r[1] > LONG_READ_NS and kind_of(r) == k)
                 for k in ("cpu", "preempted", "blocked", "off-cpu")}
        out["processes"][name] = {
            "reads": len(reads), "median_read_us": statistics.median(r[1] for r in reads) / 1e3 if reads else 0,
            "long_reads_by_kind": kinds,
            "gc": {g: {"count": len(v), "total_ms": round(sum(v), 2), "max_ms": round(max(v, default=0), 2)}
                   for g, v in by_gen.items()},
        }
        lines.append(f"{name}: {len(reads)} reads; over {LONG_READ_NS / 1e6:g} ms: {kinds}; gc " + ", ".join(
            f"gen{g} {len(v)} ({sum(v):.1f} ms, max {max(v, default=0):.2f})" for g, v in by_gen.items()))
        lines += ["  " + describe(r, gcs, t0) for r in longest]
    p99_ns = out["p99_ms"] * 1e6
    episodes: list[list[int]] = []  # [first send, last send, last arrival, messages]
    for s, r in stamps:
        if r - s < p99_ns:
            continue
        if episodes and s - episodes[-1][1] < 5_000_000:
            e = episodes[-1]
            e[1], e[2], e[3] = s, max(e[2], r), e[3] + 1
        else:
            episodes.append([s, s, r, 1])
    lines.append(f"{len(episodes)} episodes of the slowest 1% (sends < 5 ms apart):")
    for a, _z, r, n in episodes:
        near = {name: [x for x in p["reads"] if a - 3_000_000 <= x[0] <= r and x[1] > LONG_READ_NS]
                for name, p in procs.items()}
        out["episodes"].append({"at_ms": (a - t0) / 1e6, "messages": n, "span_ms": (r - a) / 1e6,
                                **{k: [[(x[0] - a) / 1e6, x[1] / 1e6, kind_of(x)] for x in v] for k, v in near.items()}})
        desc = "; ".join(f"{k}: " + (", ".join(f"{(x[0] - a) / 1e6:+.1f} ms {x[1] / 1e6:.1f} ms {kind_of(x)}"
                                               for x in v[:3]) or "-") for k, v in near.items())
        lines.append(f"  at {(a - t0) / 1e6:8.1f} ms, {n:3d} msgs over {(r - a) / 1e6:4.1f} ms | {desc}")
    out["report"] = lines
    return out


# ------------------------------------------------------------------ driver


def catches_sigusr2(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGUSR2 - 1)))
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--top", type=int, default=8, help="longest reads listed per process")
    ap.add_argument("--json", type=Path, help="write the analysis here too")
    ap.add_argument("--client", nargs=2, metavar=("NAMESRV", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client:
        # Imported before run(): what it freezes at start is then left out of the cyclic gc's walks, as in
        # an application (imported inside, the client's first full collection took 6 ms here).
        import wl_rocketmq  # noqa: F401  (bench/, the script's directory, is on sys.path)

        from remoting.loop import run

        run(client_run(a.client[0], a.rate, a.seconds, a.queues, Path(a.client[1])))
        return 0
    if sys.platform != "linux":
        raise SystemExit("read_timeline.py needs Linux (/proc and per-thread getrusage)")
    with tempfile.TemporaryDirectory(prefix="read-timeline-") as tmp_s:
        tmp = Path(tmp_s)
        prefix = tmp / "probe"
        os.environ["READ_PROBE"] = str(prefix)
        # The project's root too: the probe imports it at start-up, before any script sets up its path.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(PROBE_DIR), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        daemons = []
        results = []
        try:
            ns, ns_addr = start_namesrv(tmp)
            daemons.append(ns)
            broker, _ = start_broker(tmp, ns_addr, extra=BROKER_STORE_SIZES)
            daemons.append(broker)
            if not catches_sigusr2(broker.pid):  # the probe's dump signal: without it SIGUSR2 would kill it
                raise SystemExit("the broker did not load bench/read_probe (is the project importable?)")
            wait_idle([broker.pid], timeout=60)  # a fresh broker reads its CommitLog file ahead
            for i in range(a.runs):
                out = tmp / f"stamps-{i}.json"
                subprocess.run(
                    [sys.executable, __file__, "--client", ns_addr, str(out), "--rate", str(a.rate),
                     "--seconds", str(a.seconds), "--queues", str(a.queues)], timeout=180, check=True)
                broker_dump = Path(f"{prefix}.{broker.pid}.json")
                broker_dump.unlink(missing_ok=True)
                os.kill(broker.pid, signal.SIGUSR2)
                deadline = time.monotonic() + 10
                while not broker_dump.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not broker_dump.exists():
                    raise SystemExit(f"the broker wrote no probe dump ({broker_dump}): was the probe loaded?")
                stamps = json.loads(out.read_text())
                t0, t1 = min(s for s, _ in stamps) - 100_000_000, max(r for _, r in stamps)
                client_dump = max((p for p in tmp.glob("probe.*.json") if p != broker_dump
                                   and p.name != f"probe.{ns.pid}.json"), key=lambda p: p.stat().st_mtime)
                procs = {"broker": load_probe(broker_dump, t0, t1), "client": load_probe(client_dump, t0, t1)}
                res = analyse(stamps, procs, a.top)
                print(f"--- run {i + 1}")
                print("\n".join(res["report"]), flush=True)
                results.append(res)
                client_dump.unlink()
                wait_idle([broker.pid], timeout=10)
        finally:
            for d in reversed(daemons):
                d.terminate()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
