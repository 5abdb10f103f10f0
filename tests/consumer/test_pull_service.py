"""PullMessageService: the callback-driven pull loop (start_pull / pull_done) and its async fallback."""

from __future__ import annotations

import asyncio
from typing import Any

from client.consumer.process_queue import ProcessQueue
from client.consumer.pull_service import PULL_ASYNC, PULL_SENT, PullMessageService, PullRequest
from client.message import MessageQueue


def request(qid: int = 0) -> PullRequest:
    return PullRequest("G", MessageQueue("T", "b", qid), ProcessQueue(), 0)


async def test_next_pull_goes_out_from_the_answer_callback_in_the_same_loop_turn() -> None:
    starts: list[PullRequest] = []

    async def pull_once(req: PullRequest) -> float | None:  # never used: every start is synchronous
        raise AssertionError("async path used")

    def start_pull(req: PullRequest) -> Any:
        starts.append(req)
        return PULL_SENT

    svc = PullMessageService(pull_once, start_pull=start_pull)
    req = request()
    svc.execute_pull_request_immediately(req)
    await asyncio.sleep(0)
    assert starts == [req] and svc.is_current(req)
    for n in range(2, 6):
        svc.pull_done(req, 0.0)  # the answer of the pull in flight: the next one starts right here
        assert len(starts) == n
    assert svc.running_queues() == [req.message_queue]
    await svc.shutdown()


async def test_answer_of_a_stopped_or_replaced_loop_is_ignored() -> None:
    starts: list[PullRequest] = []
    svc = PullMessageService(lambda r: asyncio.sleep(0), start_pull=lambda r: starts.append(r) or PULL_SENT)
    old = request()
    svc.execute_pull_request_immediately(old)
    await asyncio.sleep(0)
    new = PullRequest("G", old.message_queue, ProcessQueue(), 5)
    svc.execute_pull_request_immediately(new)  # replaces the queue's loop while `old` is in flight
    await asyncio.sleep(0)
    assert not svc.is_current(old) and svc.is_current(new)
    svc.pull_done(old, 0.0)
    assert starts == [old, new]
    svc.stop_queue(new.message_queue)
    svc.pull_done(new, 0.0)
    assert starts == [old, new] and svc.running_queues() == []
    await svc.shutdown()


async def test_delays_none_and_dropped_queues_end_or_pause_the_loop() -> None:
    starts: list[float] = []
    loop = asyncio.get_running_loop()
    svc = PullMessageService(lambda r: asyncio.sleep(0), start_pull=lambda r: starts.append(loop.time()) or PULL_SENT)
    req = request()
    svc.execute_pull_request_immediately(req)
    await asyncio.sleep(0)
    svc.pull_done(req, 0.05)  # flow control: the next pull after 50 ms
    assert len(starts) == 1
    await asyncio.sleep(0.1)
    assert len(starts) == 2 and starts[1] - starts[0] >= 0.04
    req.process_queue.dropped = True
    svc.pull_done(req, 0.0)
    assert len(starts) == 2 and svc.running_queues() == []
    req2 = request(1)
    svc.execute_pull_request_immediately(req2)
    await asyncio.sleep(0)
    svc.pull_done(req2, None)  # None: the loop ends
    assert svc.running_queues() == []
    await svc.shutdown()


async def test_synchronous_no_send_does_not_spin_inside_one_callback() -> None:
    calls = 0

    def start_pull(req: PullRequest) -> Any:
        nonlocal calls
        calls += 1
        return 0.0  # decided at once, nothing sent: the next step must wait for a loop turn

    svc = PullMessageService(lambda r: asyncio.sleep(0), start_pull=start_pull)
    svc.execute_pull_request_immediately(request())
    for _ in range(5):
        await asyncio.sleep(0)
    assert 1 <= calls <= 6
    await svc.shutdown()


async def test_async_fallback_runs_pull_once_then_returns_to_the_callback_path() -> None:
    seen: list[str] = []
    gate = asyncio.Event()

    async def pull_once(req: PullRequest) -> float | None:
        seen.append("async")
        await gate.wait()  # e.g. connecting to the broker
        return 0.0

    def start_pull(req: PullRequest) -> Any:
        if not seen:
            return PULL_ASYNC
        seen.append("sent")
        return PULL_SENT

    svc = PullMessageService(pull_once, start_pull=start_pull)
    svc.execute_pull_request_immediately(request())
    await asyncio.sleep(0.01)
    assert seen == ["async"]
    gate.set()
    await asyncio.sleep(0.01)
    assert seen == ["async", "sent"]
    await svc.shutdown()


async def test_without_start_pull_one_task_runs_the_whole_loop() -> None:
    pulls = 0
    tasks: set[asyncio.Task[Any] | None] = set()

    async def pull_once(req: PullRequest) -> float | None:
        nonlocal pulls
        pulls += 1
        tasks.add(asyncio.current_task())
        await asyncio.sleep(0)
        return 0.0 if pulls < 50 else None

    svc = PullMessageService(pull_once)
    svc.execute_pull_request_immediately(request())
    for _ in range(200):
        await asyncio.sleep(0)
        if pulls >= 50:
            break
    assert pulls == 50 and len(tasks) == 1
    await asyncio.sleep(0)
    assert svc.running_queues() == []
    await svc.shutdown()
