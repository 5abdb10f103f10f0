"""Consumer retry and dead-letter queues against a real broker and NameServer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from remoting.codes import ResponseCode
from remoting.message import PermName
from tests.broker_delivery.conftest import DeliveryCluster
from tests.broker_delivery.support import DELAY_MS, SCHEDULE_TOPIC, Wire, message_props, now_ms, until
from tests.support.daemons import start_broker, start_namesrv

RW = PermName.PERM_READ | PermName.PERM_WRITE


async def route_queues(wire: Wire, topic: str) -> list[tuple[str, int, int]] | None:
    route = await wire.route(topic)
    if route is None or not route.queue_datas:
        return None
    return [(q.broker_name, q.write_queue_nums, q.perm) for q in route.queue_datas]


async def test_a_failed_message_comes_back_at_the_delays_then_dead_letters(wire: Wire) -> None:
    topic, group = "RetryWork", "RetryWorkers"
    retry, dlq = f"%RETRY%{group}", f"%DLQ%{group}"
    s = await wire.send(topic, b"job-1", queue_id=0,
                        properties=message_props(tags="T1", keys="order-42", uniq="UNIQ-42", note="n1"))
    original = await wire.pull_one(topic, 0, 0, group=group)

    failed = original
    max_reconsume = 3
    for attempt in range(max_reconsume):
        before = now_ms()
        r = await wire.send_back(failed.commit_log_offset, group, max_reconsume_times=max_reconsume,
                                 origin_msg_id=failed.uniq_key, origin_topic=topic)
        assert r.code == ResponseCode.SUCCESS, r.remark
        level = 3 + attempt  # delayLevel 0 in the request: 3 + reconsumeTimes
        parked = [m for m in await wire.pull(SCHEDULE_TOPIC, level - 1, 0) if m.body == b"job-1"][-1]
        assert parked.properties["REAL_TOPIC"] == retry

        m = await wire.pull_one(retry, 0, attempt, group=group, wait_s=5)
        assert m.store_timestamp >= parked.store_timestamp + DELAY_MS[level] >= before + DELAY_MS[level]
        assert m.store_timestamp <= parked.store_timestamp + DELAY_MS[level] + 1000
        assert (m.topic, m.body, m.tags, m.keys, m.uniq_key) == (retry, b"job-1", "T1", "order-42", "UNIQ-42")
        assert m.reconsume_times == attempt + 1  # RECONSUME_TIME counts up
        assert m.properties["RETRY_TOPIC"] == topic and m.properties["ORIGIN_MESSAGE_ID"] == "UNIQ-42"
        assert m.properties["note"] == "n1" and "DELAY" not in m.properties
        failed = m

    # the retry topic exists with the group's retryQueueNums (1) queues, read/write, and is routed
    configs = (await wire.topic_configs()).topic_config_table
    assert (configs[retry].read_queue_nums, configs[retry].write_queue_nums, configs[retry].perm) == (1, 1, RW)
    assert dlq not in configs

    # failing once more (reconsumeTimes 3 >= maxReconsumeTimes 3): the dead-letter queue, at once
    r = await wire.send_back(failed.commit_log_offset, group, max_reconsume_times=max_reconsume)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert await wire.max_offset(retry, 0) == max_reconsume
    configs = (await wire.topic_configs()).topic_config_table
    assert (configs[dlq].read_queue_nums, configs[dlq].perm) == (1, RW)  # readable, as RocketMQ 4.9.2+
    routed = await until(lambda: route_queues(wire, dlq), 5, "the DLQ topic's route at the NameServer")
    assert routed == [("broker-a", 1, RW)]
    assert await until(lambda: route_queues(wire, retry), 5, "the retry topic's route") == [("broker-a", 1, RW)]

    # a consumer reads the dead letter with no grant ...
    [d] = await wire.pull(dlq, 0, 0, group=group, wait_s=2)
    assert (d.body, d.tags, d.keys, d.uniq_key) == (b"job-1", "T1", "order-42", "UNIQ-42")
    assert d.properties["ORIGIN_MESSAGE_ID"] == "UNIQ-42" and d.properties["RETRY_TOPIC"] == topic
    assert d.reconsume_times == max_reconsume + 1 and "DELAY" not in d.properties
    assert s.commit_log_offset == original.commit_log_offset
    # ... unless an operator makes the DLQ write-only (RocketMQ before 4.9.2 created it so)
    await wire.set_topic_perm(dlq, 1, PermName.PERM_WRITE)
    r = await wire.pull_raw(dlq, 0, 0, group=group)
    assert r.code == ResponseCode.NO_PERMISSION, r.remark


async def test_negative_delay_level_goes_straight_to_the_dlq(wire: Wire) -> None:
    topic, group = "RetryNeg", "NegWorkers"
    s = await wire.send(topic, b"poison", queue_id=0, properties=message_props(keys="p1"))  # no UNIQ_KEY
    r = await wire.send_back(s.commit_log_offset, group, delay_level=-1)
    assert r.code == ResponseCode.SUCCESS, r.remark
    dlq = f"%DLQ%{group}"
    assert (await wire.topic_configs()).topic_config_table[dlq].perm == RW
    assert f"%RETRY%{group}" in (await wire.topic_configs()).topic_config_table
    [d] = await wire.pull(dlq, 0, 0, group=group, wait_s=2)
    assert d.body == b"poison" and d.keys == "p1" and d.reconsume_times == 1
    assert d.properties["ORIGIN_MESSAGE_ID"] == s.msg_id  # no UNIQ_KEY: the offset msg id


async def test_explicit_delay_level_is_used(wire: Wire) -> None:
    topic, group = "RetryExplicit", "ExplicitWorkers"
    s = await wire.send(topic, b"e", queue_id=0, properties=message_props(keys="e1"))
    before = now_ms()
    r = await wire.send_back(s.commit_log_offset, group, delay_level=1)
    assert r.code == ResponseCode.SUCCESS, r.remark
    m = await wire.pull_one(f"%RETRY%{group}", 0, 0, group=group, wait_s=3)
    assert m.body == b"e" and m.reconsume_times == 1
    assert m.store_timestamp >= before + DELAY_MS[1]


async def test_send_back_of_an_offset_that_is_not_a_message(wire: Wire) -> None:
    s = await wire.send("RetryBad", b"x", queue_id=0)
    for offset in (s.commit_log_offset + 1, 1 << 40, -5):
        r = await wire.send_back(offset, "BadWorkers")
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert r.remark == f"look message by offset failed, {offset}"


async def test_producer_send_to_a_retry_topic_goes_through_retry_and_dlq(wire: Wire) -> None:
    group = "DirectWorkers"
    retry, dlq = f"%RETRY%{group}", f"%DLQ%{group}"
    r = await wire.call(wire.send_cmd(retry, b"again", queue_id=0, properties=message_props(keys="d1"),
                                      reconsume_times=1, max_reconsume_times=3))
    assert r.code == ResponseCode.SUCCESS, r.remark
    m = await wire.pull_one(retry, 0, 0, group=group, wait_s=2)
    assert m.body == b"again" and m.reconsume_times == 1
    r = await wire.call(wire.send_cmd(retry, b"dead", queue_id=0, properties=message_props(keys="d2"),
                                      reconsume_times=3, max_reconsume_times=3))
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert await wire.max_offset(retry, 0) == 1
    assert (await wire.topic_configs()).topic_config_table[dlq].perm == RW
    [d] = await wire.pull(dlq, 0, 0, group=group, wait_s=2)
    assert d.body == b"dead" and d.keys == "d2"


async def test_heartbeat_creates_and_routes_the_retry_topic(wire: Wire) -> None:
    group = "HeartbeatWorkers"
    await wire.heartbeat("client-hb", group, "HbTopic")
    retry = f"%RETRY%{group}"
    tc = (await wire.topic_configs()).topic_config_table[retry]
    assert (tc.read_queue_nums, tc.perm) == (1, RW)
    assert await until(lambda: route_queues(wire, retry), 5, "the retry topic's route") == [("broker-a", 1, RW)]


# ------------------------------------------------------------------ autoCreateSubscriptionGroup=false


@pytest.fixture(scope="module")
def strict_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeliveryCluster]:
    tmp: Path = tmp_path_factory.mktemp("strict")
    ns, ns_addr = start_namesrv(tmp)
    try:
        store = tmp / "store"
        br, br_addr = start_broker(tmp, ns_addr, name="broker-s", store_dir=store,
                                   extra={"autoCreateSubscriptionGroup": False, "messageDelayLevel": "200ms"})
        try:
            yield DeliveryCluster(ns_addr, br_addr, br, store)
        finally:
            br.terminate()
    finally:
        ns.terminate()


async def test_unknown_group_with_auto_create_off(strict_cluster: DeliveryCluster) -> None:
    wire = Wire(strict_cluster.broker_addr, strict_cluster.namesrv_addr)
    try:
        s = await wire.send("StrictTopic", b"x", queue_id=0)
        r = await wire.send_back(s.commit_log_offset, "NoSuchGroup")
        assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert "NoSuchGroup" in r.remark and "updateSubGroup" in r.remark
        configs = (await wire.topic_configs()).topic_config_table
        assert "%RETRY%NoSuchGroup" not in configs and "%DLQ%NoSuchGroup" not in configs
        # a group created by the operator works, with its own retryMaxTimes (1 here) when the client
        # sends none; levels above the broker's max (1 level here) are clamped
        await wire.create_group("KnownGroup", retry_max_times=1)
        r = await wire.send_back(s.commit_log_offset, "KnownGroup")
        assert r.code == ResponseCode.SUCCESS, r.remark
        m = await wire.pull_one("%RETRY%KnownGroup", 0, 0, group="KnownGroup", wait_s=3)
        assert m.reconsume_times == 1
        r = await wire.send_back(m.commit_log_offset, "KnownGroup")
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert (await wire.topic_configs()).topic_config_table["%DLQ%KnownGroup"].perm == RW
        # a group with no retry queues takes the message back without storing it (as Java)
        await wire.create_group("NoRetryGroup", retry_queue_nums=0)
        r = await wire.send_back(s.commit_log_offset, "NoRetryGroup")
        assert r.code == ResponseCode.SUCCESS, r.remark
        configs = (await wire.topic_configs()).topic_config_table
        assert "%RETRY%NoRetryGroup" not in configs and "%DLQ%NoRetryGroup" not in configs
    finally:
        await wire.close()
