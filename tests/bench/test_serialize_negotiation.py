"""Our client speaks MSGPACK headers to our broker once the broker's HEART_BEAT answer says it reads
them; NameServer requests and any client that did not switch (real RocketMQ clients) stay JSON."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from client import Message, Producer
from client.reader import QueueReader
from remoting import RemotingClient, RemotingCommand
from remoting.body import HeartbeatData, ProducerData
from remoting.codec import FrameDecoder
from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.connection import RemotingConnection
from remoting.headers import SERIALIZE_TYPES_EXT_FIELD
from tests.support.daemons import Daemon

_SENDS = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
Wire = list[tuple[RemotingConnection, str, int, SerializeType]]


@contextlib.contextmanager
def _requests_on_the_wire() -> Iterator[Wire]:
    """Every request this process's connections write meanwhile, decoded from what actually goes out (every
    send path ends in RemotingConnection._flush with whole frames): (connection, peer, code, serialize type)."""
    wire: Wire = []
    real_flush = RemotingConnection._flush

    def recording_flush(self: RemotingConnection) -> None:
        for cmd in FrameDecoder().feed(b"".join(bytes(b) for b in self._out)):
            if not cmd.is_response:
                wire.append((self, self.remote_addr, cmd.code, cmd.serialize_type))
        real_flush(self)

    RemotingConnection._flush = recording_flush  # type: ignore[method-assign]
    try:
        yield wire
    finally:
        RemotingConnection._flush = real_flush  # type: ignore[method-assign]


async def test_our_client_switches_to_msgpack_and_json_stays_json(cluster: tuple[str, str, Daemon]) -> None:
    ns, broker, _d = cluster
    with _requests_on_the_wire() as wire:
        async with Producer("negotiation_pg", ns) as p:
            r = await p.send(Message("NegotiationT", b"first"))  # route lookup, connection, heartbeat
            assert r.queue_offset >= 0
            remoting = p.instance.remoting
            deadline = time.monotonic() + 10
            while remoting.addr_serialize_types.get(broker) is not SerializeType.MSGPACK:
                assert time.monotonic() < deadline, "client never switched to MSGPACK"
                await asyncio.sleep(0.05)
            start = len(wire)
            await p.send(Message("NegotiationT", b"sync"))
            await asyncio.gather(*(p.send_async(Message("NegotiationT", b"async")) for _ in range(5)))
            await p.send_batch([Message("NegotiationT", b"batch") for _ in range(3)])
            sends = [w for w in wire[start:] if w[2] in _SENDS]
            assert len(sends) == 7
            assert {w[3] for w in sends} == {SerializeType.MSGPACK}
            # The broker answers in the request's serialize type.
            resp = await remoting.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000)
            assert resp.code == ResponseCode.SUCCESS and resp.serialize_type is SerializeType.MSGPACK
            # NameServer requests stay JSON: every one this client sent (a refresh asked for here may
            # share a request already in flight, so look at all of them, the first route lookups included).
            await p.instance.update_topic_route_info_from_name_server("NegotiationT")
            to_ns = [w for w in wire if w[1] == ns]
            assert to_ns and {w[3] for w in to_ns} == {SerializeType.JSON}

    # A JSON-only client (as a real RocketMQ client is) gets JSON answers, heartbeat included.
    plain = RemotingClient()
    try:
        hb = HeartbeatData(client_id="json-only@1", producer_data_set=[ProducerData(group_name="json_pg")])
        resp = await plain.invoke(broker, RemotingCommand.request(RequestCode.HEART_BEAT, body=hb.encode()), 5000)
        assert resp.code == ResponseCode.SUCCESS and resp.serialize_type is SerializeType.JSON
        assert "MSGPACK" in (resp.ext_fields or {})[SERIALIZE_TYPES_EXT_FIELD].split(",")
        resp = await plain.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000)
        assert resp.code == ResponseCode.SUCCESS and resp.serialize_type is SerializeType.JSON
        assert plain.addr_serialize_types == {}
    finally:
        await plain.close()


async def test_a_new_connection_is_negotiated_before_its_first_request(cluster: tuple[str, str, Daemon]) -> None:
    """The heartbeat that says the broker reads MSGPACK goes out on a new broker connection before anything
    else may use it: a producer that starts and fires a burst at once sends all of it in MSGPACK (before,
    every send issued ahead of the first heartbeat's answer went out as JSON), and so do the sends after a
    reconnect (the format is forgotten with the connection; before, JSON until the next periodic
    heartbeat, 30 s later)."""
    ns, broker, _d = cluster
    with _requests_on_the_wire() as wire:
        async with Producer("negotiation_burst_pg", ns) as p:
            results = await asyncio.gather(
                *(p.send_async(Message("NegotiationBurstT", b"burst")) for _ in range(200)))
            assert len(results) == 200 and all(r.queue_offset >= 0 for r in results)
            sends = [w[3] for w in wire if w[1] == broker and w[2] in _SENDS]
            assert len(sends) == 200 and set(sends) == {SerializeType.MSGPACK}, sends[:5]
            remoting = p.instance.remoting
            # The connection goes (a broker restart, a network blip): the next one is negotiated again.
            remoting._conns[broker].close()
            deadline = time.monotonic() + 10
            while broker in remoting.addr_serialize_types or broker in remoting._conns:
                assert time.monotonic() < deadline, "the closed connection was not forgotten"
                await asyncio.sleep(0.01)
            start = len(wire)
            await asyncio.gather(*(p.send_async(Message("NegotiationBurstT", b"again")) for _ in range(50)))
            sends = [w[3] for w in wire[start:] if w[1] == broker and w[2] in _SENDS]
            assert len(sends) == 50 and set(sends) == {SerializeType.MSGPACK}, sends[:5]
        # the code of the first request on each connection to the broker
        first: dict[int, int] = {}
        for conn, peer, code, _st in wire:
            if peer == broker:
                first.setdefault(id(conn), code)
        assert list(first.values()) == [RequestCode.HEART_BEAT, RequestCode.HEART_BEAT], first
        # A client with no group (a QueueReader: the Spark source's) never heartbeats on its own; its new
        # connection is negotiated all the same, so its pulls go out in MSGPACK too.
        start = len(wire)
        async with await QueueReader.create(ns) as reader:
            got = 0
            for mq in await reader.fetch_queues("NegotiationBurstT"):
                async for msgs in reader.read_range(mq, 0, await reader.max_offset(mq)):
                    got += len(msgs)
        pulls = [w[3] for w in wire[start:] if w[1] == broker and w[2] == RequestCode.PULL_MESSAGE]
        assert got == 250 and not [w for w in wire[start:] if w[2] in _SENDS]
        assert pulls and set(pulls) == {SerializeType.MSGPACK}, pulls[:5]
