"""Idle polling: keep an event loop turning for a short while after socket activity instead of letting
it sleep at once (the reactor "idle poll" of Seastar, which Redpanda runs with).

A loop with nothing to do sleeps in epoll_wait. The next frame then has to wake it, and on a virtual
machine that wake-up is dear: the sender's write pays for an inter-processor interrupt, the halted vCPU
has to be resumed by the host, and the woken process starts with cold caches. Measured on our 2-vCPU
benchmark VM for a sync send (one request, one answer, repeated), of a 162 us round trip the two
wake-ups took ~48 us and the two writes ~40 us, the Python work of client and broker ~70 us.

While an IdlePoller spins, the loop has a ready callback, so it polls with a zero time-out: a frame
that arrives is read at the next turn, a few microseconds later, and nobody has to be woken. The spin
ends a window after the last touch() (a read or a write), so an idle process sleeps as before and
a busy one never spins (it always has work). The price is CPU: up to `window_us` of it after each burst
of activity, i.e. a broker serving one sync sender keeps its core busy.

The window adapts, as KVM's halt polling does (halt_poll_ns grow / shrink): `window_us` is its
ceiling, and the window in use follows the gaps before reads. A gap longer than the ceiling means the
spin before it was wasted (no window we allow would have caught it): the window drops to 0. A gap
within the ceiling but past the current window is a wake-up a longer window would have saved: the
window doubles (from an eighth of the ceiling). Only a read adapts it (touch_read), measured from the
last read or write: the gap before a write of ours is our own work, not a wait for the peer. A steady
request/answer exchange (a sync sender, ~100 us turnaround) so keeps the full window, while bursts
further apart than the ceiling (a paced producer, 1 ms ticks) stop paying for a spin after every
burst: on our 2-vCPU VM that spin took ~20 us of broker CPU per message at 10k msg/s.
"""

from __future__ import annotations

import asyncio
import os
import time

_now_ns = time.perf_counter_ns


def checked_window_us(value: int) -> int:
    """An idle poll window in microseconds, refused (ValueError naming it) when negative."""
    if value < 0:
        raise ValueError(f"idle_poll_us must be >= 0, got {value}")
    return value


def cgroup_cpu_limit(proc_cgroup: str = "/proc/self/cgroup", fs_root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs this process's cgroup CPU quota allows (quota / period), the smallest along its cgroup path up
    to the root; None without a quota (or off Linux). Reads cgroup v2 `cpu.max` and v1
    `cpu.cfs_quota_us` / `cpu.cfs_period_us`, as a JVM sizes itself in a container."""
    try:
        with open(proc_cgroup, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        v2 = controllers == ""  # v2: one unified hierarchy
        if v2:
            base = fs_root
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own mount (often cpu,cpuacct)
            base = os.path.join(fs_root, controllers)
            if not os.path.isdir(base):
                base = os.path.join(fs_root, "cpu")
        else:
            continue
        base = os.path.normpath(base)
        d = os.path.normpath(os.path.join(base, path.lstrip("/")))
        while True:
            limit = _read_cpu_quota(d, v2)
            if limit is not None:
                limits.append(limit)
            if d == base or not d.startswith(base):
                break
            d = os.path.dirname(d)
    return min(limits) if limits else None


def _read_cpu_quota(d: str, v2: bool) -> float | None:
    """The quota in CPUs set in cgroup directory d (v2 `cpu.max`: "QUOTA PERIOD" or "max PERIOD"; v1:
    `cpu.cfs_quota_us`, -1 for none, and `cpu.cfs_period_us`), None for none or unreadable."""

    def read(name: str) -> str:
        with open(os.path.join(d, name), encoding="ascii") as f:
            return f.read()

    try:
        if v2:
            quota_s, period_s = read("cpu.max").split()[:2]
        else:
            quota_s, period_s = read("cpu.cfs_quota_us").strip(), read("cpu.cfs_period_us").strip()
        if quota_s == "max" or int(quota_s) < 0:
            return None
        period = int(period_s)
        return int(quota_s) / period if period > 0 else None
    except (OSError, ValueError):
        return None


def available_cpus() -> int:
    """Whole CPUs this process may use, at least 1: its affinity mask, capped by its cgroup's CPU quota
    (rounded down: spinning wants a whole spare CPU, and a quota it spins away is throttled for the rest
    of the period)."""
    try:
        n = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        n = max(1, os.cpu_count() or 1)
    limit = cgroup_cpu_limit()
    if limit is not None:
        n = min(n, max(1, int(limit)))
    return n


class IdlePoller:
    """Spins `loop` after each touch() for the current window, which adapts between 0 and `window_us`
    (see the module docstring); a ceiling of 0 turns it off. With a single CPU (affinity, or a cgroup
    quota under 2 CPUs) spinning would only take it from the peer we are waiting for, or burn the quota,
    so it stays off there."""

    __slots__ = ("_loop", "_window_ns", "_cur_ns", "_grow_start_ns", "_last", "_spinning", "spins",
                 "single_cpu")

    def __init__(self, loop: asyncio.AbstractEventLoop, window_us: int = 0) -> None:
        self._loop = loop
        self._spinning = False
        self.spins = 0  # loop turns spent spinning (for tests and stats)
        self.single_cpu = available_cpus() < 2
        self.window_us = window_us  # sets the ceiling (_window_ns), the window in use (_cur_ns) and the rest

    @property
    def window_us(self) -> int:
        """The ceiling of the window (the configured value; 0 with a single CPU)."""
        return self._window_ns // 1000

    @window_us.setter
    def window_us(self, value: int) -> None:
        value = checked_window_us(value)
        self._window_ns = 0 if self.single_cpu else value * 1000  # the ceiling
        self._cur_ns = self._window_ns  # the window in use: a new ceiling starts in full (the gaps adapt it)
        self._grow_start_ns = self._window_ns // 8
        self._last = 0

    @property
    def current_window_us(self) -> int:
        """The window in use now (adapted to the recent gaps between touches)."""
        return self._cur_ns // 1000

    @property
    def active(self) -> bool:
        """Whether spinning is on (a window, more than one CPU)."""
        return self._window_ns > 0

    @property
    def spinning(self) -> bool:
        return self._spinning

    def touch(self) -> None:
        """Activity of our own (a write): keep the loop polling for the current window."""
        if self._window_ns:
            self._last = _now_ns()
            if not self._spinning and self._cur_ns:
                self._spinning = True
                self._loop.call_soon(self._spin)

    def touch_read(self) -> None:
        """A read: adapt the window to the gap since the last activity, then keep the loop polling.
        Only reads adapt it: a peer's frame is what a sleeping loop has to be woken for, while the gap
        before one of our writes is our own work."""
        if self._window_ns:
            now = _now_ns()
            gap = now - self._last
            self._last = now
            cur = self._cur_ns
            if gap > cur and gap != now:  # (not the first touch: _last starts at 0)
                # The loop slept (or would have) before this read: a gap past the ceiling means the spin
                # was wasted, one within it a wake-up that a longer window would have saved.
                cur = self._cur_ns = (
                    0 if gap > self._window_ns else min(self._window_ns, max(cur * 2, self._grow_start_ns))
                )
            if not self._spinning and cur:
                self._spinning = True
                self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        # One loop turn: while this callback is ready again, the loop polls without sleeping.
        if _now_ns() - self._last < self._cur_ns:
            self.spins += 1
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False

    def close(self) -> None:
        """Stop spinning (the pending turn finds the window closed)."""
        self._window_ns = self._cur_ns = 0
