"""PushConsumer against real daemons: start offsets, restarts, broadcasting, retries, orderly, flow control."""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageModel,
    Producer,
    PushConsumer,
)
from client.consumer.offset_store import RemoteBrokerOffsetStore
from client.consumer.push_consumer import stable_client_id
from client.errors import error_for_code
from client.message import MessageQueue
from client.reader import QueueReader
from remoting.codes import ResponseCode
from remoting.message import MessageConst

from .conftest import ConsumerCluster, create_topic, send_to_queues, wait_until

SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


def collecting(into: list[bytes]):  # type: ignore[no-untyped-def]
    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        into.extend(m.body for m in msgs)
        return SUCCESS

    return listener


async def run_consumer(c: PushConsumer, until: Callable[[], bool], timeout: float, what: str) -> None:
    await c.start()
    try:
        await wait_until(until, timeout, what)
    finally:
        await c.shutdown()


# ------------------------------------------------------------------ where to start, restarts
async def test_offsets_resume_after_restart(mq_cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 4)
    first = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    got: list[bytes] = []
    c = PushConsumer(group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic)
    c.register_listener(collecting(got))
    await run_consumer(c, lambda: set(first) <= set(got), 15, "the first batch")
    second = await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="n")
    got2: list[bytes] = []
    c2 = PushConsumer(group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c2.subscribe(topic)
    c2.register_listener(collecting(got2))
    await c2.start()
    try:
        await wait_until(lambda: set(second) <= set(got2), 15, "the second batch")
        await asyncio.sleep(0.3)
        assert sorted(got2) == sorted(second)  # committed at shutdown: nothing consumed twice
    finally:
        await c2.shutdown()


async def test_new_queue_in_broker_memory_starts_at_0_whatever_consume_from_where(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """RocketMQ 4.9.4: QUERY_CONSUMER_OFFSET of a never-consumed queue whose first message is still
    in the broker's memory answers 0, a stored offset, which wins over ConsumeFromWhere."""
    topic = names("T")
    queues = await create_topic(mq_cluster, topic, 2)
    old = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    for i, cfw in enumerate(ConsumeFromWhere):
        if cfw.name.endswith(("BOOT_FIRST", "MIN_OFFSET", "MAX_OFFSET")):
            continue
        got: list[bytes] = []
        c = PushConsumer(names("G") + f"_{i}", mq_cluster.namesrv_addr, consume_from_where=cfw)
        c.subscribe(topic)
        c.register_listener(collecting(got))
        await run_consumer(c, lambda got=got: set(old) <= set(got), 15, f"old messages with {cfw.name}")


async def test_consume_from_last_offset_skips_backlog_once_committed_at_end(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """CONSUME_FROM_LAST_OFFSET with the group's offset at the queue end: only new messages."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 2)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    reader = await QueueReader.create(mq_cluster.namesrv_addr)
    try:
        for mq in queues:
            assert await reader.commit_offset(group, mq, await reader.max_offset(mq))
    finally:
        await reader.close()
    got: list[bytes] = []
    c = PushConsumer(group, mq_cluster.namesrv_addr)
    c.subscribe(topic)
    c.register_listener(collecting(got))
    await c.start()
    try:
        await wait_until(
            lambda: len([q for q in c.assigned_queues() if q.topic == topic]) == 2, 10, "assignment"
        )
        new = await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="new")
        await wait_until(lambda: set(new) <= set(got), 15, "new messages")
        assert sorted(got) == sorted(new)
    finally:
        await c.shutdown()


async def test_steady_state_pulls_run_from_answer_callbacks_not_tasks(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """Once connected, each queue's next pull is sent from the previous pull's answer callback (no
    Task per pull): long-polled messages still arrive, each exactly once, and no loop holds a Task."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 2)
    got: list[bytes] = []
    c = PushConsumer(group, mq_cluster.namesrv_addr)
    c.subscribe(topic)
    c.register_listener(collecting(got))
    await c.start()
    try:
        await wait_until(
            lambda: len([q for q in c.assigned_queues() if q.topic == topic]) == 2, 10, "assignment"
        )
        await asyncio.sleep(0.3)  # the first pulls are held by the broker
        sent: list[bytes] = []
        for k in range(3):
            sent += await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix=f"r{k}")
            want = set(sent)
            await wait_until(lambda want=want: want <= set(got), 15, f"round {k}")  # type: ignore[misc]
        assert sorted(got) == sorted(sent)
        loops = c.pull_service._loops
        assert {mq for mq in loops if mq.topic == topic} == set(queues)
        assert all(lp.task is None for mq, lp in loops.items() if mq.topic == topic)
    finally:
        await c.shutdown()


async def test_next_pull_is_sent_before_the_answer_goes_to_the_listener(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From an answer's callback the queue's next pull is sent first, then the messages are handed to
    the consume service, so that pull's write is queued ahead of the listener calls it wakes."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    got: list[bytes] = []
    events: list[str] = []
    c = PushConsumer(group, mq_cluster.namesrv_addr)
    c.subscribe(topic)
    c.register_listener(collecting(got))
    await c.start()
    try:
        await wait_until(
            lambda: [q for q in c.assigned_queues() if q.topic == topic] == queues, 10, "assignment"
        )
        await asyncio.sleep(0.3)  # the first pull is held by the broker
        orig_pull = c.pull_api.pull_kernel_nowait
        orig_submit = c.consume_service.submit_consume_request

        def pull(mq, sd, offset, *a, **kw):  # type: ignore[no-untyped-def]
            if mq.topic == topic:
                events.append(f"pull {offset}")
            return orig_pull(mq, sd, offset, *a, **kw)

        def submit(msgs, pq, mq, *a, **kw):  # type: ignore[no-untyped-def]
            if mq.topic == topic:
                events.append(f"submit {msgs[0].queue_offset}-{msgs[-1].queue_offset + 1}")
            return orig_submit(msgs, pq, mq, *a, **kw)

        monkeypatch.setattr(c.pull_api, "pull_kernel_nowait", pull)
        monkeypatch.setattr(c.consume_service, "submit_consume_request", submit)
        sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
        await wait_until(lambda: set(sent) <= set(got), 15, "delivery")
        assert sorted(got) == sorted(sent)
        for i, e in enumerate(events):
            if e.startswith("submit"):
                end = e.split("-")[1]
                assert f"pull {end}" in events[:i], events  # the next pull went out first
    finally:
        await c.shutdown()


@pytest.fixture
def broker_has_no_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the broker's "0 for a new in-memory queue" answer look like QUERY_NOT_FOUND (what a
    broker says once the queue's first message is only on disk), so ConsumeFromWhere decides."""
    original = RemoteBrokerOffsetStore.fetch_consume_offset_from_broker

    async def fetch(self: RemoteBrokerOffsetStore, mq: MessageQueue) -> int:
        off = await original(self, mq)
        if off == 0 and not mq.topic.startswith("%"):
            raise error_for_code(ResponseCode.QUERY_NOT_FOUND, "not found (test)")
        return off

    monkeypatch.setattr(RemoteBrokerOffsetStore, "fetch_consume_offset_from_broker", fetch)


async def test_consume_from_last_offset_and_from_timestamp(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], broker_has_no_offset: None
) -> None:
    topic = names("T")
    queues = await create_topic(mq_cluster, topic, 2)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="before")
    # consume_timestamp has one-second resolution: start strictly after the old messages' second
    ts = int(time.time()) + 1
    while time.time() < ts + 0.05:
        await asyncio.sleep(0.05)
    after = await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="after")
    got_ts: list[bytes] = []
    c = PushConsumer(
        names("G") + "_ts",
        mq_cluster.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
        consume_timestamp=time.strftime("%Y%m%d%H%M%S", time.localtime(ts)),
    )
    c.subscribe(topic)
    c.register_listener(collecting(got_ts))
    got_last: list[bytes] = []
    last = PushConsumer(names("G") + "_last", mq_cluster.namesrv_addr)  # CONSUME_FROM_LAST_OFFSET
    last.subscribe(topic)
    last.register_listener(collecting(got_last))
    await c.start()
    await last.start()
    try:
        await wait_until(lambda: set(after) <= set(got_ts), 15, "messages after the timestamp")
        await wait_until(
            lambda: len([q for q in last.assigned_queues() if q.topic == topic]) == 2, 10, "assignment"
        )
        new = await send_to_queues(mq_cluster.namesrv_addr, queues, 1, prefix="new")
        await wait_until(lambda: set(new) <= set(got_last) and set(new) <= set(got_ts), 15, "new messages")
        await asyncio.sleep(0.3)
        assert sorted(got_ts) == sorted(after + new)
        assert sorted(got_last) == sorted(new)
    finally:
        await c.shutdown()
        await last.shutdown()


