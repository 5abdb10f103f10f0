"""Allocation strategies: RocketMQ's exact splits, full coverage, no overlap."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.consumer.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    md5_hash,
)
from client.message import MessageQueue


def mqs(n: int, broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue("T", broker, i) for i in range(n)]


CIDS = ["c0", "c1", "c2"]


def ids(qs: list[MessageQueue]) -> list[int]:
    return [q.queue_id for q in qs]


def test_averagely_matches_rocketmq_example() -> None:
    s = AllocateMessageQueueAveragely()
    assert [ids(s.allocate("g", c, mqs(8), CIDS)) for c in CIDS] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_averagely_more_consumers_than_queues() -> None:
    s = AllocateMessageQueueAveragely()
    cids = [f"c{i}" for i in range(5)]
    assert [ids(s.allocate("g", c, mqs(3), cids)) for c in cids] == [[0], [1], [2], [], []]


def test_by_circle_matches_rocketmq_example() -> None:
    s = AllocateMessageQueueAveragelyByCircle()
    assert [ids(s.allocate("g", c, mqs(8), CIDS)) for c in CIDS] == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_unknown_consumer_gets_nothing() -> None:
    assert AllocateMessageQueueAveragely().allocate("g", "stranger", mqs(4), CIDS) == []


@pytest.mark.parametrize(
    "strategy",
    [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(), AllocateMessageQueueConsistentHash()],
    ids=lambda s: s.name,
)
@given(n_mq=st.integers(0, 40), n_cid=st.integers(1, 9))
def test_every_queue_exactly_once(strategy, n_mq: int, n_cid: int) -> None:
    queues = mqs(n_mq)
    cids = [f"10.0.0.{i}@{i}" for i in range(n_cid)]
    shares = [strategy.allocate("g", c, queues, cids) for c in cids]
    flat = list(itertools.chain.from_iterable(shares))
    assert sorted(flat, key=lambda q: q.queue_id) == queues


def test_md5_hash_is_rocketmq_first_four_bytes() -> None:
    # md5("a") = 0cc175b9c0f1b6a8...: the first four bytes as an unsigned int.
    assert md5_hash("a") == 0x0CC175B9


def test_consistent_hash_moves_few_queues_when_a_consumer_leaves() -> None:
    s = AllocateMessageQueueConsistentHash(virtual_node_cnt=50)
    queues = mqs(64)
    before = {c: set(s.allocate("g", c, queues, CIDS)) for c in CIDS}
    after = {c: set(s.allocate("g", c, queues, CIDS[:2])) for c in CIDS[:2]}
    # Survivors keep everything they had; only the leaver's queues move.
    for c in CIDS[:2]:
        assert before[c] <= after[c]


def test_by_config_returns_the_configured_queues() -> None:
    chosen = mqs(2)
    assert AllocateMessageQueueByConfig(chosen).allocate("g", "c0", mqs(8), CIDS) == chosen


def test_by_machine_room() -> None:
    queues = mqs(3, "room1@broker-a") + mqs(3, "room2@broker-b") + mqs(2, "room3@broker-c")
    s = AllocateMessageQueueByMachineRoom(["room1", "room2"])
    shares = [s.allocate("g", c, queues, CIDS[:2]) for c in CIDS[:2]]
    assert [[(q.broker_name, q.queue_id) for q in sh] for sh in shares] == [
        [("room1@broker-a", 0), ("room1@broker-a", 1), ("room1@broker-a", 2)],
        [("room2@broker-b", 0), ("room2@broker-b", 1), ("room2@broker-b", 2)],
    ]
