"""Blocking twins (client.sync.PushConsumer / LitePullConsumer) used from plain threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from client import ConsumeConcurrentlyStatus, Message
from client import sync as rmq
from client.message import MessageQueue

from .conftest import ConsumerCluster


def wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def create_topic(cluster: ConsumerCluster, topic: str, queues: int) -> list[MessageQueue]:
    with rmq.Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, broker_addr=cluster.brokers["broker-a"], read_queue_nums=queues, write_queue_nums=queues)

    want = [MessageQueue(topic, "broker-a", i) for i in range(queues)]
    with rmq.LitePullConsumer("probe", cluster.namesrv_addr) as probe:
        wait(lambda: _safe(lambda: probe.fetch_message_queues(topic)) == want, 20, "route")
    return want


def _safe(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception:
        return None


def test_blocking_push_consumer_from_a_thread_with_a_blocking_listener(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group, echo = names("T"), names("G"), names("E")
    create_topic(mq_cluster, topic, 2)
    create_topic(mq_cluster, echo, 1)
    got: list[bytes] = []
    threads: set[str] = set()
    producer = rmq.Producer(names("P"), mq_cluster.namesrv_addr)
    producer.start()
    try:

        def listener(msgs, ctx):  # type: ignore[no-untyped-def]
            threads.add(threading.current_thread().name)
            for m in msgs:
                got.append(m.body)
                # a blocking client call from inside the listener is fine (not the loop thread)
                producer.send(Message(echo, b"echo-" + m.body))
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = rmq.PushConsumer(group, mq_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe(topic, "*")
        c.register_listener(listener)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                with c:
                    for i in range(6):
                        producer.send(Message(topic, f"s{i}".encode()))
                    wait(lambda: len(got) >= 6, 15, "6 messages")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join(40)
        assert not t.is_alive() and not errors, errors
        assert sorted(got) == sorted(f"s{i}".encode() for i in range(6))
        assert all(n.startswith("ConsumeMessageThread_") for n in threads)
        with rmq.LitePullConsumer(names("L"), mq_cluster.namesrv_addr) as lp:
            echoed = [m.body for b in lp.read_range(MessageQueue(echo, "broker-a", 0), 0, 6) for m in b]
        assert sorted(echoed) == sorted(b"echo-" + b for b in got)
    finally:
        producer.shutdown()


def test_blocking_lite_pull_consumer(mq_cluster: ConsumerCluster, names: Callable[[str], str]) -> None:
    topic, group = names("T"), names("G")
    queues = create_topic(mq_cluster, topic, 2)
    with rmq.Producer(names("P"), mq_cluster.namesrv_addr) as p:
        for i in range(8):
            p.send(Message(topic, f"x{i}".encode()), queue=queues[i % 2])
    with rmq.LitePullConsumer(group, mq_cluster.namesrv_addr, auto_commit=False) as c:
        c.assign(queues)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 8:
            assert time.monotonic() < deadline
            got.extend(c.poll(0.5))
        assert sorted(m.body for m in got) == sorted(f"x{i}".encode() for i in range(8))
        c.commit_sync()
        assert c.committed(queues[0]) == 4
        c.seek(queues[0], 1)
        again = []
        while len(again) < 3:
            again.extend(c.poll(0.5))
        assert [m.queue_offset for m in again] == [1, 2, 3]


def test_blocking_poll_takes_waiting_batches_in_its_own_thread_and_keeps_commit_pause_seek_exact(
    mq_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    """The blocking poll takes a batch already waiting in the calling thread (here while the client's loop
    thread is held up), and the batches set aside for it (HANDOFF_BATCHES) are not counted as polled:
    commit() stops after what poll() returned, pause() holds them back, seek() drops them. A poller blocked
    when the consumer shuts down is woken."""
    from client.consumer import lite_pull_consumer
    from client.sync import get_loop_thread

    topic, group = names("T"), names("G")
    [q] = create_topic(mq_cluster, topic, 1)
    with rmq.Producer(names("P"), mq_cluster.namesrv_addr) as p:
        for i in range(12):
            p.send(Message(topic, f"x{i}".encode()), queue=q)
    c = rmq.LitePullConsumer(group, mq_cluster.namesrv_addr, auto_commit=False, pull_batch_size=2,
                             consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.assign([q])
    c.start()
    try:
        wait(lambda: c.async_consumer._handoff_n == lite_pull_consumer.HANDOFF_BATCHES, 15, "batches set aside")
        held = threading.Event()
        get_loop_thread().loop.call_soon_threadsafe(held.wait, 10)  # the client's loop busy meanwhile
        try:
            t0 = time.monotonic()
            first = c.poll(5)
            assert time.monotonic() - t0 < 2 and [m.queue_offset for m in first] == [0, 1]
        finally:
            held.set()
        c.commit_sync()
        assert c.committed(q) == 2  # not past the batches waiting for a poll

        c.pause([q])
        assert c.poll(0.3) == []  # those waiting are held back too
        c.resume([q])
        got: list[int] = []
        deadline = time.monotonic() + 15
        while len(got) < 10:
            assert time.monotonic() < deadline
            got.extend(m.queue_offset for m in c.poll(0.5))
        assert got == list(range(2, 12))  # in order, none lost, none twice

        c.seek(q, 0)
        again: list[int] = []
        while len(again) < 12:
            assert time.monotonic() < deadline + 15
            again.extend(m.queue_offset for m in c.poll(0.5))
        assert again == list(range(12))

        result: list[object] = []
        poller = threading.Thread(target=lambda: result.append(c.poll(10)))
        poller.start()
        time.sleep(0.2)
    finally:
        t0 = time.monotonic()
        c.shutdown()
    poller.join(5)
    assert result == [[]] and time.monotonic() - t0 < 5  # woken by the shutdown, not by its timeout