async def test_tag_filter_delivers_only_matching_tags(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic = names("T")
    queues = await create_topic(mq_cluster, topic, 2)
    want = await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="a", tags="TagA")
    await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="c", tags="TagC")
    want += await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="b", tags="TagB")
    got: list[bytes] = []
    c = PushConsumer(names("G"), mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, "TagA || TagB")
    c.register_listener(collecting(got))
    await run_consumer(c, lambda: set(want) <= set(got), 15, "TagA/TagB messages")
    assert sorted(got) == sorted(want)


# ------------------------------------------------------------------ broadcasting
async def test_broadcasting_every_consumer_gets_everything_and_resumes_from_local_file(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 4)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 2)
    got: dict[str, list[bytes]] = {"b1": [], "b2": []}

    def make(name: str) -> PushConsumer:
        c = PushConsumer(
            group,
            mq_cluster.namesrv_addr,
            message_model=MessageModel.BROADCASTING,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            instance_name=name,
            offset_store_dir=str(tmp_path),
        )
        c.subscribe(topic)
        c.register_listener(collecting(got[name]))
        return c

    b1, b2 = make("b1"), make("b2")
    await b1.start()
    await b2.start()
    try:
        await wait_until(
            lambda: set(sent) <= set(got["b1"]) and set(sent) <= set(got["b2"]), 15, "both get all"
        )
        assert {q for q in b1.assigned_queues()} == set(queues)  # no %RETRY% in broadcasting
    finally:
        await b1.shutdown()
        await b2.shutdown()
    path = tmp_path / stable_client_id(b1.client_config) / group / "offsets.json"
    table = {(e["topic"], e["queueId"]): e["offset"] for e in json.loads(path.read_text())["offsetTable"]}
    assert table == {(topic, i): 2 for i in range(4)}

    more = await send_to_queues(mq_cluster.namesrv_addr, queues, 1, prefix="n")
    got["b1"] = []
    again = make("b1")
    await again.start()
    try:
        await wait_until(lambda: set(more) <= set(got["b1"]), 15, "the new messages")
        await asyncio.sleep(0.3)
        assert sorted(got["b1"]) == sorted(more)
    finally:
        await again.shutdown()


