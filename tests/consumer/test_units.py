"""Consumer building blocks without daemons: tag filter, ProcessQueue, offset stores, start offsets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from client.consumer.filter import build_subscription_data, filter_messages
from client.consumer.listener import ConsumeFromWhere
from client.consumer.offset_store import LocalFileOffsetStore, ReadOffsetType
from client.consumer.process_queue import ProcessQueue
from client.consumer.rebalance import compute_pull_from_where, parse_consume_timestamp
from client.errors import MQClientError
from client.message import MessageQueue
from remoting.message import MessageExt, java_string_hash


def msg(offset: int, tags: str | None = None, body: bytes = b"x") -> MessageExt:
    props = {"TAGS": tags} if tags else {}
    return MessageExt(topic="T", body=body, queue_offset=offset, properties=props)


# ------------------------------------------------------------------ filter
def test_tag_expression_builds_tags_and_java_hash_codes() -> None:
    sd = build_subscription_data("T", " TagA ||TagB|| TagA ")
    assert sd.tags_set == ["TagA", "TagB"]
    assert sd.code_set == [java_string_hash("TagA"), java_string_hash("TagB")]
    assert java_string_hash("TagA") == 2_598_919  # "TagA".hashCode() in Java
    assert build_subscription_data("T", "*").tags_set == []
    assert build_subscription_data("T", None).sub_string == "*"
    with pytest.raises(MQClientError):
        build_subscription_data("T", "TagA || ")


def test_client_side_tag_recheck() -> None:
    sd = build_subscription_data("T", "A || B")
    got = filter_messages(sd, [msg(0, "A"), msg(1, "C"), msg(2, None), msg(3, "B")])
    assert [m.queue_offset for m in got] == [0, 3]
    assert len(filter_messages(build_subscription_data("T", "*"), [msg(0, "C"), msg(1)])) == 2


# ------------------------------------------------------------------ ProcessQueue
def test_offset_advances_only_past_lowest_unfinished() -> None:
    pq = ProcessQueue()
    ms = [msg(i, body=b"ab") for i in range(10, 15)]
    assert pq.put_messages(ms) is True
    assert pq.msg_count == 5 and pq.msg_size == 10 and pq.max_span() == 4
    assert pq.remove_messages([ms[1], ms[2]]) == 10  # 10 still in progress
    assert pq.remove_messages([ms[0]]) == 13
    assert pq.remove_messages([ms[3], ms[4]]) == 15  # empty: max seen + 1
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.remove_messages([ms[0]]) == -1
    assert pq.msg_count_high_watermark == 5


def test_duplicate_puts_are_not_counted() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(1), msg(2)])
    pq.put_messages([msg(2), msg(3)])
    assert pq.msg_count == 3


def test_orderly_take_commit_and_consume_again() -> None:
    pq = ProcessQueue()
    assert pq.put_messages([msg(i) for i in range(5)]) is True
    assert pq.put_messages([msg(5)]) is False  # already consuming: no second dispatch
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [0, 1]
    pq.make_message_to_consume_again([first[1]])
    assert [m.queue_offset for m in pq.take_messages(1)] == [1]  # back in order, before 2
    assert pq.commit() == 2
    assert pq.msg_count == 4
    taken = pq.take_messages(10)
    assert [m.queue_offset for m in taken] == [2, 3, 4, 5]
    pq.rollback()
    assert pq.first_offset() == 2
    pq.take_messages(10)
    assert pq.commit() == 6
    assert pq.take_messages(1) == [] and pq.consuming is False


# ------------------------------------------------------------------ LocalFileOffsetStore
async def test_local_offset_store_roundtrip_atomic_and_java_format(tmp_path: Path) -> None:
    mq0, mq1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    store = LocalFileOffsetStore("1.2.3.4@DEFAULT", "G", tmp_path)
    store.update_offset(mq0, 5, False)
    store.update_offset(mq0, 3, True)  # increase only: ignored
    store.update_offset(mq1, 7, False)
    await store.persist_all([mq0, mq1])
    path = tmp_path / "1.2.3.4@DEFAULT" / "G" / "offsets.json"
    assert json.loads(path.read_text())["offsetTable"][0] == {"topic": "T", "brokerName": "b", "queueId": 0, "offset": 5}
    store.update_offset(mq0, 9, False)
    await store.persist_all([mq0])  # mq1 stays in the file
    assert path.with_name("offsets.json.bak").exists()
    fresh = LocalFileOffsetStore("1.2.3.4@DEFAULT", "G", tmp_path)
    await fresh.load()
    assert fresh.clone_offset_table("T") == {mq0: 9, mq1: 7}
    assert await fresh.read_offset(MessageQueue("T", "b", 2), ReadOffsetType.READ_FROM_STORE) == -1
    # a file written by the Java client (fastjson object keys) loads too
    path.write_text('{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:42}}')
    assert await fresh.read_offset(mq1, ReadOffsetType.READ_FROM_STORE) == 42


# ------------------------------------------------------------------ computePullFromWhere
class FakeStore:
    def __init__(self, stored: int) -> None:
        self.stored = stored

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        assert type_ is ReadOffsetType.READ_FROM_STORE
        return self.stored


class FakeApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def get_max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        self.calls.append(("max", topic))
        return 100

    async def search_offset(self, addr: str, topic: str, queue_id: int, ts: int) -> int:
        self.calls.append(("search", ts))
        return 40


class FakeInstance:
    def __init__(self) -> None:
        self.api = FakeApi()

    def find_broker_address_in_publish(self, name: str) -> str:
        return "127.0.0.1:1"


CFW = ConsumeFromWhere
TS = "20240102030405"


@pytest.mark.parametrize(
    ("stored", "cfw", "topic", "expected", "asked"),
    [
        (17, CFW.CONSUME_FROM_LAST_OFFSET, "T", 17, None),
        (17, CFW.CONSUME_FROM_TIMESTAMP, "T", 17, None),
        (-1, CFW.CONSUME_FROM_LAST_OFFSET, "T", 100, "max"),
        (-1, CFW.CONSUME_FROM_MAX_OFFSET, "T", 100, "max"),
        (-1, CFW.CONSUME_FROM_LAST_OFFSET, "%RETRY%G", 0, None),
        (-1, CFW.CONSUME_FROM_FIRST_OFFSET, "T", 0, None),
        (-1, CFW.CONSUME_FROM_TIMESTAMP, "T", 40, "search"),
        (-1, CFW.CONSUME_FROM_TIMESTAMP, "%RETRY%G", 100, "max"),
        (-2, CFW.CONSUME_FROM_FIRST_OFFSET, "T", -1, None),
    ],
)
async def test_compute_pull_from_where_like_rocketmq_494(
    stored: int, cfw: ConsumeFromWhere, topic: str, expected: int, asked: str | None
) -> None:
    inst = FakeInstance()
    got = await compute_pull_from_where(inst, FakeStore(stored), MessageQueue(topic, "b", 0), cfw, TS)  # type: ignore[arg-type]
    assert got == expected
    assert [c[0] for c in inst.api.calls] == ([asked] if asked else [])
    if asked == "search":
        assert inst.api.calls[0][1] == parse_consume_timestamp(TS)


def test_consume_timestamp_format() -> None:
    assert parse_consume_timestamp("20240102030405") > 0
    with pytest.raises(MQClientError, match="yyyyMMddHHmmss"):
        parse_consume_timestamp("2024-01-02 03:04:05")


# ------------------------------------------------------------------ concurrent consume service
class FakeOffsetStore:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        if not increase_only or offset > self.table.get(mq, -1):
            self.table[mq] = offset


class FakePushConsumer:
    group = "G"
    consume_thread_max = 2
    consume_message_batch_max_size = 1
    consume_timeout = 15.0

    def __init__(self, send_back_ok: bool) -> None:
        from client.consumer.listener import MessageModel

        self.message_model = MessageModel.CLUSTERING
        self.offset_store = FakeOffsetStore()
        self.send_back_ok = send_back_ok
        self.sent_back: list[tuple[int, int]] = []

    def reset_retry_topic(self, msgs: Any) -> None:
        pass

    async def send_message_back_safe(self, m: MessageExt, delay_level: int, broker_name: str) -> bool:
        self.sent_back.append((m.queue_offset, delay_level))
        return self.send_back_ok


@pytest.mark.parametrize("kind", ["async", "plain"])
@pytest.mark.parametrize("send_back_ok", [True, False])
async def test_concurrent_failures_are_sent_back_or_retried_locally(
    monkeypatch: pytest.MonkeyPatch, send_back_ok: bool, kind: str
) -> None:
    import asyncio

    from client.consumer import consume_service
    from client.consumer.listener import ConsumeConcurrentlyStatus

    monkeypatch.setattr(consume_service, "SEND_BACK_RETRY_LOCALLY_DELAY_S", 0.05)
    consumer = FakePushConsumer(send_back_ok)
    calls: list[tuple[int, int]] = []

    def decide(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        m = msgs[0]
        calls.append((m.queue_offset, m.reconsume_times))
        if m.queue_offset == 1 and m.reconsume_times == 0:
            ctx.delay_level_when_next_consume = 5
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def async_listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        return decide(msgs, ctx)

    listener = async_listener if kind == "async" else decide
    svc = consume_service.ConsumeMessageConcurrentlyService(consumer, listener)  # type: ignore[arg-type]
    svc.start()
    mq = MessageQueue("T", "b", 0)
    pq = ProcessQueue()
    ms = [msg(i) for i in range(3)]
    pq.put_messages(ms)
    svc.submit_consume_request(ms, pq, mq)
    try:
        for _ in range(100):
            if consumer.offset_store.table.get(mq) == 3:
                break
            await asyncio.sleep(0.02)
        assert consumer.offset_store.table[mq] == 3
        assert consumer.sent_back == [(1, 5)]
        if send_back_ok:
            assert sorted(calls) == [(0, 0), (1, 0), (2, 0)]
        else:  # consumed again here, with the reconsume count raised, before the offset passed it
            assert sorted(calls) == [(0, 0), (1, 0), (1, 1), (2, 0)]
        assert pq.msg_count == 0
    finally:
        await svc.shutdown(0.1)


async def _until(cond: Any, what: str, timeout: float = 10) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def test_plain_listener_calls_queue_for_the_threads_bounded_and_are_stamped_when_they_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain listener's calls wait for a thread in its queue, PLAIN_CALLS_QUEUED at most (the rest stay in
    the process queue), run one at a time per thread in the order taken, and get their consume start stamp
    when a thread starts them (what consume_timeout measures), not when queued."""
    import threading

    from client.consumer import consume_service
    from client.consumer.listener import ConsumeConcurrentlyStatus
    from remoting.message import MessageConst

    monkeypatch.setattr(consume_service, "PLAIN_CALLS_QUEUED", 8)
    consumer = FakePushConsumer(True)
    consumer.consume_thread_max = 1
    gate = threading.Event()
    order: list[int] = []
    running = 0
    peak = 0

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        gate.wait(10)
        order.append(msgs[0].queue_offset)
        running -= 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = consume_service.ConsumeMessageConcurrentlyService(consumer, listener)  # type: ignore[arg-type]
    svc.start()
    mq, pq = MessageQueue("T", "b", 0), ProcessQueue()
    ms = [msg(i) for i in range(50)]
    pq.put_messages(ms)
    try:
        svc.submit_consume_request(ms, pq, mq)
        assert svc._plain_calls == 8 and len(pq.pending) == 42
        await _until(lambda: running == 1, "the first call running")
        stamp = MessageConst.PROPERTY_CONSUME_START_TIMESTAMP
        assert ms[0].get_property(stamp) and not ms[1].get_property(stamp)  # queued, not started
        gate.set()
        await _until(lambda: consumer.offset_store.table.get(mq) == 50, "all 50 committed")
        assert order == list(range(50)) and peak == 1
        assert all(m.get_property(stamp) for m in ms) and pq.msg_count == 0 and svc._plain_calls == 0
    finally:
        gate.set()
        await svc.shutdown(0.1)


