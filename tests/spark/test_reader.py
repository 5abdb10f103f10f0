"""client.reader against real daemons: ranges, pipelining across short pulls, tags, offsets, errors."""

from __future__ import annotations

import os
import random
import time

import pytest

from client import Message
from client.message import MessageQueue
from client.reader import BlockingQueueReader, OffsetOutOfRangeError, QueueReader
from client.sync import Producer

from .conftest import Cluster, produce, topic_name


@pytest.fixture(scope="module")
def reader(rmq: Cluster) -> BlockingQueueReader:
    r = BlockingQueueReader(rmq.namesrv, pull_timeout_ms=10_000)
    yield r
    r.close()


def _send_to_queue(namesrv: str, mq: MessageQueue, bodies: list[bytes], tags: list[str] | None = None) -> None:
    with Producer(f"pg_{mq.topic}", namesrv) as p:
        for i, b in enumerate(bodies):
            p.send(Message(mq.topic, b, tags=tags[i] if tags else "TagA", keys=f"k{i}"), queue=mq)


def test_fetch_queues_and_offset_ranges(rmq: Cluster, reader: BlockingQueueReader) -> None:
    topic = topic_name("Rd")
    produce(rmq.namesrv, topic, 40)
    queues = reader.fetch_queues(topic)
    assert queues == [MessageQueue(topic, "broker-a", i) for i in range(4)]
    ranges = reader.offset_ranges(queues)
    assert all(lo == 0 for lo, _ in ranges.values())
    assert sum(hi for _, hi in ranges.values()) == 40
    total = 0
    for mq in queues:
        msgs = [m for batch in reader.read_range(mq, 0, ranges[mq][1]) for m in batch]
        assert [m.queue_offset for m in msgs] == list(range(ranges[mq][1]))
        assert all(m.topic == topic and m.queue_id == mq.queue_id for m in msgs)
        total += len(msgs)
    assert total == 40


def test_read_exact_subrange_and_stop_at_queue_end(rmq: Cluster, reader: BlockingQueueReader) -> None:
    topic = topic_name("Rd")
    mq = MessageQueue(topic, "broker-a", 0)
    produce(rmq.namesrv, topic, 1)  # creates the topic
    base = reader.max_offset(mq)
    _send_to_queue(rmq.namesrv, mq, [f"b{i}".encode() for i in range(50)])
    got = [m for b in reader.read_range(mq, base + 5, base + 17) for m in b]
    assert [m.queue_offset for m in got] == list(range(base + 5, base + 17))
    assert [m.body for m in got] == [f"b{i}".encode() for i in range(5, 17)]
    # An end beyond the queue stops at the queue's end instead of waiting.
    t0 = time.monotonic()
    tail = [m for b in reader.read_range(mq, base + 40, base + 10_000) for m in b]
    assert [m.queue_offset for m in tail] == list(range(base + 40, base + 50))
    assert time.monotonic() - t0 < 5
    assert list(reader.read_range(mq, base + 50, base + 60)) == []  # at the end: nothing, no error


def test_pipelined_reads_fill_short_pulls_in_order(rmq: Cluster, reader: BlockingQueueReader) -> None:
    """Mixed sizes make the broker's 256 KiB cap cut pulls short of the 32-message cap: the reader
    must fill each gap before later pipelined answers and deliver every offset once, in order."""
    topic = topic_name("Rd")
    produce(rmq.namesrv, topic, 1)
    mq = MessageQueue(topic, "broker-a", 1)
    base = reader.max_offset(mq)
    rnd = random.Random(7)
    bodies = [os.urandom(rnd.choice([200, 1000, 30_000, 60_000])) for _ in range(240)]
    _send_to_queue(rmq.namesrv, mq, bodies)
    for pipeline in (1, 8):
        got = []
        for chunk in reader.read_range_raw(mq, base, base + len(bodies), pipeline=pipeline):
            assert chunk.lo <= chunk.next_offset
            got.extend(m for m in _decode(chunk))
        assert [m.queue_offset for m in got] == list(range(base, base + len(bodies)))
        assert [m.body for m in got] == bodies


def _decode(chunk):  # type: ignore[no-untyped-def]
    from client.reader import decode_chunk

    return decode_chunk(chunk)


