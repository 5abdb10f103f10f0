"""Send and pull against an in-process broker (real store, real TCP): formats, statuses, errors."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.processor.send_message_processor import SendMessageContext
from remoting.body import TopicConfig
from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.command import RemotingCommand
from remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageResponseHeader,
    SendMessageResponseHeader,
)
from remoting.message import decode_messages, decode_offset_msg_id
from store.message import MessageExtBrokerInner
from tests.broker.conftest import BrokerHarness, running_broker
from tests.broker.helpers import props, pull, send_batch, send_v1, send_v2, wait_until


async def dispatched(h: BrokerHarness) -> None:
    assert await h.controller.message_store.wait_dispatched(5.0)


def make_topic(h: BrokerHarness, name: str, queues: int = 4) -> None:
    h.controller.topic_config_manager.update_topic_config(
        TopicConfig(topic_name=name, read_queue_nums=queues, write_queue_nums=queues)
    )


async def test_send_v1_then_pull_round_trip(broker: BrokerHarness) -> None:
    h = broker
    r = await h.call(send_v1("Orders", b"hello", queue_id=1, properties=props("TagA", "k1 k2", "UNIQ1", color="red")))
    assert r.code == ResponseCode.SUCCESS, r.remark
    rh = SendMessageResponseHeader.decode(r.ext_fields)
    assert (rh.queue_id, rh.queue_offset, rh.transaction_id) == (1, 0, "UNIQ1")
    host, port, phy = decode_offset_msg_id(rh.msg_id)
    assert f"{host}:{port}" == h.addr and phy == 0
    assert r.ext_fields["MSG_REGION"] == "DefaultRegion"
    await dispatched(h)

    p = await h.call(pull("Orders", 1, 0))
    assert p.code == ResponseCode.SUCCESS, p.remark
    ph = PullMessageResponseHeader.decode(p.ext_fields)
    assert (ph.next_begin_offset, ph.min_offset, ph.max_offset, ph.suggest_which_broker_id) == (1, 0, 1, 0)
    [m] = decode_messages(p.body)
    assert m.body == b"hello" and m.topic == "Orders" and m.queue_id == 1 and m.queue_offset == 0
    assert m.tags == "TagA" and m.keys == "k1 k2" and m.uniq_key == "UNIQ1"
    assert m.properties["color"] == "red" and m.properties["CLUSTER"] == "DefaultCluster"
    assert "WAIT" not in m.properties  # a broker-only flag, not stored
    assert m.msg_id == rh.msg_id
    assert m.born_host[0] == "127.0.0.1"


async def test_send_v2_with_typed_values_from_real_clients(broker: BrokerHarness) -> None:
    h = broker
    r = await h.call(send_v2("CppTopic", b"from cpp", queue_id=0, properties=props("tagA", "k1", "U-1")))
    assert r.code == ResponseCode.SUCCESS, r.remark
    r2 = await h.call(send_v2("CppTopic", b"again", queue_id=0, properties=props("tagB"), omit_lm=False))
    assert r2.code == ResponseCode.SUCCESS, r2.remark
    assert SendMessageResponseHeader.decode(r2.ext_fields).queue_offset == 1
    await dispatched(h)
    p = await h.call(pull("CppTopic", 0, 0))
    assert [(m.body, m.tags) for m in decode_messages(p.body)] == [(b"from cpp", "tagA"), (b"again", "tagB")]


async def test_batch_keeps_each_messages_properties(broker: BrokerHarness) -> None:
    h = broker
    msgs = [(f"b{i}".encode(), props(f"T{i}", f"key{i}", f"U{i}")) for i in range(3)]
    r = await h.call(send_batch("Batch", msgs, queue_id=2))
    assert r.code == ResponseCode.SUCCESS, r.remark
    rh = SendMessageResponseHeader.decode(r.ext_fields)
    ids = rh.msg_id.split(",")
    assert len(ids) == 3 and rh.queue_id == 2 and rh.queue_offset == 0
    await dispatched(h)
    got = decode_messages((await h.call(pull("Batch", 2, 0))).body)
    assert [(m.body, m.tags, m.keys, m.uniq_key, m.queue_offset) for m in got] == [
        (b"b0", "T0", "key0", "U0", 0), (b"b1", "T1", "key1", "U1", 1), (b"b2", "T2", "key2", "U2", 2)
    ]
    assert [m.msg_id for m in got] == ids
    assert all(m.properties["CLUSTER"] == "DefaultCluster" for m in got)


async def test_tag_filter_on_pull(broker: BrokerHarness) -> None:
    h = broker
    for tag in ("a", "b", "c", None):
        r = await h.call(send_v1("Tags", tag.encode() if tag else b"none", queue_id=0, properties=props(tag)))
        assert r.code == ResponseCode.SUCCESS
    await dispatched(h)
    p = await h.call(pull("Tags", 0, 0, subscription="a || c"))
    assert p.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(p.body)] == [b"a", b"c"]
    assert PullMessageResponseHeader.decode(p.ext_fields).next_begin_offset == 4
    p = await h.call(pull("Tags", 0, 0, subscription="zzz"))
    assert p.code == ResponseCode.PULL_RETRY_IMMEDIATELY  # NO_MATCHED_MESSAGE
    assert PullMessageResponseHeader.decode(p.ext_fields).next_begin_offset == 4


async def test_bad_sends_are_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    async with running_broker(tmp_path, maxMessageSize=1024) as h:
        await h.call(send_v1("Exists", b"x", queue_id=0))
        store = h.controller.message_store
        before = store.get_commit_log_max_offset()
        cases = [
            (send_v1("Exists", b"x" * 1025), ResponseCode.MESSAGE_ILLEGAL, "maxMessageSize"),
            (send_v1("bad topic!", b"x"), ResponseCode.INVALID_PARAMETER, "illegal characters"),
            (send_v1("x" * 128, b"x"), ResponseCode.INVALID_PARAMETER, "max length"),
            (send_v1("Exists", b"x", queue_id=4), ResponseCode.INVALID_PARAMETER, "queueId[4] is illegal"),
            (send_v1("SCHEDULE_TOPIC_XXXX", b"x"), ResponseCode.NO_PERMISSION, "forbidden"),
            (send_v1("Exists", b"x", properties="A\x01" + "v" * 40000), ResponseCode.MESSAGE_ILLEGAL, "32767"),
        ]
        bad_batch = send_batch("Exists", [(b"x", "")])
        bad_batch.body = bad_batch.body[:-3] + b"\x00\x00\x05"  # a broken length in the record
        cases.append((bad_batch, ResponseCode.MESSAGE_ILLEGAL, "bad batch body"))
        hdr_missing = send_v1("Exists", b"x")
        del hdr_missing.ext_fields["producerGroup"]
        cases.append((hdr_missing, ResponseCode.INVALID_PARAMETER, "producerGroup"))
        # A list or a map where a header holds a value (msgpack and JSON can carry them): refused naming the
        # field, not a SYSTEM_ERROR from a look-up keyed by the values.
        for field, name, value in (("d", "defaultTopicQueueNums", [4]), ("e", "queueId", {"q": 0})):
            for st in (SerializeType.MSGPACK, SerializeType.JSON):
                cmd = send_v2("Exists", b"x", queue_id=0)
                cmd.ext_fields[field] = value
                cmd.serialize_type = st
                cases.append((cmd, ResponseCode.INVALID_PARAMETER, name))
        # The same in the constant part of our producer's pipelined header (the frame decoder memoizes it).
        lead = send_v2("Exists", b"x", queue_id=0)
        ext = lead.ext_fields
        piped = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
            "g": ext["g"], "i": "", **{k: v for k, v in ext.items() if k in "abcefhjk"}, "d": [4]}, b"x")
        piped.serialize_type = SerializeType.MSGPACK
        cases.append((piped, ResponseCode.INVALID_PARAMETER, "defaultTopicQueueNums"))
        for cmd, code, needle in cases:
            r = await h.call(cmd)
            assert r.code == code, (needle, r.code, r.remark)
            assert needle in (r.remark or ""), r.remark
        h.controller.topic_config_manager.update_topic_config(TopicConfig(topic_name="ReadOnly", perm=4))
        r = await h.call(send_v1("ReadOnly", b"x"))
        assert r.code == ResponseCode.NO_PERMISSION and "ReadOnly" in r.remark
        assert store.get_commit_log_max_offset() == before


async def test_auto_create_off_answers_topic_not_exist(tmp_path: Path) -> None:
    async with running_broker(tmp_path, autoCreateTopicEnable="false") as h:
        r = await h.call(send_v1("Nope", b"x"))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert r.remark.startswith("topic[Nope] not exist, apply first please!")
        assert h.controller.topic_config_manager.select_topic_config("Nope") is None
        # Retry topics are still created on demand.
        r = await h.call(send_v1("%RETRY%grp", b"x"))
        assert r.code == ResponseCode.SUCCESS, r.remark


async def test_auto_create_uses_client_queue_count(broker: BrokerHarness) -> None:
    r = await broker.call(send_v1("Auto2", b"x", default_queue_nums=2))
    assert r.code == ResponseCode.SUCCESS
    tc = broker.controller.topic_config_manager.select_topic_config("Auto2")
    assert tc is not None and tc.write_queue_nums == 2 and tc.perm == 6


async def test_pull_statuses_and_errors(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        await h.call(send_v1("P", b"m0", queue_id=0))
        await h.call(send_v1("P", b"m1", queue_id=0))
        await dispatched(h)
        no_suspend = 0x4

        async def code(cmd: RemotingCommand) -> tuple[int, str, dict[str, str]]:
            r = await h.call(cmd)
            return r.code, r.remark or "", r.ext_fields or {}

        c, _, ext = await code(pull("P", 0, -1, sys_flag=no_suspend))
        assert c == ResponseCode.PULL_OFFSET_MOVED and ext["nextBeginOffset"] == "0"
        c, _, ext = await code(pull("P", 0, 50, sys_flag=no_suspend))
        assert c == ResponseCode.PULL_OFFSET_MOVED and ext["nextBeginOffset"] == "2"  # OVERFLOW_BADLY
        c, remark, _ = await code(pull("P", 0, 2, sys_flag=no_suspend))
        assert c == ResponseCode.PULL_NOT_FOUND and remark == "OFFSET_OVERFLOW_ONE"
        c, _, _ = await code(pull("P", 1, 0, sys_flag=no_suspend))
        assert c == ResponseCode.PULL_NOT_FOUND  # empty queue pulled from 0
        c, _, _ = await code(pull("P", 1, 3, sys_flag=no_suspend))
        assert c == ResponseCode.PULL_OFFSET_MOVED  # empty queue pulled from elsewhere
        c, remark, _ = await code(pull("NoSuchTopic", 0, 0))
        assert c == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in remark
        c, remark, _ = await code(pull("P", 9, 0))
        assert c == ResponseCode.SYSTEM_ERROR and "queueId[9] is illegal" in remark
        c, remark, _ = await code(pull("P", 0, 0, sys_flag=0x2, subscription=None))
        assert c == ResponseCode.SUBSCRIPTION_NOT_EXIST  # no heartbeat, no subscription in the pull
        h.controller.topic_config_manager.update_topic_config(TopicConfig(topic_name="WriteOnly", perm=2))
        c, remark, _ = await code(pull("WriteOnly", 0, 0))
        assert c == ResponseCode.NO_PERMISSION and "WriteOnly" in remark
        sgm = h.controller.subscription_group_manager
        sgm.find_subscription_group_config("Disabled")
        sgm.disable_consume("Disabled")
        c, _, _ = await code(pull("P", 0, 0, group="Disabled"))
        assert c == ResponseCode.NO_PERMISSION
        sql = pull("P", 0, 0, subscription="a > 1")
        sql.ext_fields["expressionType"] = "SQL92"
        c, remark, _ = await code(sql)
        assert c == ResponseCode.SYSTEM_ERROR and "SQL92" in remark  # not delivered unfiltered
        hdr = pull("P", 0, 0)
        del hdr.ext_fields["queueOffset"]
        c, remark, _ = await code(hdr)
        assert c == ResponseCode.INVALID_PARAMETER and "queueOffset" in remark


async def test_pull_for_unknown_group_with_auto_create_off(tmp_path: Path) -> None:
    async with running_broker(tmp_path, autoCreateSubscriptionGroup="false") as h:
        await h.call(send_v1("P", b"m0", queue_id=0))
        await dispatched(h)
        r = await h.call(pull("P", 0, 0, group="Stranger"))
        assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert "Stranger" in r.remark and "does not exist" in r.remark
        assert h.controller.subscription_group_manager.find_subscription_group_config("Stranger", create=False) is None
        assert h.controller.consumer_offset_manager.offset_table == {}


@pytest.mark.parametrize("before", [[b"first"], [b"a", b"b", b"c"]], ids=["one record before", "records before"])
async def test_long_poll_is_answered_by_arrival(broker: BrokerHarness, before: list[bytes]) -> None:
    """Also on a queue whose records went by while nothing was held on it: the store keeps, per queue,
    whether a listener wants its records, and the hold service tells it when a pull is held."""
    h = broker
    for body in before:  # one at a time: each dispatched before the next
        await h.call(send_v1("LP", body, queue_id=0))
        await dispatched(h)
    fut = await h.client.invoke_future(h.addr, pull("LP", 0, len(before), suspend_ms=10000), 15000)
    await asyncio.sleep(0.1)
    assert not fut.done() and h.controller.pull_request_hold_service.held == 1
    t0 = time.monotonic()
    await h.call(send_v1("LP", b"next", queue_id=0))
    p = await asyncio.wait_for(fut, 5)
    elapsed_ms = (time.monotonic() - t0) * 1000
    assert p.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(p.body)] == [b"next"]
    assert elapsed_ms < 1000, elapsed_ms  # event-driven, not the 5 s re-check
    assert h.controller.pull_request_hold_service.held == 0


async def test_held_pull_ignores_other_tags_then_times_out(broker: BrokerHarness) -> None:
    h = broker
    await h.call(send_v1("LP2", b"first", queue_id=0, properties=props("x")))
    await dispatched(h)
    t0 = time.monotonic()
    fut = await h.client.invoke_future(h.addr, pull("LP2", 0, 1, subscription="wanted", suspend_ms=600), 5000)
    await asyncio.sleep(0.1)
    await h.call(send_v1("LP2", b"other", queue_id=0, properties=props("nope")))
    await asyncio.sleep(0.2)
    assert not fut.done()
    p = await asyncio.wait_for(fut, 5)
    assert time.monotonic() - t0 >= 0.55
    # Woken at timeout, the pull skips the unmatched message.
    assert p.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND)
    assert PullMessageResponseHeader.decode(p.ext_fields).next_begin_offset == 2


async def test_held_pull_times_out_with_pull_not_found(broker: BrokerHarness) -> None:
    make_topic(broker, "Empty")
    t0 = time.monotonic()
    p = await broker.call(pull("Empty", 0, 0, suspend_ms=300))
    assert p.code == ResponseCode.PULL_NOT_FOUND
    assert 0.25 <= time.monotonic() - t0 < 3


async def test_short_polling_when_long_polling_is_off(tmp_path: Path) -> None:
    async with running_broker(tmp_path, longPollingEnable="false", shortPollingTimeMills="200") as h:
        make_topic(h, "Empty")
        t0 = time.monotonic()
        p = await h.call(pull("Empty", 0, 0, suspend_ms=10000))
        assert p.code == ResponseCode.PULL_NOT_FOUND
        assert time.monotonic() - t0 < 2


async def test_too_many_held_pulls_is_system_busy(tmp_path: Path) -> None:
    async with running_broker(tmp_path, maxHeldPullRequests="1") as h:
        make_topic(h, "Busy")
        fut = await h.client.invoke_future(h.addr, pull("Busy", 0, 0, suspend_ms=5000), 8000)
        await asyncio.sleep(0.1)
        r = await h.call(pull("Busy", 1, 0, suspend_ms=5000))
        assert r.code == ResponseCode.SYSTEM_BUSY
        await h.call(send_v1("Busy", b"x", queue_id=0))
        assert (await asyncio.wait_for(fut, 5)).code == ResponseCode.SUCCESS


async def test_pull_commits_offset(broker: BrokerHarness) -> None:
    h = broker
    await h.call(send_v1("C", b"x", queue_id=0))
    await dispatched(h)
    r = await h.call(pull("C", 0, 1, sys_flag=0x1 | 0x4, commit_offset=1))
    assert r.code == ResponseCode.PULL_NOT_FOUND
    assert h.controller.consumer_offset_manager.query_offset("CG", "C", 0) == 1


async def test_send_waiting_too_long_is_flow_controlled(broker: BrokerHarness) -> None:
    proc = broker.controller.send_message_processor
    ctx = SimpleNamespace(queued_ms=lambda: 350.0, remote_addr="127.0.0.1:1", conn=None)
    r = await proc.process_request(ctx, send_v1("Slow", b"x"))  # type: ignore[arg-type]
    assert r.code == ResponseCode.SYSTEM_BUSY
    assert r.remark.startswith("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 350ms")
    assert "size of queue: 0" in r.remark


async def test_a_zero_queue_wait_sheds_what_queued_not_every_request(tmp_path: Path) -> None:
    """waitTimeMillsInSendQueue / waitTimeMillsInPullQueue = 0: Java sheds only requests still queued when
    its sweep looks, so a request taken at once goes through (before: every request was refused, since
    each measurably waits a few microseconds); one that waited a millisecond is shed."""
    async with running_broker(tmp_path, waitTimeMillsInSendQueue=0, waitTimeMillsInPullQueue=0) as h:
        for waited, code in ((0.05, ResponseCode.SUCCESS), (1.5, ResponseCode.SYSTEM_BUSY)):
            ctx = SimpleNamespace(queued_ms=lambda w=waited: w, remote_addr="127.0.0.1:1", conn=None)
            r = await h.controller.send_message_processor.process_request(  # type: ignore[arg-type]
                ctx, send_v1("Zero", b"x", queue_id=0)
            )
            assert r.code == code, (waited, r.remark)
        await dispatched(h)
        for waited, code in ((0.05, ResponseCode.SUCCESS), (1.5, ResponseCode.SYSTEM_BUSY)):
            ctx = SimpleNamespace(queued_ms=lambda w=waited: w, remote_addr="127.0.0.1:1", conn=None)
            r = h.controller.pull_message_processor.process_request(ctx, pull("Zero", 0, 0))  # type: ignore[arg-type]
            if not isinstance(r, RemotingCommand):
                r = await r  # type: ignore[misc]
            assert r is not None and r.code == code, (waited, r.remark if r else None)
        # through the real connection too
        assert (await h.call(send_v1("Zero", b"y", queue_id=0))).code == ResponseCode.SUCCESS


async def test_message_transformer_hook(broker: BrokerHarness) -> None:
    h = broker
    seen: list[tuple[str, str | None]] = []

    def redirect(msg: MessageExtBrokerInner, sctx: SendMessageContext) -> RemotingCommand | None:
        seen.append((msg.topic, sctx.producer_group))
        if msg.properties.get("PARK"):
            msg.properties["REAL_TOPIC"] = msg.topic
            msg.topic = "Parked"
            msg.queue_id = 0
            msg.properties_string = ""
        if msg.properties.get("REJECT"):
            return RemotingCommand(code=ResponseCode.NO_PERMISSION, remark="rejected by hook")
        return None

    h.controller.topic_config_manager.update_topic_config(TopicConfig(topic_name="Parked", read_queue_nums=1, write_queue_nums=1))
    h.controller.send_message_processor.add_message_transformer(redirect)
    r = await h.call(send_v1("Hooked", b"later", properties=props(PARK="1")))
    assert r.code == ResponseCode.SUCCESS
    r = await h.call(send_v1("Hooked", b"no", properties=props(REJECT="1")))
    assert r.code == ResponseCode.NO_PERMISSION and r.remark == "rejected by hook"
    await dispatched(h)
    [m] = decode_messages((await h.call(pull("Parked", 0, 0))).body)
    assert m.body == b"later" and m.properties["REAL_TOPIC"] == "Hooked"
    assert seen == [("Hooked", "PG"), ("Hooked", "PG")]


async def test_message_transformer_with_triggers_skips_plain_sends(broker: BrokerHarness) -> None:
    h = broker
    seen: list[str] = []

    def mark(msg: MessageExtBrokerInner, sctx: SendMessageContext) -> RemotingCommand | None:
        seen.append(msg.properties["MARK"])
        return None

    h.controller.send_message_processor.add_message_transformer(mark, triggers=("MARK",))
    for p in (props(), props(MARK="a"), props(OTHER="x"), props(MARK="b")):
        r = await h.call(send_v1("Triggered", b"m", properties=p))
        assert r.code == ResponseCode.SUCCESS
    assert seen == ["a", "b"]  # only the sends that carry the trigger property
    # The broker's own transformers still act: a DELAY send is parked in SCHEDULE_TOPIC_XXXX.
    r = await h.call(send_v1("Triggered", b"later", properties=props(DELAY="3")))
    assert r.code == ResponseCode.SUCCESS
    await dispatched(h)
    assert h.controller.message_store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 1


async def test_consumer_send_back_goes_to_retry_then_dlq(tmp_path: Path) -> None:
    # Short delay levels: a send-back is parked in SCHEDULE_TOPIC_XXXX at level 3 first.
    async with running_broker(tmp_path / "store", messageDelayLevel="100ms 100ms 100ms 100ms") as h:
        r = await h.call(send_v1("Work", b"job", queue_id=0, properties=props("t", "k")))
        phy = decode_offset_msg_id(SendMessageResponseHeader.decode(r.ext_fields).msg_id)[2]
        back = ConsumerSendMsgBackRequestHeader(offset=phy, group="Workers", delay_level=0, origin_msg_id="ORIG",
                                                origin_topic="Work", max_reconsume_times=1)
        r = await h.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, back.encode()))
        assert r.code == ResponseCode.SUCCESS, r.remark
        # Long poll on the retry queue: answered when the scheduled delivery lands.
        resp = await h.call(pull("%RETRY%Workers", 0, 0, group="Workers", suspend_ms=5000), timeout_ms=10000)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        [m] = decode_messages(resp.body)
        assert m.body == b"job" and m.reconsume_times == 1
        assert m.properties["RETRY_TOPIC"] == "Work" and "DELAY" not in m.properties
        assert m.properties["ORIGIN_MESSAGE_ID"]
        # Its second failure exceeds max_reconsume_times=1: the dead letter queue (read from the store).
        back.offset = m.commit_log_offset
        r = await h.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, back.encode()))
        assert r.code == ResponseCode.SUCCESS
        await dispatched(h)
        store = h.controller.message_store
        assert store.get_max_offset_in_queue("%DLQ%Workers", 0) == 1
        got = store.get_message("Workers", "%DLQ%Workers", 0, 0, 1)
        [d] = decode_messages(got.body())
        assert d.body == b"job" and "DELAY" not in d.properties and d.reconsume_times == 2


async def test_send_to_retry_topic_past_max_goes_to_dlq(broker: BrokerHarness) -> None:
    h = broker
    r = await h.call(send_v1("%RETRY%G9", b"late", reconsume_times=16, queue_id=0))
    assert r.code == ResponseCode.SUCCESS, r.remark
    await dispatched(h)
    assert h.controller.message_store.get_max_offset_in_queue("%DLQ%G9", 0) == 1
    assert h.controller.message_store.get_max_offset_in_queue("%RETRY%G9", 0) == 0


async def test_reads_right_after_an_acknowledged_send_see_it(broker: BrokerHarness) -> None:
    """Consume queues are built after the put is acknowledged; max offset and non-held pulls wait."""
    from remoting.headers import OffsetResponseHeader, TopicQueueRequestHeader

    h = broker
    tq = TopicQueueRequestHeader(topic="RYW", queue_id=0).encode()
    for i in range(60):
        assert (await h.call(send_v1("RYW", f"m{i}".encode(), queue_id=0))).code == ResponseCode.SUCCESS
        if i % 2:
            r = await h.call(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, dict(tq)))
            assert OffsetResponseHeader.decode(r.ext_fields).offset == i + 1
        else:
            p = await h.call(pull("RYW", 0, i, sys_flag=0x4))
            assert p.code == ResponseCode.SUCCESS, (i, p.code, p.remark)
            assert [m.body for m in decode_messages(p.body)] == [f"m{i}".encode()]


async def test_held_pull_on_a_new_queue_has_its_consume_queue_file_made_before_the_first_message(
    broker: BrokerHarness,
) -> None:
    """Dispatch is one task: creating a new queue's file when its first message comes stalled every
    queue. A consumer already waiting on the queue has the file made while it waits."""
    h = broker
    make_topic(h, "NewQ", queues=2)
    make_topic(h, "%RETRY%G", queues=1)
    store = h.controller.message_store
    fut = await h.client.invoke_future(h.addr, pull("NewQ", 1, 0, suspend_ms=10000), 15000)
    retry = await h.client.invoke_future(h.addr, pull("%RETRY%G", 0, 0, suspend_ms=10000), 15000)
    for _ in range(100):
        cq = store.get_consume_queue("NewQ", 1)
        if cq is not None and cq.mapped_file_queue.mapped_files:
            break
        await asyncio.sleep(0.02)
    assert cq is not None and len(cq.mapped_file_queue.mapped_files) == 1
    assert store.get_consume_queue("NewQ", 0) is None  # nobody waits there
    retry_cq = store.get_consume_queue("%RETRY%G", 0)
    assert retry_cq is None or not retry_cq.mapped_file_queue.mapped_files  # group topics: file on first message
    assert not fut.done() and not retry.done()  # both held
    await h.call(send_v1("NewQ", b"first", queue_id=1))
    p = await asyncio.wait_for(fut, 5)
    assert p.code == ResponseCode.SUCCESS
    assert [(m.body, m.queue_offset) for m in decode_messages(p.body)] == [(b"first", 0)]
    assert len(cq.mapped_file_queue.mapped_files) == 1  # the dispatcher used it, made no other
    # Once a message was put, the dispatcher makes what it needs: nothing is ordered any more.
    assert store.prepare_consume_queue("NewQ", 1) is False
    await h.call(send_v1("NewQ", b"x", queue_id=0))
    await dispatched(h)
    assert store.prepare_consume_queue("NewQ", 0) is False
    retry.cancel()


async def test_pull_at_the_end_of_a_queue_with_messages_is_held_committed_and_counted(tmp_path: Path) -> None:
    """The long-polling pull that finds nothing new (its offset is the end of a queue that has messages) is
    held without get_message's result: it still commits the consumer's offset, counts a store miss as
    get_message would, answers SYSTEM_BUSY past the held limit and an error when the store is unreadable."""
    async with running_broker(tmp_path, maxHeldPullRequests="1") as h:
        make_topic(h, "End")
        for q in (0, 1):
            await h.call(send_v1("End", b"x", queue_id=q))
        await dispatched(h)
        stats = h.controller.message_store.store_stats_service
        misses = stats.get_message_times_total_miss
        fut = await h.client.invoke_future(
            h.addr, pull("End", 0, 1, sys_flag=0x1 | 0x2 | 0x4, commit_offset=1, suspend_ms=5000), 8000)
        await wait_until(lambda: h.controller.pull_request_hold_service.held == 1)
        assert not fut.done()
        assert h.controller.consumer_offset_manager.query_offset("CG", "End", 0) == 1
        assert stats.get_message_times_total_miss == misses + 1
        busy = await h.call(pull("End", 1, 1, suspend_ms=5000))
        assert busy.code == ResponseCode.SYSTEM_BUSY and "too many pull requests held" in (busy.remark or "")
        await h.call(send_v1("End", b"next", queue_id=0))
        p = await asyncio.wait_for(fut, 5)
        assert p.code == ResponseCode.SUCCESS and [m.body for m in decode_messages(p.body)] == [b"next"]
        flags = h.controller.message_store.running_flags
        flags.flag_bits |= flags.NOT_READABLE_BIT
        try:
            r = await h.call(pull("End", 1, 1, suspend_ms=5000))
        finally:
            flags.flag_bits &= ~flags.NOT_READABLE_BIT
        assert r.code == ResponseCode.SYSTEM_ERROR and "not readable" in (r.remark or "")
