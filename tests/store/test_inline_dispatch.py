"""DefaultMessageStore.put_many dispatches a put before answering it when its InlineDispatchListener has
something waiting on a queue the put wrote to (the broker's held pulls), and only then."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from store.consume_queue import ConsumeQueue
from store.message_store import DefaultMessageStore
from tests.store.conftest import make_msg


class Waiting:
    """An InlineDispatchListener waiting on the given queues; records what it is told, and what the store had
    dispatched when it was told."""

    def __init__(self, store: DefaultMessageStore, queues: set[tuple[str, int]]) -> None:
        self.store = store
        self.queues = queues
        self.told: list[int] = []  # the store's dispatched count at each dispatched_inline

    def any_waiting(self) -> bool:
        return bool(self.queues)

    def wants_inline(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self.queues

    def dispatched_inline(self) -> None:
        self.told.append(self.store.reput_message_service.dispatched_count)


async def test_a_put_to_a_waited_queue_is_dispatched_before_it_returns(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    store = make_store()
    await store.start()
    heard: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda topic, qid, after, *_: heard.append((topic, qid, after)))
    await store.put_many([[make_msg(queue_id=0)], [make_msg(queue_id=1)]])  # queue files exist from here on
    assert await store.wait_dispatched(5)
    heard.clear()
    waiting = Waiting(store, {("TopicTest", 1)})
    store.inline_dispatch_listener = waiting
    reput = store.reput_message_service

    # Nothing waits on queue 0: answered first, dispatched later by the dispatcher's own task.
    before = reput.dispatched_count
    await store.put_many([[make_msg(queue_id=0)], [make_msg(queue_id=0)]])
    assert waiting.told == [] and reput.dispatched_count == before and heard == []
    assert await store.wait_dispatched(5)
    assert heard == [("TopicTest", 0, 2), ("TopicTest", 0, 3)]

    # A put that also writes to queue 1 is dispatched, all of it, before put_many returns; the listener is told
    # after the dispatch.
    heard.clear()
    before = reput.dispatched_count
    await store.put_many([[make_msg(queue_id=0)], [make_msg(queue_id=1)]])
    assert waiting.told == [before + 2] and reput.dispatched_count == before + 2
    assert heard == [("TopicTest", 0, 4), ("TopicTest", 1, 2)]
    assert not reput.is_commit_log_available()

    # Nobody waiting at all: not even the per-unit question.
    waiting.queues = set()
    await store.put_many([[make_msg(queue_id=1)]])
    assert waiting.told == [before + 2]


async def test_sync_flush_puts_are_not_dispatched_inline(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(flushDiskType="SYNC_FLUSH")
    await store.start()
    waiting = Waiting(store, {("TopicTest", 0)})
    store.inline_dispatch_listener = waiting
    await store.put_many([[make_msg(queue_id=0)]])
    assert waiting.told == []
    assert await store.wait_dispatched(5)


async def test_the_dispatcher_task_waits_while_an_inline_dispatch_makes_a_file(
    make_store: Callable[..., DefaultMessageStore], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a put's inline dispatch waits for a new ConsumeQueue file (made on a thread), the dispatcher's own
    task waits for that dispatch to end instead of going round the loop meanwhile."""
    store = make_store()
    await store.start()
    reput = store.reput_message_service
    inner = ConsumeQueue.create_next_file_blocking

    def slow_create(self: ConsumeQueue, offset: int) -> None:
        time.sleep(0.3)  # on the allocation thread
        inner(self, offset)

    monkeypatch.setattr(ConsumeQueue, "create_next_file_blocking", slow_create)
    checks = 0
    available = reput.is_commit_log_available

    def counted() -> bool:
        nonlocal checks
        checks += 1
        return available()

    monkeypatch.setattr(reput, "is_commit_log_available", counted)
    store.inline_dispatch_listener = Waiting(store, {("TopicTest", 3)})
    before = reput.dispatched_count
    await store.put_many([[make_msg(queue_id=3)]])  # queue 3 has no file yet: the inline dispatch makes it
    assert reput.dispatched_count == before + 1
    assert await store.wait_dispatched(5)
    # The spinning task checked thousands of times in those 0.3 s; waiting, a handful.
    assert checks < 20, checks
