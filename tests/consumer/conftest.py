"""Consumer fixtures: one real NameServer + two real brokers per module, helpers to wait and send.

broker-a is a plain broker; "room1@broker-b" carries a machine-room prefix (for
AllocateMessageQueueByMachineRoom). Both use a shortened messageDelayLevel (1 s per level) so
retried messages come back quickly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from client import Admin, Message, Producer
from client.message import MessageQueue
from tests.support.daemons import Daemon, start_broker, start_namesrv

FAST_DELAY_LEVELS = " ".join(["1s"] * 18)
ROOM_BROKER = "room1@broker-b"

_seq = itertools.count(1)


@dataclass
class ConsumerCluster:
    namesrv_addr: str
    brokers: dict[str, str]
    daemons: dict[str, Daemon]


@contextlib.contextmanager
def consumer_cluster(tmp: Path, brokers: dict[str, dict[str, object]]) -> Iterator[ConsumerCluster]:
    """A real NameServer and one real broker per `brokers` entry (name -> extra config), stopped by PID
    on the way out."""
    started: list[Daemon] = []
    try:
        ns, ns_addr = start_namesrv(tmp)
        started.append(ns)
        addrs: dict[str, str] = {}
        daemons = {"namesrv": ns}
        for name, extra in brokers.items():
            d, addr = start_broker(tmp, ns_addr, name=name, extra=extra)
            started.append(d)
            addrs[name] = addr
            daemons[name] = d
        yield ConsumerCluster(ns_addr, addrs, daemons)
    finally:
        for d in reversed(started):
            d.terminate()


@pytest.fixture(scope="module")
def mq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsumerCluster]:
    extra: dict[str, object] = {"messageDelayLevel": FAST_DELAY_LEVELS}
    with consumer_cluster(tmp_path_factory.mktemp("consumer-cluster"), {"broker-a": extra, ROOM_BROKER: extra}) as c:
        yield c


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """names('T') -> a topic/group name unique to this test."""
    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:50]
    n = next(_seq)

    def make(prefix: str) -> str:
        return f"{prefix}_{base}_{n}"

    return make


async def wait_until(pred: Callable[[], bool | Awaitable[bool]], timeout: float, what: str, step: float = 0.05) -> None:
    """Poll `pred` until true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(step)


async def create_topic(cluster: ConsumerCluster, topic: str, queues: int = 8, brokers: list[str] | None = None) -> list[MessageQueue]:
    """Create `topic` with `queues` queues on the given brokers (default broker-a) and wait until
    the NameServer routes all of them; returns the queues, sorted."""
    admin = Admin(cluster.namesrv_addr)
    await admin.start()
    try:
        names = brokers or ["broker-a"]
        for b in names:
            await admin.create_topic(topic, broker_addr=cluster.brokers[b], read_queue_nums=queues, write_queue_nums=queues)
        want = {MessageQueue(topic, b, i) for b in names for i in range(queues)}
        api = admin.api

        async def routed() -> bool:
            try:
                route = await api.get_topic_route_info_from_name_server(topic)
            except Exception:
                return False
            have = {MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums)}
            return have == want

        await wait_until(routed, 20, f"route of {topic}")
        return sorted(want)
    finally:
        await admin.shutdown()


async def send_to_queues(
    namesrv: str, queues: list[MessageQueue], per_queue: int, *, prefix: str = "m", tags: str | None = None
) -> list[bytes]:
    """Send `per_queue` messages to each queue; returns the bodies sent."""
    bodies: list[bytes] = []
    async with Producer(f"P_{next(_seq)}", namesrv) as p:
        for i in range(per_queue):
            for mq in queues:
                body = f"{prefix}-{mq.broker_name}-{mq.queue_id}-{i}".encode()
                await p.send(Message(mq.topic, body, tags=tags), queue=mq)
                bodies.append(body)
    return bodies
