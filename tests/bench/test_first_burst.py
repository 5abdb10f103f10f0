"""A pipelined send whose topic route is not known yet, or whose broker has no open connection, waits
with the topic's other such sends for one route lookup and connection, then starts on the callback path
in call order: no Task per send (a fresh producer's first burst, the first burst after a reconnect).
The outcome of each send is what the attempt loop would have given: results, errors, cancellation."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from client import Admin, Message, Producer
from client.errors import NoRouteError
from client.message import SendResult, SendStatus
from tests.support.daemons import Daemon, start_namesrv

N = 400


def _offsets_follow_call_order(results: list[SendResult]) -> None:
    by_queue: dict[int, list[int]] = defaultdict(list)
    for r in results:
        assert r.status is SendStatus.SEND_OK
        by_queue[r.message_queue.queue_id].append(r.queue_offset)
    for offsets in by_queue.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def _idle(p: Producer) -> None:
    assert p._async_permits.active == 0 and not p._async_permits._waiters
    assert not p._unrouted and not p._inflight


async def test_first_burst_waits_for_one_route_lookup_without_a_task_per_send(
    cluster: tuple[str, str, Daemon],
) -> None:
    ns, broker, _d = cluster
    async with Producer("first_burst_pg", ns, max_async_inflight=128) as p:
        tasks_before = len(asyncio.all_tasks())
        futs = [p.send_async(Message("FirstBurstT", b"m%d" % i)) for i in range(N)]
        assert len(p._unrouted["FirstBurstT"]) == N
        assert len(asyncio.all_tasks()) - tasks_before <= 2  # the topic's one route task (was N)
        results = await asyncio.wait_for(asyncio.gather(*futs), 20)
        # Started in call order over one connection: each queue's offsets rise in call order.
        _offsets_follow_call_order(results)
        _idle(p)

        # The first burst after the broker connection closed waits for the new connection the same way.
        p.instance.remoting.close_connection(broker)
        tasks_before = len(asyncio.all_tasks())
        futs = [p.send_async(Message("FirstBurstT", b"r%d" % i)) for i in range(N)]
        assert len(p._unrouted["FirstBurstT"]) == N
        assert len(asyncio.all_tasks()) - tasks_before <= 2
        _offsets_follow_call_order(await asyncio.wait_for(asyncio.gather(*futs), 20))
        _idle(p)


async def test_a_send_cancelled_while_it_waits_for_the_route_is_not_sent(
    cluster: tuple[str, str, Daemon],
) -> None:
    ns, _broker, _d = cluster
    async with Admin(ns) as admin:
        await admin.create_topic("FirstBurstCancelT", cluster="DefaultCluster", read_queue_nums=4, write_queue_nums=4)
    async with Producer("first_burst_cancel_pg", ns) as p:
        futs = [p.send_async(Message("FirstBurstCancelT", b"c%d" % i)) for i in range(20)]
        assert futs[5].cancel()
        done = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 20)
        assert isinstance(done[5], asyncio.CancelledError)
        assert all(isinstance(r, SendResult) and r.status is SendStatus.SEND_OK for i, r in enumerate(done) if i != 5)
        _idle(p)
    async with Admin(ns) as admin:
        stored = [await admin.max_offset(mq) for mq in await admin.topic_queues("FirstBurstCancelT")]
    assert sum(stored) == 19


async def test_a_burst_with_no_route_fails_each_send_as_the_attempt_loop_does(tmp_path: Path) -> None:
    ns, ns_addr = start_namesrv(tmp_path)  # no broker: the NameServer knows no topic, not even TBW102
    try:
        async with Producer("first_burst_noroute_pg", ns_addr, max_async_inflight=4) as p:
            asked: list[tuple[str, bool]] = []
            inst = p.instance
            lookup = inst.update_topic_route_info_from_name_server

            async def counted(topic: str, **kw: Any) -> bool:
                asked.append((topic, kw.get("is_default", False)))
                return await lookup(topic, **kw)

            inst.update_topic_route_info_from_name_server = counted  # type: ignore[method-assign]
            futs = [p.send_async(Message("NoRouteBurstT", b"x")) for _ in range(10)]
            done = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 20)
            assert all(isinstance(e, NoRouteError) for e in done), done
            # One lookup for the burst (the topic, then the auto-create template), not one more per send
            # after it failed: with a NameServer that does not answer, each would wait its timeout again.
            assert asked == [("NoRouteBurstT", False), ("NoRouteBurstT", True)]
            _idle(p)
            # A later send to a topic that has no route fails the same way, and is not parked forever.
            with pytest.raises(NoRouteError):
                await asyncio.wait_for(p.send_async(Message("NoRouteBurstT", b"y")), 20)
            _idle(p)
    finally:
        ns.terminate()


async def test_sends_waiting_for_their_route_still_go_out_when_shutdown_begins(
    cluster: tuple[str, str, Daemon],
) -> None:
    ns, _broker, _d = cluster
    p = Producer("first_burst_shutdown_pg", ns)
    await p.start()
    futs = [p.send_async(Message("FirstBurstShutdownT", b"s%d" % i)) for i in range(50)]
    await asyncio.wait_for(p.shutdown(), 20)  # waits (bounded) for what it accepted
    assert all(f.done() and f.result().status is SendStatus.SEND_OK for f in futs)