class GatedPlainListener:
    """A plain listener on one thread whose calls record their first offset and wait for `gate`, and the
    concurrent service running it on `n` submitted messages of one queue (after start())."""

    def __init__(self, n: int) -> None:
        import threading

        from client.consumer import consume_service

        self.consumer = FakePushConsumer(True)
        self.consumer.consume_thread_max = 1
        self.gate = threading.Event()
        self.called: list[int] = []
        self.svc = consume_service.ConsumeMessageConcurrentlyService(self.consumer, self.listener)  # type: ignore[arg-type]
        self.mq, self.pq = MessageQueue("T", "b", 0), ProcessQueue()
        self.ms = [msg(i) for i in range(n)]

    def listener(self, msgs: list[MessageExt], ctx: Any) -> Any:
        from client.consumer.listener import ConsumeConcurrentlyStatus

        self.called.append(msgs[0].queue_offset)
        self.gate.wait(10)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def start(self) -> None:
        self.svc.start()
        self.pq.put_messages(self.ms)
        self.svc.submit_consume_request(self.ms, self.pq, self.mq)
        await _until(lambda: self.called == [0], "the first call running")


async def test_plain_listener_calls_of_a_dropped_queue_are_not_made_and_not_committed() -> None:
    g = GatedPlainListener(20)
    try:
        await g.start()
        g.pq.dropped = True  # rebalanced away meanwhile
        g.gate.set()
        await _until(lambda: g.svc._plain_calls == 0, "the queued calls skipped")
        assert g.called == [0] and g.mq not in g.consumer.offset_store.table
    finally:
        g.gate.set()
        await g.svc.shutdown(0.1)


