"""Producer and client-runtime behaviour against in-process fake NameServer/brokers (error paths)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest

from client import Message, Producer, RemotingTimeout, get_client_manager
from client.errors import (
    BrokerSystemError,
    MessageIllegalError,
    NoNameServerError,
    NoRouteError,
)
from client.instance import MQClientInstance
from client.message import SendStatus
from remoting import RemotingCommand, RequestCode, ResponseCode
from remoting.body import ConsumerData, HeartbeatData, SubscriptionData
from remoting.message import MessageConst, encode_message_record, encode_properties
from tests.client.fakes import FakeBroker, FakeNameServer, wait_until
from tests.support.daemons import refused_port


@pytest.fixture
async def ns() -> AsyncIterator[FakeNameServer]:
    n = FakeNameServer()
    await n.start()
    yield n
    await n.stop()


@pytest.fixture
async def brokers() -> AsyncIterator[list[FakeBroker]]:
    made: list[FakeBroker] = []
    yield made
    for b in made:
        await b.stop()


async def new_broker(brokers: list[FakeBroker], name: str) -> FakeBroker:
    b = FakeBroker(name=name)
    await b.start()
    brokers.append(b)
    return b


def sends_with_code(cmds: list[RemotingCommand], code: int) -> list[RemotingCommand]:
    return [c for c in cmds if c.code == code]


async def test_system_busy_is_backed_off_then_retried(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    b = await new_broker(brokers, "broker-a")
    answers = iter([(ResponseCode.SYSTEM_BUSY, "[TIMEOUT_CLEAN_QUEUE]broker busy")])
    b.behaviour = lambda cmd: next(answers, "ok")
    ns.add_route("BusyTopic", {"broker-a": b.addr})
    async with Producer("busy_group", ns.addr, system_busy_backoff=150) as p:
        t0 = time.monotonic()
        r = await p.send(Message("BusyTopic", b"payload"))
        elapsed = time.monotonic() - t0
    assert r.status is SendStatus.SEND_OK
    assert len(b.sends) == 2
    uniq = [s.ext_fields["i"].split("UNIQ_KEY\x01")[1][:32] for s in b.sends]  # type: ignore[index]
    assert uniq[0] == uniq[1] == r.msg_id  # the same message was re-sent
    assert elapsed >= 0.14  # it waited before the retry


async def test_silent_broker_fails_within_the_send_budget(
    ns: FakeNameServer, brokers: list[FakeBroker]
) -> None:
    b = await new_broker(brokers, "broker-a")
    b.behaviour = lambda cmd: "hang"
    ns.add_route("SilentTopic", {"broker-a": b.addr})
    async with Producer("silent_group", ns.addr, send_msg_timeout=1000) as p:
        await p.fetch_publish_message_queues("SilentTopic")  # route cached: only the send is timed
        t0 = time.monotonic()
        with pytest.raises(RemotingTimeout) as ei:
            await p.send(Message("SilentTopic", b"x"))
        elapsed = time.monotonic() - t0
    assert 0.95 <= elapsed < 1.6
    text = str(ei.value)
    assert b.addr in text and "SilentTopic" in text and "attempts=1" in text
    assert len(b.sends) == 1  # no time left for a retry


async def test_non_retryable_code_raises_typed_error_at_once(
    ns: FakeNameServer, brokers: list[FakeBroker]
) -> None:
    b = await new_broker(brokers, "broker-a")
    b.behaviour = lambda cmd: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched",
    )
    ns.add_route("IllegalTopic", {"broker-a": b.addr})
    async with Producer("illegal_group", ns.addr) as p:
        with pytest.raises(MessageIllegalError) as ei:
            await p.send(Message("IllegalTopic", b"x"))
    e = ei.value
    assert e.code == 13 and e.addr == b.addr and "maybe msg body" in e.remark
    assert "attempts=1" in str(e) and "topic=IllegalTopic" in str(e)
    assert len(b.sends) == 1


async def test_retryable_code_moves_to_another_broker(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    bad = await new_broker(brokers, "broker-a")
    good = await new_broker(brokers, "broker-b")
    bad.behaviour = lambda cmd: (ResponseCode.SYSTEM_ERROR, "disk trouble")
    ns.add_route("RetryTopic", {"broker-a": bad.addr, "broker-b": good.addr})
    async with Producer("retry_group", ns.addr) as p:
        results = [await p.send(Message("RetryTopic", b"x")) for _ in range(6)]
        assert all(r.queue.broker_name == "broker-b" for r in results)
        assert len(good.sends) == 6 and len(bad.sends) >= 1
        good.behaviour = lambda cmd: (ResponseCode.SYSTEM_ERROR, "also broken")
        with pytest.raises(BrokerSystemError) as ei:
            await p.send(Message("RetryTopic", b"x"))
    text = str(ei.value)
    assert "attempts=3" in text and "broker-a" in text and "broker-b" in text


async def test_dead_broker_is_skipped_on_retry(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    live = await new_broker(brokers, "broker-live")
    with refused_port() as port:
        dead_addr = f"127.0.0.1:{port}"  # bound, never listening: connects are refused
        ns.add_route("HalfDead", {"broker-dead": dead_addr, "broker-live": live.addr})
        async with Producer("dead_group", ns.addr) as p:
            results = [await p.send(Message("HalfDead", b"x")) for _ in range(8)]
    assert {r.queue.broker_name for r in results} == {"broker-live"}
    assert len(live.sends) == 8


async def test_latency_fault_tolerance_keeps_away_from_a_failing_broker(
    ns: FakeNameServer, brokers: list[FakeBroker]
) -> None:
    bad = await new_broker(brokers, "broker-a")
    good = await new_broker(brokers, "broker-b")
    bad.behaviour = lambda cmd: (ResponseCode.SYSTEM_ERROR, "broken")
    ns.add_route("FaultTopic", {"broker-a": bad.addr, "broker-b": good.addr})
    async with Producer("fault_group", ns.addr, send_latency_fault_enable=True) as p:
        for _ in range(10):  # until the round robin has tried (and been failed by) broker-a once
            await p.send(Message("FaultTopic", b"x"))
            if bad.sends:
                break
        hits = len(bad.sends)
        assert hits == 1
        for _ in range(20):
            await p.send(Message("FaultTopic", b"x"))
        assert len(bad.sends) == hits  # isolated for 10 minutes after its failure
    async with Producer("nofault_group", ns.addr) as p2:
        before = len(bad.sends)
        for _ in range(20):
            await p2.send(Message("FaultTopic", b"x"))
        assert len(bad.sends) > before  # plain round robin keeps trying it first now and then


async def test_orderly_send_is_never_retried(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    bad = await new_broker(brokers, "broker-a")
    good = await new_broker(brokers, "broker-b")
    bad.behaviour = lambda cmd: (ResponseCode.SYSTEM_ERROR, "broken")
    ns.add_route("OrderTopic", {"broker-a": bad.addr, "broker-b": good.addr})
    async with Producer("order_group", ns.addr) as p:
        queues = await p.fetch_publish_message_queues("OrderTopic")
        with pytest.raises(BrokerSystemError) as ei:
            await p.send_orderly(Message("OrderTopic", b"x"), 0, lambda qs, m, arg: qs[arg])
        r = await p.send_orderly(Message("OrderTopic", b"y"), 0, lambda qs, m, arg: qs[-1])
    assert queues[0].broker_name == "broker-a"
    assert len(bad.sends) == 1 and "attempts=1" in str(ei.value)
    assert r.queue == queues[-1]


async def test_namesrv_failover_then_no_available_namesrv(
    ns: FakeNameServer, brokers: list[FakeBroker]
) -> None:
    b = await new_broker(brokers, "broker-a")
    ns.add_route("FailoverTopic", {"broker-a": b.addr})
    with refused_port() as port:
        dead = f"127.0.0.1:{port}"
        async with Producer("failover_group", f"{dead};{ns.addr}") as p:
            r = await p.send(Message("FailoverTopic", b"x"))
            assert r.status is SendStatus.SEND_OK
            assert p.instance.api.chosen_namesrv == ns.addr  # remembered: the next lookup starts there
            await ns.stop()
            with pytest.raises(NoNameServerError) as ei:
                await p.send(Message("OtherTopic", b"x"))
            assert "no available NameServer" in str(ei.value)
            assert dead in str(ei.value) and ns.addr in str(ei.value)
            # The cached route keeps working without a NameServer.
            assert (await p.send(Message("FailoverTopic", b"x"))).status is SendStatus.SEND_OK


async def test_unknown_topic_without_template_has_no_route(ns: FakeNameServer) -> None:
    async with Producer("noroute_group", ns.addr) as p:
        with pytest.raises(NoRouteError, match="No route info of this topic: Nowhere"):
            await p.send(Message("Nowhere", b"x"))
    codes = [c.code for c in ns.requests]
    assert codes.count(RequestCode.GET_ROUTEINFO_BY_TOPIC) == 2  # the topic, then the TBW102 template
    assert ns.requests[-1].ext_fields == {"topic": "TBW102"}


async def test_auto_create_template_route_is_used_for_a_new_topic(
    ns: FakeNameServer, brokers: list[FakeBroker]
) -> None:
    b = await new_broker(brokers, "broker-a")
    ns.add_route("TBW102", {"broker-a": b.addr}, queues=8)
    async with Producer("auto_group", ns.addr, default_topic_queue_nums=3) as p:
        r = await p.send(Message("BrandNew", b"x"))
        queues = await p.fetch_publish_message_queues("BrandNew")
    assert r.queue.topic == "BrandNew" and len(queues) == 3  # min(defaultTopicQueueNums, template)
    assert b.sends[0].ext_fields["b"] == "BrandNew" and b.sends[0].ext_fields["c"] == "TBW102"  # type: ignore[index]


async def test_heartbeat_on_start_and_unregister_on_shutdown(
    ns: FakeNameServer, brokers: list[FakeBroker]
) -> None:
    b = await new_broker(brokers, "broker-a")
    ns.add_route("HbTopic", {"broker-a": b.addr})
    p = Producer("hb_group", ns.addr)
    await p.start()
    client_id = p.instance.client_id
    await p.send(Message("HbTopic", b"x"))
    await wait_until(lambda: bool(sends_with_code(b.others, RequestCode.HEART_BEAT)))
    hb = HeartbeatData.decode(sends_with_code(b.others, RequestCode.HEART_BEAT)[0].body)
    assert hb.client_id == client_id and [d.group_name for d in hb.producer_data_set] == ["hb_group"]
    await p.shutdown()
    unreg = sends_with_code(b.others, RequestCode.UNREGISTER_CLIENT)
    assert len(unreg) == 1 and unreg[0].ext_fields == {"clientID": client_id, "producerGroup": "hb_group"}


async def test_one_instance_per_namesrv_set_refcounted(ns: FakeNameServer) -> None:
    p1, p2 = Producer("share_a", ns.addr), Producer("share_b", ns.addr)
    await p1.start()
    await p2.start()
    inst = p1.instance
    assert p2.instance is inst and inst.refcount == 2
    assert inst in get_client_manager().instances()
    await p1.shutdown()
    assert not inst.closed and inst.refcount == 1
    await p2.shutdown()
    assert inst.closed and inst not in get_client_manager().instances()
    p3 = Producer("share_c", f"{ns.addr};127.0.0.1:1")
    await p3.start()
    assert p3.instance is not inst and p3.instance.client_id != inst.client_id
    await p3.shutdown()


async def test_send_async_future_and_callback(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    b = await new_broker(brokers, "broker-a")
    ns.add_route("AsyncTopic", {"broker-a": b.addr})
    got: list[tuple[object, object]] = []
    async with Producer("async_group", ns.addr, send_msg_timeout=500) as p:
        futs = [
            p.send_async(Message("AsyncTopic", b"%d" % i), lambda r, e: got.append((r, e))) for i in range(50)
        ]
        results = await asyncio.gather(*futs)
        assert len({r.queue_offset for r in results}) == 50
        await wait_until(lambda: len(got) == 50)
        assert all(r is not None and e is None for r, e in got)
        b.behaviour = lambda cmd: "hang"
        failed: list[tuple[object, object]] = []
        fut = p.send_async(Message("AsyncTopic", b"late"), lambda r, e: failed.append((r, e)))
        with pytest.raises(RemotingTimeout):
            await fut
        await wait_until(lambda: bool(failed))
        assert failed[0][0] is None and isinstance(failed[0][1], RemotingTimeout)


async def test_send_oneway_expects_no_answer(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    b = await new_broker(brokers, "broker-a")
    b.behaviour = lambda cmd: "hang"  # would never answer: oneway must not wait
    ns.add_route("OnewayTopic", {"broker-a": b.addr})
    async with Producer("oneway_group", ns.addr) as p:
        t0 = time.monotonic()
        await p.send_oneway(Message("OnewayTopic", b"x"))
        assert time.monotonic() - t0 < 0.5
        await wait_until(lambda: len(b.sends) == 1)
    assert b.sends[0].is_oneway


class _TxProducer(Producer):
    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.checked: list[tuple[str, object]] = []

    async def check_transaction_state(self, broker_addr, msg, header):  # type: ignore[no-untyped-def, override]
        self.checked.append((msg.uniq_key, header.commit_log_offset))


class _DummyConsumer:
    group = "dummy_consumer_group"

    def __init__(self) -> None:
        self.reset: list[tuple[str, dict]] = []

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group, subscription_data_set=[SubscriptionData(topic="CbTopic", sub_string="*")]
        )

    def subscribed_topics(self) -> list[str]:
        return ["CbTopic"]

    def reset_offset(self, topic: str, table: dict) -> None:
        self.reset.append((topic, table))


async def test_broker_to_client_requests_are_served(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    b = await new_broker(brokers, "broker-a")
    ns.add_route("CbTopic", {"broker-a": b.addr})
    async with _TxProducer("tx_group", ns.addr) as p:
        await p.send(Message("CbTopic", b"x"))
        inst: MQClientInstance = p.instance
        (conn,) = list(b.server.connections)
        woken: list[int] = []
        inst.rebalance_listeners.append(lambda: woken.append(1))

        notify = RemotingCommand.request(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"}, oneway=True
        )
        conn.invoke_oneway(notify)
        await wait_until(lambda: bool(woken))

        record = encode_message_record(
            topic="CbTopic",
            queue_id=0,
            flag=0,
            body=b"half",
            properties=encode_properties(
                {MessageConst.PROPERTY_PRODUCER_GROUP: "tx_group", "UNIQ_KEY": "ABC"}
            ),
            sys_flag=0,
            born_timestamp=1,
            born_host=("127.0.0.1", 1),
            store_host=("127.0.0.1", 2),
        )
        check = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE,
            {"tranStateTableOffset": "5", "commitLogOffset": "77", "msgId": "ABC"},
            record,
            oneway=True,
        )
        conn.invoke_oneway(check)
        await wait_until(lambda: bool(p.checked))
        assert p.checked == [("ABC", 77)]

        info_req = {"consumerGroup": "nobody", "clientId": inst.client_id}
        resp = await conn.invoke(
            RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, info_req), 2000
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR and "nobody" in (resp.remark or "")

        consumer = _DummyConsumer()
        inst.register_consumer(consumer.group, consumer)
        try:
            info_req["consumerGroup"] = consumer.group
            resp = await conn.invoke(
                RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, info_req), 2000
            )
            assert resp.code == ResponseCode.SUCCESS
            body = json.loads(resp.body_bytes())
            assert body["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert body["subscriptionSet"][0]["topic"] == "CbTopic"

            reset = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                {"topic": "CbTopic", "group": consumer.group, "timestamp": "0", "isForce": "true"},
                b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"CbTopic"}:42}}',
            )
            resp = await conn.invoke(reset, 2000)
            assert resp.code == ResponseCode.SUCCESS
            ((topic, table),) = consumer.reset
            assert topic == "CbTopic" and list(table.values()) == [42]
            assert next(iter(table)).queue_id == 1
        finally:
            await inst.unregister_consumer(consumer.group)
    unreg = sends_with_code(b.others, RequestCode.UNREGISTER_CLIENT)
    assert {tuple(sorted(c.ext_fields.items())) for c in unreg} == {  # type: ignore[union-attr]
        (("clientID", inst.client_id), ("consumerGroup", consumer.group)),
        (("clientID", inst.client_id), ("producerGroup", "tx_group")),
    }


async def test_batch_rules_are_checked_before_sending(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    b = await new_broker(brokers, "broker-a")
    ns.add_route("BatchTopic", {"broker-a": b.addr})
    ns.add_route("OtherTopic", {"broker-a": b.addr})
    from client import InvalidMessageError

    async with Producer("batch_group", ns.addr, max_message_size=4096) as p:
        with pytest.raises(InvalidMessageError, match="same"):
            await p.send_batch([Message("BatchTopic", b"a"), Message("OtherTopic", b"b")])
        with pytest.raises(InvalidMessageError, match="TimeDelayLevel"):
            await p.send_batch([Message("BatchTopic", b"a", delay_level=2)])
        with pytest.raises(InvalidMessageError, match="over maxMessageSize 4096: split"):
            await p.send_batch([Message("BatchTopic", b"x" * 1000) for _ in range(5)])
        with pytest.raises(InvalidMessageError, match="at least one"):
            await p.send_batch([])
        r = await p.send_batch([Message("BatchTopic", b"x" * 10) for _ in range(3)])
    assert len(b.sends) == 1 and b.sends[0].code == RequestCode.SEND_BATCH_MESSAGE
    assert b.sends[0].ext_fields["m"] == "true"  # type: ignore[index]
    assert len(r.msg_id.split(",")) == 3


async def test_routes_refresh_and_heartbeats_repeat_on_their_intervals(
    ns: FakeNameServer, brokers: list[FakeBroker]
) -> None:
    from client import ClientConfig

    a = await new_broker(brokers, "broker-a")
    b = await new_broker(brokers, "broker-b")
    ns.add_route("PollTopic", {"broker-a": a.addr})
    cfg = ClientConfig(poll_name_server_interval=200, heartbeat_broker_interval=200)
    async with Producer("poll_group", ns.addr, client_config=cfg) as p:
        await p.send(Message("PollTopic", b"x"))
        assert set(p.instance.publish_info_table["PollTopic"].broker_names()) == {"broker-a"}
        ns.add_route("PollTopic", {"broker-a": a.addr, "broker-b": b.addr})  # a broker joins
        await wait_until(
            lambda: set(p.instance.publish_info_table["PollTopic"].broker_names()) == {"broker-a", "broker-b"}
        )
        # the new broker is told about the producer at once, and both keep getting heartbeats
        await wait_until(lambda: len(sends_with_code(b.others, RequestCode.HEART_BEAT)) >= 2)
        await wait_until(lambda: len(sends_with_code(a.others, RequestCode.HEART_BEAT)) >= 3)
        del ns.routes["PollTopic"]  # NameServer forgets the topic: the cached route stays usable
        await asyncio.sleep(0.5)
        assert (await p.send(Message("PollTopic", b"x"))).status is SendStatus.SEND_OK


async def test_delay_level_and_properties_on_the_wire(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    b = await new_broker(brokers, "broker-a")
    ns.add_route("WireTopic", {"broker-a": b.addr})
    async with Producer("wire_group", ns.addr, compress_msg_body_over_howmuch=100) as p:
        r = await p.send(
            Message("WireTopic", b"z" * 200, tags="T1", keys=["a", "b"], properties={"u": "1"}, delay_level=3)
        )
    (cmd,) = b.sends
    ext = cmd.ext_fields or {}
    from remoting.message import decode_properties

    props = decode_properties(ext["i"])
    assert props == {
        "TAGS": "T1",
        "KEYS": "a b",
        "u": "1",
        "DELAY": "3",
        "WAIT": "true",
        "UNIQ_KEY": r.msg_id,
    }
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and ext["a"] == "wire_group" and ext["b"] == "WireTopic"
    assert int(ext["f"]) & 1 and len(cmd.body_bytes()) < 200  # compressed, COMPRESSED sysFlag
    import zlib

    assert zlib.decompress(cmd.body_bytes()) == b"z" * 200


async def test_send_async_in_flight_is_bounded(ns: FakeNameServer, brokers: list[FakeBroker]) -> None:
    b = await new_broker(brokers, "broker-a")
    b.behaviour = lambda cmd: "hang"
    ns.add_route("BoundTopic", {"broker-a": b.addr})
    async with Producer("bound_group", ns.addr, max_async_inflight=3, send_msg_timeout=300) as p:
        await p.fetch_publish_message_queues("BoundTopic")
        futs = [p.send_async(Message("BoundTopic", b"%d" % i)) for i in range(5)]
        await wait_until(lambda: len(b.sends) == 3)
        await asyncio.sleep(0.1)
        assert len(b.sends) == 3  # the other two wait for a slot
        b.behaviour = lambda cmd: "ok"
        results = await asyncio.gather(*futs, return_exceptions=True)
    assert [type(r).__name__ for r in results[:3]] == ["RemotingTimeoutError"] * 3
    assert all(getattr(r, "status", None) is SendStatus.SEND_OK for r in results[3:])


async def test_inflight_limiter_hands_slots_over_in_order_and_survives_cancel() -> None:
    from client.producer.producer import _InflightLimiter

    lim = _InflightLimiter(1)
    await lim.acquire()
    order: list[int] = []

    async def user(n: int) -> None:
        await lim.acquire()
        order.append(n)
        lim.release()

    t1 = asyncio.ensure_future(user(1))
    t2 = asyncio.ensure_future(user(2))
    t3 = asyncio.ensure_future(user(3))
    await asyncio.sleep(0)
    t2.cancel()  # a waiter gives up
    lim.release()
    await asyncio.gather(t1, t3)
    assert order == [1, 3] and t2.cancelled()
    assert lim.active == 0
