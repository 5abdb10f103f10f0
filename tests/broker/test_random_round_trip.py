"""Random messages through the whole path, against a real NameServer and broker: whatever a message
carries (body, tags, keys, user properties; ASCII or not; sent alone, pipelined, auto-batched or in a
batch) comes back as it was sent, where its SendResult said, and its keys and id find it; and all of it
again after the broker was killed (SIGKILL) and restarted on its store. Consumers with tag expressions
get exactly the messages whose tags match.

The broker's send path has fast paths for what producers usually send (memoized header shapes and
property strings, gathered index runs, batches packed column by column) beside the general one; the
random mix sends every kind through both, with the store's files small enough to roll under it."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from client import (
    Admin,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    SendStatus,
)
from client.message import MessageExt, PullStatus, SendResult
from tests.support.daemons import Daemon, start_broker

TOPICS = ("RoundTripA", "RoundTrip_B")
QUEUES = 4
# Files that roll during the run: CommitLog every 256 KiB, consume queues every 64 units, index files every
# 300 entries (a gathered run of index entries then meets a full file).
STORE = {
    "mappedFileSizeCommitLog": 256 * 1024,
    "mappedFileSizeConsumeQueue": 64 * 20,
    "maxHashSlotNum": 64,
    "maxIndexNum": 300,
}
KEY_POOL = [f"k{i}" for i in range(24)] + [f"order-{i:06d}" for i in range(12)] + ["键", "clé-7", "ключ"]
TAGS = [None, None, "TagA", "TagB", "标签", "tag-3"]
PROP_NAMES = ["color", "p1", "trace-id", "颜色", "x.y"]
VALUE_CHARS = "abcXYZ019 =:;,/-_.é中🙂"


@dataclass
class Sent:
    topic: str
    body: bytes
    tags: str | None
    keys: list[str]
    props: dict[str, str]
    uniq: str = ""
    offset_msg_id: str = ""
    queue_id: int = -1
    queue_offset: int = -1


def random_message(rnd: random.Random, topic: str, shape: tuple[str | None, int, int] | None = None) -> Sent:
    """A message with random content; `shape` fixes its tags and how many keys and properties it has."""
    tags, n_keys, n_props = shape if shape is not None else (
        rnd.choice(TAGS), rnd.choice((0, 0, 1, 1, 2, 3)), rnd.choice((0, 0, 1, 2, 4)))
    size = rnd.choice((1, 17, 300, 1024, 1024, 2048, 4100, 6000))
    body = rnd.randbytes(size)
    keys = rnd.sample(KEY_POOL, n_keys)
    props = {name: "".join(rnd.choices(VALUE_CHARS, k=rnd.randint(1, 12))) for name in rnd.sample(PROP_NAMES, n_props)}
    return Sent(topic, body, tags, keys, props)


def as_message(s: Sent) -> Message:
    return Message(s.topic, s.body, tags=s.tags, keys=s.keys or None, properties=s.props or None)


async def send_round(rnd: random.Random, plain: Producer, auto: Producer, out: list[Sent]) -> None:
    """One of each way of sending, in random order, with random messages."""

    async def alone() -> None:
        for _ in range(rnd.randint(3, 8)):
            s = random_message(rnd, rnd.choice(TOPICS))
            record(s, await plain.send(as_message(s)))

    async def pipelined(p: Producer) -> None:
        sent = [random_message(rnd, rnd.choice(TOPICS)) for _ in range(rnd.randint(20, 70))]
        # Every other one has the same tags, key and property as the first (only its body and id differ, as
        # a producer's usual messages), the rest each their own.
        like = random_message(rnd, sent[0].topic, (rnd.choice(TAGS[2:]), 0, 1))
        like.keys = [f"shape-{rnd.randrange(10**9)}"]  # its own key: at most 35 hits, under a query's 64
        for i in range(0, len(sent), 2):
            sent[i] = Sent(like.topic, rnd.randbytes(rnd.choice((10, 1024))), like.tags, like.keys, like.props)
        futures = [p.send_async(as_message(s)) for s in sent]
        for s, r in zip(sent, await asyncio.gather(*futures), strict=True):
            record(s, r)

    async def batch(uniform: bool) -> None:
        topic = rnd.choice(TOPICS)
        n = rnd.randint(2, 16)
        if uniform:
            # One body length and one properties length (the broker then packs the batch column by column):
            # the same tags, and keys and property values that differ but are of one length.
            size, tags = rnd.choice((1, 100, 1024)), rnd.choice(TAGS)
            keyed, names = rnd.random() < 0.7, rnd.sample(PROP_NAMES, rnd.randint(0, 2))
            sent = [
                Sent(topic, rnd.randbytes(size), tags, [f"order-{rnd.randrange(12):06d}"] if keyed else [],
                     {name: "".join(rnd.choices("abcXYZ019", k=8)) for name in names})
                for _ in range(n)
            ]
        else:
            sent = [random_message(rnd, topic) for _ in range(n)]
        r = await plain.send_batch([as_message(s) for s in sent])
        assert r.status is SendStatus.SEND_OK
        uniqs = r.msg_id.split(",")
        offset_ids = r.offset_msg_id.split(",")
        assert len(uniqs) == len(offset_ids) == len(sent)
        for k, s in enumerate(sent):
            s.uniq, s.offset_msg_id = uniqs[k], offset_ids[k]
            s.queue_id, s.queue_offset = r.queue.queue_id, r.queue_offset + k
            out.append(s)

    def record(s: Sent, r: SendResult) -> None:
        assert r.status is SendStatus.SEND_OK
        s.uniq, s.offset_msg_id = r.msg_id, r.offset_msg_id
        s.queue_id, s.queue_offset = r.queue.queue_id, r.queue_offset
        out.append(s)

    steps = [alone(), pipelined(plain), pipelined(auto), batch(True), batch(False)]
    rnd.shuffle(steps)
    for step in steps:
        await step


async def fill(namesrv: str, rnd: random.Random, rounds: int, sent: list[Sent]) -> None:
    """Create the topics (if new) and send `rounds` of send_round from a plain and an auto-batching producer."""
    async with Admin(namesrv) as admin:
        for topic in TOPICS:
            await admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    async with Producer("rt_plain", namesrv) as plain, Producer("rt_auto", namesrv, auto_batch=True) as auto:
        for _ in range(rounds):
            await send_round(rnd, plain, auto, sent)


async def read_all(admin: Admin, broker_name: str) -> dict[tuple[str, int], list[MessageExt]]:
    """Every message of every queue, read from offset 0 until a pull finds nothing more."""
    out: dict[tuple[str, int], list[MessageExt]] = {}
    for topic in TOPICS:
        for q in range(QUEUES):
            mq = MessageQueue(topic, broker_name, q)
            got: list[MessageExt] = []
            pos = 0
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                res = await admin.pull(mq, pos, 32)
                if res.status is not PullStatus.FOUND:
                    break
                got.extend(res.messages)
                pos = res.next_begin_offset
            out[(topic, q)] = got
    return out


async def check(admin: Admin, broker_name: str, sent: list[Sent], rnd: random.Random) -> None:
    queues = await read_all(admin, broker_name)
    stored: dict[str, MessageExt] = {}
    for (topic, q), msgs in queues.items():
        # Each queue holds its messages at offsets 0, 1, 2, ... with nothing twice.
        assert [m.queue_offset for m in msgs] == list(range(len(msgs))), (topic, q)
        for m in msgs:
            assert (m.topic, m.queue_id) == (topic, q)
            assert m.uniq_key not in stored, m.uniq_key
            stored[m.uniq_key] = m
    assert len(stored) == len(sent)
    for s in sent:
        m = stored[s.uniq]
        assert m.body == s.body, s
        assert m.tags == s.tags, s
        assert (m.keys or "") == " ".join(s.keys), s
        assert {k: m.properties.get(k) for k in s.props} == s.props, s
        assert (m.topic, m.queue_id, m.queue_offset) == (s.topic, s.queue_id, s.queue_offset), s
        assert m.msg_id == s.offset_msg_id, s
    # The index: every key finds exactly the messages sent with it (per topic), every id its message.
    with_key: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s in sent:
        for k in s.keys:
            with_key[(s.topic, k)].add(s.uniq)
    for (topic, key), uniqs in with_key.items():
        assert len(uniqs) <= 64, (topic, key)  # (a query answers at most 64: the test's own bound)
        hits = await admin.query_message_by_key(topic, key, max_num=64)
        assert {m.uniq_key for m in hits} == uniqs, (topic, key)
    for s in rnd.sample(sent, 25):
        m = await admin.query_message_by_unique_key(s.topic, s.uniq)
        assert m is not None and m.body == s.body, s


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[Daemon]]:
    """Brokers the test starts; whichever still runs is stopped by PID at the end."""
    started: list[Daemon] = []
    try:
        yield started
    finally:
        for d in started:
            d.terminate()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_random_messages_come_back_as_sent_before_and_after_a_crash(
    tmp_path: Path, namesrv: str, brokers: list[Daemon], flush: str
) -> None:
    rnd = random.Random(20261124)
    store = tmp_path / "store"
    name = "broker-rt"
    conf = {**STORE, "flushDiskType": flush}
    broker, _ = start_broker(tmp_path, namesrv, name=name, store_dir=store, extra=conf)
    brokers.append(broker)
    sent: list[Sent] = []
    await fill(namesrv, rnd, 6, sent)
    assert len(sent) > 500
    assert len(list((store / "commitlog").iterdir())) > 2 and len(list((store / "index").iterdir())) > 2
    async with Admin(namesrv) as admin:
        await check(admin, name, sent, rnd)

    broker.kill()  # SIGKILL: no shutdown, no final flush or checkpoint
    broker, _ = start_broker(tmp_path, namesrv, name=name, store_dir=store, extra=conf)
    brokers.append(broker)
    async with Admin(namesrv) as admin:
        await check(admin, name, sent, rnd)
        # Writing goes on where the store ends: every queue's offsets continue.
        await fill(namesrv, rnd, 1, sent)
        await check(admin, name, sent, rnd)


async def test_random_tag_filters_deliver_exactly_the_matching_messages(
    tmp_path: Path, namesrv: str, brokers: list[Daemon]
) -> None:
    """Consumers subscribed with tag expressions (one an `async def` push listener, the others lite pull) get
    exactly the random messages whose tags match, each once; `*` gets all, untagged ones too."""
    rnd = random.Random(424242)
    broker, _ = start_broker(tmp_path, namesrv, name="broker-rt", extra=STORE)
    brokers.append(broker)
    sent: list[Sent] = []
    await fill(namesrv, rnd, 3, sent)
    topic = TOPICS[1]

    def expected(expression: str) -> set[str]:
        wanted = {t.strip() for t in expression.split("||")}
        return {s.uniq for s in sent if s.topic == topic and ("*" in wanted or s.tags in wanted)}

    async def lite_pull(group: str, expression: str) -> list[str]:
        want = len(expected(expression))
        got: list[str] = []
        async with LitePullConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                    poll_timeout_millis=200) as c:
            c.subscribe(topic, expression)
            deadline = time.monotonic() + 10
            while len(got) < want and time.monotonic() < deadline:
                got.extend(m.uniq_key for m in await c.poll())
            got.extend(m.uniq_key for m in await c.poll(0.3))  # nothing more comes
        return got

    async def push(group: str, expression: str) -> list[str]:
        want = len(expected(expression))
        got: list[str] = []
        enough = asyncio.Event()

        async def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
            got.extend(m.uniq_key for m in msgs)
            if len(got) >= want:
                enough.set()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe(topic, expression)
        c.register_listener(listener)
        await c.start()
        try:
            with contextlib.suppress(TimeoutError):  # (what came is compared below)
                await asyncio.wait_for(enough.wait(), 10)
            await asyncio.sleep(0.3)  # nothing more comes
        finally:
            await c.shutdown()
        return got

    for run, group, expression in (
        (lite_pull, "rt_lite_a", "TagA || 标签"),
        (push, "rt_push", "tag-3 || TagB"),
        (lite_pull, "rt_lite_all", "*"),
    ):
        got = await run(group, expression)
        assert len(got) == len(set(got)), expression  # each once
        assert set(got) == expected(expression), expression
        assert got, expression
