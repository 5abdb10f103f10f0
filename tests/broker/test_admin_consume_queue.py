"""QUERY_CONSUME_QUEUE (321), CLEAN_EXPIRED_CONSUMEQUEUE (306) and CLEAN_UNUSED_TOPIC (316) against an
in-process broker: what RocketMQ's mqadmin queryCq, cleanExpiredCQ and cleanUnusedTopic send."""

from __future__ import annotations

import json
from pathlib import Path

from broker.topic import topic_validator as tv
from remoting.body import ConsumerData, HeartbeatData, QueryConsumeQueueResponseBody, SubscriptionData
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import QueryConsumeQueueRequestHeader, SendMessageResponseHeader
from remoting.message import decode_message, decode_offset_msg_id, java_string_hash
from store.message import MessageExtBrokerInner
from tests.broker.conftest import BrokerHarness, running_broker
from tests.broker.helpers import props, send_v1

ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


def query_cq(topic: str, queue_id: int, index: int, count: int = 10, group: str | None = None) -> RemotingCommand:
    h = QueryConsumeQueueRequestHeader(topic=topic, queue_id=queue_id, index=index, count=count, consumer_group=group)
    return RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE, h.encode())


async def send(h: BrokerHarness, topic: str, body: bytes, queue_id: int, tags: str | None = None,
               **extra: str) -> tuple[int, int]:
    """Send one message; (its commit log offset, its queue offset)."""
    r = await h.call(send_v1(topic, body, queue_id=queue_id, properties=props(tags, **extra)))
    assert r.code == ResponseCode.SUCCESS, r.remark
    rh = SendMessageResponseHeader.decode(r.ext_fields)
    return decode_offset_msg_id(rh.msg_id)[2], rh.queue_offset


def cq_dir(h: BrokerHarness, topic: str, queue_id: int | None = None) -> Path:
    root = Path(h.controller.message_store.message_store_config.store_path_consume_queue()) / topic
    return root if queue_id is None else root / str(queue_id)


# ---------------------------------------------------------------------------------------- QUERY_CONSUME_QUEUE


async def test_query_consume_queue_units_and_bounds(broker: BrokerHarness) -> None:
    h = broker
    sent = [await send(h, "CQ", f"body-{i}".encode(), 0, tags=f"Tag{i}") for i in range(5)]
    assert [qo for _phy, qo in sent] == [0, 1, 2, 3, 4]
    r = await h.call(query_cq("CQ", 0, 1, 3))
    assert r.code == ResponseCode.SUCCESS and r.remark is None
    raw = json.loads(r.body)
    # RocketMQ's field names (fastjson leaves the null ones out: no group, no ext units)
    assert set(raw) == {"queueData", "maxQueueIndex", "minQueueIndex"}
    assert set(raw["queueData"][0]) == {"physicOffset", "physicSize", "tagsCode", "eval"}
    body = QueryConsumeQueueResponseBody.decode(r.body)
    assert (body.min_queue_index, body.max_queue_index) == (0, 5)
    assert body.subscription_data is None and body.filter_data is None
    assert body.queue_data is not None and len(body.queue_data) == 3
    store = h.controller.message_store
    for i, unit in zip(range(1, 4), body.queue_data, strict=True):
        assert unit.physic_offset == sent[i][0]
        assert unit.tags_code == java_string_hash(f"Tag{i}")
        assert not unit.eval and unit.extend_data_json is None and unit.bit_map is None and unit.msg is None
        data = store.select_one_message_by_offset(unit.physic_offset, unit.physic_size)
        assert data is not None and len(data) == unit.physic_size
        msg, end = decode_message(data)
        assert end == unit.physic_size
        assert (msg.body, msg.queue_offset) == (f"body-{i}".encode(), i)
    # count past the end: what there is
    tail = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("CQ", 0, 3, 10))).body)
    assert [u.physic_offset for u in tail.queue_data or []] == [sent[3][0], sent[4][0]]
    # the default count of RocketMQ's tool (10) when a request has none
    ext = QueryConsumeQueueRequestHeader(topic="CQ", queue_id=0, index=0).encode()
    assert "count" in ext
    del ext["count"]
    r = await h.call(RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE, ext))
    assert len(QueryConsumeQueueResponseBody.decode(r.body).queue_data or []) == 5


async def test_query_consume_queue_not_exist(broker: BrokerHarness) -> None:
    h = broker
    await send(h, "CQ2", b"x", 1)
    r = await h.call(query_cq("CQ2", 0, 0))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "0@CQ2 is not exist!")
    r = await h.call(query_cq("NoSuchTopic", 3, 0))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "3@NoSuchTopic is not exist!")
    # an index past the queue: success with the reason, the bounds and no units
    for index in (1, 1000, -1):
        r = await h.call(query_cq("CQ2", 1, index))
        assert (r.code, r.remark) == (ResponseCode.SUCCESS, f"Index {index} of 1@CQ2 is not exist!")
        body = QueryConsumeQueueResponseBody.decode(r.body)
        assert body.queue_data is None and (body.min_queue_index, body.max_queue_index) == (0, 1)
    r = await h.call(RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE, {"topic": "CQ2", "queueId": "1"}))
    assert r.code == ResponseCode.INVALID_PARAMETER and "index" in r.remark