# ------------------------------------------------------------------ retry
async def test_reconsume_later_goes_through_the_retry_topic_and_comes_back(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 2)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    fail = set(sent[::2])
    seen: list[tuple[bytes, int, str, str | None]] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]  # a blocking listener (thread pool)
        for m in msgs:
            seen.append(
                (m.body, m.reconsume_times, m.topic, m.properties.get(MessageConst.PROPERTY_RETRY_TOPIC))
            )
            if m.body in fail and m.reconsume_times == 0:
                if m.body == sorted(fail)[0]:
                    raise RuntimeError("listener exception = RECONSUME_LATER")
                return LATER
        return SUCCESS

    c = PushConsumer(
        group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", rebalance_interval=2
    )
    c.subscribe(topic)
    c.register_listener(listener)
    await c.start()
    try:
        await wait_until(lambda: {s[0] for s in seen if s[1] == 1} >= fail, 30, "failed messages redelivered")
        ok_once = [s for s in seen if s[0] not in fail]
        assert sorted(s[0] for s in ok_once) == sorted(set(sent) - fail)
        for body, times, t, retry_topic in seen:
            if body in fail and times == 1:
                assert t == topic  # shown with the original topic, not %RETRY%<group>
                assert retry_topic == topic
        retry_q = [q for q in c.assigned_queues() if q.topic == f"%RETRY%{group}"]
        assert retry_q
        await wait_until(
            lambda: (
                all(c.offset_store.clone_offset_table(f"%RETRY%{group}").get(q, 0) >= 1 for q in retry_q)
                or sum(c.offset_store.clone_offset_table(f"%RETRY%{group}").values()) >= len(fail)
            ),
            10,
            "retry offsets advanced",
        )
        # the original queues' offsets passed the failed messages (they live on in %RETRY%)
        table = c.offset_store.clone_offset_table(topic)
        assert sum(table.values()) == len(sent)
    finally:
        await c.shutdown()


