"""MessageBatch (a batch send without a MessageExtBrokerInner per message) stores exactly what the same
messages as a list store; its dispatch run fills the consume queue, the index and the arrival listeners
per record; SYNC_FLUSH group commit answers every waiter only once its data is flushed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from remoting.message import decode_message, java_string_hash
from store.commit_log import MessageBatch
from store.message_store import DefaultMessageStore
from store.results import PutMessageStatus
from tests.store.conftest import BORN_HOST, STORE_HOST

BORN_TS = int(time.time() * 1000)  # one value: two batches made a millisecond apart must still compare equal


def make_batch(n: int, queue_id: int = 0, prefix: str = "m", sys_flag: int = 0) -> MessageBatch:
    props_list: list[dict[str, str]] = []
    strings: list[str] = []
    for i in range(n):
        props = {"UNIQ_KEY": f"{prefix}-uniq-{i}", "TAGS": f"tag{i % 3}", "CLUSTER": "c"}
        if i == 1:
            props["KEYS"] = f"{prefix}-k1 {prefix}-k2"
        props_list.append(props)
        strings.append("\x02".join(f"{k}\x01{v}" for k, v in props.items()))
    return MessageBatch(
        "TopicTest", queue_id, sys_flag, BORN_TS, BORN_HOST, STORE_HOST, 0,
        list(range(n)), [f"{prefix}-body-{i}".encode() * 7 for i in range(n)], props_list, strings,
    )


def _records(store: DefaultMessageStore, queue_id: int, n: int) -> list:  # type: ignore[type-arg]
    r = store.get_message("g", "TopicTest", queue_id, 0, n)
    assert r.message_count == n
    return [decode_message(bytes(b))[0] for b in r.message_buffers]


async def test_batch_stores_what_the_list_stores(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    batch = make_batch(5)
    as_list = make_batch(5).to_messages()
    for m in as_list:
        m.queue_id = 1
    rb, rl = await store.put_many([batch, as_list])
    assert rb.status == rl.status == PutMessageStatus.PUT_OK
    assert rb.append_result is not None and rl.append_result is not None
    assert rb.append_result.msg_num == 5 and rb.append_result.logics_offset == 0
    assert len(rb.append_result.msg_ids) == 5
    assert await store.wait_dispatched(5)
    got_b = _records(store, 0, 5)
    got_l = _records(store, 1, 5)
    for i, (b, li) in enumerate(zip(got_b, got_l, strict=True)):
        assert b.body == li.body == f"m-body-{i}".encode() * 7
        assert b.properties == li.properties
        assert b.flag == li.flag == i
        assert (b.sys_flag, b.born_timestamp, b.born_host, b.store_host) == (
            li.sys_flag, li.born_timestamp, li.born_host, li.store_host)
        assert b.queue_offset == li.queue_offset == i
        assert b.body_crc == li.body_crc
    # Consume queue tags codes and the index (UNIQ_KEY and KEYS) for every record of the batch.
    cq = store.find_consume_queue("TopicTest", 0)
    for i in range(5):
        unit = cq.get_unit(i)
        assert unit is not None and unit[2] == java_string_hash(f"tag{i % 3}")
    now = int(time.time() * 1000)
    for key in ("m-uniq-0", "m-uniq-4", "m-k2"):
        q = store.query_message("TopicTest", key, 32, 0, now + 1000)
        assert len(q.message_buffers) == 2, key  # the batch's record and the list's


async def test_batch_run_dispatch_notifies_every_record(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    seen: list[tuple[int, int, str]] = []
    store.add_arrival_listener(
        lambda topic, qid, after, tags_code, ts, props: seen.append((qid, after, props["UNIQ_KEY"]))
    )
    await store.put_many([make_batch(3, prefix="a"), make_batch(4, prefix="b")])
    await store.put_many([make_batch(2, queue_id=2, prefix="c")])
    assert await store.wait_dispatched(5)
    assert seen == [
        (0, 1, "a-uniq-0"), (0, 2, "a-uniq-1"), (0, 3, "a-uniq-2"),
        (0, 4, "b-uniq-0"), (0, 5, "b-uniq-1"), (0, 6, "b-uniq-2"), (0, 7, "b-uniq-3"),
        (2, 1, "c-uniq-0"), (2, 2, "c-uniq-1"),
    ]
    assert store.get_max_offset_in_queue("TopicTest", 0) == 7


async def test_batch_runs_across_consume_queue_files(make_store: Callable[..., DefaultMessageStore]) -> None:
    # 1000 units per consume queue file: runs of 7 cross file boundaries and fall back unit by unit.
    store = make_store(mappedFileSizeCommitLog=1024 * 1024)
    await store.start()
    for b in range(200):
        r = await store.put_messages(make_batch(7, prefix=f"x{b}"))  # type: ignore[arg-type]
        assert r.status == PutMessageStatus.PUT_OK
    assert await store.wait_dispatched(10)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1400
    for start in (995, 1000):  # a read stops at a consume queue file's end
        got = store.get_message("g", "TopicTest", 0, start, 5)
        assert got.message_queue_offsets == list(range(start, start + 5))
        uniqs = [decode_message(bytes(b))[0].properties["UNIQ_KEY"] for b in got.message_buffers]
        assert uniqs == [f"x{o // 7}-uniq-{o % 7}" for o in range(start, start + 5)]


async def test_sync_flush_answers_each_waiter_after_its_flush(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    store = make_store(flushDiskType="SYNC_FLUSH")
    await store.start()
    flushed_at_answer: list[tuple[int, int]] = []

    async def put(i: int) -> None:
        r = await store.put_messages(make_batch(3, queue_id=i % 4, prefix=f"s{i}"))  # type: ignore[arg-type]
        assert r.status == PutMessageStatus.PUT_OK and r.append_result is not None
        flushed_at_answer.append(
            (store.commit_log.flushed_where, r.append_result.wrote_offset + r.append_result.wrote_bytes)
        )

    await asyncio.gather(*(put(i) for i in range(40)))
    assert len(flushed_at_answer) == 40
    assert all(flushed >= end for flushed, end in flushed_at_answer)
    # No service task polls: once idle, nothing is in flight and everything written is on disk.
    assert store.commit_log.flushed_where == store.commit_log.get_max_offset()
