"""Request-reply (RocketMQ 4.6+: `Producer.request`, `create_reply_message`) against real daemons: the
reply goes to <cluster>_REPLY_TOPIC with SEND_REPLY_MESSAGE_V2, the broker pushes it to the requester
(PUSH_REPLY_MESSAGE_TO_CLIENT) and stores it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from client import (
    ConsumeConcurrentlyStatus,
    LitePullConsumer,
    Message,
    MessageExt,
    MQBrokerError,
    MQClientError,
    Producer,
    PushConsumer,
    RequestTimeoutError,
    create_reply_message,
)
from client import sync as sync_client
from remoting.codes import ResponseCode
from tests.support.daemons import Daemon, start_broker

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


async def _create_topic(ns: str, topic: str) -> None:
    from client import Admin

    async with Admin(ns) as admin:
        await admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)


def _responder(ns: str, topic: str, group: str, replies: list[object]) -> tuple[PushConsumer, Producer]:
    """A consumer that answers every request with b're:' + its body, sent by its own producer."""
    producer = Producer(f"{group}_P", ns)

    async def on_messages(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            replies.append(await producer.send(create_reply_message(m, b"re:" + m.body)))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(topic)
    consumer.register_listener(on_messages)
    return consumer, producer


async def test_request_gets_the_reply_its_consumer_sends(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    await _create_topic(ns, "RR")
    sent: list[object] = []
    consumer, responder = _responder(ns, "RR", "rr_group", sent)
    await responder.start()
    await consumer.start()
    try:
        async with Producer("rr_requester", ns) as requester:
            requests = [Message("RR", b"ping-%d" % i, tags="q") for i in range(8)]
            replies = await asyncio.gather(*(requester.request(m, timeout=15000) for m in requests))
            assert [r.body for r in replies] == [b"re:ping-%d" % i for i in range(8)]
            for req, rep in zip(requests, replies, strict=True):
                assert rep.topic == REPLY_TOPIC
                assert rep.properties["CORRELATION_ID"] == req.properties["CORRELATION_ID"]
                assert rep.properties["REPLY_TO_CLIENT"] == requester.instance.client_id
                assert int(rep.properties["ARRIVE_TIME"]) >= int(rep.properties["PUSH_REPLY_TIME"]) - 5000
                assert rep.born_host[1] > 0 and rep.store_host[1] > 0
            assert requester.instance.request_futures == {}
            # the replies were stored as well (storeReplyMessageEnable): each send result names its place
            # (the broker pushes a reply before it stores it: its sender hears back a little later)
            for _ in range(100):
                if len(sent) == 8:
                    break
                await asyncio.sleep(0.05)
            assert len(sent) == 8 and all(r.offset_msg_id != "0" for r in sent)  # type: ignore[attr-defined]
            assert sorted(r.queue_offset for r in sent) == list(range(8))  # type: ignore[attr-defined]
    finally:
        await consumer.shutdown()
        await responder.shutdown()


async def test_a_request_nobody_answers_times_out(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    await _create_topic(ns, "RRSilent")
    async with Producer("rr_silent", ns) as requester:
        t0 = time.monotonic()
        with pytest.raises(RequestTimeoutError) as e:
            await requester.request(Message("RRSilent", b"anyone?"), timeout=700)
        assert 0.6 <= time.monotonic() - t0 < 5 and "700 ms" in str(e.value)
        assert requester.instance.request_futures == {}


async def test_a_reply_for_a_requester_that_is_gone_is_refused(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    request = MessageExt(topic="RR", body=b"x", properties={
        "CLUSTER": "DefaultCluster", "REPLY_TO_CLIENT": "127.0.0.1@gone", "CORRELATION_ID": "c-1", "TTL": "3000"})
    reply = create_reply_message(request, b"late")
    assert reply.topic == REPLY_TOPIC and reply.properties["MSG_TYPE"] == "reply"
    async with Producer("rr_orphan", ns) as p:
        with pytest.raises(MQBrokerError) as e:
            await p.send(reply)
        assert e.value.code == ResponseCode.SYSTEM_ERROR and "127.0.0.1@gone" in e.value.remark
    with pytest.raises(MQClientError, match="CLUSTER"):
        create_reply_message(MessageExt(topic="RR", body=b"x"), b"y")


def test_blocking_request(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    asyncio.run(_create_topic(ns, "RRSync"))
    sent: list[object] = []
    consumer = sync_client.PushConsumer("rr_sync_group", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    responder = sync_client.Producer("rr_sync_responder", ns)
    responder.start()

    def on_messages(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            sent.append(responder.send(create_reply_message(m, m.body[::-1])))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.subscribe("RRSync")
    consumer.register_listener(on_messages)
    consumer.start()
    requester = sync_client.Producer("rr_sync_requester", ns)
    requester.start()
    try:
        assert requester.request(Message("RRSync", b"abc"), timeout=15000).body == b"cba"
    finally:
        requester.shutdown()
        consumer.shutdown()
        responder.shutdown()


async def test_old_header_replies_and_replies_not_stored(namesrv: str, tmp_path: Path) -> None:
    """A responder sending SEND_REPLY_MESSAGE (long header names, sendSmartMsg=false) to a broker with
    storeReplyMessageEnable=false: the reply is pushed, not stored, and its send result says so (id "0")."""
    d, _addr = start_broker(tmp_path, namesrv, extra={"storeReplyMessageEnable": "false"})
    try:
        await _create_topic(namesrv, "RROld")
        requester = Producer("rr_old_requester", namesrv)
        responder = Producer("rr_old_responder", namesrv, send_smart_msg=False)
        await requester.start()
        await responder.start()
        try:
            pending = asyncio.ensure_future(requester.request(Message("RROld", b"q"), timeout=15000))
            # the request is stored as any message: read it back, as a consumer would get it
            reader = LitePullConsumer("rr_old_reader_group", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            reader.subscribe("RROld")
            await reader.start()
            try:
                got: list[MessageExt] = []
                for _ in range(40):
                    got += await reader.poll(0.25)
                    if got:
                        break
                assert len(got) == 1
                result = await responder.send(create_reply_message(got[0], b"a"))
            finally:
                await reader.shutdown()
            assert result.offset_msg_id == "0" and result.queue_offset == 0
            assert (await pending).body == b"a"
        finally:
            await requester.shutdown()
            await responder.shutdown()
    finally:
        d.terminate()