async def test_reconsume_later_is_delayed_by_the_delay_level(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 1)
    times: dict[int, float] = {}

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        # needs the broker's delay delivery (SCHEDULE_TOPIC_XXXX, messageDelayLevel)
        for m in msgs:
            times.setdefault(m.reconsume_times, time.monotonic())
            if m.reconsume_times == 0:
                ctx.delay_level_when_next_consume = 2  # "1s" in the test broker's table
                return LATER
        return SUCCESS

    c = PushConsumer(
        group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", rebalance_interval=2
    )
    c.subscribe(topic)
    c.register_listener(listener)
    await c.start()
    try:
        await wait_until(lambda: 1 in times, 20, f"redelivery of {sent[0]!r}")
        assert times[1] - times[0] >= 0.8
    finally:
        await c.shutdown()


@pytest.mark.parametrize("kind", ["async", "plain"])  # plain: the call's start stamped in its thread
async def test_message_held_past_consume_timeout_is_sent_back(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], kind: str
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    stuck = asyncio.Event()
    released = threading.Event()
    done: list[tuple[bytes, int]] = []

    async def async_listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        if m.body == sent[0] and m.reconsume_times == 0:
            await stuck.wait()  # hangs "forever"
        done.append((m.body, m.reconsume_times))
        return SUCCESS

    def plain_listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        if m.body == sent[0] and m.reconsume_times == 0:
            released.wait(30)  # blocks its thread "forever"
        done.append((m.body, m.reconsume_times))
        return SUCCESS

    listener = async_listener if kind == "async" else plain_listener

    c = PushConsumer(
        group,
        mq_cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_timeout=0.02,  # minutes: 1.2 s
        rebalance_interval=2,
        await_termination_millis_when_shutdown=100,
    )
    c.subscribe(topic)
    c.register_listener(listener)
    await c.start()
    try:
        await wait_until(lambda: (sent[0], 1) in done, 20, "the stuck message coming back from %RETRY%")
        # its queue offset moved past it although the first listener call never returned
        await wait_until(lambda: c.offset_store.clone_offset_table(topic).get(queues[0]) == 3, 10, "offset 3")
    finally:
        stuck.set()
        released.set()
        await c.shutdown()


# ------------------------------------------------------------------ orderly
@pytest.mark.parametrize("kind", ["async", "plain"])  # plain: several batches per hand-off to its thread
async def test_orderly_keeps_per_key_order_when_the_listener_suspends(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], kind: str
) -> None:
    topic, group = names("T"), names("G")
    await create_topic(mq_cluster, topic, 4)
    keys = [f"k{i}" for i in range(6)]
    async with Producer(names("P"), mq_cluster.namesrv_addr) as p:
        for seq in range(8):
            for k in keys:
                await p.send_orderly(Message(topic, f"{k}:{seq}".encode(), keys=k), k)
    order: dict[str, list[int]] = collections.defaultdict(list)
    suspends: collections.Counter[bytes] = collections.Counter()
    active: set[int] = set()
    overlap: list[int] = []

    guard = threading.Lock()  # (the plain listener's calls run in threads)

    def enter(q: int) -> None:
        with guard:
            if q in active:
                overlap.append(q)
            active.add(q)

    def decide(msgs, ctx) -> ConsumeOrderlyStatus:  # type: ignore[no-untyped-def]
        try:
            for m in msgs:
                k, seq = m.body.decode().split(":")
                with guard:
                    if int(seq) in (2, 5) and suspends[m.body] < 2:
                        suspends[m.body] += 1
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    order[k].append(int(seq))
            return ConsumeOrderlyStatus.SUCCESS
        finally:
            with guard:
                active.discard(ctx.message_queue.queue_id)

    async def async_listener(msgs, ctx):  # type: ignore[no-untyped-def]
        enter(ctx.message_queue.queue_id)
        await asyncio.sleep(0.001)
        return decide(msgs, ctx)

    def consume(msgs, ctx):  # type: ignore[no-untyped-def]
        enter(ctx.message_queue.queue_id)
        time.sleep(0.001)
        return decide(msgs, ctx)

    listener = async_listener if kind == "async" else consume

    c = PushConsumer(
        group,
        mq_cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        suspend_current_queue_time_millis=100,
    )
    c.subscribe(topic)
    c.register_orderly_listener(listener)
    await c.start()
    try:
        await wait_until(
            lambda: sum(len(v) for v in order.values()) >= len(keys) * 8, 30, "all messages in order"
        )
        for k in keys:
            assert order[k] == list(range(8)), k
        assert all(n == 2 for n in suspends.values()) and len(suspends) == len(keys) * 2
        assert not overlap  # one listener call per queue at a time
        pqs = c.process_queue_table()
        assert pqs and all(
            pq.locked and not pq.is_lock_expired() for mq, pq in pqs.items() if mq.topic == topic
        )
    finally:
        await c.shutdown()


