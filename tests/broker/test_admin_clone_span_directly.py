"""CLONE_GROUP_OFFSET (314), QUERY_CONSUME_TIME_SPAN (303) and CONSUME_MESSAGE_DIRECTLY (309) against an
in-process broker, with hand-made client connections."""

from __future__ import annotations

import asyncio
import json
import time

from remoting.body import (
    ConsumeMessageDirectlyResult,
    ConsumerData,
    HeartbeatData,
    MessageQueue,
    QueryConsumeTimeSpanBody,
    SubscriptionData,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext, RequestDispatcher
from remoting.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    SendMessageResponseHeader,
)
from remoting.message import create_offset_msg_id, decode_message, decode_offset_msg_id
from tests.broker.conftest import BrokerHarness
from tests.broker.helpers import props, send_v1, wait_until


def req(code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    return RemotingCommand.request(code, ext, body)


def heartbeat(client_id: str, group: str, topics: list[str]) -> RemotingCommand:
    subs = [SubscriptionData(topic=t, sub_string="*") for t in topics]
    body = HeartbeatData(
        client_id=client_id, consumer_data_set=[ConsumerData(group_name=group, subscription_data_set=subs)]
    ).encode()
    return RemotingCommand.request(RequestCode.HEART_BEAT, None, body)


async def create_topic(h: BrokerHarness, topic: str, queues: int = 2) -> None:
    ct = CreateTopicRequestHeader(topic=topic, read_queue_nums=queues, write_queue_nums=queues, perm=6)
    r = await h.call(req(RequestCode.UPDATE_AND_CREATE_TOPIC, ct.encode()))
    assert r.code == ResponseCode.SUCCESS, r.remark


async def clone(h: BrokerHarness, src: str, dest: str, topic: str | None = None, offline: bool = False) -> None:
    hdr = CloneGroupOffsetRequestHeader(src_group=src, dest_group=dest, topic=topic, offline=offline)
    r = await h.call(req(RequestCode.CLONE_GROUP_OFFSET, hdr.encode()))
    assert r.code == ResponseCode.SUCCESS, r.remark


# ---------------------------------------------------------------------------------------- clone


async def test_clone_group_offset_with_topic_and_blank_topic(broker: BrokerHarness) -> None:
    h = broker
    com = h.controller.consumer_offset_manager
    for t in ("C1", "C2"):
        await create_topic(h, t)
    com.commit_offset("x", "SRC", "C1", 0, 5)
    com.commit_offset("x", "SRC", "C1", 1, 2)
    com.commit_offset("x", "SRC", "C2", 0, 7)
    com.commit_offset("x", "SRC", "Gone", 0, 1)  # offsets of a topic that no longer exists: skipped

    await clone(h, "SRC", "D1", "C1")
    assert com.query_offsets("D1", "C1") == {0: 5, 1: 2}
    assert com.query_offsets("D1", "C2") is None
    assert com.which_topic_by_consumer("D1") == {"C1"}

    # Blank topic (absent or empty on the wire): every topic SRC has offsets of.
    await clone(h, "SRC", "D2")
    r = await h.call(req(RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "SRC", "destGroup": "D3", "topic": ""}))
    assert r.code == ResponseCode.SUCCESS
    for dest in ("D2", "D3"):
        assert com.which_topic_by_consumer(dest) == {"C1", "C2"}
        assert com.query_offsets(dest, "C1") == {0: 5, 1: 2} and com.query_offsets(dest, "C2") == {0: 7}

    # A copy, not a shared table; and a clone replaces what dest had.
    com.commit_offset("x", "SRC", "C2", 0, 9)
    assert com.query_offset("D2", "C2", 0) == 7
    com.commit_offset("x", "D1", "C1", 1, 40)
    await clone(h, "SRC", "D1", "C1")
    assert com.query_offsets("D1", "C1") == {0: 5, 1: 2}

    # Persisted like any offset change.
    path = com.config_file_path()

    def persisted() -> bool:
        try:
            table = json.loads(path.read_text())["offsetTable"]
        except (OSError, ValueError):
            return False
        return table.get("C2@D3") == {"0": 7} and table.get("C1@D2") == {"0": 5, "1": 2}

    await wait_until(persisted, 5)

    # Unknown source group / topic: nothing to clone, still SUCCESS (as Java).
    await clone(h, "NOBODY", "D4")
    await clone(h, "SRC", "D4", "NoSuchTopic")
    assert com.which_topic_by_consumer("D4") == set()

    r = await h.call(req(RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "SRC"}))
    assert r.code == ResponseCode.INVALID_PARAMETER and "destGroup" in r.remark