async def test_plain_listener_call_that_outlasts_shutdown_is_not_settled_and_queued_ones_not_made() -> None:
    import time

    g = GatedPlainListener(5)
    svc, called, consumer, mq, pq = g.svc, g.called, g.consumer, g.mq, g.pq
    await g.start()
    t0 = time.monotonic()
    await svc.shutdown(0.2)
    assert time.monotonic() - t0 >= 0.15  # it waited for the call under way, up to await_s
    g.gate.set()
    svc._plain_threads._threads[0].join(10)  # type: ignore[union-attr]
    await _until(lambda: svc._plain_calls == 0, "every call's outcome delivered")
    assert called == [0]  # the queued calls were dropped, not made
    assert mq not in consumer.offset_store.table and pq.msg_count == 5  # redelivered to whoever consumes next


async def test_concurrent_listener_starts_in_the_submitting_call_when_a_worker_is_idle() -> None:
    """An async listener that does not wait runs inside submit_consume_request (the pull answer's
    callback): no hand-off to a worker, no loop turn before the listener."""
    import asyncio

    from client.consumer import consume_service
    from client.consumer.listener import ConsumeConcurrentlyStatus

    consumer = FakePushConsumer(True)
    consumer.consume_message_batch_max_size = 32
    calls: list[list[int]] = []

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        calls.append([m.queue_offset for m in msgs])
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = consume_service.ConsumeMessageConcurrentlyService(consumer, listener)  # type: ignore[arg-type]
    svc.start()
    await asyncio.sleep(0)  # the workers park on the ready queue
    mq = MessageQueue("T", "b", 0)
    pq = ProcessQueue()
    try:
        ms = [msg(i) for i in range(3)]
        pq.put_messages(ms)
        svc.submit_consume_request(ms, pq, mq)
        assert calls == [[0, 1, 2]] and consumer.offset_store.table[mq] == 3 and pq.msg_count == 0
    finally:
        await svc.shutdown(0.1)


