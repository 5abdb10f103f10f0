"""MessageExtBrokerInner.consume_queue: the broker may hand the store the target queue's ConsumeQueue with a
message (a producer's memoized send), so that the put and the dispatcher skip their per-topic look-ups.
It is a hint: used only while it is the message's own queue and still in the store's table. A hint from
before a topic was deleted, or for another queue, must not take the record."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from sys import intern

from store.commit_log import MessageBatch
from store.message_store import DefaultMessageStore
from store.results import PutMessageStatus
from tests.store.conftest import BORN_HOST, STORE_HOST, make_msg

TOPIC = intern("Hinted")


async def _put(store: DefaultMessageStore, msg) -> int:  # type: ignore[no-untyped-def]
    (r,) = await store.put_many([(msg,)])
    assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
    assert await store.wait_dispatched(5.0)
    return r.append_result.wrote_offset


def _hinted(body: bytes, queue_id: int, cq, topic: str = TOPIC):  # type: ignore[no-untyped-def]
    """A message for (topic, queue_id) handed `cq` as its consume_queue, as the broker's processor does."""
    msg = make_msg(topic=topic, body=body, queue_id=queue_id)
    msg.consume_queue = cq
    return msg


async def test_a_hinted_put_lands_in_its_queue(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    await _put(store, make_msg(topic=TOPIC, body=b"first", queue_id=0))  # the dispatcher makes the queue
    cq = store.get_consume_queue(TOPIC, 0)
    assert cq is not None
    phy = await _put(store, _hinted(b"second", 0, cq))
    assert store.get_max_offset_in_queue(TOPIC, 0) == 2
    unit = cq.get_unit(1)
    assert unit is not None and unit[0] == phy
    m = store.look_message_by_offset(phy)
    assert m is not None and m.body == b"second" and m.queue_offset == 1


async def test_a_hint_for_another_queue_is_ignored(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    for qid in (0, 1):
        await _put(store, make_msg(topic=TOPIC, body=b"x", queue_id=qid))
    other = store.get_consume_queue(TOPIC, 1)
    assert other is not None
    # As a message whose queue a transformer changed after the broker picked the hint.
    phy = await _put(store, _hinted(b"to-0", 0, other))
    assert store.get_max_offset_in_queue(TOPIC, 0) == 2
    assert store.get_max_offset_in_queue(TOPIC, 1) == 1
    m = store.look_message_by_offset(phy)
    assert m is not None and (m.queue_id, m.queue_offset) == (0, 1)
    # Another topic's queue: likewise.
    phy = await _put(store, _hinted(b"e", 1, other, topic="Elsewhere"))
    assert store.get_max_offset_in_queue("Elsewhere", 1) == 1
    assert store.get_max_offset_in_queue(TOPIC, 1) == 1
    m = store.look_message_by_offset(phy)
    assert m is not None and (m.topic, m.queue_offset) == ("Elsewhere", 0)


async def test_a_hint_from_before_a_delete_is_not_written(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    await _put(store, make_msg(topic=TOPIC, body=b"old", queue_id=0))
    old = store.get_consume_queue(TOPIC, 0)
    assert old is not None and not old.removed
    assert store.delete_topics({TOPIC}) == 1
    assert old.removed
    await store.wait_background_io()
    phy = await _put(store, _hinted(b"new", 0, old))  # a producer's memo from before the delete
    new = store.get_consume_queue(TOPIC, 0)
    assert new is not None and new is not old and not new.removed
    assert store.get_max_offset_in_queue(TOPIC, 0) == 1
    unit = new.get_unit(0)
    assert unit is not None and unit[0] == phy
    m = store.look_message_by_offset(phy)
    assert m is not None and m.body == b"new" and m.queue_offset == 0


async def test_the_queue_offset_table_is_keyed_by_the_queues_own_key(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """A hinted put looks its queue offset up with ConsumeQueue.queue_key: the table's key must be that very
    object (a match by identity, no compare against a cold string), for a new queue and after a restart."""
    store = make_store()
    await store.start()
    await _put(store, make_msg(topic=TOPIC, body=b"x", queue_id=2))
    cq = store.get_consume_queue(TOPIC, 2)
    assert cq is not None and cq.queue_key == f"{TOPIC}-2"
    table = store.commit_log.topic_queue_table
    assert [k for k in table if k is cq.queue_key] == [cq.queue_key] and table[cq.queue_key] == 1
    root = Path(store.message_store_config.storePathRootDir)
    await store.shutdown()
    again = make_store(root)
    await again.start()
    cq = again.get_consume_queue(TOPIC, 2)
    assert cq is not None
    table = again.commit_log.topic_queue_table
    assert [k for k in table if k is cq.queue_key] == [cq.queue_key] and table[cq.queue_key] == 1


def _batch(topic: str, queue_id: int, n: int, prefix: str) -> MessageBatch:
    props = [{"UNIQ_KEY": f"{prefix}-{i}"} for i in range(n)]
    return MessageBatch(
        topic, queue_id, 0, int(time.time() * 1000), BORN_HOST, STORE_HOST, 0, [0] * n,
        [f"{prefix}-{i}".encode() for i in range(n)], props, [f"UNIQ_KEY\x01{prefix}-{i}" for i in range(n)],
    )


async def test_batch_hints_old_and_foreign_are_not_written(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    for qid in (0, 1):
        (r,) = await store.put_many([_batch(TOPIC, qid, 3, f"q{qid}")])
        assert r.status is PutMessageStatus.PUT_OK
    assert await store.wait_dispatched(5.0)
    q0, q1 = store.get_consume_queue(TOPIC, 0), store.get_consume_queue(TOPIC, 1)
    assert q0 is not None and q1 is not None
    b = _batch(TOPIC, 0, 3, "own")
    b.consume_queue = q0
    f = _batch(TOPIC, 0, 3, "foreign")
    f.consume_queue = q1  # another queue's: ignored
    rs = await store.put_many([b, f])
    assert [r.append_result.logics_offset for r in rs if r.append_result] == [3, 6]
    assert await store.wait_dispatched(5.0)
    assert (q0.get_max_offset_in_queue(), q1.get_max_offset_in_queue()) == (9, 3)
    assert store.delete_topics({TOPIC}) == 2
    await store.wait_background_io()
    old = _batch(TOPIC, 0, 2, "after")
    old.consume_queue = q0  # from before the delete: q0 is removed
    (r,) = await store.put_many([old])
    assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
    assert await store.wait_dispatched(5.0)
    new = store.get_consume_queue(TOPIC, 0)
    assert new is not None and new is not q0 and new.get_max_offset_in_queue() == 2
    for qo, phy in enumerate(r.append_result.phy_offsets):
        unit = new.get_unit(qo)
        assert unit is not None and unit[0] == phy
