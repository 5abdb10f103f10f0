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


class RecordingTransport:
    """What a RemotingConnection uses of a transport; each write is recorded (who, frames) in a shared log."""

    def __init__(self, name: str, port: int, log: list[tuple[str, list[Any]]]) -> None:
        self.name = name
        self.port = port
        self.log = log

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", self.port), "sockname": ("127.0.0.1", 10911)}.get(name, default)

    def writelines(self, bufs: list[bytes]) -> None:
        self.log.append((self.name, FrameDecoder().feed(b"".join(bufs))))

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def connection(controller: Any, name: str, port: int, log: list[tuple[str, list[Any]]]) -> RemotingConnection:
    conn = RemotingConnection(controller.dispatcher)
    conn.connection_made(RecordingTransport(name, port, log))  # type: ignore[arg-type]
    return conn


async def turns(n: int = 6) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_woken_pull_is_answered_before_the_send(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        c = h.controller
        c.topic_config_manager.update_topic_config(TopicConfig(topic_name="Order", read_queue_nums=2, write_queue_nums=2))
        log: list[tuple[str, list[Any]]] = []
        producer = connection(c, "producer", 50001, log)
        consumer = connection(c, "consumer", 50002, log)
        first = send_v2("Order", b"first", queue_id=0, properties=props(uniq="U0"))
        first.opaque = 1
        producer.data_received(encode(first))  # queue 0 gets its file: the pulls below are held at its end
        await turns()
        assert await c.message_store.wait_dispatched(5)
        log.clear()

        pulls = [pull("Order", q, 1 if q == 0 else 0) for q in (0, 1)]
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
        await turns()
        assert [(who, [f.opaque for f in frames]) for who, frames in log] == [("producer", [20])]