async def test_concurrent_listener_that_waits_is_finished_by_a_worker_within_the_thread_bound() -> None:
    """A listener call started in the submitting call that has to wait is continued by an idle worker:
    at most consume_thread_max calls run at once, and each still completes and commits."""
    import asyncio

    from client.consumer import consume_service
    from client.consumer.listener import ConsumeConcurrentlyStatus

    consumer = FakePushConsumer(True)  # consume_thread_max = 2, one message per call
    gate = asyncio.Event()
    running = 0
    peak = 0
    done: list[int] = []

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        await asyncio.sleep(0)  # a bare yield too
        running -= 1
        done.append(msgs[0].queue_offset)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = consume_service.ConsumeMessageConcurrentlyService(consumer, listener)  # type: ignore[arg-type]
    svc.start()
    await asyncio.sleep(0)
    queues = [(MessageQueue("T", "b", q), ProcessQueue()) for q in range(4)]
    try:
        for q, (mq, pq) in enumerate(queues):
            ms = [msg(10 * q)]
            pq.put_messages(ms)
            svc.submit_consume_request(ms, pq, mq)
        for _ in range(5):
            await asyncio.sleep(0)
        assert running == 2 and peak == 2
        gate.set()
        for _ in range(100):
            if len(done) == 4:
                break
            await asyncio.sleep(0.01)
        assert sorted(done) == [0, 10, 20, 30] and peak == 2
        assert [consumer.offset_store.table[mq] for mq, _ in queues] == [1, 11, 21, 31]
    finally:
        await svc.shutdown(0.1)