def test_tag_filtering_and_skip_chunks_report_progress(rmq: Cluster, reader: BlockingQueueReader) -> None:
    topic = topic_name("Rd")
    produce(rmq.namesrv, topic, 1, tags=lambda i: "Other")
    mq = MessageQueue(topic, "broker-a", 2)
    base = reader.max_offset(mq)
    tags = ["TagA" if i % 10 == 0 else "TagB" if i % 10 == 1 else "Other" for i in range(200)]
    _send_to_queue(rmq.namesrv, mq, [f"m{i}".encode() for i in range(200)], tags)
    end = base + 200
    got = [m for b in reader.read_range(mq, base, end, sub_expression="TagA || TagB") for m in b]
    want = [base + i for i in range(200) if tags[i] in ("TagA", "TagB")]
    assert [m.queue_offset for m in got] == want
    assert {m.tags for m in got} == {"TagA", "TagB"}
    chunks = list(reader.read_range_raw(mq, base, end, sub_expression="Nope"))
    assert chunks and chunks[-1].next_offset == end  # nothing matched, but the range was walked to its end


def test_compressed_bodies_are_decompressed(rmq: Cluster, reader: BlockingQueueReader) -> None:
    topic = topic_name("Rd")
    produce(rmq.namesrv, topic, 1)
    mq = MessageQueue(topic, "broker-a", 3)
    base = reader.max_offset(mq)
    big = b"compress me " * 2000  # over the producer's 4 KiB threshold
    _send_to_queue(rmq.namesrv, mq, [big, b"small"])
    got = [m for b in reader.read_range(mq, base, base + 2) for m in b]
    assert [m.body for m in got] == [big, b"small"]
    assert got[0].sys_flag & 0x1  # stored compressed


def test_offset_beyond_max_raises_typed_error(rmq: Cluster, reader: BlockingQueueReader) -> None:
    topic = topic_name("Rd")
    produce(rmq.namesrv, topic, 8)
    mq = MessageQueue(topic, "broker-a", 0)
    hi = reader.max_offset(mq)
    with pytest.raises(OffsetOutOfRangeError) as ei:
        list(reader.read_range(mq, hi + 100, hi + 110))
    assert ei.value.requested == hi + 100 and ei.value.max_offset == hi and ei.value.min_offset == 0


def test_commit_offset_and_timestamp_search(rmq: Cluster, reader: BlockingQueueReader) -> None:
    topic = topic_name("Rd")
    mq = MessageQueue(topic, "broker-a", 0)
    produce(rmq.namesrv, topic, 1)
    _send_to_queue(rmq.namesrv, mq, [b"a"] * 5)
    before = reader.max_offset(mq)
    time.sleep(0.05)
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    _send_to_queue(rmq.namesrv, mq, [b"b"] * 5)
    assert reader.offset_for_timestamp(mq, ts) == before
    assert reader.commit_offset("rd_group", mq, 3) is True
    assert reader.committed_offset("rd_group", mq) == 3
    assert reader.commit_offsets("rd_group", {mq: 4}) == 1
    assert reader.committed_offset("rd_group", mq) == 4


async def test_async_reader(rmq: Cluster) -> None:
    topic = topic_name("Rd")
    produce(rmq.namesrv, topic, 20)
    async with await QueueReader.create(rmq.namesrv) as r:
        queues = await r.fetch_queues(topic)
        n = 0
        for mq in queues:
            lo, hi = await r.offset_range(mq)
            async for msgs in r.read_range(mq, lo, hi, max_batch=3):
                assert len(msgs) <= 3
                n += len(msgs)
        assert n == 20
        res = await r.pull_once(queues[0], 0, 2)
        assert res.status.name == "FOUND" and len(res.messages) <= 2


def test_reader_survives_a_broker_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.support.daemons import free_port, start_broker, start_namesrv

    ns, ns_addr = start_namesrv(tmp_path)
    try:
        port = free_port()
        store = tmp_path / "store"
        br, _ = start_broker(tmp_path, ns_addr, port=port, store_dir=store)
        try:
            topic = topic_name("Rd")
            mq = MessageQueue(topic, "broker-a", 0)
            _send_to_queue(ns_addr, mq, [f"m{i}".encode() for i in range(30)])
            with BlockingQueueReader(ns_addr) as reader:
                first = [m.body for b in reader.read_range(mq, 0, 10) for m in b]
                assert br.terminate() == 0
                br, _ = start_broker(tmp_path, ns_addr, port=port, store_dir=store)
                rest = [m.body for b in reader.read_range(mq, 10, 30) for m in b]
            assert first + rest == [f"m{i}".encode() for i in range(30)]
        finally:
            br.terminate()
    finally:
        ns.terminate()
