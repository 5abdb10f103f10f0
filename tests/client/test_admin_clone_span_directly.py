"""Admin.clone_group_offset / query_consume_time_span / consume_message_directly and the mqadmin
subcommands on top of them (cloneGroupOffset, queryMsgById -g -d), against real daemons."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from client import Admin, ConsumeConcurrentlyStatus, MessageQueue, MQBrokerError, PushConsumer
from client import sync as blocking
from tests.client.conftest import RealCluster
from tests.client.test_mqadmin import fails, ok


async def wait_for(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def offsets_of(progress: dict[str, Any]) -> dict[tuple[str, str, int], int]:
    return {
        (q["queue"]["topic"], q["queue"]["brokerName"], q["queue"]["queueId"]): q["consumer_offset"]
        for q in progress["queues"]
    }


# ---------------------------------------------------------------------------------------- clone


async def test_clone_group_offset(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    other = f"{topic}_b"
    src = f"GS_{topic}"
    want = {
        (topic, "broker-a", 0): 3,
        (topic, "broker-a", 1): 1,
        (topic, "broker-b", 0): 2,
        (other, "broker-b", 1): 5,
    }
    async with Admin(n) as admin:
        for t in (topic, other):
            await admin.create_topic(t, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
        for (t, b, q), off in want.items():
            await admin.update_consume_offset(src, MessageQueue(t, b, q), off)

        def committed(p: Any) -> dict[tuple[str, str, int], int]:
            return {(q.queue.topic, q.queue.broker_name, q.queue.queue_id): q.consumer_offset
                    for q in p.queues if q.consumer_offset > 0}

        addrs = await admin.clone_group_offset(src, f"GD1_{topic}", topic)
        assert sorted(addrs) == sorted(real_cluster.brokers.values())
        got = committed(await admin.consumer_progress(f"GD1_{topic}"))
        assert got == {k: v for k, v in want.items() if k[0] == topic}

        await admin.clone_group_offset(src, f"GD2_{topic}")  # blank topic: every topic of src
        assert committed(await admin.consumer_progress(f"GD2_{topic}")) == want

    # mqadmin cloneGroupOffset (RocketMQ's flags and success line), then the offsets via consumerProgress.
    out = ok("cloneGroupOffset", "-n", n, "-s", src, "-d", f"GD3_{topic}", "-t", other, "-o", "false")
    assert out.strip() == f"clone group offset success. srcGroup[{src}], destGroup=[GD3_{topic}], topic[{other}]"
    got = offsets_of(json.loads(ok("consumerProgress", "-n", n, "-g", f"GD3_{topic}", "--json")))
    assert {k: v for k, v in got.items() if v > 0} == {(other, "broker-b", 1): 5}
    js = json.loads(ok("cloneGroupOffset", "-n", n, "-s", src, "-d", f"GD4_{topic}", "-o", "true", "--json"))
    assert js["srcGroup"] == src and js["topic"] is None and js["offline"] is True and len(js["brokers"]) == 2
    got = offsets_of(json.loads(ok("consumerProgress", "-n", n, "-g", f"GD4_{topic}", "--json")))
    assert {k: v for k, v in got.items() if v > 0} == want
    assert "bad value 'maybe' for -o" in fails("cloneGroupOffset", "-n", n, "-s", src, "-d", "X", "-o", "maybe")


# ---------------------------------------------------------------------------------------- time span


def test_query_consume_time_span(real_cluster: RealCluster, topic: str) -> None:
    """Through the blocking twin (client.sync.Admin mirrors every Admin coroutine)."""
    n = real_cluster.namesrv_addr
    group = f"GT_{topic}"
    with blocking.Admin(n) as admin:
        admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
        sent = []
        for i in range(3):
            sent.append(admin.send_message(topic, f"span {i}", broker_name="broker-a", queue_id=0))
            time.sleep(0.003)
        stored = [
            admin.query_message_by_offset(topic, "broker-a", 0, r.queue_offset).store_timestamp for r in sent
        ]
        assert stored[0] < stored[1] < stored[2]
        admin.update_consume_offset(group, MessageQueue(topic, "broker-a", 0), 1)  # m0 consumed, m1/m2 not
        before = int(time.time() * 1000)
        spans = admin.query_consume_time_span(topic, group)
        after = int(time.time() * 1000)
    assert [(s.queue.broker_name, s.queue.queue_id) for s in spans] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)
    ]
    q0 = spans[0]
    assert (q0.min_timestamp, q0.max_timestamp, q0.consume_timestamp) == (stored[0], stored[2], stored[0])
    assert before - stored[1] <= q0.delay_time <= after - stored[1]
    assert all(s.min_timestamp == s.max_timestamp == -1 for s in spans[1:])  # no messages there


# ---------------------------------------------------------------------------------------- consume directly


async def test_consume_message_directly_with_a_live_push_consumer(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    group = f"GC_{topic}"
    seen: list[tuple[str, str | None]] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        for m in msgs:
            seen.append((m.body.decode(), m.tags))
            if m.body == b"boom":
                raise RuntimeError("listener exploded")
            if m.body == b"later":
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async with Admin(n) as admin:
        await admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
        consumer = PushConsumer(group, n)
        # The consumer subscribes TagA only; the messages carry TagB, so they reach the listener only
        # when pushed directly.
        consumer.subscribe(topic, "TagA")
        consumer.register_listener(listener)
        await consumer.start()
        try:
            cid = consumer.client_id

            async def online() -> bool:
                try:
                    return cid in await admin.consumer_ids(group)
                except Exception:
                    return False

            await wait_for(online, 20, "the consumer to be online")
            sent = {b: await admin.send_message(topic, b, tags="TagB") for b in ("direct", "later", "boom")}

            r = await admin.consume_message_directly(group, cid, sent["direct"].offset_msg_id)
            assert (r.consume_result, r.order, r.auto_commit) == ("CR_SUCCESS", False, True)
            assert seen == [("direct", "TagB")]
            # A UNIQ_KEY id (what the producer returned as msg_id) works with its topic.
            r = await admin.consume_message_directly(group, cid, sent["direct"].msg_id, topic)
            assert r.consume_result == "CR_SUCCESS" and len(seen) == 2
            r = await admin.consume_message_directly(group, cid, sent["later"].offset_msg_id)
            assert r.consume_result == "CR_LATER"
            r = await admin.consume_message_directly(group, cid, sent["boom"].offset_msg_id)
            assert r.consume_result == "CR_THROW_EXCEPTION" and "listener exploded" in (r.remark or "")

            with pytest.raises(MQBrokerError) as ei:
                await admin.consume_message_directly(group, "127.0.0.1@nobody", sent["direct"].offset_msg_id)
            assert f"The Consumer <{group}> <127.0.0.1@nobody> not online" in str(ei.value)

            # mqadmin queryMsgById -g -d (in a thread: this loop must keep serving the consumer).
            oid = sent["direct"].offset_msg_id
            out = await asyncio.to_thread(ok, "queryMsgById", "-n", n, "-i", oid, "-g", group, "-d", cid)
            assert "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS" in out
            js = json.loads(
                await asyncio.to_thread(ok, "queryMsgById", "-n", n, "-i", oid, "-g", group, "-d", cid, "--json")
            )
            assert js["consumeResult"] == "CR_SUCCESS"
            assert [s for s in seen if s[0] == "direct"] == [("direct", "TagB")] * 4
            line = await asyncio.to_thread(fails, "queryMsgById", "-n", n, "-i", oid, "-g", group, "-d", "nobody")
            assert line.startswith("mqadmin: ") and "not online" in line
            line = await asyncio.to_thread(fails, "queryMsgById", "-n", n, "-i", oid, "-g", group)
            assert line == "mqadmin: give both -g consumerGroup and -d clientId, or neither"
        finally:
            await consumer.shutdown()
