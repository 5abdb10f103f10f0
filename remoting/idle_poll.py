"""Idle polling: keep an event loop turning for a short while after socket activity instead of letting
it sleep at once (the reactor "idle poll" of Seastar, which Redpanda runs with).

A loop with nothing to do sleeps in epoll_wait. The next frame then has to wake it, and on a virtual
machine that wake-up is dear: the sender's write pays for an inter-processor interrupt, the halted vCPU
has to be resumed by the host, and the woken process starts with cold caches. Measured on our 2-vCPU
benchmark VM for a sync send (one request, one answer, repeated), of a 162 us round trip the two
wake-ups took ~48 us and the two writes ~40 us, the Python work of client and broker ~70 us.

While an IdlePoller spins, the loop has a ready callback, so it polls with a zero time-out: a frame
that arrives is read at the next turn, a few microseconds later, and nobody has to be woken. The spin
ends `window_us` after the last touch() (a read or a write), so an idle process sleeps as before and
a busy one never spins (it always has work). The price is CPU: up to `window_us` of it after each burst
of activity, i.e. a broker serving one sync sender keeps its core busy.
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


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


class IdlePoller:
    """Spins `loop` for `window_us` microseconds after each touch(); 0 turns it off. With a single CPU
    spinning would only take it from the peer we are waiting for, so it stays off there."""

    __slots__ = ("_loop", "_window_ns", "_last", "_spinning", "spins", "single_cpu")

    def __init__(self, loop: asyncio.AbstractEventLoop, window_us: int = 0) -> None:
        self._loop = loop
        self._window_ns = 0
        self._last = 0
        self._spinning = False
        self.spins = 0  # loop turns spent spinning (for tests and stats)
        self.single_cpu = available_cpus() < 2
        self.window_us = window_us

    @property
    def window_us(self) -> int:
        return self._window_ns // 1000

    @window_us.setter
    def window_us(self, value: int) -> None:
        self._window_ns = 0 if self.single_cpu else checked_window_us(value) * 1000

    @property
    def active(self) -> bool:
        """Whether spinning is on (a window, more than one CPU)."""
        return self._window_ns > 0

    @property
    def spinning(self) -> bool:
        return self._spinning

    def touch(self) -> None:
        """Socket activity: keep the loop polling for the next window."""
        if self._window_ns:
            self._last = _now_ns()
            if not self._spinning:
                self._spinning = True
                self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        # One loop turn: while this callback is ready again, the loop polls without sleeping.
        if _now_ns() - self._last < self._window_ns:
            self.spins += 1
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False

    def close(self) -> None:
        """Stop spinning (the pending turn finds the window closed)."""
        self._window_ns = 0