async def test_started_listener_call_is_cancelled_with_its_worker_at_shutdown() -> None:
    import asyncio

    from client.consumer import consume_service
    from client.consumer.listener import ConsumeConcurrentlyStatus

    consumer = FakePushConsumer(True)
    cancelled: list[bool] = []

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = consume_service.ConsumeMessageConcurrentlyService(consumer, listener)  # type: ignore[arg-type]
    svc.start()
    await asyncio.sleep(0)
    mq, pq = MessageQueue("T", "b", 0), ProcessQueue()
    ms = [msg(0)]
    pq.put_messages(ms)
    svc.submit_consume_request(ms, pq, mq)
    await asyncio.sleep(0.01)
    await svc.shutdown(0.05)
    assert cancelled == [True] and mq not in consumer.offset_store.table


async def test_listener_started_in_the_submitting_call_runs_in_its_own_context() -> None:
    """As in a Task: what a listener sets in contextvars stays in its call, also after waiting."""
    import asyncio
    import contextvars

    from client.consumer import consume_service
    from client.consumer.listener import ConsumeConcurrentlyStatus

    var: contextvars.ContextVar[str] = contextvars.ContextVar("h4_test_var", default="outside")
    seen: list[str] = []
    consumer = FakePushConsumer(True)

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        var.set(f"call{msgs[0].queue_offset}")
        await asyncio.sleep(0.01)
        seen.append(var.get())
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = consume_service.ConsumeMessageConcurrentlyService(consumer, listener)  # type: ignore[arg-type]
    svc.start()
    await asyncio.sleep(0)
    mq, pq = MessageQueue("T", "b", 0), ProcessQueue()
    try:
        ms = [msg(0)]
        pq.put_messages(ms)
        svc.submit_consume_request(ms, pq, mq)
        assert var.get() == "outside"
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen == ["call0"] and consumer.offset_store.table[mq] == 1
    finally:
        await svc.shutdown(0.1)


# ------------------------------------------------------------------ orderly consume service
class FakeOrderlyConsumer(FakePushConsumer):
    suspend_current_queue_time_millis = 10

    def __init__(self, batch: int) -> None:
        from client.consumer.listener import MessageModel

        super().__init__(True)
        self.message_model = MessageModel.BROADCASTING  # no broker locks to take
        self.consume_message_batch_max_size = batch
        self.dlq: list[int] = []

    def max_reconsume_times_orderly(self) -> int:
        return 2

    async def send_message_back_to_dlq(self, m: MessageExt, broker_name: str | None = None) -> bool:
        self.dlq.append(m.queue_offset)
        return True


