"""A send to a queue with a pull held on it: the broker answers the woken pull before it answers the send (the
store's inline dispatch and the hold service's dispatched_inline), each in one write; a send nobody waits
for is answered as before."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from remoting.body import TopicConfig
from remoting.codec import FrameDecoder, encode
from remoting.codes import ResponseCode
from remoting.connection import RemotingConnection
from tests.broker.conftest import running_broker
from tests.broker.helpers import props, pull, send_v2
from tests.support.bench_scripts import load_bench_script


class RecordingTransport(load_bench_script("bench_e2e_tick").CountingTransport):  # type: ignore[misc]
    """bench_e2e_tick's stand-in transport, with each write recorded (who, frames) in a shared log."""

    def __init__(self, name: str, port: int, log: list[tuple[str, list[Any]]]) -> None:
        super().__init__(port)
        self.name = name
        self.log = log

    def writelines(self, bufs: list[bytes]) -> None:
        self.log.append((self.name, FrameDecoder().feed(b"".join(bufs))))

    def write(self, data: bytes) -> None:
        self.writelines([data])


def connection(controller: Any, name: str, port: int, log: list[tuple[str, list[Any]]]) -> RemotingConnection:
    conn = RemotingConnection(controller.dispatcher)
    conn.connection_made(RecordingTransport(name, port, log))  # type: ignore[arg-type]
    return conn


async def turns(n: int = 6) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def until(cond: Any, timeout: float = 5.0) -> None:
    """Loop turns until cond() (bounded): a first put may wait for a file on a thread."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_the_woken_pull_is_answered_before_the_send(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        c = h.controller
        c.topic_config_manager.update_topic_config(TopicConfig(topic_name="Order", read_queue_nums=2, write_queue_nums=2))
        log: list[tuple[str, list[Any]]] = []
        producer = connection(c, "producer", 50001, log)
        consumer = connection(c, "consumer", 50002, log)
        # A message in each queue first: both queues' files exist (nothing below waits for a file on a thread),
        # and the pulls below are held at their ends.
        firsts = [send_v2("Order", b"first", queue_id=q, properties=props(uniq=f"F{q}")) for q in (0, 1)]
        for k, f in enumerate(firsts):
            f.opaque = 1 + k
        producer.data_received(b"".join(map(encode, firsts)))
        await until(lambda: sum(len(frames) for _, frames in log) == 2)  # both answered: both stored
        assert await c.message_store.wait_dispatched(5)
        for q in (0, 1):
            cq = c.message_store.find_consume_queue("Order", q)
            assert cq.tail_file is not None
        log.clear()

        pulls = [pull("Order", q, 1) for q in (0, 1)]
        for k, p in enumerate(pulls):
            p.opaque = 100 + k
        consumer.data_received(b"".join(map(encode, pulls)))
        await turns()
        assert log == [] and c.pull_request_hold_service.held == 2  # both held: nothing new

        # Two sends in one read, to both queues: both pulls wake; their answers go in one write, before the
        # sends' answers.
        sends = [send_v2("Order", b"m%d" % q, queue_id=q, properties=props(uniq=f"U{q + 1}")) for q in (0, 1)]
        for k, s in enumerate(sends):
            s.opaque = 10 + k
        producer.data_received(b"".join(map(encode, sends)))
        await until(lambda: len(log) >= 2)
        await turns()
        assert [who for who, _ in log] == ["consumer", "producer"], log
        (_, answers), (_, acks) = log
        assert sorted(a.opaque for a in answers) == [100, 101]
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        assert [a.opaque for a in acks] == [10, 11] and all(a.code == ResponseCode.SUCCESS for a in acks)
        assert c.pull_request_hold_service.held == 0

        # Nobody waiting: the send is answered, and nothing else is written.
        log.clear()
        lone = send_v2("Order", b"lone", queue_id=1, properties=props(uniq="U9"))
        lone.opaque = 20
        producer.data_received(encode(lone))
        await until(lambda: len(log) >= 1)
        await turns()
        assert [(who, [f.opaque for f in frames]) for who, frames in log] == [("producer", [20])]
