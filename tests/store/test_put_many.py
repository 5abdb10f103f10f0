"""put_many: several independent puts (single messages and batches) in one lock round, one result
each; a bad unit fails alone; no unit spans files; the index hash shortcut matches Java's."""

from __future__ import annotations

import random
import string
from collections.abc import Callable

from remoting.message import java_hash_unsigned
from store.index_service import TopicKeyHasher
from store.message_store import DefaultMessageStore
from store.results import AppendMessageResult, AppendMessageStatus, PutMessageStatus
from tests.store.conftest import make_msg


async def test_units_get_their_own_results(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(maxMessageSize=1000)
    await store.start()
    units = [
        [make_msg(body=b"a", uniq="A")],
        [make_msg(body=b"x" * 1001)],  # too big: fails alone
        [make_msg(body=b"b1", queue_id=1), make_msg(body=b"b2", queue_id=1)],  # a batch
        [],  # empty: fails alone
        [make_msg(topic="t" * 128)],
        [make_msg(body=b"c", uniq="C")],
    ]
    rs = await store.put_many(units)
    assert [r.status for r in rs] == [
        PutMessageStatus.PUT_OK,
        PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.PUT_OK,
        PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.PUT_OK,
    ]
    a, b, c = rs[0].append_result, rs[2].append_result, rs[5].append_result
    assert a is not None and b is not None and c is not None
    assert (a.logics_offset, b.logics_offset, c.logics_offset) == (0, 0, 1)
    assert b.msg_num == 2 and len(b.msg_ids) == 2
    assert a.wrote_offset + a.wrote_bytes == b.wrote_offset and b.wrote_offset + b.wrote_bytes == c.wrote_offset
    assert await store.wait_dispatched(5.0)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 2
    assert store.get_max_offset_in_queue("TopicTest", 1) == 2
    m = store.look_message_by_offset(c.wrote_offset)
    assert m is not None and m.body == b"c" and m.queue_offset == 1 and m.msg_id == c.msg_id


async def test_units_roll_files_without_spanning(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()  # 64 KiB commit log files
    await store.start()
    units = [[make_msg(body=bytes([i]) * 9000)] for i in range(20)]
    rs = await store.put_many(units)
    assert all(r.is_ok for r in rs)
    for r in rs:
        ar = r.append_result
        assert ar is not None and ar.wrote_offset // 65536 == (ar.wrote_offset + ar.wrote_bytes - 1) // 65536
    assert len(store.commit_log.mapped_file_queue.mapped_files) > 2
    for i, r in enumerate(rs):
        m = store.look_message_by_offset(r.append_result.wrote_offset)  # type: ignore[union-attr]
        assert m is not None and m.body == bytes([i]) * 9000 and m.queue_offset == i


async def test_sync_flush_units_share_one_wait(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(flushDiskType="SYNC_FLUSH")
    await store.start()
    units = [[make_msg(body=f"s{i}".encode())] for i in range(10)]
    units.append([make_msg(body=b"nowait", extra={"WAIT": "false"})])
    rs = await store.put_many(units)
    assert all(r.status == PutMessageStatus.PUT_OK for r in rs)
    last = rs[-2].append_result
    assert last is not None
    assert store.commit_log.flushed_where >= last.wrote_offset + last.wrote_bytes


def test_topic_key_hasher_matches_java_hash() -> None:
    rnd = random.Random(3)
    h = TopicKeyHasher()
    alphabet = string.printable + "\u00e9\u4e2d\U0001f600"
    for i in range(5000):
        topic = "".join(rnd.choice(string.ascii_letters + "%_-|") for _ in range(rnd.randint(1, 40)))
        key_chars = "0123456789ABCDEF" if i % 2 else alphabet
        key = "".join(rnd.choice(key_chars) for _ in range(rnd.randint(0, 80)))
        assert h.hash_unsigned(topic, key) == java_hash_unsigned(f"{topic}#{key}"), (topic, key)


def test_batch_msg_ids_match_per_record_encoding() -> None:
    for host in (bytes([10, 0, 0, 2, 0, 0, 0x2A, 0x9F]), bytes(range(16)) + bytes([0, 0, 0x2A, 0x9F])):
        offsets = [0, 1300, 2**40, 2**63 - 1]
        ar = AppendMessageResult(AppendMessageStatus.PUT_OK, 0, phy_offsets=offsets, store_host_bytes=host)
        assert ar.msg_id == ",".join((host + o.to_bytes(8, "big")).hex().upper() for o in offsets)
        one = AppendMessageResult(AppendMessageStatus.PUT_OK, 77, store_host_bytes=host)
        assert one.msg_id == (host + (77).to_bytes(8, "big")).hex().upper()


async def test_new_queues_get_their_files_in_few_thread_trips(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """A burst of sends to new queues: the dispatcher creates the consume queue files the pending
    records need together, not one allocation-thread round trip per queue."""
    store = make_store()
    await store.start()
    assert (await store.put_message(make_msg(topic="Warm"))).is_ok
    assert await store.wait_dispatched(5)
    trips: list[int] = []
    submit = store.alloc_executor.submit

    def counting_submit(fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        trips.append(1)
        return submit(fn, *args, **kwargs)

    store.alloc_executor.submit = counting_submit  # type: ignore[method-assign]
    try:
        units = [[make_msg(topic=f"Burst{t}", queue_id=q)] for t in range(30) for q in range(4)]
        results = await store.put_many(units)
        assert all(r.is_ok for r in results)
        assert await store.wait_dispatched(5)
    finally:
        store.alloc_executor.submit = submit  # type: ignore[method-assign]
    assert all(store.get_max_offset_in_queue(f"Burst{t}", q) == 1 for t in range(30) for q in range(4))
    assert 1 <= len(trips) <= 3, f"{len(trips)} allocation-thread trips for 120 new queues"