async def test_clone_group_offset_skips_unsubscribed_topics_of_an_online_group(broker: BrokerHarness) -> None:
    h = broker
    com = h.controller.consumer_offset_manager
    for t in ("O1", "O2"):
        await create_topic(h, t)
    com.commit_offset("x", "ONL", "O1", 0, 3)
    com.commit_offset("x", "ONL", "O2", 0, 4)
    client = RemotingClient()
    try:
        r = await client.invoke(h.addr, heartbeat("onl-client", "ONL", ["O1"]), 5000)
        assert r.code == ResponseCode.SUCCESS
        await clone(h, "ONL", "ON1")  # online, subscribes O1 only
        assert com.which_topic_by_consumer("ON1") == {"O1"}
        await clone(h, "ONL", "ON2", "O2")
        assert com.query_offsets("ON2", "O2") is None
        await clone(h, "ONL", "ON3", offline=True)  # offline: no subscription check
        assert com.which_topic_by_consumer("ON3") == {"O1", "O2"}
    finally:
        await client.close()


# ---------------------------------------------------------------------------------------- time span


async def test_query_consume_time_span(broker: BrokerHarness) -> None:
    h = broker
    store = h.controller.message_store
    await create_topic(h, "TS", 2)
    for i in range(3):
        r = await h.call(send_v1("TS", f"m{i}".encode(), queue_id=0))
        assert r.code == ResponseCode.SUCCESS
        await asyncio.sleep(0.003)  # distinct store timestamps
    await store.wait_dispatched(5)
    ts = [store.get_message_store_timestamp("TS", 0, i) for i in range(3)]
    assert ts[0] < ts[1] < ts[2]
    h.controller.consumer_offset_manager.commit_offset("x", "TSG", "TS", 0, 1)

    def query(group: str) -> RemotingCommand:
        hdr = QueryConsumeTimeSpanRequestHeader(topic="TS", group=group)
        return req(RequestCode.QUERY_CONSUME_TIME_SPAN, hdr.encode())

    before = int(time.time() * 1000)
    r = await h.call(query("TSG"))
    after = int(time.time() * 1000)
    assert r.code == ResponseCode.SUCCESS, r.remark
    raw = json.loads(r.body)
    assert set(raw["consumeTimeSpanSet"][0]) == {
        "messageQueue", "minTimeStamp", "maxTimeStamp", "consumeTimeStamp", "delayTime"
    }
    spans = {s.message_queue.queue_id: s for s in QueryConsumeTimeSpanBody.decode(r.body).consume_time_span_set}
    assert sorted(spans) == [0, 1]
    q0 = spans[0]
    assert q0.message_queue == MessageQueue(topic="TS", broker_name="broker-t", queue_id=0)
    assert (q0.min_time_stamp, q0.max_time_stamp, q0.consume_time_stamp) == (ts[0], ts[2], ts[0])
    # The first unconsumed message is m1: delay = now - its store time.
    assert before - ts[1] <= q0.delay_time <= after - ts[1]
    q1 = spans[1]  # empty queue: no times, nothing to wait for... except Java's quirk below
    assert (q1.min_time_stamp, q1.max_time_stamp, q1.consume_time_stamp) == (-1, -1, -1)

    # Everything consumed: consume time = the last message's, no delay.
    h.controller.consumer_offset_manager.commit_offset("x", "TSG", "TS", 0, 3)
    q0 = next(s for s in QueryConsumeTimeSpanBody.decode((await h.call(query("TSG"))).body).consume_time_span_set
              if s.message_queue.queue_id == 0)
    assert (q0.consume_time_stamp, q0.delay_time) == (ts[2], 0)

    # A group that never committed: consume time = min time; Java looks the delay up at offset -1 (no
    # message: -1), so the delay is now + 1.
    spans = {s.message_queue.queue_id: s for s in QueryConsumeTimeSpanBody.decode(
        (await h.call(query("NEVER"))).body).consume_time_span_set}
    assert spans[0].consume_time_stamp == ts[0] and spans[0].delay_time >= before + 1

    r = await h.call(req(RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": "NoSuchTopic", "group": "G"}))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in r.remark
    r = await h.call(req(RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": "TS"}))
    assert r.code == ResponseCode.INVALID_PARAMETER and "group" in r.remark


# ---------------------------------------------------------------------------------------- consume directly


class FakeConsumer:
    """A client connection answering CONSUME_MESSAGE_DIRECTLY like a consumer client does."""

    def __init__(self) -> None:
        self.got: list[RemotingCommand] = []
        d = RequestDispatcher()
        d.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on)
        self.client = RemotingClient(d)

    def _on(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        self.got.append(cmd)
        msg, _ = decode_message(cmd.body_bytes())
        result = ConsumeMessageDirectlyResult(consume_result="CR_SUCCESS", remark=msg.body.decode(), spent_time_mills=3)
        return cmd.response(body=result.encode())


async def test_consume_message_directly_forwards_the_stored_message(broker: BrokerHarness) -> None:
    h = broker
    r = await h.call(send_v1("CD", b"direct body", queue_id=1, properties=props("TagD", "k1")))
    offset_msg_id = SendMessageResponseHeader.decode(r.ext_fields).msg_id
    _host, _port, phy = decode_offset_msg_id(offset_msg_id)
    fake = FakeConsumer()
    try:
        assert (await fake.client.invoke(h.addr, heartbeat("cd-client", "CDG", ["CD"]), 5000)).code == 0
        hdr = ConsumeMessageDirectlyResultRequestHeader(consumer_group="CDG", client_id="cd-client", msg_id=offset_msg_id)
        r = await h.call(req(RequestCode.CONSUME_MESSAGE_DIRECTLY, hdr.encode()), 15000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        result = ConsumeMessageDirectlyResult.decode(r.body)
        assert (result.consume_result, result.remark, result.spent_time_mills) == ("CR_SUCCESS", "direct body", 3)
        [fwd] = fake.got
        assert fwd.ext_fields["brokerName"] == "broker-t"
        assert fwd.ext_fields["consumerGroup"] == "CDG" and fwd.ext_fields["msgId"] == offset_msg_id
        msg, _ = decode_message(fwd.body_bytes())
        assert (msg.topic, msg.queue_id, msg.body, msg.tags, msg.commit_log_offset) == ("CD", 1, b"direct body", "TagD", phy)

        # Unknown client id, unknown group: a clear error, nothing forwarded.
        for group, cid in (("CDG", "nobody"), ("NOGROUP", "cd-client")):
            hdr = ConsumeMessageDirectlyResultRequestHeader(consumer_group=group, client_id=cid, msg_id=offset_msg_id)
            r = await h.call(req(RequestCode.CONSUME_MESSAGE_DIRECTLY, hdr.encode()))
            assert r.code == ResponseCode.SYSTEM_ERROR and f"<{group}> <{cid}> not online" in r.remark
        # Bad or missing message ids.
        for msg_id, code, needle in (
            (None, ResponseCode.INVALID_PARAMETER, "msgId"),
            ("not-hex", ResponseCode.INVALID_PARAMETER, "not an offset message id"),
            (create_offset_msg_id("127.0.0.1", 1, phy + 10_000_000), ResponseCode.SYSTEM_ERROR, "can not find message"),
        ):
            hdr = ConsumeMessageDirectlyResultRequestHeader(consumer_group="CDG", client_id="cd-client", msg_id=msg_id)
            r = await h.call(req(RequestCode.CONSUME_MESSAGE_DIRECTLY, hdr.encode()))
            assert r.code == code and needle in r.remark, r.remark
        assert len(fake.got) == 1
    finally:
        await fake.client.close()
