"""ProcessQueue with whole pull answers (the batch fast paths) and with everything else (the
per-message paths) must keep the same books: counts, sizes, the commit offset, the order."""

from __future__ import annotations

import random

from client.consumer.process_queue import ProcessQueue
from remoting.message import MessageExt, decode_messages, encode_message_record


def pulled(offsets: list[int], body: bytes = b"abc") -> list[MessageExt]:
    raw = b"".join(
        bytes(
            encode_message_record(
                topic="T", queue_id=0, flag=0, body=body, properties="MAX_OFFSET\x01999", sys_flag=0,
                born_timestamp=0, born_host=("1.2.3.4", 1), store_host=("1.2.3.4", 2), queue_offset=off,
            )
        )
        for off in offsets
    )
    return decode_messages(raw)


def test_pull_batches_in_and_out_in_order() -> None:
    pq = ProcessQueue()
    a, b = pulled(list(range(0, 32))), pulled(list(range(32, 64)))
    assert pq.put_messages(a, 100) is True
    assert pq.put_messages(b, 100) is False
    assert (pq.msg_count, pq.msg_size, pq.max_span(), pq.msg_acc_cnt) == (64, 64 * 3, 63, 100 - 63)
    assert all(m._done == 0 for m in a + b)  # nothing decoded beyond the eager fields
    assert pq.remove_messages(a) == 32
    assert pq.remove_messages(b[:5]) == 37
    assert pq.remove_messages(b[5:]) == 64
    assert (pq.msg_count, pq.msg_size) == (0, 0)


def test_max_offset_read_from_the_property_when_not_given() -> None:
    pq = ProcessQueue()
    pq.put_messages(pulled([5, 6]))
    assert pq.msg_acc_cnt == 999 - 6


def test_random_batches_keep_the_same_books_as_one_at_a_time() -> None:
    rng = random.Random(7)
    offsets = list(range(200))
    chunks: list[list[int]] = []
    i = 0
    while i < len(offsets):
        n = rng.randint(1, 9)
        chunks.append(offsets[i : i + n])
        i += n
    rng.shuffle(chunks)  # out of order, and some again (duplicates)
    chunks += [chunks[0], chunks[3][:1]]
    batched, single = ProcessQueue(), ProcessQueue()
    msgs = {m.queue_offset: m for m in pulled(offsets, b"x" * 10)}
    for c in chunks:
        batched.put_messages([msgs[o] for o in c], 300)
        for o in c:
            single.put_messages([msgs[o]], 300)
    assert (batched.msg_count, batched.msg_size, batched.first_offset(), batched.max_span()) == (
        single.msg_count, single.msg_size, single.first_offset(), single.max_span())
    done = list(offsets)
    rng.shuffle(done)
    for i in range(0, len(done), 13):
        part = [msgs[o] for o in sorted(done[i : i + 13])]
        assert batched.remove_messages(part) == single.remove_messages(part)
        assert (batched.msg_count, batched.msg_size) == (single.msg_count, single.msg_size)
    assert batched.msg_count == 0 and batched.msg_size == 0


def test_orderly_consuming_set_blocks_duplicates_of_taken_messages() -> None:
    pq = ProcessQueue()
    pq.put_messages(pulled([0, 1, 2]), 10)
    taken = pq.take_messages(3)
    assert [m.queue_offset for m in taken] == [0, 1, 2]
    pq.put_messages(pulled([2, 3]), 10)  # 2 is being consumed: not cached again
    assert pq.msg_count == 4 and pq.first_offset() == 3
    assert pq.commit() == 3
    assert pq.msg_count == 1