@pytest.mark.parametrize("batch", [1, 3])
async def test_orderly_plain_listener_runs_batches_per_hand_off_as_the_async_path_consumes_them_one_by_one(
    batch: int,
) -> None:
    """A plain orderly listener gets several batches per hand-off to its thread (ORDERLY_RUN_MESSAGES), yet
    sees exactly the calls an `async def` one sees, batch by batch: a SUSPEND mid-run is consumed again
    before anything after it, an exception too, a message past max_reconsume_times goes to the DLQ, and with
    auto_commit off nothing is committed until COMMIT. The committed offset never passes a message that
    still has to be consumed again."""
    from client.consumer import consume_service
    from client.consumer.listener import ConsumeOrderlyStatus as S

    logs: dict[str, tuple[list[tuple[int, ...]], list[int], list[int]]] = {}
    for kind in ("async", "plain"):
        consumer = FakeOrderlyConsumer(batch)
        calls: list[tuple[int, ...]] = []
        committed: list[int] = []
        store_update = consumer.offset_store.update_offset

        def update(mq: MessageQueue, offset: int, increase_only: bool, calls: Any = calls,
                   committed: Any = committed, store_update: Any = store_update) -> None:
            # every message below the offset has had its last call already (3 twice, 6 twice, 9 three times)
            seen = [c[0] for c in calls]
            assert (offset <= 3 or seen.count(3) == 2) and (offset <= 6 or seen.count(6) == 2)
            assert offset <= 9 or seen.count(9) == 3
            committed.append(offset)
            store_update(mq, offset, increase_only)

        consumer.offset_store.update_offset = update  # type: ignore[method-assign]

        def decide(msgs: list[MessageExt], ctx: Any, calls: list[tuple[int, ...]] = calls) -> S:
            first = msgs[0]
            calls.append(tuple(m.queue_offset for m in msgs) + (first.reconsume_times,))
            offs = {m.queue_offset for m in msgs}
            if 3 in offs and first.reconsume_times == 0:
                return S.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if 6 in offs and first.reconsume_times == 0:
                raise RuntimeError("listener failed")
            if 9 in offs:
                return S.SUSPEND_CURRENT_QUEUE_A_MOMENT  # until max_reconsume_times: then the DLQ
            if 12 in offs or 13 in offs:
                ctx.auto_commit = False  # 12 and 13 (and 14 with batch 3): committed by 15's COMMIT
                return S.SUCCESS
            if 15 in offs:
                ctx.auto_commit = False
                return S.COMMIT
            return S.SUCCESS

        async def async_listener(msgs: list[MessageExt], ctx: Any) -> S:
            return decide(msgs, ctx)

        svc = consume_service.ConsumeMessageOrderlyService(
            consumer, async_listener if kind == "async" else decide)  # type: ignore[arg-type]
        svc.start()
        mq, pq = MessageQueue("T", "b", 0), ProcessQueue()
        try:
            ms = [msg(i) for i in range(20)]
            svc.submit_consume_request(ms, pq, mq, pq.put_messages(ms))
            await _until(lambda: consumer.offset_store.table.get(mq) == 20, f"{kind}: all 20 committed")  # noqa: B023
            await _until(lambda: not pq.consuming, f"{kind}: the queue's turn over")  # noqa: B023
        finally:
            await svc.shutdown(0.1)
        logs[kind] = (calls, consumer.dlq, committed)
    async_calls, async_dlq, async_committed = logs["async"]
    plain_calls, plain_dlq, plain_committed = logs["plain"]
    assert plain_calls == async_calls and plain_dlq == async_dlq == [9 // batch * batch + k for k in range(batch)]
    assert plain_committed[-1] == async_committed[-1] == 20
    if batch == 1:  # (with 3 a message, every run here ends at a scripted stop)
        assert len(plain_committed) < len(async_committed)  # several batches committed at once
