"""get_message against a model of RocketMQ 4.9's DefaultMessageStore.getMessage loop, on random queries: the
messages, status and next offset of every answer. The store has fast paths (one record, a run, a filtered scan)
beside its general loop; the model is the loop as upstream writes it:

- units are scanned from the offset, at most max(16000, 20 * maxMsgNums) bytes of them;
- before each unit, the batch is full (stop, that unit not consumed) once it holds maxMsgNums messages, or the
  unit would take it past maxTransferBytesOnMessageInMemory, or it holds maxTransferCountOnMessageInMemory;
  the first message is always taken;
- a unit the tag filter refuses is consumed (the next offset passes it) but not taken;
- an offset at the queue's end is OFFSET_OVERFLOW_ONE, past it OFFSET_OVERFLOW_BADLY (next offset: the end)."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import pytest

from remoting.message import java_string_hash
from store.filter import TagsCodeFilter
from store.message_store import DefaultMessageStore
from store.results import GetMessageStatus

from .conftest import make_msg

TAGS = ["A", "B", "C", None]


def model(units: list[tuple[int, int]], offset: int, max_nums: int, codes: set[int] | None,
          max_bytes: int, max_count: int) -> tuple[GetMessageStatus, list[int], int]:
    """(status, offsets taken, next begin offset) as upstream's loop gives them; units are (size, tags code)."""
    n = len(units)
    if offset == n:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, [], offset
    if offset > n:
        return GetMessageStatus.OFFSET_OVERFLOW_BADLY, [], n
    window = max(16000, max_nums * 20) // 20
    status = GetMessageStatus.NO_MATCHED_MESSAGE
    taken: list[int] = []
    total = i = 0
    while offset + i < n and i < window:
        size, code = units[offset + i]
        if taken and (len(taken) >= max_nums or total + size > max_bytes or len(taken) > max_count - 1):
            break
        i += 1
        if codes is not None and code not in codes:
            continue
        taken.append(offset + i - 1)
        total += size
        status = GetMessageStatus.FOUND
    return status, taken, offset + i


@pytest.mark.parametrize("seed", [1, 2])
async def test_get_message_answers_as_upstreams_loop(make_store: Callable[..., DefaultMessageStore], seed: int) -> None:
    rnd = random.Random(seed)
    store = make_store(mappedFileSizeCommitLog=8 * 1024 * 1024, mappedFileSizeConsumeQueue=300_000 * 20)
    await store.start()
    n = 900
    put = 0
    while put < n:  # alone and in runs (one put_many: the dispatcher's gathered runs), random tags and sizes
        msgs = [make_msg("MT", b"x" * rnd.choice([10, 100, 1000, 20000]), 0, tags=rnd.choice(TAGS))
                for _ in range(min(rnd.choice([1, 1, 5, 17]), n - put))]
        assert all(r.is_ok for r in await store.put_many([(m,) for m in msgs]))
        put += len(msgs)
    assert await store.wait_dispatched(10)
    cq = store.get_consume_queue("MT", 0)
    assert cq is not None
    units = []
    for off in range(n):
        buf = cq.get_index_buffer(off)
        assert buf is not None
        _phy, size, code = struct.unpack_from(">qiq", buf[0], 0)
        units.append((size, code))
    cfg = store.message_store_config
    kinds = {GetMessageStatus.FOUND: 0, GetMessageStatus.NO_MATCHED_MESSAGE: 0}
    for _ in range(300):
        offset = rnd.randint(0, n + 1)
        max_nums = rnd.choice([1, 2, 5, 32, 40, 64])
        tags = rnd.choice([None, ["A"], ["A", "B"], ["C"], ["Z"]])
        codes = None if tags is None else {java_string_hash(t) for t in tags}
        r = store.get_message("g", "MT", 0, offset, max_nums, TagsCodeFilter(codes))
        got = (r.status, list(r.message_queue_offsets) if r.status is GetMessageStatus.FOUND else [],
               r.next_begin_offset)
        r.release()
        want = model(units, offset, max_nums, codes, cfg.maxTransferBytesOnMessageInMemory,
                     cfg.maxTransferCountOnMessageInMemory)
        assert got == want, (offset, max_nums, tags)
        kinds[want[0]] = kinds.get(want[0], 0) + 1
    # both outcomes were exercised
    assert kinds[GetMessageStatus.FOUND] > 100 and kinds[GetMessageStatus.NO_MATCHED_MESSAGE] > 5
