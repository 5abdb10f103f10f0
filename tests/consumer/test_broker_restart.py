"""A broker restarting under a consumer group: it knows none of the group's members until their
heartbeats reach it again, and that must not make any member take the others' queues meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin, ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from client.message import MessageQueue
from tests.support.daemons import Daemon, start_broker, start_namesrv

from .conftest import wait_until

BROKERS = ("broker-a", "broker-b")


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.daemons: dict[str, Daemon] = {}
        self.addrs: dict[str, str] = {}
        self.namesrv, self.namesrv_addr = start_namesrv(tmp)
        for name in BROKERS:
            self.start(name)

    def start(self, name: str) -> None:
        port = int(self.addrs[name].rsplit(":", 1)[1]) if name in self.addrs else None
        self.daemons[name], self.addrs[name] = start_broker(
            self.tmp, self.namesrv_addr, name=name, port=port, store_dir=self.tmp / f"store-{name}"
        )

    def stop(self) -> None:
        for d in self.daemons.values():
            d.terminate()
        self.namesrv.terminate()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def owned(c: PushConsumer, topic: str) -> set[MessageQueue]:
    return {q for q in c.assigned_queues() if q.topic == topic}


async def test_a_restarted_broker_does_not_hand_every_queue_to_the_first_member_it_hears_from(cluster: Cluster) -> None:
    topic, group = "TRestart", "GRestart"
    admin = Admin(cluster.namesrv_addr)
    await admin.start()
    try:
        for addr in cluster.addrs.values():
            await admin.create_topic(topic, broker_addr=addr, read_queue_nums=4, write_queue_nums=4)
    finally:
        await admin.shutdown()
    got: list[bytes] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        got.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    members = [
        PushConsumer(group, cluster.namesrv_addr, instance_name=f"m{i}", consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        for i in range(2)
    ]
    for c in members:
        c.subscribe(topic, "*")
        c.register_listener(listener)
        await c.start()
    try:
        await wait_until(
            lambda: all(len(owned(c, topic)) == 4 for c in members) and len(owned(members[0], topic) | owned(members[1], topic)) == 8,
            20,
            "a 4/4 split of the 8 queues",
        )
        # The broker members would ask first (a route's first broker), killed and started again.
        first = members[0].instance.topic_route_table[topic].broker_datas[0].broker_name
        cluster.daemons[first].kill()
        await asyncio.to_thread(cluster.start, first)
        overlaps: list[set[MessageQueue]] = []
        deadline = time.monotonic() + 6.0
        while time.monotonic() < deadline:
            both = owned(members[0], topic) & owned(members[1], topic)
            if both:
                overlaps.append(both)
            await asyncio.sleep(0.02)
        assert not overlaps, f"{len(overlaps)} samples with queues owned twice, e.g. {sorted(overlaps[0])}"
        async with Producer("PRestart", cluster.namesrv_addr) as p:
            sent = [f"m{i}".encode() for i in range(40)]
            for b in sent:
                await p.send(Message(topic, b))
        await wait_until(lambda: set(sent) <= set(got), 20, "the messages sent after the restart")
    finally:
        for c in members:
            await c.shutdown()
