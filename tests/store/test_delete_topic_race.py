"""Deleting a topic while the dispatcher is behind the puts (DELETE_TOPIC_IN_BROKER right after sends).

The topic's records stored before the delete but not dispatched yet went down with the topic: the
dispatcher must not rebuild a ConsumeQueue from them (that brought the deleted messages back, and put the
first message sent after the delete -- queue offset 0, the offsets start again -- behind them), and must
not write into the deleted queue it was making a file for (the file destroyed under it: reput errors).
The allocation thread is held so that the dispatcher is behind, deterministically."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remoting.message import decode_message
from store.commit_log import MessageBatch
from store.message_store import DefaultMessageStore
from tests.store.conftest import BORN_HOST, STORE_HOST, make_msg

TOPIC = "Gone"


def batch(topic: str, queue_id: int, n: int, prefix: str) -> MessageBatch:
    props = [{"UNIQ_KEY": f"{prefix}-{i}"} for i in range(n)]
    return MessageBatch(
        topic, queue_id, 0, int(time.time() * 1000), BORN_HOST, STORE_HOST, 0, [0] * n,
        [f"{prefix}-{i}".encode() for i in range(n)], props, [f"UNIQ_KEY\x01{prefix}-{i}" for i in range(n)],
    )


@pytest.fixture
def held_alloc_thread() -> Iterator[Callable[[DefaultMessageStore], threading.Event]]:
    """hold(store): the store's allocation thread waits (at most 10 s) until the returned event is set."""
    gates: list[threading.Event] = []

    def hold(store: DefaultMessageStore) -> threading.Event:
        gate = threading.Event()
        gates.append(gate)
        store.alloc_executor.submit(gate.wait, 10)
        return gate

    try:
        yield hold
    finally:
        for g in gates:
            g.set()


def spy_reput(store: DefaultMessageStore) -> tuple[asyncio.Event, list[BaseException]]:
    """(set once the dispatcher asks for a consume queue file, errors do_reput raised)."""
    rs = store.reput_message_service
    asked = asyncio.Event()
    errors: list[BaseException] = []
    create, do_reput = rs._create_queue_files, rs.do_reput

    async def create_spy(*a: Any) -> None:
        asked.set()
        await create(*a)

    async def do_reput_spy(*a: Any, **kw: Any) -> int:
        try:
            return await do_reput(*a, **kw)
        except Exception as e:  # the service logs and retries: record it
            errors.append(e)
            raise

    rs._create_queue_files = create_spy  # type: ignore[method-assign]
    rs.do_reput = do_reput_spy  # type: ignore[method-assign]
    return asked, errors


async def start_held(
    store: DefaultMessageStore, hold: Callable[[DefaultMessageStore], threading.Event]
) -> tuple[DefaultMessageStore, asyncio.Event, list[BaseException], threading.Event]:
    """Start the store with its dispatcher spied on (spy_reput) and its allocation thread held (the gate
    to set): (store, asked, errors, gate)."""
    await store.start()
    asked, errors = spy_reput(store)
    return store, asked, errors, hold(store)


def bodies(store: DefaultMessageStore, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    r = store.get_message("g", topic, queue_id, 0, 64)
    return [(o, decode_message(bytes(b))[0].body) for o, b in zip(r.message_queue_offsets, r.message_buffers, strict=True)]


def cq_dir(store: DefaultMessageStore, topic: str, queue_id: int | None = None) -> Path:
    p = Path(store.message_store_config.store_path_consume_queue()) / topic
    return p if queue_id is None else p / str(queue_id)


async def test_delete_while_dispatch_waits_for_the_topics_file(
    make_store: Callable[..., DefaultMessageStore], held_alloc_thread: Callable[[DefaultMessageStore], threading.Event],
    tmp_path: Path,
) -> None:
    store, asked, errors, gate = await start_held(make_store(tmp_path / "s"), held_alloc_thread)
    results = await store.put_many([batch(TOPIC, 0, 4, "old"), [make_msg(TOPIC, b"old-single", queue_id=1)]])
    assert all(r.is_ok for r in results)
    # The dispatcher waits (held thread) for Gone/0's first file when the topic is deleted ...
    await asyncio.wait_for(asked.wait(), 5)
    store.delete_topics({TOPIC})
    # ... and the first send after the delete starts the queue again at offset 0.
    new = await store.put_message(make_msg(TOPIC, b"new", queue_id=0))
    assert new.is_ok and new.append_result is not None and new.append_result.logics_offset == 0
    gate.set()
    assert await store.wait_dispatched(5)
    await store.wait_background_io()

    assert errors == []
    assert bodies(store, TOPIC, 0) == [(0, b"new")]
    assert store.get_consume_queue(TOPIC, 1) is None
    assert not cq_dir(store, TOPIC, 1).exists()
    assert store.deleted_topic_offsets == {}  # dispatch has passed the delete

    await store.shutdown()
    again = make_store(tmp_path / "s")
    await again.start()
    assert again.last_exit_ok
    assert bodies(again, TOPIC, 0) == [(0, b"new")]
    assert again.get_consume_queue(TOPIC, 1) is None


async def test_delete_while_dispatch_is_behind_on_another_topic(
    make_store: Callable[..., DefaultMessageStore], held_alloc_thread: Callable[[DefaultMessageStore], threading.Event],
    tmp_path: Path,
) -> None:
    store, asked, errors, gate = await start_held(make_store(tmp_path / "s"), held_alloc_thread)
    results = await store.put_many(
        [[make_msg("Kept", b"k0", queue_id=0)], batch(TOPIC, 2, 3, "old"), [make_msg(TOPIC, b"old-single", queue_id=3)]]
    )
    assert all(r.is_ok for r in results)
    await asyncio.wait_for(asked.wait(), 5)  # waiting for Kept/0's file; Gone's records still pending
    store.delete_topics({TOPIC})
    gate.set()
    assert await store.wait_dispatched(5)
    await store.wait_background_io()

    assert errors == []
    assert bodies(store, "Kept", 0) == [(0, b"k0")]
    assert store.consume_queue_table.get(TOPIC) is None
    assert not cq_dir(store, TOPIC).exists()
    await store.shutdown()


async def test_delete_before_dispatch_starts_the_topics_queues_again(store: DefaultMessageStore) -> None:
    rs = store.reput_message_service
    release = asyncio.Event()
    do_reput = rs.do_reput

    async def held(*a: Any, **kw: Any) -> int:
        await asyncio.wait_for(release.wait(), 10)
        return await do_reput(*a, **kw)

    rs.do_reput = held  # type: ignore[method-assign]
    try:
        # Stored and answered, not dispatched: the queue has no ConsumeQueue yet when its topic is deleted.
        r = await store.put_messages([make_msg(TOPIC, b"old-%d" % i, queue_id=5) for i in range(3)])
        assert r.is_ok and store.get_consume_queue(TOPIC, 5) is None
        store.delete_topics({TOPIC})
        new = await store.put_message(make_msg(TOPIC, b"new", queue_id=5))
        assert new.is_ok and new.append_result is not None and new.append_result.logics_offset == 0
    finally:
        release.set()
    assert await store.wait_dispatched(5)
    await store.wait_background_io()
    assert bodies(store, TOPIC, 5) == [(0, b"new")]
