"""ConsumerRunningInfo: what a push consumer reports of itself (mqadmin consumerStatus, the dashboard)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from client import Admin, ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, PushConsumer
from client.consumer import stats as stats_module
from client.consumer.process_queue import ProcessQueue
from client.consumer.stats import ConsumerStatsManager
from client.message import MessageQueue
from remoting.body import ConsumerRunningInfo

from .conftest import ConsumerCluster, create_topic, send_to_queues, wait_until


def test_stats_manager_windows_and_dropped_queues(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    clock = [1000.0]
    monkeypatch.setattr(stats_module.time, "monotonic", lambda: clock[0])
    a, b = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    table = {a: ProcessQueue(), b: ProcessQueue()}
    stats = ConsumerStatsManager(lambda: dict(table))

    def work(pq: ProcessQueue, pulls: int, msgs: int, ok: int, failed: int) -> None:
        pq.pull_rt_ms += 20.0 * pulls
        pq.pull_found += pulls
        pq.pulled_msgs += msgs
        pq.consume_rt_ms += 3.0 * (ok + failed)
        pq.consume_calls += ok + failed
        pq.consume_ok += ok
        pq.consume_failed += failed

    work(table[a], 2, 60, 55, 5)
    work(table[b], 1, 30, 30, 0)
    clock[0] += 10
    stats.sample()
    dropped = table.pop(b)  # a rebalance takes queue 1 away; what it did before that still counts
    work(dropped, 1, 10, 10, 0)
    dropped.dropped = True
    clock[0] += 10
    s = stats.consume_status("T")
    assert (s.pull_rt, s.pull_tps, s.consume_rt) == (20.0, 100 / 20, 3.0)
    assert (s.consume_ok_tps, s.consume_failed_tps, s.consume_failed_msgs) == (95 / 20, 5 / 20, 5)
    for _ in range(7):  # a minute later the early work has left the minute's window, not the hour's
        clock[0] += 10
        stats.sample()
    s = stats.consume_status("T")
    assert (s.pull_tps, s.consume_ok_tps, s.pull_rt) == (0.0, 0.0, 0.0) and s.consume_failed_msgs == 5
    work(table[a], 1, 6, 6, 0)
    s = stats.consume_status("T")
    assert s.pull_tps == 6 / 60 and s.consume_rt == 3.0
    assert stats.consume_status("Other").consume_ok_tps == 0.0


async def test_push_consumer_reports_its_queues_and_figures(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 2)
    seen: set[bytes] = set()
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]  # a plain function: runs in a thread
        with lock:
            first = msgs[0].body not in seen
            seen.add(msgs[0].body)
        if first and msgs[0].body.endswith(b"-0"):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER  # each queue's first message fails once
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic)
    c.register_listener(listener)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 10)
    async with c, Admin(mq_cluster.namesrv_addr) as admin:
        await wait_until(lambda: len(seen) == 20, 20, "20 messages consumed")

        async def committed() -> bool:
            info = await admin.consumer_running_info(group, c.client_id)
            return sorted((mq.queue_id, pq.commit_offset) for mq, pq in info.mq_table.items()
                          if mq.topic == topic) == [(0, 10), (1, 10)]

        await wait_until(committed, 10, "both queues reported committed at offset 10")
        info = await admin.consumer_running_info(group, c.client_id, jstack=True)
        assert isinstance(info, ConsumerRunningInfo)
        assert {(mq.topic, mq.broker_name) for mq in info.mq_table} == {(topic, "broker-a"), (f"%RETRY%{group}", "broker-a")}
        pq = next(pq for mq, pq in info.mq_table.items() if mq.topic == topic)
        assert pq.cached_msg_count == 0 and not pq.droped and pq.last_pull_timestamp > 0
        st = info.status_table[topic]
        assert st.pull_tps > 0 and st.consume_ok_tps > 0 and st.consume_rt >= 0 and st.pull_rt > 0
        assert st.consume_failed_msgs == 2 and st.consume_failed_tps > 0
        assert info.properties["consumerGroup"] == group and info.properties["PROP_CONSUMEORDERLY"] == "false"
        assert "Thread: MainThread" in (info.jstack or "") and "Task:" in (info.jstack or "")


async def test_orderly_consumer_reports_locks_and_calls(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    queues = await create_topic(mq_cluster, topic, 1)
    done = asyncio.Event()
    count = 0

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        nonlocal count
        count += len(msgs)
        if count >= 5:
            done.set()
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer(group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic)
    c.register_orderly_listener(listener)
    await send_to_queues(mq_cluster.namesrv_addr, queues, 5)
    async with c, Admin(mq_cluster.namesrv_addr) as admin:
        await asyncio.wait_for(done.wait(), 20)
        info = await admin.consumer_running_info(group, c.client_id)
        [pq] = [pq for mq, pq in info.mq_table.items() if mq.topic == topic]
        assert pq.locked and pq.last_lock_timestamp > 0
        assert info.status_table[topic].consume_ok_tps > 0
        assert info.properties["PROP_CONSUMEORDERLY"] == "true"