async def test_query_consume_queue_stops_at_the_end_of_the_file(tmp_path: Path) -> None:
    """As upstream, the units come from the one file holding `index` (here 4 units a file)."""
    async with running_broker(tmp_path / "store", mappedFileSizeConsumeQueue=4 * 20) as h:
        sent = [(await send(h, "Small", b"m", 0))[0] for _ in range(7)]
        body = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("Small", 0, 2, 10))).body)
        assert [u.physic_offset for u in body.queue_data or []] == sent[2:4]
        body = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("Small", 0, 4, 10))).body)
        assert [u.physic_offset for u in body.queue_data or []] == sent[4:7]
        assert body.max_queue_index == 7


async def test_query_consume_queue_with_a_group(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "store", enablePropertyFilter=True) as h:
        await send(h, "CQG", b"x", 0, tags="TagA")
        # a group with no online member: why there is no subscription
        body = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("CQG", 0, 0, group="Offline"))).body)
        assert body.subscription_data is None and body.filter_data == "Offline@CQG is not online!"
        assert body.queue_data is not None and len(body.queue_data) == 1
        consumers = [
            ConsumerData(group_name="Tags", subscription_data_set=[SubscriptionData(topic="CQG", sub_string="TagA")]),
            ConsumerData(group_name="Sql", subscription_data_set=[
                SubscriptionData(topic="CQG", sub_string="a > 1", expression_type="SQL92", sub_version=7)]),
            ConsumerData(group_name="Other", subscription_data_set=[SubscriptionData(topic="Elsewhere")]),
        ]
        hb = HeartbeatData(client_id="cq-client", consumer_data_set=consumers).encode()
        assert (await h.call(RemotingCommand.request(RequestCode.HEART_BEAT, None, hb))).code == ResponseCode.SUCCESS
        # a tag subscription: the group's subscription, no filter data (Java's JSON of a null)
        body = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("CQG", 0, 0, group="Tags"))).body)
        assert body.subscription_data is not None and body.subscription_data.sub_string == "TagA"
        assert body.subscription_data.topic == "CQG" and body.filter_data == "null"
        # SQL92: the filter data the broker holds for the group
        body = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("CQG", 0, 0, group="Sql"))).body)
        assert body.subscription_data is not None and body.subscription_data.expression_type == "SQL92"
        assert body.filter_data is not None
        fd = json.loads(body.filter_data)
        assert {k: fd[k] for k in ("consumerGroup", "topic", "expression", "expressionType", "clientVersion", "dead")} == {
            "consumerGroup": "Sql", "topic": "CQG", "expression": "a > 1", "expressionType": "SQL92",
            "clientVersion": 7, "dead": False}
        assert fd["bornTime"] > 0 and fd["deadTime"] == 0
        # online, but not subscribed to this topic
        body = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("CQG", 0, 0, group="Other"))).body)
        assert body.subscription_data is None and body.filter_data == "Other@CQG is not online!"


# ---------------------------------------------------------------------------------------- CLEAN_EXPIRED_CONSUMEQUEUE