async def test_orderly_gives_up_after_max_reconsume_times_into_the_dlq(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    poison = sent[0]
    attempts: collections.Counter[bytes] = collections.Counter()
    done: list[bytes] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        attempts[m.body] += 1
        if m.body == poison:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        done.append(m.body)
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer(
        group,
        mq_cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        suspend_current_queue_time_millis=50,
        max_reconsume_times=2,
    )
    c.subscribe(topic)
    c.register_orderly_listener(listener)
    await c.start()
    try:
        await wait_until(lambda: done == sent[1:], 20, "the queue moving on past the poison message")
        assert attempts[poison] == 3  # first try + 2 reconsumes
    finally:
        await c.shutdown()
    dlq = f"%DLQ%{group}"
    broker = mq_cluster.brokers["broker-a"]
    reader = await QueueReader.create(mq_cluster.namesrv_addr)
    try:

        async def in_dlq() -> bool:
            try:
                return await reader.api.get_max_offset(broker, dlq, 0) == 1
            except Exception:
                return False

        await wait_until(in_dlq, 15, "one message in the DLQ")

        # The broker creates %DLQ% readable (RocketMQ 4.9.2+), so it is read with no grant.
        async def dlq_queues() -> list[MessageQueue]:
            try:
                return await reader.fetch_queues(dlq)
            except Exception:
                return []

        await wait_until(lambda: dlq_queues(), 15, "the DLQ topic's route")
        bodies = []
        for mq in await reader.fetch_queues(dlq):
            async for msgs in reader.read_range(mq, 0, await reader.max_offset(mq)):
                bodies.extend(m.body for m in msgs)
        assert bodies == [poison]
    finally:
        await reader.close()


# ------------------------------------------------------------------ flow control
async def test_flow_control_bounds_the_cache_of_a_slow_listener(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    mq = queues[0]
    async with Producer(names("P"), mq_cluster.namesrv_addr) as p:
        for i in range(0, 400, 50):
            await p.send_batch([Message(topic, f"m{j}".encode()) for j in range(i, i + 50)], queue=mq)
    gate = asyncio.Event()
    got: list[bytes] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        await gate.wait()
        got.extend(m.body for m in msgs)
        return SUCCESS

    threshold, batch = 40, 16
    c = PushConsumer(
        group,
        mq_cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        pull_threshold_for_queue=threshold,
        pull_batch_size=batch,
        consume_thread_min=2,
        consume_thread_max=2,
    )
    c.subscribe(topic)
    c.register_listener(listener)
    await c.start()
    try:
        await wait_until(lambda: mq in c.process_queue_table(), 10, "the queue assigned")
        pq = c.process_queue_table()[mq]
        await wait_until(lambda: pq.msg_count > threshold, 10, "the cache filling up")
        samples = []
        for _ in range(20):  # 1 s of a stuck listener: pulls must stay paused
            samples.append(pq.msg_count)
            await asyncio.sleep(0.05)
        assert max(samples) <= threshold + batch
        assert c.flow_control_times > 0
        gate.set()
        await wait_until(lambda: len(set(got)) == 400, 30, "all 400 messages")
        assert pq.msg_count_high_watermark <= threshold + batch
    finally:
        gate.set()
        await c.shutdown()
