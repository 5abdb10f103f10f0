"""The blocking facade hands work to the client loop thread in call order, many calls per wake-up of the
loop, and chains the asyncio future each returns without a Task: results, errors and cancellation as
run_coroutine_threadsafe gave them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from client import Message, SendStatus
from client import sync as blocking
from client.errors import InvalidMessageError
from client.sync import LoopThread
from tests.client.conftest import RealCluster


class CountingLoopThread(LoopThread):
    def __init__(self) -> None:
        self.drains = 0
        super().__init__(name="test-hand-off-loop")

    def _drain(self) -> None:
        self.drains += 1
        super()._drain()


@pytest.fixture
def runner() -> Iterator[CountingLoopThread]:
    r = CountingLoopThread()
    try:
        yield r
    finally:
        r.stop()


def _hold_the_loop(runner: LoopThread) -> threading.Event:
    """Keep the loop thread busy (blocked in a callback) until the returned event is set."""
    held, release = threading.Event(), threading.Event()

    def block() -> None:
        held.set()
        release.wait(10)

    runner.loop.call_soon_threadsafe(block)
    assert held.wait(10)
    return release


def _resolved_later(loop: asyncio.AbstractEventLoop, value: Any) -> asyncio.Future[Any]:
    fut = loop.create_future()
    loop.call_soon(fut.set_result, value)
    return fut


def test_calls_made_while_the_loop_is_busy_go_over_in_one_wake_up_in_call_order(runner: CountingLoopThread) -> None:
    loop = runner.loop
    started: list[int] = []

    def begin(k: int) -> asyncio.Future[Any]:
        started.append(k)
        return _resolved_later(loop, k * 10)

    release = _hold_the_loop(runner)
    futs = [runner.start_future(lambda k=k: begin(k)) for k in range(200)]
    release.set()
    assert [f.result(10) for f in futs] == [k * 10 for k in range(200)]
    assert started == list(range(200))
    assert runner.drains == 1


def test_a_coroutine_runs_as_a_task_and_errors_reach_the_caller(runner: CountingLoopThread) -> None:
    async def coro() -> str:
        await asyncio.sleep(0)
        return "done"

    def boom() -> asyncio.Future[Any]:
        raise ValueError("bad request")

    async def fails() -> None:
        raise KeyError("later")

    assert runner.start_future(coro).result(10) == "done"
    with pytest.raises(ValueError, match="bad request"):
        runner.start_future(boom).result(10)
    with pytest.raises(KeyError, match="later"):
        runner.start_future(fails).result(10)


def test_cancel_before_the_start_starts_nothing_and_after_it_cancels_the_work(runner: CountingLoopThread) -> None:
    loop = runner.loop
    begun = threading.Event()
    release = _hold_the_loop(runner)
    early = runner.start_future(lambda: begun.set())  # (would fail: not a future; never called)
    assert early.cancel()
    release.set()
    with pytest.raises(concurrent.futures.CancelledError):
        early.result(10)

    pending: list[asyncio.Future[Any]] = []
    cancelled = threading.Event()

    def never() -> asyncio.Future[Any]:
        fut = loop.create_future()
        fut.add_done_callback(lambda f: cancelled.set() if f.cancelled() else None)
        pending.append(fut)
        return fut

    late = runner.start_future(never)
    deadline = time.monotonic() + 10
    while not pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert late.cancel()
    assert cancelled.wait(10)
    assert not begun.is_set()

    # Work the loop cancels (its shutdown, say) cancels the caller's future too.
    gone = runner.start_future(never)
    while len(pending) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.call_soon_threadsafe(pending[1].cancel)
    with pytest.raises(concurrent.futures.CancelledError):
        gone.result(10)


def test_a_stopped_loop_thread_refuses_new_calls_every_time(runner: CountingLoopThread) -> None:
    runner.stop()
    deadline = time.monotonic() + 10
    while not runner.loop.is_closed() and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(2):  # (the second call is refused too: no drain is left marked as scheduled)
        with pytest.raises(RuntimeError):
            runner.start_future(lambda: None)


def test_blocking_pipelined_sends_from_threads_keep_each_threads_order(real_cluster: RealCluster, topic: str) -> None:
    with blocking.Admin(real_cluster.namesrv_addr) as admin:
        admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=4, write_queue_nums=4)
    per_thread: dict[int, list[concurrent.futures.Future[Any]]] = {}
    with blocking.Producer("pg_hand_off", real_cluster.namesrv_addr) as p:
        p.send(Message(topic, b"warm"))

        def worker(n: int) -> None:
            per_thread[n] = [p.send_async(Message(topic, b"%d-%d" % (n, i))) for i in range(300)]

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for futs in per_thread.values():
            offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
            for f in futs:
                r = f.result(30)
                assert r.status is SendStatus.SEND_OK
                offsets[(r.message_queue.broker_name, r.message_queue.queue_id)].append(r.queue_offset)
            assert all(o == sorted(o) for o in offsets.values())  # each thread's sends went out in its order
        # A blocking send of an invalid message raises as it did (nothing sent).
        with pytest.raises(InvalidMessageError):
            p.send(Message(topic, b""))
        r = p.send(Message(topic, b"after"))
        assert r.status is SendStatus.SEND_OK
