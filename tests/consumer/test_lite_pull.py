"""LitePullConsumer against real daemons: assign / seek / commit / pause, subscribe, range reads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from client import LitePullConsumer
from client.errors import MQClientError
from client.message import MessageExt, MessageQueue
from client.reader import QueueReader

from .conftest import ConsumerCluster, create_topic, send_to_queues, wait_until


async def poll_until(c: LitePullConsumer, want: int, timeout: float = 15) -> list[MessageExt]:
    out: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(out) < want:
        assert time.monotonic() < deadline, f"polled {len(out)} of {want} messages"
        out.extend(await c.poll(0.5))
    return out


async def broker_committed(cluster: ConsumerCluster, group: str, mq: MessageQueue) -> int | None:
    reader = await QueueReader.create(cluster.namesrv_addr)
    try:
        return await reader.committed_offset(group, mq)
    finally:
        await reader.close()


async def test_assign_poll_commit_seek_and_pause(mq_cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 2)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 5)
    c = LitePullConsumer(group, mq_cluster.namesrv_addr, auto_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    assert await c.fetch_message_queues(topic) == queues
    c.assign(queues)
    with pytest.raises(MQClientError, match="mutually exclusive"):
        c.subscribe(topic)
    await c.start()
    try:
        msgs = await poll_until(c, 10)
        assert sorted(m.body for m in msgs) == sorted(sent)
        for mq in queues:  # per queue in offset order
            offs = [m.queue_offset for m in msgs if m.queue_id == mq.queue_id]
            assert offs == sorted(offs) == list(range(5))
        assert await c.poll(0.2) == []
        assert c.position(queues[0]) == 5
        assert await c.committed(queues[0]) == 0  # nothing committed yet (new queue -> 0)
        done = await c.commit()
        assert done == {queues[0]: 5, queues[1]: 5}
        assert await broker_committed(mq_cluster, group, queues[0]) == 5

        await c.seek(queues[1], 2)
        again = await poll_until(c, 3)
        assert [m.queue_offset for m in again] == [2, 3, 4] and {m.queue_id for m in again} == {1}
        await c.seek_to_begin(queues[0])
        again = await poll_until(c, 5)
        assert [m.queue_offset for m in again] == [0, 1, 2, 3, 4]
        with pytest.raises(MQClientError, match="Seek offset illegal"):
            await c.seek(queues[0], 99)

        c.pause([queues[0]])
        more = await send_to_queues(mq_cluster.namesrv_addr, queues, 2, prefix="n")
        got = await poll_until(c, 2)
        assert {m.queue_id for m in got} == {1}
        await asyncio.sleep(0.3)
        assert await c.poll(0.2) == []  # queue 0 is paused
        c.resume([queues[0]])
        got += await poll_until(c, 2)
        assert sorted(m.body for m in got) == sorted(more)
        await c.seek_to_end(queues[0])
        assert c.position(queues[0]) == 7
        await c.commit()
        assert await broker_committed(mq_cluster, group, queues[0]) == 7
    finally:
        await c.shutdown()


async def test_assign_on_a_running_consumer_takes_effect_at_once(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """RocketMQ's LitePullConsumerAssign example: start, assign, and seek on the next line. A pause right after
    an assign holds its queue, and a new assignment drops what it leaves out (and commits its offset)."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 2)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 5)
    c = LitePullConsumer(group, mq_cluster.namesrv_addr, auto_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    await c.start()
    try:
        c.assign(queues)
        await c.seek(queues[0], 3)  # no await between: before, "not in assigned list"
        c.pause([queues[1]])  # before, a no-op: the queue did not exist yet
        got = await poll_until(c, 2)
        assert [(m.queue_id, m.queue_offset) for m in got] == [(0, 3), (0, 4)]
        await asyncio.sleep(0.3)
        assert await c.poll(0.2) == []  # queue 1 stays paused
        assert (await c.commit())[queues[0]] == 5
        c.assign([queues[1]])
        assert c.assignment() == [queues[1]]
        c.resume([queues[1]])
        got = await poll_until(c, 5)
        assert [(m.queue_id, m.queue_offset) for m in got] == [(1, i) for i in range(5)]
    finally:
        await c.shutdown()
    assert await broker_committed(mq_cluster, group, queues[0]) == 5  # the dropped queue's offset was persisted


async def test_auto_commit_commits_what_earlier_polls_returned(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 4)
    c = LitePullConsumer(group, mq_cluster.namesrv_addr, auto_commit_interval_millis=1000, pull_batch_size=2)
    c.assign(queues)
    await c.start()
    try:
        await poll_until(c, 4)
        await asyncio.sleep(1.05)
        await c.poll(0.1)  # the auto-commit point
        deadline = time.monotonic() + 10
        while await broker_committed(mq_cluster, group, queues[0]) != 4:
            assert time.monotonic() < deadline, "auto-commit did not reach the broker"
            await asyncio.sleep(0.1)
    finally:
        await c.shutdown()


async def test_subscribe_two_lite_consumers_split_the_queues(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 4)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
    cs = [
        LitePullConsumer(group, mq_cluster.namesrv_addr, instance_name=f"l{i}-{group}", consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        for i in range(2)
    ]
    for c in cs:
        c.subscribe(topic, "*")
    try:
        for c in cs:
            await c.start()
        await wait_until(
            lambda: sorted(cs[0].assignment() + cs[1].assignment()) == queues
            and len(cs[0].assignment()) == 2,
            10,
            "a 2/2 split",
        )
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < len(sent):
            assert time.monotonic() < deadline
            for c in cs:
                got.extend(m.body for m in await c.poll(0.2))
        assert sorted(got) == sorted(sent)
    finally:
        for c in cs:
            await c.shutdown()


async def test_read_range_needs_no_group_membership(mq_cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic = names("T")
    queues = await create_topic(mq_cluster, topic, 1)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 20)
    c = LitePullConsumer(names("G"), mq_cluster.namesrv_addr)  # never started
    try:
        offsets = []
        async for msgs in c.read_range(queues[0], 5, 15):
            offsets.extend(m.queue_offset for m in msgs)
        assert offsets == list(range(5, 15))
        assert (await c.min_offset(queues[0]), await c.max_offset(queues[0])) == (0, 20)
    finally:
        await c.shutdown()


async def test_prefetch_runs_from_pull_answer_callbacks_and_a_seek_drops_the_pull_in_flight(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """Steady-state prefetch sends each queue's next pull from the previous answer's callback (no Task
    per loop); a seek while a long-polled pull is in flight discards that pull's answer."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 2)
    c = LitePullConsumer(group, mq_cluster.namesrv_addr, auto_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.assign(queues)
    await c.start()
    try:
        first = await send_to_queues(mq_cluster.namesrv_addr, queues, 3)
        assert sorted(m.body for m in await poll_until(c, 6)) == sorted(first)
        await asyncio.sleep(0.2)  # both queues' pulls are now held by the broker
        loops = c.pull_service._loops
        assert set(loops) == set(queues) and all(lp.task is None for lp in loops.values())
        await c.seek(queues[0], 1)  # replaces queue 0's loop while its held pull is in flight
        again = await poll_until(c, 2)
        assert sorted(m.queue_offset for m in again) == [1, 2]
        more = await send_to_queues(mq_cluster.namesrv_addr, queues, 1, prefix="n")
        got = await poll_until(c, 2)
        assert sorted(m.body for m in got) == sorted(more)
        assert await c.poll(0.3) == []  # nothing delivered twice
    finally:
        await c.shutdown()


async def test_next_pull_goes_out_before_the_answer_is_decoded_and_a_bad_body_is_pulled_again(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A found answer moves the queue on and its next pull is sent from the read path; the body is
    decoded in a later callback (while the broker reads that pull). An answer that fails to decode
    restarts the queue at that answer's offset: every message arrives exactly once."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 6)
    c = LitePullConsumer(group, mq_cluster.namesrv_addr, auto_commit=False, pull_batch_size=2,
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    order: list[str] = []
    api_cls = type(c).__mro__[0]
    orig_defer, orig_finish = api_cls._defer_found, api_cls._finish_deferred
    failed: list[int] = []

    def defer(self: LitePullConsumer, req, st, gen, offset, result, body):  # type: ignore[no-untyped-def]
        order.append(f"found {offset}")
        return orig_defer(self, req, st, gen, offset, result, body)

    def finish(self: LitePullConsumer, req, st, gen, offset, result, body, n):  # type: ignore[no-untyped-def]
        order.append(f"decode {offset}")
        if offset == 2 and not failed:
            failed.append(offset)
            body = b"\x00" * 8  # truncated record: decode_messages raises
        return orig_finish(self, req, st, gen, offset, result, body, n)

    monkeypatch.setattr(api_cls, "_defer_found", defer)
    monkeypatch.setattr(api_cls, "_finish_deferred", finish)
    monkeypatch.setattr(c, "pull_time_delay_mills_when_exception", 1000)
    c.assign(queues)
    await c.start()
    orig_raw = c.pull_api.pull_kernel_nowait_raw

    def raw(mq, sd, offset, *a, **kw):  # type: ignore[no-untyped-def]
        order.append(f"pull {offset}")
        return orig_raw(mq, sd, offset, *a, **kw)

    monkeypatch.setattr(c.pull_api, "pull_kernel_nowait_raw", raw)
    try:
        await wait_until(lambda: bool(failed), 10, "the bad answer")  # offsets 0-1 are cached, not polled
        got = await poll_until(c, 6)
        assert [m.body for m in got] == sent and [m.queue_offset for m in got] == list(range(6))
        assert await c.poll(0.3) == []  # nothing twice
        assert failed == [2]
        # The pull after a found answer is sent before that answer is decoded.
        decoded = [int(e.split()[1]) for e in order if e.startswith("decode")]
        assert decoded and all(order.index(f"pull {o + 2}") < order.index(f"decode {o}") for o in decoded if o + 2 <= 6)
        assert c.position(queues[0]) == 6
    finally:
        await c.shutdown()


async def test_flow_control_resumes_pulling_once_polls_take_the_cache_down(
    mq_cluster: ConsumerCluster, names: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue held by flow control pulls again as soon as poll() has taken its cache down to half the
    threshold, not only after the flow-control delay (RocketMQ's 50 ms, during which a fast poller found
    an empty cache): with the delay made a minute long here, reading past the first full cache would
    time out otherwise. The cache still stays within the threshold (plus the batch a pull may add)."""
    from client.consumer import lite_pull_consumer

    monkeypatch.setattr(lite_pull_consumer, "PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL", 60_000)
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 400)
    c = LitePullConsumer(group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         pull_batch_size=16, pull_threshold_for_queue=48)
    c.assign(queues)
    await c.start()
    try:
        # Nothing polled yet: the pulls fill the cache past the threshold, and flow control holds the queue.
        st = c._queues[queues[0]]
        await wait_until(lambda: st.pq.msg_count > 48, 10, "the cache to fill past the threshold")
        await asyncio.sleep(0.2)
        got: list[MessageExt] = []
        most = 0
        deadline = time.monotonic() + 20
        while len(got) < len(sent):
            assert time.monotonic() < deadline, f"polled {len(got)} of {len(sent)}: a held pull was not resumed"
            most = max(most, st.pq.msg_count + st.deferred_count)
            got.extend(await c.poll(0.5))
        assert [m.body for m in got] == sent
        assert most <= 48 + 16
    finally:
        await c.shutdown()


async def test_auto_commit_a_queue_leaving_keeps_what_earlier_polls_returned(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """With auto-commit, a queue taken away (by a rebalance, or by assign) keeps what earlier polls returned
    from it: its next owner re-reads at most the last batch (the application may still hold it), not
    everything since the last auto-commit (up to auto_commit_interval_millis of messages, as upstream's
    client does)."""
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 4)
    sent = await send_to_queues(mq_cluster.namesrv_addr, queues, 20)
    batch = 4

    def member(name: str, group: str) -> LitePullConsumer:
        return LitePullConsumer(
            group, mq_cluster.namesrv_addr, instance_name=f"{name}-{group}", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            pull_batch_size=batch,
        )

    async def committed_at_least(mqs: list[MessageQueue], offset: int) -> bool:
        for q in mqs:
            if (await broker_committed(mq_cluster, c.consumer_group, q) or 0) < offset:
                return False
        return True

    # A rebalance: a second member joins, the first polled everything well within the 5 s interval.
    c, c2 = member("l1", group), member("l2", group)
    c.subscribe(topic, "*")
    c2.subscribe(topic, "*")
    try:
        await c.start()
        await poll_until(c, len(sent))
        await c2.start()
        await wait_until(lambda: len(c.assignment()) == 2 and len(c2.assignment()) == 2, 10, "a 2/2 split")
        moved = sorted(set(queues) - set(c.assignment()))
        await wait_until(lambda: committed_at_least(moved, 20 - batch), 4, "the moved queues' polled offsets")
    finally:
        await c2.shutdown()
        await c.shutdown()

    # assign: the queues a new assignment leaves out.
    c = member("l3", names("H"))
    c.assign(queues)
    try:
        await c.start()
        await poll_until(c, len(sent))
        c.assign(queues[:2])
        await wait_until(lambda: committed_at_least(queues[2:], 20 - batch), 4, "the unassigned queues' polled offsets")
    finally:
        await c.shutdown()
