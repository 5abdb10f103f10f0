"""Consumers of one group split the queues per strategy, and re-split at once (NOTIFY) when a member
joins or leaves; no message is lost across the switch."""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable

import pytest

from client import Admin, ConsumeConcurrentlyStatus, ConsumeFromWhere, ConsumeOrderlyStatus, PushConsumer
from client.consumer import rebalance as rebalance_module
from client.consumer.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
)
from client.message import MessageQueue

from .conftest import ROOM_BROKER, ConsumerCluster, create_topic, send_to_queues, wait_until

NOTIFY_BOUND_S = 8.0  # well under the 20 s periodic rebalance


def mine(c: PushConsumer, topic: str) -> set[MessageQueue]:
    return {q for q in c.assigned_queues() if q.topic == topic}


def make_consumer(
    cluster: ConsumerCluster,
    group: str,
    topic: str,
    name: str,
    strategy: AllocateMessageQueueStrategy,
    received: dict[str, list[bytes]],
    plain: bool = False,
    **kw: object,
) -> PushConsumer:
    received.setdefault(name, [])

    def record(msgs, ctx):  # type: ignore[no-untyped-def]  # a plain listener: in the consumer's threads
        received[name].extend(m.body for m in msgs)  # (list.extend: atomic under the GIL)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        return record(msgs, ctx)

    c = PushConsumer(
        group,
        cluster.namesrv_addr,
        instance_name=f"{name}-{group}",
        allocate_strategy=strategy,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        **kw,  # type: ignore[arg-type]
    )
    c.subscribe(topic, "*")
    c.register_listener(record if plain else listener)
    return c


STRATEGIES: dict[str, Callable[[], AllocateMessageQueueStrategy]] = {
    "avg": AllocateMessageQueueAveragely,
    "circle": AllocateMessageQueueAveragelyByCircle,
    "hash": AllocateMessageQueueConsistentHash,
}


def expected_split(
    strategy: AllocateMessageQueueStrategy, group: str, queues: list[MessageQueue], consumers: list[PushConsumer]
) -> dict[str, set[MessageQueue]]:
    cids = sorted(c.client_id for c in consumers)
    return {cid: set(strategy.allocate(group, cid, sorted(queues), cids)) for cid in cids}


@pytest.mark.parametrize(
    ("strategy_name", "plain"),
    [(name, False) for name in sorted(STRATEGIES)] + [("avg", True)],  # plain: calls queued in its threads
)
async def test_two_consumers_split_and_take_over_when_one_leaves(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], strategy_name: str, plain: bool
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 8)
    received: dict[str, list[bytes]] = {}
    strategy = STRATEGIES[strategy_name]()
    c1 = make_consumer(mq_cluster, group, topic, "c1", strategy, received, plain)
    c2 = make_consumer(mq_cluster, group, topic, "c2", strategy, received, plain)
    await c1.start()
    try:
        await wait_until(lambda: mine(c1, topic) == set(queues), 10, "c1 owning every queue")
        await c2.start()
        joined = time.monotonic()
        exp = expected_split(strategy, group, queues, [c1, c2])
        await wait_until(
            lambda: mine(c1, topic) == exp[c1.client_id] and mine(c2, topic) == exp[c2.client_id],
            NOTIFY_BOUND_S,
            "the split after c2 joined (NOTIFY_CONSUMER_IDS_CHANGED)",
        )
        assert time.monotonic() - joined < NOTIFY_BOUND_S
        assert not (mine(c1, topic) & mine(c2, topic))

        sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 4)
        await wait_until(lambda: set(sent) <= set(received["c1"]) | set(received["c2"]), 20, "every message")
        for name, c in (("c1", c1), ("c2", c2)):
            owned = {q.queue_id for q in exp[c.client_id]}
            assert {int(b.decode().split("-")[-2]) for b in received[name]} <= owned, name

        await c2.shutdown()
        left = time.monotonic()
        await wait_until(lambda: mine(c1, topic) == set(queues), NOTIFY_BOUND_S, "c1 taking every queue back")
        assert time.monotonic() - left < NOTIFY_BOUND_S
        sent2 = await send_to_queues(mq_cluster.namesrv_addr, queues, 3, prefix="n")
        await wait_until(lambda: set(sent2) <= set(received["c1"]), 20, "the messages after c2 left")
        everything = received["c1"] + received["c2"]
        assert set(sent) | set(sent2) <= set(everything)  # no loss
        # duplicates only around the switch: at most what c2 owned, never the later batch
        assert all(received["c1"].count(b) == 1 for b in sent2)
    finally:
        await c2.shutdown()
        await c1.shutdown()


