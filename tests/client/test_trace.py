"""Message trace (`enable_msg_trace=True`): RocketMQ's trace data format, the bounded dispatcher, and a
producer and a push consumer traced end to end against real daemons, read back by `queryMsgTraceById`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from client import (
    Admin,
    ConsumeConcurrentlyStatus,
    LitePullConsumer,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from client.config import ClientConfig
from client.trace import (
    QUEUE_MAX,
    AsyncTraceDispatcher,
    ConsumeReturnType,
    TraceBean,
    TraceContext,
    TraceType,
    decode_trace_data,
    encode_trace_context,
)
from tests.client.test_mqadmin import fails, ok
from tests.consumer.conftest import wait_until
from tests.consumer.test_lite_pull import poll_until
from tests.support.daemons import Daemon


async def read_trace(
    ns: str, msg_id: str, enough: Callable[[list[TraceContext]], bool], topic: str | None = None
) -> list[TraceContext]:
    """The message's trace records once `enough` holds of them, or after ~10 s (the trace topic's index is
    built as the broker dispatches what the dispatchers flushed)."""
    async with Admin(ns) as admin:
        for _ in range(100):
            trace = await admin.query_msg_trace(msg_id, topic)
            if enough(trace):
                break
            await asyncio.sleep(0.1)
    return trace


def test_pub_record_is_rocketmqs_format() -> None:
    ctx = TraceContext(TraceType.Pub, 1700000000000, "DefaultRegion", "PG", cost_time=3, success=True, trace_beans=[
        TraceBean(topic="T", msg_id="ID1", offset_msg_id="OFF1", tags="TagA", keys="k1 k2", store_host="1.2.3.4:10911",
                  body_length=5)])
    data, keys = encode_trace_context(ctx)
    assert data == "\x01".join(["Pub", "1700000000000", "DefaultRegion", "PG", "T", "ID1", "TagA", "k1 k2",
                                "1.2.3.4:10911", "5", "3", "0", "OFF1", "true"]) + "\x02"
    assert keys == {"ID1", "k1", "k2"}
    back = decode_trace_data(data)[0]
    assert back.trace_type is TraceType.Pub and back.trace_beans[0] == ctx.trace_beans[0] and back.cost_time == 3


def test_sub_records_round_trip_and_java_nulls() -> None:
    beans = [TraceBean(topic="T", msg_id="A", keys="", retry_times=1), TraceBean(topic="T", msg_id="B", keys="kb")]
    before = TraceContext(TraceType.SubBefore, 1, "R", "CG", request_id="req", trace_beans=beans)
    after = TraceContext(TraceType.SubAfter, 9, "R", "CG", cost_time=4, success=False, request_id="req",
                         context_code=ConsumeReturnType.FAILED, trace_beans=beans)
    data = encode_trace_context(before)[0] + encode_trace_context(after)[0]
    assert "\x01null\x02" in data  # a message without keys: Java writes null
    got = decode_trace_data(data)
    assert [c.trace_type for c in got] == [TraceType.SubBefore] * 2 + [TraceType.SubAfter] * 2
    assert [b.msg_id for c in got for b in c.trace_beans] == ["A", "B", "A", "B"]
    assert got[0].trace_beans[0].retry_times == 1 and got[0].trace_beans[0].keys == ""
    assert got[2].success is False and got[2].context_code == ConsumeReturnType.FAILED and got[2].group_name == "CG"
    # an older SubAfter (no time stamp and group) and a record of an unknown type are read or skipped
    old = "\x01".join(["SubAfter", "r", "C", "7", "true", "null", "0"]) + "\x02" + "Unknown\x01x\x02"
    (one,) = decode_trace_data(old)
    assert one.trace_beans[0].msg_id == "C" and one.cost_time == 7 and one.group_name == ""


def test_dispatcher_queue_is_bounded() -> None:
    d = AsyncTraceDispatcher("G", ClientConfig(namesrv_addr="127.0.0.1:1"))
    ctx = TraceContext(TraceType.Pub, trace_beans=[TraceBean(topic="T", msg_id="x")])
    taken = sum(d.append(ctx) for _ in range(QUEUE_MAX + 100))
    assert taken == QUEUE_MAX and d.discarded == 100


async def test_a_traced_message_from_send_to_consume(cluster: tuple[str, str, Daemon]) -> None:
    ns, broker, _d = cluster
    async with Admin(ns) as admin:
        await admin.create_topic("Traced", cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
    got: list[MessageExt] = []

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("traced_consumer", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            enable_msg_trace=True)
    consumer.subscribe("Traced")
    consumer.register_listener(listener)
    await consumer.start()
    producer = Producer("traced_producer", ns, enable_msg_trace=True)
    await producer.start()
    try:
        result = await producer.send(Message("Traced", b"hello", tags="TagT", keys=["order-1"]))
        pipelined = await asyncio.gather(*(producer.send_async(Message("Traced", b"p%d" % i)) for i in range(5)))
        await wait_until(lambda: bool(got), 20, "the message to reach the listener")
    finally:
        await producer.shutdown()  # each flushes its traces on the way out
        await consumer.shutdown()
    trace = await read_trace(ns, result.msg_id, lambda t: len(t) >= 3)
    kinds = {c.trace_type: c for c in trace}
    assert set(kinds) == {TraceType.Pub, TraceType.SubBefore, TraceType.SubAfter}
    pub = kinds[TraceType.Pub]
    assert pub.group_name == "traced_producer" and pub.success and pub.region_id == "DefaultRegion"
    b = pub.trace_beans[0]
    assert (b.topic, b.tags, b.keys, b.store_host, b.body_length) == ("Traced", "TagT", "order-1", broker, 5)
    assert b.offset_msg_id == result.offset_msg_id
    assert kinds[TraceType.SubBefore].group_name == "traced_consumer"
    after = kinds[TraceType.SubAfter]
    assert after.success and after.request_id == kinds[TraceType.SubBefore].request_id
    assert after.context_code == ConsumeReturnType.SUCCESS and after.group_name == "traced_consumer"
    # the trace is found by the message's key as well, and mqadmin shows it
    out = await asyncio.to_thread(ok, "queryMsgTraceById", "-n", ns, "-i", result.msg_id)
    assert "Pub" in out and "SubAfter" in out and "traced_consumer" in out
    js = json.loads(await asyncio.to_thread(ok, "queryMsgTraceById", "-n", ns, "-i", result.msg_id, "--json"))
    assert {c["trace_type"] for c in js} == {"Pub", "SubBefore", "SubAfter"}
    async with Admin(ns) as admin:  # send_async's answers are traced too (from their futures' callbacks)
        for r in pipelined:
            assert [c.trace_type for c in await admin.query_msg_trace(r.msg_id)][0] is TraceType.Pub
    line = await asyncio.to_thread(fails, "queryMsgTraceById", "-n", ns, "-i", "0" * 32)
    assert "no trace of message" in line


async def test_a_failed_listener_call_is_traced_as_failed(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    async with Admin(ns) as admin:
        await admin.create_topic("TracedFail", cluster="DefaultCluster", read_queue_nums=1, write_queue_nums=1)
    calls: list[int] = []

    def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:  # a plain function: threads
        calls.append(len(msgs))
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    async with Producer("traced_fail_p", ns) as p:  # (not traced: only the consumer's side is)
        result = await p.send(Message("TracedFail", b"x"))
    consumer = PushConsumer("traced_fail_c", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            enable_msg_trace=True, customized_trace_topic="MyTraceTopic")
    consumer.subscribe("TracedFail")
    consumer.register_listener(listener)
    await consumer.start()
    try:
        await wait_until(lambda: bool(calls), 20, "the message to reach the listener")
    finally:
        await consumer.shutdown()
    trace = await read_trace(ns, result.msg_id, lambda t: any(c.trace_type is TraceType.SubAfter for c in t),
                             "MyTraceTopic")
    assert await read_trace(ns, result.msg_id, lambda t: True) == []  # nothing in the default trace topic
    after = next(c for c in trace if c.trace_type is TraceType.SubAfter)
    assert after.success is False and after.context_code == ConsumeReturnType.FAILED


async def test_a_lite_pull_consumer_traces_what_poll_returns(cluster: tuple[str, str, Daemon]) -> None:
    ns, _broker, _d = cluster
    async with Admin(ns) as admin:
        await admin.create_topic("TracedPoll", cluster="DefaultCluster", read_queue_nums=1, write_queue_nums=1)
    async with Producer("traced_poll_p", ns) as p:
        result = await p.send(Message("TracedPoll", b"x", keys=["k-poll"]))
    c = LitePullConsumer("traced_poll_c", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", enable_msg_trace=True)
    c.subscribe("TracedPoll")
    await c.start()
    try:
        assert await poll_until(c, 1, 20)
    finally:
        await c.shutdown()
    trace = await read_trace(ns, result.msg_id, lambda t: len(t) >= 2)
    assert [c.trace_type for c in trace] == [TraceType.SubBefore, TraceType.SubAfter]
    assert trace[1].success and trace[1].group_name == "traced_poll_c" and trace[1].trace_beans[0].keys == "k-poll"


def test_end_transaction_record_round_trip() -> None:
    ctx = TraceContext(TraceType.EndTransaction, 5, "R", "TG", trace_beans=[TraceBean(
        topic="T", msg_id="M", store_host="1.2.3.4:1", msg_type=2, transaction_id="TX", transaction_state="UNKNOW",
        from_transaction_check=True)])
    data, keys = encode_trace_context(ctx)
    assert data.split("\x01")[:2] == ["EndTransaction", "5"] and data.endswith("\x01UNKNOW\x01true\x02")
    back = decode_trace_data(data)[0]
    assert back.trace_beans[0] == ctx.trace_beans[0] and keys == {"M"}


async def test_a_transaction_is_traced_from_half_message_to_its_end(cluster: tuple[str, str, Daemon]) -> None:
    ns, broker, _d = cluster
    async with Admin(ns) as admin:
        await admin.create_topic("TracedTx", cluster="DefaultCluster", read_queue_nums=1, write_queue_nums=1)

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

    p = TransactionProducer("traced_tx", Listener(), ns, enable_msg_trace=True)
    await p.start()
    try:
        result = await p.send_in_transaction(Message("TracedTx", b"tx", tags="TagX"))
    finally:
        await p.shutdown()
    trace = await read_trace(ns, result.msg_id, lambda t: len(t) >= 2)
    kinds = {c.trace_type: c for c in trace}
    assert kinds[TraceType.Pub].trace_beans[0].msg_type == 1  # Trans_Msg_Half
    end = kinds[TraceType.EndTransaction].trace_beans[0]
    assert (end.transaction_state, end.from_transaction_check, end.store_host, end.tags) == (
        "COMMIT_MESSAGE", False, broker, "TagX")
    assert kinds[TraceType.EndTransaction].group_name == "traced_tx"
