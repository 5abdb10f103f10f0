"""The consumers' shutdown: work a consumer already accepted -- a listener call under way, a poll()'s
messages -- is finished (bounded) and its outcome committed or sent back, not refused or dropped because
the state already says "shut down" (the class of the producer's old shutdown bug); and a listener may ask
for shutdown itself. Real NameServer + brokers (tests/consumer/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from client import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    LitePullConsumer,
    PushConsumer,
)
from client.instance import MQClientInstance, get_client_manager
from client.message import MessageQueue
from client.reader import QueueReader
from tests.consumer.conftest import ConsumerCluster, create_topic, send_to_queues, wait_until

SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER

@pytest.fixture
def cluster(mq_cluster: ConsumerCluster) -> ConsumerCluster:
    return mq_cluster


def push_consumer(cluster: ConsumerCluster, group: str, instance: str, **kwargs: Any) -> PushConsumer:
    """A push consumer of `group` from the first offset."""
    return PushConsumer(group, cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                        instance_name=instance, **kwargs)


async def start_consuming(c: PushConsumer, topic: str, listener: Any, *, orderly: bool = False) -> None:
    c.subscribe(topic)
    if orderly:
        c.register_orderly_listener(listener)
    else:
        c.register_listener(listener)
    await c.start()


async def committed(cluster: ConsumerCluster, group: str, mq: MessageQueue) -> int | None:
    reader = await QueueReader.create(cluster.namesrv_addr)
    try:
        return await reader.committed_offset(group, mq)
    finally:
        await reader.close()


async def bodies_seen_by_new_consumer(
    cluster: ConsumerCluster, group: str, mq: MessageQueue, names: Callable[[str], str], expect: tuple[bytes, int] | None = None
) -> list[tuple[bytes, int]]:
    """Start a fresh consumer of `group` (from the first offset when nothing is committed), send a
    marker, return (body, reconsume_times) of everything it gets until the marker (+0.5 s), or
    until `expect` arrives (at most 15 s more)."""
    got: list[tuple[bytes, int]] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        got.extend((m.body, m.reconsume_times) for m in msgs)
        return SUCCESS

    c = push_consumer(cluster, group, names("I2"), rebalance_interval=1)
    await start_consuming(c, mq.topic, listener)
    try:
        marker = (await send_to_queues(cluster.namesrv_addr, [mq], 1, prefix="marker"))[0]
        await wait_until(lambda: any(b == marker for b, _ in got), 20, "the marker")
        await asyncio.sleep(0.5)
        if expect is not None:
            with contextlib.suppress(AssertionError):
                await wait_until(lambda: expect in got, 15, f"{expect}")
        return [g for g in got if g[0] != marker]
    finally:
        await c.shutdown()


# ------------------------------------------------------------------ push: listener calls under way
@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_push_shutdown_waits_for_running_listener_and_commits(cluster: ConsumerCluster, names: Callable[[str], str], kind: str) -> None:
    topic, group = names("T"), names("G")
    [mq] = await create_topic(cluster, topic, 1)
    sent = await send_to_queues(cluster.namesrv_addr, [mq], 3)
    started: list[bytes] = []
    finished: list[bytes] = []

    if kind == "async":
        async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
            started.extend(m.body for m in msgs)
            await asyncio.sleep(0.3)
            finished.extend(m.body for m in msgs)
            return SUCCESS
    else:
        def listener(msgs, ctx):  # type: ignore[no-untyped-def]
            started.extend(m.body for m in msgs)
            time.sleep(0.3)
            finished.extend(m.body for m in msgs)
            return SUCCESS

    c = push_consumer(cluster, group, names("I"))
    await start_consuming(c, topic, listener)
    await wait_until(lambda: len(started) == 3, 15, "all 3 listener calls running")
    assert not finished
    t0 = time.monotonic()
    await c.shutdown()
    assert time.monotonic() - t0 >= 0.15  # it waited for the running calls
    assert sorted(finished) == sorted(sent)
    assert await committed(cluster, group, mq) == 3
    assert await bodies_seen_by_new_consumer(cluster, group, mq, names) == []


async def test_push_reconsume_later_during_shutdown_is_sent_back(cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic, group = names("T"), names("G")
    [mq] = await create_topic(cluster, topic, 1)
    [body] = await send_to_queues(cluster.namesrv_addr, [mq], 1)
    started = asyncio.Event()

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.sleep(0.3)
        return LATER

    c = push_consumer(cluster, group, names("I"))
    await start_consuming(c, topic, listener)
    await asyncio.wait_for(started.wait(), 15)
    await c.shutdown()
    assert await committed(cluster, group, mq) == 1  # past it: it lives on in %RETRY%<group>
    seen = await bodies_seen_by_new_consumer(cluster, group, mq, names, expect=(body, 1))
    assert seen == [(body, 1)]


async def test_push_orderly_shutdown_waits_for_running_listener_and_commits(cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic, group = names("T"), names("G")
    [mq] = await create_topic(cluster, topic, 1)
    await send_to_queues(cluster.namesrv_addr, [mq], 2)
    started = asyncio.Event()
    finished: list[int] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.sleep(0.3)
        finished.extend(m.queue_offset for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    c = push_consumer(cluster, group, names("I"))
    await start_consuming(c, topic, listener, orderly=True)
    await asyncio.wait_for(started.wait(), 15)
    await c.shutdown()
    assert finished and finished[0] == 0
    assert await committed(cluster, group, mq) == max(finished) + 1


# ------------------------------------------------------------------ push: shutdown asked for by a listener
async def test_push_shutdown_started_from_listener_still_finishes_that_listener(
    cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """`asyncio.create_task(consumer.shutdown())` from an async listener ("stop after this one"):
    the listener call is already running (started inline by _consume_now, handed to a worker as a
    _Started) -- shutdown must let it finish and commit it, not abandon it half-way."""
    topic, group = names("T"), names("G")
    [mq] = await create_topic(cluster, topic, 1)
    finished: list[bytes] = []
    tasks: list[asyncio.Task[None]] = []

    c = push_consumer(cluster, group, names("I"))

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        if not tasks:
            tasks.append(asyncio.get_running_loop().create_task(c.shutdown()))
        await asyncio.sleep(0.3)
        finished.extend(m.body for m in msgs)
        return SUCCESS

    await start_consuming(c, topic, listener)
    await wait_until(lambda: mq in c.assigned_queues(), 15, "assignment")
    await asyncio.sleep(0.3)  # steady state: the pull is held by the broker, workers idle
    [body] = await send_to_queues(cluster.namesrv_addr, [mq], 1)
    await wait_until(lambda: bool(tasks), 15, "the listener call")
    await asyncio.wait_for(tasks[0], 15)
    await asyncio.sleep(0.5)
    assert finished == [body], "the running listener call was abandoned by shutdown"
    assert await committed(cluster, group, mq) == 1


@pytest.mark.parametrize("where", ["inline", "worker"])
async def test_push_shutdown_awaited_inside_listener_completes(cluster: ConsumerCluster, names: Callable[[str], str], where: str) -> None:
    """`await consumer.shutdown()` inside an async listener ("stop after this message").

    inline: the listener's first step runs inside _consume_now (pull answer path); shutdown sets
    `stopped` and queues the None sentinels, then suspends -- and only then is the suspended call
    queued as a _Started, behind the sentinels: every worker exits on its None, nobody resumes the
    call, so shutdown never returns and holds _start_lock forever (a 2nd shutdown() hangs too).
    worker: the call runs in a worker; shutdown waits for all workers, itself included, then
    cancels them -- itself -- so shutdown ends in CancelledError before persisting offsets,
    unregistering and releasing the client instance."""
    topic, group = names("T"), names("G")
    [mq] = await create_topic(cluster, topic, 1)
    await send_to_queues(cluster.namesrv_addr, [mq], 1)
    outcome: list[str] = []
    insts: list[MQClientInstance] = []
    c = push_consumer(cluster, group, names("I"), await_termination_millis_when_shutdown=300)

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        if not outcome:
            outcome.append("called")
            insts.append(c.instance)
            if where == "worker":
                await asyncio.sleep(0)  # suspended once: a worker drives the rest of the call
            try:
                await c.shutdown()
                outcome.append("returned")
            except BaseException as e:
                outcome.append(type(e).__name__)
                raise
        return SUCCESS

    await start_consuming(c, topic, listener)
    await wait_until(lambda: bool(insts), 15, "the listener call")
    inst = insts[0]
    try:
        with contextlib.suppress(AssertionError):
            await wait_until(lambda: len(outcome) > 1, 5, "shutdown() inside the listener to end")
        second_shutdown_hangs = False
        try:
            await asyncio.wait_for(c.shutdown(), 3)
        except TimeoutError:
            second_shutdown_hangs = True
        state = dict(outcome=outcome, second_shutdown_hangs=second_shutdown_hangs,
                     instance_closed=inst.closed, group_still_registered=group in inst.consumer_table)
        assert state == dict(outcome=["called", "returned"], second_shutdown_hangs=False,
                             instance_closed=True, group_still_registered=False)
    finally:
        if not inst.closed:  # clean up what the broken shutdown leaked
            if group in inst.consumer_table:
                await inst.unregister_consumer(group)
            await get_client_manager().release(inst)


# ------------------------------------------------------------------ lite pull
async def test_lite_pull_shutdown_commits_polled_and_ends_running_poll(cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic, group = names("T"), names("G")
    [mq] = await create_topic(cluster, topic, 1)
    sent = await send_to_queues(cluster.namesrv_addr, [mq], 5)
    c = LitePullConsumer(group, cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         auto_commit=True, instance_name=names("I"))
    c.assign([mq])
    await c.start()
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(got) < 5 and time.monotonic() < deadline:
        got += [m.body for m in await c.poll(0.5)]
    assert sorted(got) == sorted(sent)
    running_poll = asyncio.get_running_loop().create_task(c.poll(20))
    await asyncio.sleep(0.2)
    assert not running_poll.done()
    await c.shutdown()
    assert await asyncio.wait_for(running_poll, 2) == []
    assert await committed(cluster, group, mq) == 5
