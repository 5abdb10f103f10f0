"""IdlePoller: the loop keeps turning for a window after activity, then sleeps again; off at 0 and
with a single CPU. RemotingServer touches it on its connections' reads and writes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remoting import RemotingClient, RemotingCommand, RemotingServer, RequestContext, RequestDispatcher
from remoting.idle_poll import IdlePoller, available_cpus, cgroup_cpu_limit

ROOT = Path(__file__).resolve().parents[2]
needs_two_cpus = pytest.mark.skipif(available_cpus() < 2, reason="idle polling turns itself off with one CPU")


async def _stopped_after(p: IdlePoller, limit_s: float = 2.0) -> float:
    """Seconds until p stops spinning (bounded)."""
    t0 = time.perf_counter()
    while p.spinning:
        if time.perf_counter() - t0 > limit_s:
            raise AssertionError(f"still spinning after {limit_s} s")
        await asyncio.sleep(0.001)
    return time.perf_counter() - t0


@needs_two_cpus
async def test_spins_for_the_window_then_sleeps() -> None:
    p = IdlePoller(asyncio.get_running_loop(), 30_000)
    assert p.active and p.window_us == 30_000
    t0 = time.perf_counter()
    p.touch()
    await asyncio.sleep(0.005)
    assert p.spinning and p.spins > 5  # many loop turns in 5 ms: the loop did not sleep
    await _stopped_after(p)
    elapsed = time.perf_counter() - t0
    assert 0.029 <= elapsed < 0.5, elapsed
    spins = p.spins
    await asyncio.sleep(0.05)
    assert p.spins == spins and not p.spinning  # asleep again: nothing turns the loop


@needs_two_cpus
async def test_each_touch_extends_the_window() -> None:
    p = IdlePoller(asyncio.get_running_loop(), 30_000)
    t0 = time.perf_counter()
    p.touch()
    await asyncio.sleep(0.02)
    p.touch()
    await _stopped_after(p)
    assert time.perf_counter() - t0 >= 0.045  # (uvloop times sleeps from a clock up to ~1 ms stale)


@needs_two_cpus
async def test_the_window_adapts_to_the_gaps_between_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """KVM halt-polling style: a read after a gap past the ceiling drops the window to 0 (the spin was
    wasted), reads within the ceiling double it again from an eighth of the ceiling."""
    clock = [10_000_000_000]
    monkeypatch.setattr("remoting.idle_poll._now_ns", lambda: clock[0])
    p = IdlePoller(asyncio.get_running_loop(), 800)  # ceiling 800 us, grows from 100 us
    p.touch_read()
    assert p.current_window_us == 800  # a new ceiling starts in full
    clock[0] += 300_000  # 300 us: caught by the window in use
    p.touch_read()
    assert p.current_window_us == 800
    clock[0] += 1_000_000  # 1 ms: no window we allow would have caught it
    p.touch_read()
    assert p.current_window_us == 0
    grown = []
    for _ in range(5):
        clock[0] += 700_000  # 700 us: within the ceiling, past the window in use
        p.touch_read()
        grown.append(p.current_window_us)
    assert grown == [100, 200, 400, 800, 800]
    clock[0] += 5_000_000
    p.touch()  # our own write: no adaptation, whatever the gap
    assert p.current_window_us == 800
    clock[0] += 5_000_000
    p.touch_read()
    assert p.current_window_us == 0
    p.window_us = 400  # a new ceiling starts in full again
    assert p.current_window_us == 400 and p.window_us == 400
    p.close()
    await _stopped_after(p)


@needs_two_cpus
async def test_a_window_adapted_to_zero_does_not_spin() -> None:
    p = IdlePoller(asyncio.get_running_loop(), 20_000)
    p.touch_read()
    await _stopped_after(p)
    await asyncio.sleep(0.03)  # past the ceiling
    spins = p.spins
    p.touch_read()
    assert p.current_window_us == 0 and not p.spinning
    await asyncio.sleep(0.01)
    assert p.spins == spins
    p.touch_read()  # 10 ms later: within the ceiling, so the window grows back
    assert p.current_window_us == 20_000 // 8 and p.spinning
    p.close()
    await _stopped_after(p)


async def test_a_zero_window_never_spins() -> None:
    p = IdlePoller(asyncio.get_running_loop(), 0)
    assert not p.active
    p.touch()
    await asyncio.sleep(0.01)
    assert p.spins == 0 and not p.spinning


@needs_two_cpus
async def test_close_and_a_new_window_take_effect_at_once() -> None:
    p = IdlePoller(asyncio.get_running_loop(), 10_000_000)  # 10 s
    p.touch()
    await asyncio.sleep(0.005)
    p.close()
    assert await _stopped_after(p, 0.5) < 0.1
    p.window_us = 20_000
    p.touch()
    await asyncio.sleep(0.005)
    assert p.spinning
    p.window_us = 0
    assert await _stopped_after(p, 0.5) < 0.1


@needs_two_cpus
async def test_timers_and_callbacks_run_while_it_spins() -> None:
    loop = asyncio.get_running_loop()
    p = IdlePoller(loop, 500_000)
    p.touch()
    ran: list[float] = []
    t0 = time.perf_counter()
    loop.call_soon(lambda: ran.append(time.perf_counter() - t0))
    await asyncio.sleep(0.02)
    slept = time.perf_counter() - t0
    assert ran and ran[0] < 0.01
    assert 0.015 <= slept < 0.1
    assert p.spinning
    p.close()
    await _stopped_after(p)


def test_a_negative_window_is_refused() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match=">= 0"):
            IdlePoller(loop, -1)
        with pytest.raises(ValueError, match="idle_poll_us"):
            RemotingServer(idle_poll_us=-5)
    finally:
        loop.close()


def test_a_single_cpu_turns_it_off() -> None:
    code = (
        "import asyncio, os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from remoting.idle_poll import IdlePoller\n"
        "loop = asyncio.new_event_loop()\n"
        "p = IdlePoller(loop, 200)\n"
        "p.touch()\n"
        "print(p.single_cpu, p.active, p.spinning)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "False"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_cpu_limit_reads_v2_cpu_max_along_the_path(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    fs = tmp_path / "fs"
    _write(proc, "0::/app/worker\n")
    _write(fs / "app" / "cpu.max", "50000 100000\n")  # the parent's limit applies to the child too
    _write(fs / "app" / "worker" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(str(proc), str(fs)) == 0.5
    _write(fs / "app" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(str(proc), str(fs)) is None


def test_cgroup_cpu_limit_reads_v1_cfs_quota(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    fs = tmp_path / "fs"
    _write(proc, "9:memory:/x\n4:cpu,cpuacct:/pod/c1\nnot a cgroup line\n")
    _write(fs / "cpu,cpuacct" / "pod" / "c1" / "cpu.cfs_quota_us", "-1\n")  # unlimited here ...
    _write(fs / "cpu,cpuacct" / "pod" / "c1" / "cpu.cfs_period_us", "100000\n")
    _write(fs / "cpu,cpuacct" / "pod" / "cpu.cfs_quota_us", "250000\n")  # ... but not in the pod
    _write(fs / "cpu,cpuacct" / "pod" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(str(proc), str(fs)) == 2.5
    assert cgroup_cpu_limit(str(tmp_path / "missing"), str(fs)) is None


def _cpu_cgroup_dir() -> Path | None:
    """A fresh child cgroup whose CPU quota this test may set (cgroup v1's cpu mount or v2 with the cpu
    controller), or None."""
    v1 = Path("/sys/fs/cgroup/cpu")
    candidates = [v1] if (v1 / "cpu.cfs_quota_us").exists() else []
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        candidates.append(Path("/sys/fs/cgroup"))
    for base in candidates:
        d = base / f"mq_idle_poll_test_{os.getpid()}"
        try:
            d.mkdir()
        except OSError:
            continue
        if (d / "cpu.cfs_quota_us").exists() or (d / "cpu.max").exists():
            return d
        d.rmdir()
    return None


def test_a_cgroup_quota_under_two_cpus_turns_it_off() -> None:
    """A container limited to 1.5 CPUs (affinity still shows every CPU) must not spin: the spin would
    burn the quota and get the process throttled."""
    d = _cpu_cgroup_dir()
    if d is None:
        pytest.skip("no writable cgroup with a CPU controller here (needs root)")
    try:
        if (d / "cpu.max").exists():
            (d / "cpu.max").write_text("150000 100000")
        else:
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text("150000")
        code = (
            "import asyncio, os, sys\n"
            "from remoting.idle_poll import IdlePoller, available_cpus, cgroup_cpu_limit\n"
            "before = available_cpus()\n"
            "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "loop = asyncio.new_event_loop()\n"
            "p = IdlePoller(loop, 200)\n"
            "p.touch()\n"
            "print(len(os.sched_getaffinity(0)), before, cgroup_cpu_limit(), available_cpus(), p.single_cpu,"
            " p.active, p.spinning)\n"
        )
        out = subprocess.run([sys.executable, "-c", code, str(d / "cgroup.procs")], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, out.stderr
        affinity, before, limit, after, *flags = out.stdout.split()
        assert float(limit) == 1.5 and after == "1"
        assert flags == ["True", "False", "False"]
        if int(affinity) >= 2:
            assert before == affinity  # outside the cgroup it counted every CPU of its mask
    finally:
        for _ in range(50):  # the subprocess has exited; the kernel drops it from the cgroup at once
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.02)


@needs_two_cpus
@pytest.mark.parametrize("window_us", [0, 20_000])
async def test_server_polls_after_its_connections_read_and_write(window_us: int) -> None:
    d = RequestDispatcher()

    def echo(_ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=cmd.body)

    d.register(1, echo)
    srv = RemotingServer(d, host="127.0.0.1", port=0, idle_poll_us=window_us)
    _, port = await srv.start()
    client = RemotingClient()
    try:
        poller = srv.idle_poller
        assert poller is not None and poller.window_us == window_us
        for i in range(3):
            resp = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(1, body=b"%d" % i), 3000)
            assert resp.body == b"%d" % i
        # (client and server share this loop here: the spins are what the server's poller counted)
        if window_us:
            assert poller.spins > 0
            await _stopped_after(poller)
            srv.idle_poll_us = 0  # a live change reaches the poller
            assert not poller.active and srv.idle_poll_us == 0
        else:
            await asyncio.sleep(0.01)
            assert poller.spins == 0 and not poller.spinning
    finally:
        await client.close()
        await srv.stop()
    assert not srv.idle_poller.active  # stop() closes it


@needs_two_cpus
async def test_client_polls_after_its_reads_and_writes() -> None:
    d = RequestDispatcher()
    d.register(1, lambda _ctx, cmd: cmd.response(body=cmd.body))
    srv = RemotingServer(d, host="127.0.0.1", port=0)  # (the server itself: off)
    _, port = await srv.start()
    client = RemotingClient(idle_poll_us=20_000)
    try:
        assert client.idle_poller is None  # made with the first connection
        resp = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(1, body=b"x"), 3000)
        assert resp.body == b"x"
        poller = client.idle_poller
        assert poller is not None and poller.window_us == 20_000 and poller.spins > 0
        await _stopped_after(poller)
        assert srv.idle_poller is not None and srv.idle_poller.spins == 0
    finally:
        await client.close()
        await srv.stop()
    assert not poller.active  # close() closes it
    with pytest.raises(ValueError, match="idle_poll_us"):
        RemotingClient(idle_poll_us=-1)
