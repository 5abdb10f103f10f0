"""Every send mode against a real NameServer and two real brokers (subprocesses)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from client import Admin, InvalidMessageError, Message, MessageQueue, Producer, SendStatus
from client import sync as blocking
from client.message import MessageExt, PullStatus
from client.producer import SelectMessageQueueByHash
from remoting.message import MessageSysFlag
from tests.client.conftest import RealCluster

T = TypeVar("T")


async def eventually(fn: Callable[[], Awaitable[T]], ok: Callable[[T], bool], timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = await fn()
            if ok(v):
                return v
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {v!r})")
        await asyncio.sleep(0.05)


async def make_topic(admin: Admin, topic: str, queues: int = 4, brokers: int = 2) -> None:
    await admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
    await eventually(lambda: admin.topic_route(topic), lambda r: len(r.broker_datas) == brokers)


async def read_queue(admin: Admin, mq: MessageQueue, start: int, count: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    pos = start
    deadline = time.monotonic() + 10
    while len(out) < count and time.monotonic() < deadline:
        res = await admin.pull(mq, pos, 32)
        if res.status is PullStatus.FOUND:
            out.extend(res.messages)
            pos = res.next_begin_offset
        else:
            await asyncio.sleep(0.05)
    return out


async def test_send_sync_then_view_and_query(real_cluster: RealCluster, topic: str) -> None:
    async with Admin(real_cluster.namesrv_addr) as admin, Producer("pg_sync", real_cluster.namesrv_addr) as p:
        await make_topic(admin, topic)
        msg = Message(
            topic, b"hello world", tags="TagA", keys=["order-17", "user-3"], properties={"color": "red"}
        )
        r = await p.send(msg)
        assert r.status is SendStatus.SEND_OK
        assert r.queue.topic == topic and r.queue.broker_name in real_cluster.brokers
        assert len(r.msg_id) == 32 and r.msg_id == msg.uniq_id
        stored = await admin.view_message(r.offset_msg_id)
        assert stored.body == b"hello world" and stored.topic == topic
        assert stored.tags == "TagA" and stored.keys == "order-17 user-3"
        assert stored.properties["color"] == "red" and stored.uniq_key == r.msg_id
        assert (stored.queue_id, stored.queue_offset) == (r.queue.queue_id, r.queue_offset)
        by_key = await eventually(lambda: admin.query_message_by_key(topic, "user-3"), lambda v: len(v) == 1)
        assert by_key[0].uniq_key == r.msg_id
        by_uniq = await admin.view_message(r.msg_id, topic)
        assert by_uniq.body == b"hello world"


async def test_send_async_many_in_flight(real_cluster: RealCluster, topic: str) -> None:
    seen: list[tuple[object, object]] = []
    async with (
        Admin(real_cluster.namesrv_addr) as admin,
        Producer("pg_async", real_cluster.namesrv_addr) as p,
    ):
        await make_topic(admin, topic)
        futs = [
            p.send_async(Message(topic, b"m%d" % i), lambda r, e: seen.append((r, e))) for i in range(300)
        ]
        results = await asyncio.gather(*futs)
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert len({(r.queue, r.queue_offset) for r in results}) == 300
        await eventually(lambda: asyncio.sleep(0), lambda _: len(seen) == 300, timeout=5)
        assert all(e is None for _r, e in seen)
        status = await eventually(
            lambda: admin.topic_status(topic), lambda rows: sum(x.max_offset for x in rows) == 300
        )
        assert {row.queue.broker_name for row in status} == set(real_cluster.brokers)


async def test_send_oneway_arrives(real_cluster: RealCluster, topic: str) -> None:
    async with (
        Admin(real_cluster.namesrv_addr) as admin,
        Producer("pg_oneway", real_cluster.namesrv_addr) as p,
    ):
        await make_topic(admin, topic)
        await p.send_oneway(Message(topic, b"fire and forget", keys="ow-key-1"))
        found = await eventually(lambda: admin.query_message_by_key(topic, "ow-key-1"), lambda v: len(v) == 1)
        assert found[0].body == b"fire and forget"


async def test_send_batch_one_request_consecutive_offsets(real_cluster: RealCluster, topic: str) -> None:
    async with (
        Admin(real_cluster.namesrv_addr) as admin,
        Producer("pg_batch", real_cluster.namesrv_addr) as p,
    ):
        await make_topic(admin, topic)
        msgs = [Message(topic, b"batch-%d" % i, tags="B", keys=f"bk{i}") for i in range(10)]
        r = await p.send_batch(msgs)
        ids = r.msg_id.split(",")
        assert r.status is SendStatus.SEND_OK and ids == [m.uniq_id for m in msgs]
        got = await read_queue(admin, r.queue, r.queue_offset, 10)
        assert [m.body for m in got[:10]] == [b"batch-%d" % i for i in range(10)]
        assert [m.queue_offset for m in got[:10]] == list(range(r.queue_offset, r.queue_offset + 10))
        assert [m.uniq_key for m in got[:10]] == ids and got[3].keys == "bk3" and got[3].tags == "B"


async def test_send_orderly_same_key_same_queue_in_order(real_cluster: RealCluster, topic: str) -> None:
    keys = [f"order-{i}" for i in range(5)]
    async with (
        Admin(real_cluster.namesrv_addr) as admin,
        Producer("pg_order", real_cluster.namesrv_addr) as p,
    ):
        await make_topic(admin, topic)
        queues = await p.fetch_publish_message_queues(topic)
        placed: dict[str, set[MessageQueue]] = {k: set() for k in keys}
        for seq in range(8):
            for k in keys:
                r = await p.send_orderly(Message(topic, f"{k}:{seq}".encode(), keys=k), k)
                placed[k].add(r.queue)
        for k in keys:
            assert len(placed[k]) == 1
            (mq,) = placed[k]
            assert mq == SelectMessageQueueByHash().select(queues, Message(topic, b""), k)  # Java-compatible
        for mq in {q for s in placed.values() for q in s}:
            got = await read_queue(admin, mq, 0, 8 * sum(1 for k in keys if mq in placed[k]))
            for k in keys:
                seqs = [int(m.body.split(b":")[1]) for m in got if m.keys == k]
                if mq in placed[k]:
                    assert seqs == list(range(8))


async def test_compressed_body_round_trip(real_cluster: RealCluster, topic: str) -> None:
    big = b"".join(b"line %06d of a compressible body\n" % i for i in range(400))  # ~14 KiB
    small = b"s" * 4095
    async with Admin(real_cluster.namesrv_addr) as admin, Producer("pg_zip", real_cluster.namesrv_addr) as p:
        await make_topic(admin, topic)
        r_big = await p.send(Message(topic, big))
        r_small = await p.send(Message(topic, small))
        stored = await admin.view_message(r_big.offset_msg_id)
        assert stored.sys_flag & MessageSysFlag.COMPRESSED_FLAG
        assert stored.store_size < len(big)  # the broker stored the compressed form
        assert stored.body == big  # and the client decodes it
        pulled = await read_queue(admin, r_big.queue, r_big.queue_offset, 1)
        assert pulled[0].body == big
        plain = await admin.view_message(r_small.offset_msg_id)
        assert not plain.sys_flag & MessageSysFlag.COMPRESSED_FLAG and plain.body == small


async def test_delay_level_goes_to_schedule_topic(real_cluster: RealCluster, topic: str) -> None:
    async with (
        Admin(real_cluster.namesrv_addr) as admin,
        Producer("pg_delay", real_cluster.namesrv_addr) as p,
    ):
        await make_topic(admin, topic)
        msg = Message(topic, b"later", delay_level=2)
        r = await p.send(msg)
        stored = await admin.view_message(r.offset_msg_id)
        assert stored.properties.get("DELAY") == "2"  # the level went over the wire
        assert stored.topic == "SCHEDULE_TOPIC_XXXX"
        assert stored.properties["REAL_TOPIC"] == topic and stored.queue_id == 1  # level 2 -> queue 1


async def test_send_to_a_given_queue(real_cluster: RealCluster, topic: str) -> None:
    async with (
        Admin(real_cluster.namesrv_addr) as admin,
        Producer("pg_queue", real_cluster.namesrv_addr) as p,
    ):
        await make_topic(admin, topic)
        mq = MessageQueue(topic, "broker-b", 3)
        results = [await p.send(Message(topic, b"q%d" % i), queue=mq) for i in range(3)]
        assert [r.queue for r in results] == [mq] * 3
        assert [r.queue_offset for r in results] == [0, 1, 2]


async def test_oversized_message_is_refused_client_side(real_cluster: RealCluster, topic: str) -> None:
    async with Producer("pg_big", real_cluster.namesrv_addr, max_message_size=1024) as p:
        with pytest.raises(InvalidMessageError, match="over max value, MAX: 1024"):
            await p.send(Message(topic, b"x" * 1025))


def test_blocking_facade_from_plain_threads(real_cluster: RealCluster, topic: str) -> None:
    with blocking.Admin(real_cluster.namesrv_addr) as admin:
        admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=4, write_queue_nums=4)
    results: list[object] = []
    errors: list[BaseException] = []
    with blocking.Producer("pg_blocking", real_cluster.namesrv_addr) as p:

        def worker(n: int) -> None:
            try:
                for i in range(20):
                    results.append(p.send(Message(topic, f"{n}-{i}".encode())))
                results.append(p.send_async(Message(topic, b"async")).result(10))
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors and len(results) == 84
        assert all(r.status is SendStatus.SEND_OK for r in results)  # type: ignore[attr-defined]
        # A blocking call from the client's own loop thread would deadlock: it is refused.
        refused: list[BaseException] = []
        done = threading.Event()

        def cb(r: object, e: object) -> None:
            try:
                p.send(Message(topic, b"inner"))
            except RuntimeError as err:
                refused.append(err)
            done.set()

        p.send_async(Message(topic, b"outer"), cb).result(10)
        assert done.wait(5) and refused and "event-loop thread" in str(refused[0])
    with blocking.Admin(real_cluster.namesrv_addr) as admin:
        deadline = time.monotonic() + 10
        while sum(r.max_offset for r in admin.topic_status(topic)) < 85 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(r.max_offset for r in admin.topic_status(topic)) == 85


async def test_send_lands_on_the_live_broker_when_one_is_down(own_cluster: RealCluster, topic: str) -> None:
    ns_addr = own_cluster.namesrv_addr
    async with Admin(ns_addr) as admin, Producer("pg_failover", ns_addr) as p:
        await make_topic(admin, topic)
        first = await p.send(Message(topic, b"both up"))
        assert first.status is SendStatus.SEND_OK
        own_cluster.daemons["broker-b"].kill()  # the producer's cached route (refreshed every 30 s) still has it
        cached = p.instance.publish_info_table[topic]
        assert set(cached.broker_names()) == {"broker-a", "broker-b"}
        results = [await p.send(Message(topic, b"one down %d" % i)) for i in range(10)]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert {r.queue.broker_name for r in results} == {"broker-a"}


async def test_created_topic_is_routable_as_soon_as_create_returns(real_cluster: RealCluster) -> None:
    # Java's updateAndCreateTopic registers with the NameServers before answering; a client that
    # creates a topic and asks for its route at once must find it (no wait, no retry).
    async with Admin(real_cluster.namesrv_addr) as admin:
        for i in range(5):
            name = f"RoutableAtOnce_{i}_{time.monotonic_ns()}"
            await admin.create_topic(name, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
            route = await admin.topic_route(name)
            assert {b.broker_name for b in route.broker_datas} == {"broker-a", "broker-b"}
            assert all(q.write_queue_nums == 2 for q in route.queue_datas)