async def test_three_consumers_split_evenly_and_two_cover_when_one_leaves(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 8)
    received: dict[str, list[bytes]] = {}
    strategy = AllocateMessageQueueAveragely()
    cs = [make_consumer(mq_cluster, group, topic, f"c{i}", strategy, received) for i in range(3)]
    try:
        for c in cs:
            await c.start()
        exp = expected_split(strategy, group, queues, cs)
        await wait_until(
            lambda: all(mine(c, topic) == exp[c.client_id] for c in cs), NOTIFY_BOUND_S, "a 3/3/2 split"
        )
        assert sorted(len(v) for v in exp.values()) == [2, 3, 3]
        sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
        await wait_until(lambda: set(sent) <= {b for v in received.values() for b in v}, 20, "every message")

        gone = cs.pop(1)
        await gone.shutdown()
        exp2 = expected_split(strategy, group, queues, cs)
        await wait_until(
            lambda: all(mine(c, topic) == exp2[c.client_id] for c in cs), NOTIFY_BOUND_S, "a 4/4 split"
        )
        assert sorted(len(v) for v in exp2.values()) == [4, 4]
        sent2 = await send_to_queues(mq_cluster.namesrv_addr, queues, 3, prefix="n")
        await wait_until(
            lambda: set(sent2) <= {b for n in ("c0", "c2") for b in received[n]}, 20, "messages after the leave"
        )
    finally:
        for c in cs:
            await c.shutdown()


async def test_by_config_and_by_machine_room(mq_cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic, group, group2 = names("T"), names("G"), names("H")
    queues = await create_topic(mq_cluster, topic, 4, brokers=["broker-a", ROOM_BROKER])
    room_queues = [q for q in queues if q.broker_name == ROOM_BROKER]
    received: dict[str, list[bytes]] = {}
    # ByMachineRoom: only queues of brokers "<room>@..." in our rooms, spread over the consumers
    room = [
        make_consumer(mq_cluster, group, topic, f"r{i}", AllocateMessageQueueByMachineRoom(["room1"]), received)
        for i in range(2)
    ]
    # ByConfig: exactly the queues configured
    picked = [queues[0], queues[5]]
    fixed = make_consumer(mq_cluster, group2, topic, "f", AllocateMessageQueueByConfig(picked), received)
    try:
        for c in [*room, fixed]:
            await c.start()
        await wait_until(
            lambda: mine(room[0], topic) | mine(room[1], topic) == set(room_queues)
            and len(mine(room[0], topic)) == 2
            and len(mine(room[1], topic)) == 2,
            NOTIFY_BOUND_S,
            "room1 queues split 2/2",
        )
        await wait_until(lambda: mine(fixed, topic) == set(picked), NOTIFY_BOUND_S, "the configured queues")
        sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 2)
        room_sent = {b for b in sent if ROOM_BROKER in b.decode()}
        await wait_until(lambda: room_sent <= set(received["r0"]) | set(received["r1"]), 20, "room1 messages")
        assert not (set(received["r0"]) | set(received["r1"])) - room_sent
        picked_sent = {b for b in sent if any(b.decode().startswith(f"m-{q.broker_name}-{q.queue_id}-") for q in picked)}
        await wait_until(lambda: picked_sent <= set(received["f"]), 20, "the configured queues' messages")
        assert set(received["f"]) == picked_sent
    finally:
        for c in [*room, fixed]:
            await c.shutdown()


async def consume_at_once(msgs, ctx) -> ConsumeOrderlyStatus:  # type: ignore[no-untyped-def]
    return ConsumeOrderlyStatus.SUCCESS


def orderly_member(
    cluster: ConsumerCluster, group: str, topic: str, name: str, listener: Callable[..., object] = consume_at_once
) -> PushConsumer:
    c = PushConsumer(group, cluster.namesrv_addr, instance_name=f"{name}-{group}", consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, "*")
    c.register_orderly_listener(listener)
    return c


def owns_locked(c: PushConsumer, queues: list[MessageQueue]) -> bool:
    pqs = c.process_queue_table()
    return all(q in pqs and pqs[q].locked for q in queues)


def long_first_calls(seconds: float = 3.0) -> tuple[collections.Counter[int], Callable[..., object]]:
    """An orderly listener whose first call on each queue takes `seconds`, and its calls per queue id."""
    calls: collections.Counter[int] = collections.Counter()

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        calls[ctx.message_queue.queue_id] += 1
        if calls[ctx.message_queue.queue_id] == 1:
            await asyncio.sleep(seconds)
        return ConsumeOrderlyStatus.SUCCESS

    return calls, listener


