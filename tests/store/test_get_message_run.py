"""get_message's run fast path (whole runs of consume queue units, no Python step per record) must
answer exactly what the per-record loop answers: same records, offsets, next offset, statuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from remoting.message import decode_message, java_string_hash
from store.filter import TagsCodeFilter
from store.message_store import DefaultMessageStore
from store.results import GetMessageResult, PutMessageStatus

from .conftest import make_msg


def _snapshot(res: GetMessageResult) -> tuple[Any, ...]:
    return (
        res.status,
        res.next_begin_offset,
        res.min_offset,
        res.max_offset,
        list(res.message_queue_offsets),
        [bytes(b) for b in res.message_buffers],
        res.message_count,
        res.buffer_total_size,
        res.suggest_pulling_from_slave,
    )


async def _fill(store: DefaultMessageStore, n: int) -> None:
    # Two queues interleaved (records of a queue are not contiguous), three tags, varied sizes.
    for i in range(n):
        r = await store.put_message(
            make_msg(body=b"b" * (1 + (i * 37) % 300), queue_id=i % 2, tags=("TagA", "TagB", "TagC")[i % 3])
        )
        assert r.status == PutMessageStatus.PUT_OK
    assert await store.wait_dispatched(5)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"maxTransferCountOnMessageInMemory": 5},
        {"maxTransferBytesOnMessageInMemory": 700},
        {"maxTransferBytesOnMessageInMemory": 10},  # smaller than one record: still one per pull
    ],
)
async def test_run_path_matches_the_record_loop(
    make_store: Callable[..., DefaultMessageStore], monkeypatch: pytest.MonkeyPatch, overrides: dict[str, int]
) -> None:
    store = make_store(**overrides)
    await store.start()
    try:
        await _fill(store, 400)  # 64 KiB commit log files: the queues span several files
        filters = [None, TagsCodeFilter(None), TagsCodeFilter([java_string_hash("TagB")])]
        cases = [
            (q, off, nums, f)
            for q in (0, 1, 2)
            for off in (0, 1, 7, 63, 150, 199, 200, 250)
            for nums in (0, 1, 3, 32, 64)
            for f in filters
        ]
        fast = [_snapshot(store.get_message("g", "TopicTest", q, off, nums, f)) for q, off, nums, f in cases]
        used_fast = 0
        original = store._fill_get_result_run

        def count_fast(*a: Any, **kw: Any) -> Any:
            nonlocal used_fast
            r = original(*a, **kw)
            used_fast += r is not None
            return r

        monkeypatch.setattr(store, "_fill_get_result_run", count_fast)
        for q, off, nums, f in cases:
            store.get_message("g", "TopicTest", q, off, nums, f)
        assert used_fast > len(cases) // 4  # the fast path really ran for many of them
        monkeypatch.setattr(store, "_fill_get_result_run", lambda *a, **kw: None)
        slow = [_snapshot(store.get_message("g", "TopicTest", q, off, nums, f)) for q, off, nums, f in cases]
        for case, a, b in zip(cases, fast, slow, strict=True):
            assert a == b, case
    finally:
        await store.shutdown()


async def test_back_to_back_records_are_one_slice(make_store: Callable[..., DefaultMessageStore]) -> None:
    """A batch's records lie back to back: get_message hands one slice of the run (body() is one copy of
    it); message_buffers still gives one slice per record, cut on first use, and release() frees all."""
    store = make_store()
    await store.start()
    try:
        r = await store.put_messages([make_msg(body=b"r" * (10 + i), queue_id=0) for i in range(6)])
        assert r.status == PutMessageStatus.PUT_OK
        await _fill(store, 6)  # then single sends alternating between queues 0 and 1: not back to back
        res = store.get_message("g", "TopicTest", 0, 0, 4)
        assert res._run is not None and res.message_count == 4
        body = res.body()
        records = [bytes(b) for b in res.message_buffers]
        assert [_decode(b).body for b in records] == [b"r" * (10 + i) for i in range(4)]
        assert b"".join(records) == body
        assert [store.select_one_message_by_offset(_decode(b).commit_log_offset) for b in records] == records
        res.release()
        assert res.message_buffers == [] and res._run is None
        # Records 6.. of queue 0 were sent one by one between queue 1's: one slice per record.
        mixed = store.get_message("g", "TopicTest", 0, 5, 3)
        assert mixed._run is None and mixed.message_count == 3
        assert mixed.body() == b"".join(bytes(b) for b in mixed.message_buffers)
        mixed.release()
    finally:
        await store.shutdown()


def _decode(b: bytes) -> Any:
    return decode_message(b)[0]
