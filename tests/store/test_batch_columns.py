"""The column-wise store paths of a batch give what the record-by-record ones give: one struct pack for a
batch of one shape, the index entries of a UNIQ_KEY run in one go, the arrival listeners by a map, the
tags codes through the store's hook."""

from __future__ import annotations

import mmap
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from remoting.message import (
    MessageSysFlag,
    decode_message,
    host_to_bytes,
    java_hash_unsigned,
    java_string_hash,
)
from store.commit_log import MessageBatch
from store.index_service import IndexFile, IndexService, TopicKeyHasher
from store.message_store import DefaultMessageStore
from store.results import PutMessageStatus
from tests.store.conftest import BORN_HOST, STORE_HOST, make_msg

BORN_TS = int(time.time() * 1000)


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The entries of each IndexFile.put_key_hashes call from now on (0: refused, so put one by one)."""
    runs: list[int] = []
    put_key_hashes = IndexFile.put_key_hashes

    def spy(self: IndexFile, hashes: list[int], phys: list[int], ts: int) -> bool:
        ok = put_key_hashes(self, hashes, phys, ts)
        runs.append(len(hashes) if ok else 0)
        return ok

    monkeypatch.setattr(IndexFile, "put_key_hashes", spy)
    return runs


async def _bulk_and_one_by_one(
    make_store: Callable[..., DefaultMessageStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    off: tuple[str, ...], fill: Callable[[DefaultMessageStore], Awaitable[None]],
) -> list[DefaultMessageStore]:
    """Two stores filled alike by `fill`, dispatched: the first indexes as it does, the second with the
    IndexService bulk methods named in `off` refusing (so record by record)."""
    stores = []
    for root, bulk in ((tmp_path / "a", True), (tmp_path / "b", False)):
        store = make_store(root)
        await store.start()
        with monkeypatch.context() as mp:
            if not bulk:
                for name in off:
                    mp.setattr(IndexService, name, lambda *a, **k: False)
            await fill(store)
            assert await store.wait_dispatched(5)
        stores.append(store)
    return stores


def uniform_batch(n: int, prefix: str = "F", queue_id: int = 0, tags: str | None = None) -> MessageBatch:
    props_list = []
    stored = []
    for i in range(n):
        props = {"WAIT": "true", "UNIQ_KEY": f"{prefix}{i:08X}", "CLUSTER": "c"}
        if tags:
            props["TAGS"] = tags
        props_list.append(props)
        stored.append("\x02".join(f"{k}\x01{v}" for k, v in props.items() if k != "WAIT").encode())
    return MessageBatch(
        "TopicTest", queue_id, 0, BORN_TS, BORN_HOST, STORE_HOST, 0,
        [i % 3 for i in range(n)], [bytes([65 + i % 26]) * 40 for i in range(n)], props_list, None, stored,
    )


async def test_one_shape_batch_stores_what_the_list_stores(
    make_store: Callable[..., DefaultMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _count_runs(monkeypatch)
    store = make_store(maxHashSlotNum=100_003)
    await store.start()
    await store.put_many([uniform_batch(2, prefix="E", queue_id=3)])  # the index file's first entries
    batch = uniform_batch(6, tags="tg")
    as_list = uniform_batch(6, tags="tg").to_messages()
    for m in as_list:
        m.queue_id = 1
    rb, rl = await store.put_many([batch, as_list])
    assert rb.status == rl.status == PutMessageStatus.PUT_OK
    assert await store.wait_dispatched(5)
    got_b = store.get_message("g", "TopicTest", 0, 0, 6)
    got_l = store.get_message("g", "TopicTest", 1, 0, 6)
    assert got_b.message_count == got_l.message_count == 6
    for i, (xb, xl) in enumerate(zip(got_b.message_buffers, got_l.message_buffers, strict=True)):
        b = decode_message(bytes(xb))[0]
        li = decode_message(bytes(xl))[0]
        assert (b.body, b.properties, b.flag, b.body_crc, b.queue_offset, b.sys_flag, b.born_timestamp) == (
            li.body, li.properties, li.flag, li.body_crc, li.queue_offset, li.sys_flag, li.born_timestamp)
        assert b.queue_offset == i and b.store_size == li.store_size == len(xb)
    cq = store.find_consume_queue("TopicTest", 0)
    assert [cq.get_unit(i)[2] for i in range(6)] == [java_string_hash("tg")] * 6  # type: ignore[index]
    now = int(time.time() * 1000)
    for key in ("F00000000", "F00000005"):
        assert len(store.query_message("TopicTest", key, 32, 0, now + 1000).message_buffers) == 2
    assert runs == [6, 6]  # the batch's keys went in as one run, the list's records gathered into one


async def test_tags_code_hook_sees_every_batch_message(make_store: Callable[..., DefaultMessageStore]) -> None:
    seen: list[str] = []

    def hook(topic: str, props: dict[str, str]) -> int | None:
        seen.append(props["UNIQ_KEY"])
        return 7 if props["UNIQ_KEY"].endswith("1") else None

    store = make_store()
    store.tags_code_hook = hook
    await store.start()
    await store.put_many([uniform_batch(3, tags="tg")])
    assert await store.wait_dispatched(5)
    assert seen == ["F00000000", "F00000001", "F00000002"]  # once per message
    cq = store.find_consume_queue("TopicTest", 0)
    assert [cq.get_unit(i)[2] for i in range(3)] == [java_string_hash("tg"), 7, java_string_hash("tg")]  # type: ignore[index]


async def test_tags_code_hook_topics_skip_other_topics_batches(make_store: Callable[..., DefaultMessageStore]) -> None:
    seen: list[str] = []

    def hook(topic: str, props: dict[str, str]) -> int | None:
        seen.append(topic)
        return 7

    store = make_store()
    store.tags_code_hook = hook
    store.tags_code_hook_topics = frozenset(("Other",))
    await store.start()
    await store.put_many([uniform_batch(3, tags="tg")])  # TopicTest: not the hook's
    assert await store.wait_dispatched(5)
    assert seen == []
    cq = store.find_consume_queue("TopicTest", 0)
    assert [cq.get_unit(i)[2] for i in range(3)] == [java_string_hash("tg")] * 3  # type: ignore[index]
    store.tags_code_hook_topics = frozenset(("TopicTest",))
    await store.put_many([uniform_batch(2, tags="tg")])
    assert await store.wait_dispatched(5)
    assert seen == ["TopicTest", "TopicTest"]
    assert [cq.get_unit(i)[2] for i in range(3, 5)] == [7, 7]  # type: ignore[index]


async def test_failing_listener_does_not_stop_the_run(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    seen: list[int] = []
    other: list[int] = []

    def flaky(topic: str, qid: int, after: int, tags_code: int, ts: int, props: object) -> None:
        if after in (2, 4):
            raise RuntimeError("listener bug")
        seen.append(after)

    store.add_arrival_listener(flaky)
    store.add_arrival_listener(lambda topic, qid, after, tc, ts, props: other.append(after))
    await store.put_many([uniform_batch(5)])
    assert await store.wait_dispatched(5)
    assert seen == [1, 3, 5]
    assert other == [1, 2, 3, 4, 5]


async def test_run_filter_gates_batches_and_single_records(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    seen: list[tuple[int, int]] = []
    asked: list[tuple[str, int]] = []
    watched = {1}

    def wanted(topic: str, qid: int) -> bool:
        asked.append((topic, qid))
        return qid in watched

    store.add_arrival_listener(lambda topic, qid, after, tc, ts, props: seen.append((qid, after)), wanted)
    await store.put_many([uniform_batch(4, queue_id=0), uniform_batch(3, queue_id=1)])
    assert await store.wait_dispatched(5)
    assert asked == [("TopicTest", 0), ("TopicTest", 1)]  # once per batch, not per record
    assert seen == [(1, 1), (1, 2), (1, 3)]  # the unwatched queue's batch never reached the listener
    # Single records: the filter is asked at a queue's first record, and its answer kept.
    asked.clear()
    await store.put_many([[make_msg(topic="TopicTest", queue_id=q)] for q in (0, 1, 0, 1, 0)])
    assert await store.wait_dispatched(5)
    assert asked == [("TopicTest", 0), ("TopicTest", 1)]
    assert seen[3:] == [(1, 4), (1, 5)]  # the unwatched queue's records never reached it
    await store.put_many([[make_msg(topic="TopicTest", queue_id=q)] for q in (1, 0)])
    assert await store.wait_dispatched(2)
    assert asked == [("TopicTest", 0), ("TopicTest", 1)]  # later stretches: not asked again
    assert seen[5:] == [(1, 6)]
    # A queue watched later (a pull held meanwhile: its owner says so) is heard from its next record on.
    watched.add(0)
    store.arrival_interest_changed("TopicTest", 0)
    await store.put_many([[make_msg(topic="TopicTest", queue_id=0)]])
    assert await store.wait_dispatched(5)
    assert asked[2:] == [("TopicTest", 0)]
    assert seen[-1] == (0, 9)
    store.remove_arrival_listener(store.arrival_listeners[0])
    assert store.arrival_run_filters == {}


async def test_a_listener_added_later_hears_queues_whose_answer_was_kept(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """The kept answers (on each queue) belong to the set of listeners they were asked of: adding or
    removing a listener makes every queue ask again."""
    store = make_store()
    await store.start()
    first: list[int] = []
    later: list[int] = []
    store.add_arrival_listener(lambda topic, qid, after, tc, ts, props: first.append(qid), lambda t, q: q == 1)
    await store.put_many([[make_msg(topic="TopicTest", queue_id=q)] for q in (0, 1)])
    assert await store.wait_dispatched(5)
    assert first == [1]
    store.add_arrival_listener(lambda topic, qid, after, tc, ts, props: later.append(qid))
    await store.put_many([[make_msg(topic="TopicTest", queue_id=q)] for q in (0, 1)])
    assert await store.wait_dispatched(5)
    assert first == [1, 1] and later == [0, 1]
    store.remove_arrival_listener(store.arrival_listeners[1])
    await store.put_many([[make_msg(topic="TopicTest", queue_id=q)] for q in (0, 1)])
    assert await store.wait_dispatched(5)
    assert first == [1, 1, 1] and later == [0, 1]
    await store.shutdown()


async def test_run_filter_answers_stay_with_their_queue_across_index_rolls(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """A record whose index file rolls under it is dispatched without its queue at hand: the filter's
    answer for it must not be kept for (and given to) whichever queue comes next that way."""
    store = make_store(maxIndexNum=4, maxHashSlotNum=4)  # an index roll every few records
    await store.start()
    seen: list[int] = []
    store.add_arrival_listener(lambda topic, qid, after, tc, ts, props: seen.append(qid), lambda t, q: q == 1)
    qids = [0, 1] * 20
    for q in qids:  # one at a time: each record its own stretch of dispatching
        await store.put_many([[make_msg(topic="TopicTest", queue_id=q, keys=f"k{len(seen)}")]])
        assert await store.wait_dispatched(5)
    assert len(store.index_service.index_file_list) > 3  # type: ignore[union-attr]
    assert seen == [1] * 20
    await store.shutdown()


def test_index_hashes_match_one_by_one() -> None:
    h = TopicKeyHasher()
    keys = [f"7F00000100002A9F{i:016X}" for i in range(300)]
    got = h.index_hashes("TopicA", keys)
    want = []
    for k in keys:
        u = java_hash_unsigned(f"TopicA#{k}")
        want.append(0 if u == 0x80000000 else (0x100000000 - u if u & 0x80000000 else u))
    assert got == want
    assert h.index_hashes("TopicA", ["abc", "abcd"]) is None  # two lengths
    assert h.index_hashes("TopicA", ["AB~", "ABC"]) is None  # not a base-31 key
    odd = ["ÄBC", "ABC"]  # not ASCII: hashed one by one, the Java way
    assert h.index_hashes("TopicA", odd) == [
        0 if u == 0x80000000 else (0x100000000 - u if u & 0x80000000 else u)
        for u in (java_hash_unsigned(f"TopicA#{k}") for k in odd)
    ]


def _index_file(path: Path, slots: int = 64, entries: int = 256) -> IndexFile:
    return IndexFile.create_blocking(str(path), slots, entries, 0, 0)


def test_put_key_hashes_writes_what_put_key_hash_writes(tmp_path: Path) -> None:
    a = _index_file(tmp_path / "a")
    b = _index_file(tmp_path / "b")
    ts = 1_700_000_000_000
    for f in (a, b):  # a started file: the first entry anchors the begin timestamp
        assert f.put_key_hash(5, 100, ts)
    def both(hashes: list[int], phys: list[int], at: int) -> None:
        """The run into `a` with one call, into `b` key by key: the same bytes and counts."""
        assert a.put_key_hashes(hashes, phys, at)
        for h, p in zip(hashes, phys, strict=True):
            assert b.put_key_hash(h, p, at)
        a.commit_header()
        b.commit_header()
        assert bytes(a.mm) == bytes(b.mm)
        assert (a.index_count, a.hash_slot_count, a.end_phy_offset, a.end_timestamp) == (
            b.index_count, b.hash_slot_count, b.end_phy_offset, b.end_timestamp)

    both([3, 70, 9, 64 + 5, 1000], [200, 300, 400, 500, 600], ts + 5000)  # 64 + 5: the slot of entry 1
    # Keys of one run in one slot (1, 65, 129 and 65 again; a record's keys share its offset): each entry
    # chains to the run's previous one in its slot, and the slot ends at the last, as key by key.
    both([1, 65, 7, 129, 65, 70], [700, 700, 800, 800, 900, 900], ts + 6000)
    assert [p for p in (700, 800, 900) if a.has_entry(65, p)] == [700, 900]
    # No room for the whole run: refused too.
    assert not a.put_key_hashes(list(range(300)), list(range(1000, 1300)), ts + 6000)
    # A file without its first entry: refused (put_key_hash anchors the begin timestamp).
    c = _index_file(tmp_path / "c")
    assert not c.put_key_hashes([1, 2], [10, 20], ts)
    for f in (a, b, c):
        f.close_blocking()
    assert isinstance(a.mm, mmap.mmap)


def test_batch_of_stored_bytes_converts_to_messages() -> None:
    batch = uniform_batch(3)
    msgs = batch.to_messages()
    assert [m.properties_string for m in msgs] == [b.decode() for b in batch.properties_bytes or ()]
    assert [m.properties for m in msgs] == batch.properties_list


async def test_single_message_units_answer_as_the_run_path(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    units = [(make_msg(uniq=f"U{i}", queue_id=i % 2),) for i in range(4)]
    units.append((make_msg(body=b"half", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE),))
    units.append((make_msg(uniq="U9"), make_msg(uniq="U10")))  # a two-message unit: the run path
    results = await store.put_many(units)
    host = host_to_bytes(STORE_HOST[0]) + STORE_HOST[1].to_bytes(4, "big")
    for r in results:
        ar = r.append_result
        assert r.status == PutMessageStatus.PUT_OK and ar is not None
        offsets = ar.phy_offsets or [ar.wrote_offset]
        assert ar.msg_ids == [f"{host.hex().upper()}{o:016X}" for o in offsets]
    assert [r.append_result.logics_offset for r in results] == [0, 0, 1, 1, 0, 2]  # type: ignore[union-attr]
    assert await store.wait_dispatched(5)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 4  # the prepared message took no slot
    got = store.get_message("g", "TopicTest", 0, 0, 4)
    assert [decode_message(bytes(b))[0].properties.get("UNIQ_KEY") for b in got.message_buffers] == [
        "U0", "U2", "U9", "U10"]


async def test_a_batch_past_the_one_struct_cap_goes_record_by_record(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    store = make_store(mappedFileSizeCommitLog=1024 * 1024, mappedFileSizeConsumeQueue=4000 * 20, maxIndexNum=4000)
    await store.start()
    r = await store.put_many([uniform_batch(1100)])
    assert r[0].status == PutMessageStatus.PUT_OK
    assert await store.wait_dispatched(10)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1100
    got = store.get_message("g", "TopicTest", 0, 1090, 10)
    assert [decode_message(bytes(b))[0].properties["UNIQ_KEY"] for b in got.message_buffers] == [
        f"F{i:08X}" for i in range(1090, 1100)]
    now = int(time.time() * 1000)
    assert len(store.query_message("TopicTest", "F0000044B", 4, 0, now + 1000).message_buffers) == 1


def template_batch(n: int, queue_id: int = 0, sys_flag: int = 0, tags: str | None = None) -> MessageBatch:
    """uniform_batch(n) as a batch send of one shape arrives: stored properties as pieces around the
    UNIQ_KEY column (MessageBatch.properties_template), bodies of one length."""
    plain = uniform_batch(n, queue_id=queue_id, tags=tags)
    columns = [[p["UNIQ_KEY"].encode() for p in plain.properties_list]]
    pieces = (b"UNIQ_KEY\x01", b"\x02CLUSTER\x01c" + (f"\x02TAGS\x01{tags}".encode() if tags else b""))
    stored_len = len(pieces[0]) + len(columns[0][0]) + len(pieces[1])
    return MessageBatch(
        "TopicTest", queue_id, sys_flag, BORN_TS, BORN_HOST, STORE_HOST, 0, plain.flags, plain.bodies,
        plain.properties_list, None, None, body_len=40, properties_template=(pieces, columns, stored_len),
    )


async def test_template_batch_stores_what_the_bytes_batch_stores(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    store = make_store()
    await store.start()
    tb = template_batch(7)
    assert tb.stored_properties_bytes() == uniform_batch(7).properties_bytes
    rt, rb = await store.put_many([tb, uniform_batch(7, queue_id=1)])
    assert rt.status == rb.status == PutMessageStatus.PUT_OK
    assert rt.append_result is not None and rb.append_result is not None
    assert rt.append_result.wrote_bytes == rb.append_result.wrote_bytes
    assert len(rt.append_result.msg_ids) == 7
    assert await store.wait_dispatched(5)
    got_t = store.get_message("g", "TopicTest", 0, 0, 7)
    got_b = store.get_message("g", "TopicTest", 1, 0, 7)
    assert got_t.message_count == got_b.message_count == 7
    for i, (xt, xb) in enumerate(zip(got_t.message_buffers, got_b.message_buffers, strict=True)):
        t = decode_message(bytes(xt))[0]
        b = decode_message(bytes(xb))[0]
        assert (t.body, t.properties, t.flag, t.body_crc, t.sys_flag, t.born_timestamp, t.born_host, t.store_host,
                t.store_timestamp, t.reconsume_times, t.store_size) == (
            b.body, b.properties, b.flag, b.body_crc, b.sys_flag, b.born_timestamp, b.born_host, b.store_host,
            b.store_timestamp, b.reconsume_times, b.store_size)
        assert (t.queue_id, t.queue_offset, t.commit_log_offset) == (0, i, rt.append_result.phy_offsets[i])
        # Byte for byte, apart from QUEUEID (12..16) and PHYSICALOFFSET (28..36).
        assert bytes(xt)[:12] + bytes(xt)[16:28] + bytes(xt)[36:] == bytes(xb)[:12] + bytes(xb)[16:28] + bytes(xb)[36:]
    now = int(time.time() * 1000)
    assert len(store.query_message("TopicTest", "F00000006", 32, 0, now + 1000).message_buffers) == 2
    msgs = tb.to_messages()
    assert [m.properties_string for m in msgs] == [p.decode() for p in uniform_batch(7).properties_bytes or ()]
    # A prepared (transactional half) batch of one shape takes no queue slots, as the bytes path.
    half = template_batch(3, queue_id=2, sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    (rh,) = await store.put_many([half])
    assert rh.status == PutMessageStatus.PUT_OK and rh.append_result is not None
    assert rh.append_result.logics_offset == 0
    assert await store.wait_dispatched(5)
    assert store.get_max_offset_in_queue("TopicTest", 2) == 0


async def test_template_batch_tags_codes(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    tb = template_batch(4, tags="tg")
    assert tb.stored_properties_bytes() == uniform_batch(4, tags="tg").properties_bytes
    (r,) = await store.put_many([tb])
    assert r.status == PutMessageStatus.PUT_OK
    (r2,) = await store.put_many([template_batch(3, queue_id=1)])
    assert r2.status == PutMessageStatus.PUT_OK
    assert await store.wait_dispatched(5)
    cq = store.find_consume_queue("TopicTest", 0)
    assert [cq.get_unit(i)[2] for i in range(4)] == [java_string_hash("tg")] * 4  # type: ignore[index]
    cq1 = store.find_consume_queue("TopicTest", 1)
    assert [cq1.get_unit(i)[2] for i in range(3)] == [0] * 3  # type: ignore[index]
    got = store.get_message("g", "TopicTest", 0, 0, 4)
    assert [decode_message(bytes(b))[0].properties["TAGS"] for b in got.message_buffers] == ["tg"] * 4


def test_index_hashes_suffix_table_matches_one_by_one() -> None:
    """Keys sharing all but their last 4 characters hash through the suffix table: the same values as
    hashing each whole key, for hex counters, other characters and a prefix that changes between runs."""
    h = TopicKeyHasher()

    def want(topic: str, keys: list[str]) -> list[int]:
        out = []
        for k in keys:
            u = java_hash_unsigned(f"{topic}#{k}")
            out.append(0 if u == 0x80000000 else (0x100000000 - u if u & 0x80000000 else u))
        return out

    for prefix in ("C0A80001000078C3A1B2C3D4E5F6", "C0A80001000078C3A1B2C3D4E5F7", "héllo", "x"):
        for start in (0, 0xFFF0, 0x1234):
            keys = [f"{prefix}{(start + i) & 0xFFFF:04X}" for i in range(32)]
            assert h.index_hashes("TöpicA", keys) == want("TöpicA", keys)
    odd = ["pre-é~ab", "pre-zzzz", "pre-\u4e2d\u6587ab"]
    assert h.index_hashes("T", odd) == want("T", odd)
    # A character outside the BMP (a surrogate pair in Java) in the suffix: not from the table.
    assert h.index_hashes("T", ["pre-\U0001f600abc", "pre-abcd"]) in (None, want("T", ["pre-\U0001f600abc", "pre-abcd"]))


def test_mixed_topic_index_hashes_match_one_by_one() -> None:
    """Pipelined sends round-robin over topics: one producer's keys (one prefix) under many topics hash in
    bulk to what each whole "topic#key" hashes to; keys that do not share a prefix, one by one."""
    h = TopicKeyHasher()
    topics = ["TopicA", "TöpicB", "%RETRY%G", "t" * 200, "Bench_topics_7"]
    for prefix in ("7F00000100002A9F1C2B3D4E5F60", "C0A80001000078C3A1B2C3D4E5F7", "x"):
        for start in (0, 0xFFF0):
            keys = [f"{prefix}{(start + i) & 0xFFFF:04X}" for i in range(64)]
            ts = [topics[i % len(topics)] for i in range(len(keys))]
            assert h.index_hashes_mixed(ts, keys) == [_want_index_hashes(t, [k])[0] for t, k in zip(ts, keys, strict=True)]
    mixed = ["7F00000100002A9F1C2B3D4E5F600001", "7F00000100002A9F1C2B3D4E5F610002", "é-key", "ab"]
    ts = topics[: len(mixed)]
    assert h.index_hashes_mixed(ts, mixed) == [_want_index_hashes(t, [k])[0] for t, k in zip(ts, mixed, strict=True)]
    # Keys of a few prefixes (a group spanning milliseconds, or two producers interleaved), in stretches or
    # alternating, and more prefixes than are hashed by prefix: each still what its whole key hashes to.
    class Counting(TopicKeyHasher):
        one_by_one = 0

        def hash_unsigned(self, topic: str, key: str) -> int:
            Counting.one_by_one += 1
            return super().hash_unsigned(topic, key)

    c = Counting()
    for n_heads in (2, 3, 4, 5, 9):
        for alternate in (False, True):
            heads = [f"7F00000100002A9F1C2B3D4E{j:04X}" for j in range(n_heads)]
            keys = [f"{heads[(i % n_heads) if alternate else (i * n_heads // 64)]}{(0xFFF0 + i) & 0xFFFF:04X}"
                    for i in range(64)]
            ts = [topics[i % len(topics)] for i in range(len(keys))]
            Counting.one_by_one = 0
            assert c.index_hashes_mixed(ts, keys) == [
                _want_index_hashes(t, [k])[0] for t, k in zip(ts, keys, strict=True)
            ], (n_heads, alternate)
            # Up to 4 prefixes in bulk; more, key by key.
            assert Counting.one_by_one == (0 if n_heads <= 4 else len(keys)), (n_heads, alternate)


def _want_index_hashes(topic: str, keys: list[str]) -> list[int]:
    out = []
    for k in keys:
        u = java_hash_unsigned(f"{topic}#{k}")
        out.append(0 if u == 0x80000000 else (0x100000000 - u if u & 0x80000000 else u))
    return out


def test_index_hashes_ascii_by_prefix_stretches_and_near_the_sign_edges() -> None:
    """A run whose prefix changes (a batch straddling a millisecond) hashes per stretch; prefixes whose
    hash puts the run near 2^31 or 2^32 (mixed signs) take the per-key way: all as hashing each key."""
    h = TopicKeyHasher()
    base = "7F0000010E1C18B4AAC2"
    keys = [f"{base}{t:08X}{(0xFFF0 + i) & 0xFFFF:04X}" for t, i in ((7, 0), (7, 1), (7, 2), (8, 3), (8, 4))]
    assert h.index_hashes("TopicA", keys) == _want_index_hashes("TopicA", keys)
    back = keys[:2] + keys[3:4] + keys[2:3]  # a prefix coming back: the per-key parse, same values
    assert h.index_hashes("TopicA", back) == _want_index_hashes("TopicA", back)
    blob = "".join(keys).encode()
    assert h.index_hashes_ascii("TopicA", blob, len(keys[0]), len(keys)) == _want_index_hashes("TopicA", keys)
    # Topics whose prefix hash lands within 2^22 of 2^31 / 2^32, and some anywhere.
    edges = {"low": 0, "high": 0, "any": 0}
    for i in range(200_000):
        topic = f"T{i}"
        b = java_hash_unsigned(f"{topic}#{base}00000007") * 31**4 & 0xFFFFFFFF
        kind = "low" if 0x80000000 - (1 << 22) <= b <= 0x80000000 else (
            "high" if b >= 0x100000000 - (1 << 22) else "any")
        if edges[kind] >= 3:
            continue
        edges[kind] += 1
        for start in (0, 0x7FFF, 0xFFE8):
            ks = [f"{base}00000007{(start + j) & 0xFFFF:04X}" for j in range(32)]
            ks.append(f"{base}00000007~{chr(127)}z ")  # any ASCII suffix hashes from the pair tables
            assert h.index_hashes(topic, ks) == _want_index_hashes(topic, ks), (topic, start)
        if min(edges.values()) >= 3:
            break
    assert min(edges.values()) >= 3


async def test_uniq_column_travels_with_a_one_shape_batch(make_store: Callable[..., DefaultMessageStore]) -> None:
    """A batch of one shape hands the dispatcher its UNIQ_KEY column (no per-record look-up); with KEYS it
    does not, and both index every key."""
    from store.commit_log import _uniq_column

    tb = template_batch(5)
    pieces, columns, _len = tb.properties_template  # type: ignore[misc]
    assert _uniq_column(tb.properties_list[0], pieces, columns) is columns[0]
    assert _uniq_column({**tb.properties_list[0], "KEYS": "k"}, pieces, columns) is None
    assert _uniq_column(tb.properties_list[0], (b"XUNIQ_KEY\x01", pieces[1]), columns) is None
    assert _uniq_column(tb.properties_list[0], (b"A\x01b\x02UNIQ_KEY\x01", pieces[1]), columns) is columns[0]
    store = make_store()
    await store.start()
    for q in range(3):
        (r,) = await store.put_many([template_batch(40, queue_id=q)])
        assert r.status == PutMessageStatus.PUT_OK
    assert await store.wait_dispatched(5)
    now = int(time.time() * 1000)
    for key in ("F00000000", "F00000027", "F00000013"):
        assert len(store.query_message("TopicTest", key, 8, 0, now + 1000).message_buffers) == 3
    assert [store.get_max_offset_in_queue("TopicTest", q) for q in range(3)] == [40, 40, 40]


def _index_entries(store: DefaultMessageStore) -> tuple[list[tuple[int, int, int]], bytes]:
    """(key hash, phy offset, previous index) of every entry, and the hash slots, of the store's index."""
    import struct

    f = store.index_service.index_file_list[-1]  # type: ignore[union-attr]
    pos = f._entries_pos
    entries = [(h, phy, prev) for h, phy, _td, prev in (
        struct.unpack_from(">iqii", f.mm, pos + k * 20) for k in range(1, f.index_count))]
    return entries, bytes(f.mm[40:pos])