async def test_orderly_members_leaving_back_to_back_leave_no_queue_locked(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """The second member's shutdown starts while the first one's leaving makes it rebalance (and lock
    queues at the broker): the shutdown waits for that rebalance, so its unlock covers what it locked,
    and a newcomer owns every queue at once rather than after the broker's 60 s lock expiry."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 8)

    def split_locked(c1: PushConsumer, c2: PushConsumer) -> bool:
        a, b = mine(c1, topic), mine(c2, topic)
        return a | b == set(queues) and len(a) == 4 and owns_locked(c1, list(a)) and owns_locked(c2, list(b))

    for rnd in range(3):
        c1, c2 = (orderly_member(mq_cluster, group, topic, f"c{i}r{rnd}") for i in (1, 2))
        await c1.start()
        await c2.start()
        try:
            await wait_until(functools.partial(split_locked, c1, c2), NOTIFY_BOUND_S, "a locked 4/4 split")
        finally:
            await c1.shutdown()
            await c2.shutdown()
        c3 = orderly_member(mq_cluster, group, topic, f"c3r{rnd}")
        await c3.start()
        try:
            await wait_until(
                functools.partial(owns_locked, c3, queues), NOTIFY_BOUND_S, f"round {rnd}: the newcomer locking every queue"
            )
        finally:
            await c3.shutdown()


async def test_orderly_queue_dropped_with_messages_in_hand_is_handed_over_at_once(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """A member dropping queues that still cache pulled messages unlocks them at the broker as soon as
    no listener call holds them (upstream's client since 5.x; 4.x waited 20 s more), so the newcomer
    consumes them at once, in order, from the committed offset."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 8)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 40)  # a backlog: c1's queues hold messages
    seen: dict[str, list[int]] = collections.defaultdict(list)

    async def slow(msgs, ctx):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.05)
        for m in msgs:
            seen[f"{ctx.message_queue.queue_id}"].append(m.queue_offset)
        return ConsumeOrderlyStatus.SUCCESS

    c1 = orderly_member(mq_cluster, group, topic, "slow", slow)
    c2 = orderly_member(mq_cluster, group, topic, "c2", slow)
    await c1.start()
    try:
        await wait_until(lambda: owns_locked(c1, queues), NOTIFY_BOUND_S, "c1 locking every queue")
        await asyncio.sleep(0.3)  # c1 is consuming: its queues cache most of the backlog
        assert all(c1.process_queue_table()[q].has_temp_message() for q in queues)
        await c2.start()
        try:
            await wait_until(lambda: len(mine(c1, topic)) == 4, NOTIFY_BOUND_S, "c1 dropping half of its queues")
            dropped = set(queues) - mine(c1, topic)
            await wait_until(lambda: owns_locked(c2, list(dropped)), NOTIFY_BOUND_S, "c2 locking the dropped queues")
            await wait_until(lambda: sum(len(set(v)) for v in seen.values()) == 8 * 40, 30, "every message")
            for q, offsets in seen.items():
                assert sorted(set(offsets)) == list(range(40)), q
                firsts = [o for i, o in enumerate(offsets) if o not in offsets[:i]]
                assert firsts == list(range(40)), q  # in order across the hand-over
        finally:
            await c2.shutdown()
    finally:
        await c1.shutdown()


async def test_orderly_queue_taken_back_before_its_delayed_unlock_stays_locked(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue dropped with messages in hand and taken back soon after is locked again by its owner,
    and stays locked past UNLOCK_DELAY_TIME_MS: nothing left over from the drop (4.x's delayed unlock)
    may release the new lock, or another member could lock the queue while its owner consumes it."""
    monkeypatch.setattr(rebalance_module, "UNLOCK_DELAY_TIME_MS", 1500)
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 8)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 40)

    async def slow(msgs, ctx):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.05)
        return ConsumeOrderlyStatus.SUCCESS

    c1 = orderly_member(mq_cluster, group, topic, "slow", slow)
    c2 = orderly_member(mq_cluster, group, topic, "c2")
    await c1.start()
    try:
        await wait_until(lambda: owns_locked(c1, queues), NOTIFY_BOUND_S, "c1 locking every queue")
        await c2.start()
        try:
            await wait_until(lambda: len(mine(c1, topic)) == 4, NOTIFY_BOUND_S, "c1 dropping half of its queues")
        finally:
            await c2.shutdown()
        await wait_until(lambda: owns_locked(c1, queues), NOTIFY_BOUND_S, "c1 taking every queue back")
        await asyncio.sleep(2.5)  # past the (shortened) unlock delay
        probe = await c1.instance.api.lock_batch_mq(
            mq_cluster.brokers["broker-a"], group, "probe@not-a-member", queues, timeout_ms=3000
        )
        assert probe == set(), "a queue c1 holds was unlocked behind its back"
    finally:
        await c1.shutdown()


async def test_orderly_queue_busy_in_a_listener_call_is_released_when_the_call_ends(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """A dropped orderly queue whose listener call outlasts the rebalance's wait (0.5 s) stays locked;
    the rebalance retries soon, so the queue changes hands when the call ends, not at the next 20 s
    round."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 4)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 2)
    calls, long_first_call = long_first_calls()
    c1 = orderly_member(mq_cluster, group, topic, "long", long_first_call)
    c2 = orderly_member(mq_cluster, group, topic, "c2")
    await c1.start()
    try:
        await wait_until(lambda: len(calls) == 4, NOTIFY_BOUND_S, "a listener call running on every queue")
        started = time.monotonic()
        await c2.start()
        try:
            await wait_until(lambda: len(mine(c2, topic)) == 2 and owns_locked(c2, list(mine(c2, topic))), 8.0,
                             "c2 locking its half once c1's calls end")
            assert time.monotonic() - started > 2.0  # not before the calls ended
        finally:
            await c2.shutdown()
    finally:
        await c1.shutdown()


@pytest.mark.parametrize("plain", [False, True], ids=["async", "plain"])
async def test_orderly_hand_over_does_not_repeat_the_call_in_flight(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], plain: bool
) -> None:
    """A queue dropped while its listener call runs is released once the call returns: the call's
    success is committed with it, so the next owner starts after it instead of consuming it again."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 4)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 12)
    consumed: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)  # member -> (queue, offset)

    def record(name: str, msgs, ctx) -> ConsumeOrderlyStatus:  # type: ignore[no-untyped-def]
        consumed[name].extend((ctx.message_queue.queue_id, m.queue_offset) for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    def slow_member(name: str) -> PushConsumer:
        def blocking(msgs, ctx):  # type: ignore[no-untyped-def]
            time.sleep(0.2)
            return record(name, msgs, ctx)

        async def coroutine(msgs, ctx):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0.2)
            return record(name, msgs, ctx)

        return orderly_member(mq_cluster, group, topic, name, blocking if plain else coroutine)

    c1, c2 = slow_member("c1"), slow_member("c2")
    await c1.start()
    try:
        await wait_until(lambda: len({q for q, _ in consumed["c1"]}) == 4, NOTIFY_BOUND_S, "c1 consuming every queue")
        await c2.start()
        try:
            await wait_until(lambda: len({q for q, _ in consumed["c2"]}) == 2, NOTIFY_BOUND_S, "c2 consuming its half")
            await wait_until(lambda: len(set(consumed["c1"]) | set(consumed["c2"])) == 48, 20, "every message")
        finally:
            await c2.shutdown()
    finally:
        await c1.shutdown()
    assert not set(consumed["c1"]) & set(consumed["c2"])


async def test_orderly_reset_while_a_dropped_queue_waits_for_its_call(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """An offset reset arriving while a dropped orderly queue waits for its listener call neither lets the
    call commit over the reset nor forgets the queue's release: the next owner gets it when the call
    ends, not after the broker's 60 s lock expiry, and starts at the reset offset."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 4)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    calls, long_first_call = long_first_calls()
    c2_got: list[tuple[int, int]] = []

    async def record(msgs, ctx):  # type: ignore[no-untyped-def]
        c2_got.extend((ctx.message_queue.queue_id, m.queue_offset) for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    c1 = orderly_member(mq_cluster, group, topic, "long", long_first_call)
    c2 = orderly_member(mq_cluster, group, topic, "c2", record)
    admin = Admin(mq_cluster.namesrv_addr)
    await admin.start()
    await c1.start()
    try:
        await wait_until(lambda: len(calls) == 4, NOTIFY_BOUND_S, "a listener call running on every queue")
        await c2.start()
        try:
            await asyncio.sleep(1.0)  # c1's removal of c2's half waits for the calls
            await admin.reset_offset_by_time(group, topic, 0)
            await wait_until(lambda: len({q for q, _ in c2_got}) == 2, 8.0, "c2 consuming its half once c1's calls end")
            for q in {q for q, _ in c2_got}:
                assert min(o for qq, o in c2_got if qq == q) == 0, c2_got  # from the reset offset
        finally:
            await c2.shutdown()
    finally:
        await c1.shutdown()
        await admin.shutdown()