async def test_clean_expired_consume_queue(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path / "store",
        mappedFileSizeCommitLog=64 * 1024,
        deleteWhen=ALL_HOURS,
        fileReservedTime=0,
        deleteCommitLogFilesInterval=0,
        deleteConsumeQueueFilesInterval=0,
    ) as h:
        store = h.controller.message_store
        store.disk_usage_probe = lambda: 0.10
        big = b"b" * 3000
        for qid in (0, 1):
            for _ in range(2):
                await send(h, "Old", big, qid)
        await send(h, "Mixed", big, 0)
        await send(h, "Late", big, 0, DELAY="18")  # parked in SCHEDULE_TOPIC_XXXX for 2 hours
        for _ in range(60):
            await send(h, "New", big, 0)
        mixed_last, _ = await send(h, "Mixed", big, 1)
        assert await store.wait_dispatched(5)
        # Commit log files go (the queues' files stay: each queue has one)
        assert await store.clean_expired_files_now() >= 2
        min_offset = store.get_commit_log_min_offset()
        assert 0 < min_offset <= mixed_last
        assert QueryConsumeQueueResponseBody.decode((await h.call(query_cq("Old", 0, 0))).body).max_queue_index == 2
        assert cq_dir(h, "Old", 0).is_dir() and cq_dir(h, tv.RMQ_SYS_SCHEDULE_TOPIC).is_dir()

        r = await h.call(RemotingCommand.request(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, None))
        assert (r.code, r.remark, r.body) == (ResponseCode.SUCCESS, None, None)
        # whole topic gone, its files with it (answered after they were deleted)
        assert store.consume_queue_table.get("Old") is None and not cq_dir(h, "Old").exists()
        r = await h.call(query_cq("Old", 1, 0))
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "1@Old is not exist!")
        # one queue of a topic whose other queue still has live messages
        assert store.get_consume_queue("Mixed", 0) is None and not cq_dir(h, "Mixed", 0).exists()
        assert store.get_consume_queue("Mixed", 1) is not None and cq_dir(h, "Mixed", 1).is_dir()
        # live queues, and the schedule topic's whatever it points at
        assert store.get_max_offset_in_queue("New", 0) == 60
        assert store.get_consume_queue(tv.RMQ_SYS_SCHEDULE_TOPIC, 17) is not None
        assert cq_dir(h, tv.RMQ_SYS_SCHEDULE_TOPIC, 17).is_dir()
        # the queue starts again from 0, and is readable
        phy, qoff = await send(h, "Old", b"again", 0)
        assert qoff == 0
        body = QueryConsumeQueueResponseBody.decode((await h.call(query_cq("Old", 0, 0))).body)
        assert [u.physic_offset for u in body.queue_data or []] == [phy]
        # nothing more to clean
        r = await h.call(RemotingCommand.request(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, None))
        assert r.code == ResponseCode.SUCCESS and store.get_consume_queue("Old", 0) is not None


# ---------------------------------------------------------------------------------------- CLEAN_UNUSED_TOPIC


async def test_clean_unused_topic(broker: BrokerHarness) -> None:
    h = broker
    store = h.controller.message_store
    await send(h, "Keep", b"k", 0)
    await send(h, "Orphan", b"o", 0)
    await send(h, "Orphan", b"o", 2)
    await send(h, "Late", b"l", 0, DELAY="18")
    # (what the transaction service writes when a half message is ended)
    op = MessageExtBrokerInner(topic=tv.RMQ_SYS_TRANS_OP_HALF_TOPIC, body=b"d", properties={"TAGS": "d"})
    assert (await store.put_message(op)).is_ok
    assert await store.wait_dispatched(5)
    tables = h.controller.topic_config_manager.topic_config_table
    # Orphan's config is gone while its queues stay (a topic config file restored from before it was made),
    # and neither system topic kept out of the clean-up is configured either
    for t in ("Orphan", tv.RMQ_SYS_SCHEDULE_TOPIC, tv.RMQ_SYS_TRANS_OP_HALF_TOPIC):
        del tables[t]
    assert cq_dir(h, "Orphan", 2).is_dir()

    r = await h.call(RemotingCommand.request(RequestCode.CLEAN_UNUSED_TOPIC, None))
    assert (r.code, r.remark, r.body) == (ResponseCode.SUCCESS, None, None)
    assert "Orphan" not in store.consume_queue_table and not cq_dir(h, "Orphan").exists()
    r = await h.call(query_cq("Orphan", 0, 0))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "0@Orphan is not exist!")
    assert store.get_max_offset_in_queue("Keep", 0) == 1 and cq_dir(h, "Keep", 0).is_dir()
    assert store.get_max_offset_in_queue(tv.RMQ_SYS_SCHEDULE_TOPIC, 17) == 1
    assert store.get_max_offset_in_queue(tv.RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) == 1
    assert cq_dir(h, tv.RMQ_SYS_TRANS_OP_HALF_TOPIC, 0).is_dir()


async def test_delete_expired_commit_log_does_not_wait_for_delete_when(tmp_path: Path) -> None:
    """DELETE_EXPIRED_COMMITLOG (mqadmin deleteExpiredCommitLog): expired commit log files go at the next
    cleaning round although deleteWhen's hour is not now and the disk is not full."""
    async with running_broker(
        tmp_path / "store",
        mappedFileSizeCommitLog=64 * 1024,
        deleteWhen="99",  # never the hour
        fileReservedTime=0,
        deleteCommitLogFilesInterval=0,
    ) as h:
        store = h.controller.message_store
        store.disk_usage_probe = lambda: 0.10
        for _ in range(60):
            await send(h, "Expiring", b"e" * 3000, 0)
        assert await store.wait_dispatched(5)
        assert await store.clean_expired_files_now() == 0 and store.get_commit_log_min_offset() == 0
        r = await h.call(RemotingCommand.request(RequestCode.DELETE_EXPIRED_COMMITLOG, None))
        assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
        assert await store.clean_expired_files_now() >= 2 and store.get_commit_log_min_offset() > 0
