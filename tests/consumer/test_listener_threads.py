"""The threads a plain-function listener runs in: calls handed over in order, blocking calls side by side,
outcomes back to the loop many per wake-up, errors and cancellation as run_in_executor gave them."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from client.listener_threads import ListenerThreads


class Counting(ListenerThreads):
    delivers = 0

    def _deliver(self) -> None:
        self.delivers += 1
        super()._deliver()


async def test_outcomes_that_arrive_while_the_loop_is_busy_come_back_in_one_wake_up() -> None:
    pool = Counting(lambda msgs, ctx: [m * 2 for m in msgs], 4, "t1")
    try:
        futs = [pool.submit([k], None) for k in range(50)]
        deadline = time.monotonic() + 10
        while len(pool._outcomes) < 50 and time.monotonic() < deadline:  # the loop thread busy meanwhile
            time.sleep(0.005)
        assert await asyncio.wait_for(asyncio.gather(*futs), 10) == [[k * 2] for k in range(50)]
        assert pool.delivers == 1
        assert 1 <= pool.threads <= 4
    finally:
        pool.shutdown()


async def test_blocking_calls_run_side_by_side_up_to_the_limit() -> None:
    running = 0
    most = 0
    lock = threading.Lock()

    def slow(msgs: Any, ctx: Any) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.2)
        with lock:
            running -= 1
        return "ok"

    pool = ListenerThreads(slow, 8, "t2")
    try:
        assert await asyncio.wait_for(asyncio.gather(*(pool.submit([], None) for _ in range(16))), 10) == ["ok"] * 16
        assert most == 8 and pool.threads == 8  # eight at once, not one after another
    finally:
        pool.shutdown()


async def test_errors_reach_the_caller_and_a_cancelled_call_is_skipped() -> None:
    called: list[int] = []
    gate = threading.Event()

    def fn(msgs: list[int], ctx: Any) -> int:
        if msgs == [0]:
            gate.wait(10)
        called.append(msgs[0])
        if msgs[0] == 2:
            raise ValueError("listener failed")
        if msgs[0] == 3:
            raise KeyboardInterrupt  # a BaseException: still the call's outcome, not the thread's end
        return msgs[0]

    pool = ListenerThreads(fn, 1, "t3")
    try:
        first = pool.submit([0], None)  # holds the only thread
        skipped = pool.submit([1], None)
        fails = pool.submit([2], None)
        interrupted = pool.submit([3], None)
        after = pool.submit([4], None)
        skipped.cancel()
        gate.set()
        assert await asyncio.wait_for(first, 10) == 0
        with pytest.raises(ValueError, match="listener failed"):
            await asyncio.wait_for(fails, 10)
        with pytest.raises(KeyboardInterrupt):
            await asyncio.wait_for(interrupted, 10)
        assert await asyncio.wait_for(after, 10) == 4
        assert called == [0, 2, 3, 4]
    finally:
        pool.shutdown()


async def test_shutdown_cancels_queued_calls_lets_running_ones_finish_and_refuses_new_ones() -> None:
    gate = threading.Event()
    pool = ListenerThreads(lambda msgs, ctx: gate.wait(10) and "done", 1, "t4")
    running = pool.submit([], None)
    queued = pool.submit([], None)
    deadline = time.monotonic() + 10
    while pool._calls.qsize() != 1 and time.monotonic() < deadline:  # until the thread has taken the first call
        await asyncio.sleep(0.01)
    pool.shutdown()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(queued, 10)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit([], None)
    gate.set()
    assert await asyncio.wait_for(running, 10) == "done"
    thread = pool._threads[0]
    thread.join(10)
    assert not thread.is_alive()


async def test_callback_calls_get_their_outcomes_on_the_loop_and_queued_ones_a_cancellation_at_shutdown() -> None:
    loop_thread = threading.get_ident()
    gate = threading.Event()
    outcomes: list[tuple[Any, str | None, bool]] = []

    def done(result: Any, exc: BaseException | None) -> None:
        outcomes.append((result, type(exc).__name__ if exc else None, threading.get_ident() == loop_thread))
        if result == "boom-callback":
            raise RuntimeError("a callback's own bug")  # logged; the other outcomes still arrive

    def call(k: int) -> Any:
        if k == 0:
            gate.wait(10)
        if k == 2:
            raise ValueError("listener failed")
        return "boom-callback" if k == 3 else k * 10

    pool = ListenerThreads(None, 1, "t5")
    for k in range(4):
        pool.submit_callback(call, (k,), done)
    queued = []
    pool.submit_callback(call, (1,), lambda r, e: queued.append(type(e).__name__))
    gate.set()
    deadline = time.monotonic() + 10
    while len(outcomes) < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert outcomes == [(0, None, True), (10, None, True), (None, "ValueError", True), ("boom-callback", None, True)]
    assert queued == ["NoneType"]  # (None: no exception) it ran: shutdown had not begun

    gate.clear()
    pool.submit_callback(call, (0,), done)  # holds the one thread
    pool.submit_callback(call, (1,), lambda r, e: queued.append(type(e).__name__))
    while pool._calls.qsize() != 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    pool.shutdown()
    while len(queued) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert queued == ["NoneType", "CancelledError"]  # dropped, never called
    gate.set()
    pool._threads[0].join(10)
    assert not pool._threads[0].is_alive()
    while len(outcomes) < 5 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert outcomes[-1] == (0, None, True)  # the call under way finished and was delivered
