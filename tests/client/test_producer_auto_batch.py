"""Producer(auto_batch=True) against a real NameServer and two real brokers: single sends gathered into
SEND_BATCH_MESSAGE requests, each caller still answered with its own message's result."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import (
    Admin,
    InvalidMessageError,
    Message,
    MQClientError,
    NotStartedError,
    Producer,
    SendResult,
    SendStatus,
)
from tests.client.conftest import RealCluster
from tests.client.test_producer_real import eventually, make_topic

BODY = b"b" * 1024


def runs_of_one_queue(results: list[SendResult]) -> list[list[SendResult]]:
    """Consecutive results that landed in one queue at consecutive offsets (what one batch gives)."""
    runs: list[list[SendResult]] = []
    for r in results:
        last = runs[-1][-1] if runs else None
        if last is not None and last.queue == r.queue and last.queue_offset + 1 == r.queue_offset:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


async def with_topic(cluster: RealCluster, topic: str) -> str:
    """`topic` made on both brokers of `cluster`; returns the NameServer address."""
    async with Admin(cluster.namesrv_addr) as admin:
        await make_topic(admin, topic)
    return cluster.namesrv_addr


async def test_a_burst_goes_as_batches_and_each_send_gets_its_own_result(
    real_cluster: RealCluster, topic: str
) -> None:
    ns = real_cluster.namesrv_addr
    async with Admin(ns) as admin:
        await make_topic(admin, topic)
        async with Producer("pg_ab", ns, auto_batch=True, batch_max_bytes=8 * 1024) as p:
            msgs = [Message(topic, BODY + b"%d" % i, tags=f"T{i % 3}", keys=[f"ab-{topic}-{i}"]) for i in range(40)]
            results = await asyncio.gather(*(p.send_async(m) for m in msgs))
        async with Producer("pg_plain", ns) as plain:
            control = await asyncio.gather(*(plain.send_async(Message(topic, BODY)) for _ in range(16)))

        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert [r.msg_id for r in results] == [m.uniq_id for m in msgs]
        assert len({r.offset_msg_id for r in results}) == 40
        # Each batch holds what fits in 8 KiB (7 bodies of 1 KiB plus their properties: the 8th starts the
        # next), in one queue at consecutive offsets; single sends go round the 8 queues one by one.
        runs = runs_of_one_queue(results)
        assert [len(run) for run in runs] == [7, 7, 7, 7, 7, 5], [len(run) for run in runs]
        assert max(len(run) for run in runs_of_one_queue(control)) == 1

        for i in (0, 6, 7, 39):
            r = results[i]
            stored = await admin.view_message(r.offset_msg_id)
            assert stored.body == BODY + b"%d" % i and stored.tags == f"T{i % 3}"
            assert stored.keys == f"ab-{topic}-{i}" and stored.uniq_key == r.msg_id
            assert (stored.queue_id, stored.queue_offset) == (r.queue.queue_id, r.queue_offset)
        found = await eventually(
            lambda: admin.query_message_by_key(topic, f"ab-{topic}-13"), lambda v: len(v) == 1
        )
        assert found[0].uniq_key == results[13].msg_id


async def test_concurrent_sync_sends_share_a_batch(real_cluster: RealCluster, topic: str) -> None:
    ns = await with_topic(real_cluster, topic)
    async with Producer("pg_ab_sync", ns, auto_batch=True) as p:
        results = await asyncio.gather(*(p.send(Message(topic, BODY)) for _ in range(10)))
        lone = await p.send(Message(topic, BODY))
    assert [len(run) for run in runs_of_one_queue(results)] == [10]
    assert lone.status is SendStatus.SEND_OK and lone.transaction_id == lone.msg_id  # a batch of one goes singly


async def test_sends_to_a_chosen_queue_are_batched_per_queue(real_cluster: RealCluster, topic: str) -> None:
    ns = await with_topic(real_cluster, topic)
    async with Producer("pg_ab_queue", ns, auto_batch=True) as p:
        mqs = (await p.fetch_publish_message_queues(topic))[:2]
        futs = [p.send_async(Message(topic, BODY), queue=mqs[i % 2]) for i in range(10)]
        results = await asyncio.gather(*futs)
    for k, mq in enumerate(mqs):
        mine = results[k::2]
        assert all(r.queue == mq for r in mine)
        assert [r.queue_offset - mine[0].queue_offset for r in mine] == [0, 1, 2, 3, 4]


async def test_what_cannot_be_batched_is_sent_singly_and_a_bad_message_fails_alone(
    real_cluster: RealCluster, topic: str
) -> None:
    ns = await with_topic(real_cluster, topic)
    async with Producer("pg_ab_mixed", ns, auto_batch=True, batch_max_bytes=2 * 1024 * 1024) as p:
        plain = [p.send_async(Message(topic, BODY)) for _ in range(3)]
        delayed = p.send_async(Message(topic, BODY, delay_level=1))
        big = p.send_async(Message(topic, b"z" * 8192))  # compressed: sent singly
        empty = p.send_async(Message(topic, b""))
        acc = p.accumulator
        assert acc is not None and acc.pending == 3  # only the plain ones wait for the batch
        # Properties past RocketMQ's 32 767-byte limit make the batch's encoding fail: every message of it
        # is then sent on its own, and only that one fails.
        huge = p.send_async(Message(topic, BODY, properties={"big": "v" * 33_000}))
        more = [p.send_async(Message(topic, BODY)) for _ in range(2)]
        assert acc.pending == 6
        results = await asyncio.gather(*plain, *more)
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert (await delayed).status is SendStatus.SEND_OK
        assert (await big).status is SendStatus.SEND_OK
        with pytest.raises(InvalidMessageError):
            await empty
        with pytest.raises(Exception, match="propert"):
            await huge
        assert max(len(run) for run in runs_of_one_queue(results)) == 1  # the refused batch went singly


async def test_batch_max_delay_holds_a_batch_open(real_cluster: RealCluster, topic: str) -> None:
    ns = await with_topic(real_cluster, topic)
    async with Producer("pg_ab_delay", ns, auto_batch=True, batch_max_delay_ms=300) as p:
        t0 = time.monotonic()
        first = p.send_async(Message(topic, BODY))
        await asyncio.sleep(0.1)
        assert not first.done() and p.accumulator is not None and p.accumulator.pending == 1
        second = p.send_async(Message(topic, BODY))
        r1, r2 = await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert time.monotonic() - t0 >= 0.25
        assert r1.queue == r2.queue and r2.queue_offset == r1.queue_offset + 1


async def test_shutdown_sends_what_was_gathered_and_refuses_new_sends(real_cluster: RealCluster, topic: str) -> None:
    ns = await with_topic(real_cluster, topic)
    for auto_batch in (True, False):
        # A fresh producer: no route and no connection yet, so every send takes the slow path and is still
        # preparing when shutdown starts; shutdown waits for them instead of failing them.
        p = Producer(f"pg_ab_stop_{auto_batch}", ns, auto_batch=auto_batch, batch_max_delay_ms=10_000)
        await p.start()
        futs = [p.send_async(Message(topic, BODY)) for _ in range(5)]
        stopping = asyncio.ensure_future(p.shutdown())
        await asyncio.sleep(0)  # shutdown runs to its wait for the sends in flight
        late = p.send_async(Message(topic, BODY))
        with pytest.raises(NotStartedError, match="shutting down"):
            await late
        with pytest.raises(NotStartedError, match="shutting down"):
            await p.send(Message(topic, BODY))
        await asyncio.wait_for(stopping, 10)
        assert all(f.done() and f.result().status is SendStatus.SEND_OK for f in futs), auto_batch
        with pytest.raises(NotStartedError, match="not running"):
            await p.send(Message(topic, BODY))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"batch_max_bytes": 0}, "batch_max_bytes"),
        ({"batch_max_bytes": 3 * 1024 * 1024}, "batch_max_bytes"),
        ({"batch_max_delay_ms": -1}, "batch_max_delay_ms"),
        ({"batch_max_delay_ms": 30_001}, "batch_max_delay_ms"),
        ({"total_batch_max_bytes": 0}, "total_batch_max_bytes"),
    ],
)
def test_bad_batch_settings_are_refused_by_name(kwargs: dict[str, int], name: str) -> None:
    with pytest.raises(MQClientError, match=name):
        Producer("pg_ab_bad", "127.0.0.1:1", auto_batch=True, **kwargs)


async def test_batches_to_a_dead_broker_are_retried_on_the_live_one(own_cluster: RealCluster, topic: str) -> None:
    ns = own_cluster.namesrv_addr
    async with Admin(ns) as admin, Producer("pg_ab_failover", ns, auto_batch=True) as p:
        await make_topic(admin, topic)
        mqs = await p.fetch_publish_message_queues(topic)
        assert {mq.broker_name for mq in mqs} == {"broker-a", "broker-b"}
        # Both brokers connected and answering (a batch to each: a chosen queue is batched per queue).
        before = await asyncio.gather(*(p.send_async(Message(topic, BODY), queue=mq) for mq in mqs for _ in range(2)))
        assert {r.queue.broker_name for r in before} == {"broker-a", "broker-b"}
        own_cluster.daemons["broker-b"].kill()  # the producer's cached route still has it
        after: list[SendResult] = []
        # Five bursts, one batch each, to five consecutive queues of the 8 (4 a broker): at least one batch
        # goes to broker-b first and is retried.
        for _ in range(5):
            after += await asyncio.wait_for(
                asyncio.gather(*(p.send_async(Message(topic, BODY)) for _ in range(20))), 15
            )
        assert all(r.status is SendStatus.SEND_OK for r in after)
        assert {r.queue.broker_name for r in after} == {"broker-a"}
        assert len({r.msg_id for r in after}) == 100


async def test_a_lone_sends_future_follows_its_send_and_cancelling_it_cancels_the_send() -> None:
    """A batch of one goes out as a single send chained into the caller's future: its outcome is copied, and
    the caller cancelling its future cancels the send (its retries stop), as with a plain send_async."""
    from client.producer.accumulator import chain_send

    loop = asyncio.get_running_loop()
    out, src = loop.create_future(), loop.create_future()
    chain_send(out, src, mark_retrieved=True)
    out.cancel()
    await asyncio.sleep(0)
    assert src.cancelled()
    for outcome in ("result", "error", "cancel"):
        out, src = loop.create_future(), loop.create_future()
        chain_send(out, src, mark_retrieved=True)
        if outcome == "result":
            src.set_result("sent")
        elif outcome == "error":
            src.set_exception(RuntimeError("refused"))
        else:
            src.cancel()
        await asyncio.sleep(0)
        if outcome == "result":
            assert out.result() == "sent"
        elif outcome == "error":
            with pytest.raises(RuntimeError, match="refused"):
                out.result()
        else:
            assert out.cancelled()