async def test_single_records_index_gathered_as_the_one_by_one_path(
    make_store: Callable[..., DefaultMessageStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pipelined single sends: the UNIQ_KEY entries of consecutive records of one store time are written
    as one run, across topics too, and so are the KEYS of those that have them (one key a record, several,
    or one key shared by records: a chain inside the run); rollbacks and keyless ones break the run. The
    entries and slots are those of indexing record by record, in commit log order."""

    def units() -> list[list[object]]:
        out: list[list[object]] = []
        for i in range(40):
            topic = "TopicB" if i in (7, 8, 30) else "TopicTest"
            if i == 12:
                out.append([make_msg(topic=topic, uniq=f"7F000001AAAA0000{i:04X}", keys="k1 k2")])
            elif i == 13:
                out.append([make_msg(topic=topic, uniq=f"7F000001AAAA0000{i:04X}", keys="order-13")])
            elif i >= 32:  # a key a record, each shared by four (as mqbench --keys: the send second)
                out.append([make_msg(topic=topic, uniq=f"7F000001AAAA0000{i:04X}", keys=f"{1763800000 + i // 4}")])
            elif i == 20:
                out.append([make_msg(topic=topic)])  # no keys at all
            elif i == 25:
                out.append([make_msg(topic=topic, uniq=f"7F000001AAAA0000{i:04X}",
                                     sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)])
            else:
                out.append([make_msg(topic=topic, uniq=f"7F000001AAAA0000{i:04X}", queue_id=i % 4)])
        return out

    runs = _count_runs(monkeypatch)
    mixed: list[list[str]] = []  # the topics of each run of gathered records indexed in bulk

    def spying(name: str) -> None:
        build = getattr(IndexService, name)

        def spy(self: IndexService, topics: list[str], *args: Any) -> bool:
            ok = build(self, topics, *args)
            if ok:
                mixed.append(list(topics))
            return bool(ok)

        monkeypatch.setattr(IndexService, name, spy)

    spying("build_index_uniq_records")
    spying("build_index_keyed_records")
    async def fill(store: DefaultMessageStore) -> None:
        for k in range(0, 40, 16):  # as process_requests groups a connection's pipelined sends
            rs = await store.put_many(units()[k:k + 16])  # type: ignore[arg-type]
            assert all(r.status == PutMessageStatus.PUT_OK for r in rs)

    stores = await _bulk_and_one_by_one(
        make_store, tmp_path, monkeypatch,
        ("build_index_uniq_run", "build_index_uniq_records", "build_index_keyed_records"), fill,
    )
    assert runs and min(runs) > 1 and sum(runs) > 25  # gathered runs in the first store only
    assert sum(runs) > 40 - 2  # more entries in runs than there are UNIQ_KEYs: the KEYS went in runs too
    # Records 7, 8 (TopicB) went in one run with their TopicTest neighbours, not alone.
    assert any("TopicB" in t and "TopicTest" in t for t in mixed), mixed
    a, b = (_index_entries(s) for s in stores)
    # rollback and keyless: none; record 12: three, 13 and 32..39: two
    assert a == b and len(a[0]) == 40 - 2 + 2 + 1 + 8
    now = int(time.time() * 1000)
    for i in (0, 6, 7, 9, 15, 16, 31, 39):
        topic = "TopicB" if i in (7, 8, 30) else "TopicTest"
        got = stores[0].query_message(topic, f"7F000001AAAA0000{i:04X}", 4, 0, now + 1000)
        assert len(got.message_buffers) == 1, i
    assert len(stores[0].query_message("TopicTest", "k2", 4, 0, now + 1000).message_buffers) == 1
    assert len(stores[0].query_message("TopicTest", "order-13", 4, 0, now + 1000).message_buffers) == 1
    assert len(stores[0].query_message("TopicTest", "1763800008", 8, 0, now + 1000).message_buffers) == 4


def test_single_key_hash_matches_java() -> None:
    """hash_unsigned (the single-record path's base-31 parse) gives Java's hash for any key: UNIQ_KEYs
    sharing a head across topics, short keys, and keys with non-ASCII or unprintable characters."""
    h = TopicKeyHasher()
    rnd = random.Random(7)
    alphabet = "0123456789ABCDEFabcdef#-_ \u00e9\U0001f600\x01~"
    for _ in range(20000):
        topic = rnd.choice(["TopicA", "%RETRY%g", "\u00e9t\u00e9", ""])
        key = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 10)))
        if rnd.random() < 0.5:
            key = "7F0000010E1C18B4AAC2" + key
        for _ in range(2):  # the second time from the cached head
            assert h.hash_unsigned(topic, key) == java_hash_unsigned(f"{topic}#{key}"), (topic, key)


async def test_keyed_records_in_one_run_as_record_by_record(
    make_store: Callable[..., DefaultMessageStore], tmp_path: Path
) -> None:
    """build_index_keyed_records writes what build_index writes record by record: each record's UNIQ_KEY,
    then its keys, whether every record has one key (interleaved with slices), some have several or none,
    keys repeat across records (chains in the run) or the records span topics."""
    cases = [
        (["T"] * 6, [[f"id-{i}"] for i in range(6)]),
        (["T"] * 6, [["a", "b"], [], ["c"], [], ["a"], ["x", "y", "z"]]),
        (["T", "U", "T", "U"], [["1763800001"], ["1763800001"], ["1763800001"], []]),
    ]
    for n_case, (topics, keys) in enumerate(cases):
        stores = []
        for name in ("bulk", "single"):
            store = make_store(tmp_path / f"{name}{n_case}")
            await store.start()
            idx = store.index_service
            assert idx is not None
            assert idx.index_file_list[-1].put_key_hash(1, 50, 1_700_000_000_000)  # a started file
            phys = [100 * (i + 1) for i in range(len(topics))]
            uniqs = [f"7F000001AAAA0000{i:04X}" for i in range(len(topics))]
            ts = 1_700_000_001_000
            if name == "bulk":  # the entries as do_reput gathers them: a record's UNIQ_KEY, then its keys
                e_topics: list[str] = []
                e_phys: list[int] = []
                e_keys: list[str] = []
                at: list[int] = []
                for t, phy, u, ks in zip(topics, phys, uniqs, keys, strict=True):
                    for j, k in enumerate([u, *ks]):
                        if j:
                            at.append(len(e_keys))
                        e_topics.append(t)
                        e_phys.append(phy)
                        e_keys.append(k)
                assert idx.build_index_keyed_records(e_topics, e_phys, ts, e_keys, at)
            else:
                for t, phy, u, ks in zip(topics, phys, uniqs, keys, strict=True):
                    idx.build_index(t, phy, ts, 0, " ".join(ks) or None, u)
            stores.append(store)
        a, b = (_index_entries(s) for s in stores)
        assert a == b and len(a[0]) == 1 + len(topics) + sum(map(len, keys)), n_case  # (1: the first entry)
        for s in stores:
            await s.shutdown()


async def test_batch_with_keys_indexed_in_one_run_as_record_by_record(
    make_store: Callable[..., DefaultMessageStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose messages have KEYS (one, several, none, or one key shared by several) is indexed as
    one run: each message's UNIQ_KEY entry, then its keys', the entries and slots those of build_index
    message by message."""

    def keyed_batch() -> MessageBatch:
        keys = ["order-1", "a b", None, "shared", "shared", "1763800001", "1763800001", " x "]
        props_list = []
        stored = []
        for i, k in enumerate(keys):
            props = {"WAIT": "true", "UNIQ_KEY": f"7F000001BBBB0000{i:04X}", "CLUSTER": "c"}
            if k is not None:
                props["KEYS"] = k
            props_list.append(props)
            stored.append("\x02".join(f"{n}\x01{v}" for n, v in props.items() if n != "WAIT").encode())
        return MessageBatch(
            "TopicTest", 1, 0, BORN_TS, BORN_HOST, STORE_HOST, 0,
            [0] * len(keys), [b"k" * 30] * len(keys), props_list, None, stored,
        )

    runs = _count_runs(monkeypatch)
    async def fill(store: DefaultMessageStore) -> None:
        for _ in range(2):
            assert all(r.status == PutMessageStatus.PUT_OK for r in await store.put_many([keyed_batch()]))

    stores = await _bulk_and_one_by_one(make_store, tmp_path, monkeypatch, ("build_index_keyed_records",), fill)
    # The first batch starts the store's index (record by record: the file has no entry yet); the second
    # goes as one run: 8 UNIQ_KEYs and 8 keys.
    assert runs == [16]
    a, b = (_index_entries(s) for s in stores)
    assert a == b and len(a[0]) == 2 * (8 + 8)
    now = int(time.time() * 1000)
    for key, n in (("shared", 4), ("1763800001", 4), ("b", 2), ("x", 2), ("order-1", 2)):
        assert len(stores[0].query_message("TopicTest", key, 8, 0, now + 1000).message_buffers) == n, key
    for s in stores:
        await s.shutdown()
