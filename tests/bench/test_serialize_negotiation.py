"""Our client speaks MSGPACK headers to our broker once the broker's HEART_BEAT answer says it reads
them; NameServer requests and any client that did not switch (real RocketMQ clients) stay JSON."""

from __future__ import annotations

import asyncio
import time

from client import Message, Producer
from remoting import RemotingClient, RemotingCommand
from remoting.body import HeartbeatData, ProducerData
from remoting.codec import FrameDecoder
from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.connection import RemotingConnection
from remoting.headers import SERIALIZE_TYPES_EXT_FIELD
from tests.support.daemons import Daemon


async def test_our_client_switches_to_msgpack_and_json_stays_json(cluster: tuple[str, str, Daemon]) -> None:
    ns, broker, _d = cluster
    sent: list[tuple[str, int, SerializeType]] = []
    sent_all: list[tuple[str, int, SerializeType]] = []  # never cleared
    real_flush = RemotingConnection._flush

    def recording_flush(self: RemotingConnection) -> None:
        # What actually goes on the wire (every send path ends here with whole frames), decoded.
        for cmd in FrameDecoder().feed(b"".join(bytes(b) for b in self._out)):
            if not cmd.is_response:
                sent.append((self.remote_addr, cmd.code, cmd.serialize_type))
                sent_all.append(sent[-1])
        real_flush(self)

    RemotingConnection._flush = recording_flush  # type: ignore[method-assign]
    try:
        async with Producer("negotiation_pg", ns) as p:
            r = await p.send(Message("NegotiationT", b"first"))  # route lookup, connection, heartbeat
            assert r.queue_offset >= 0
            remoting = p.instance.remoting
            deadline = time.monotonic() + 10
            while remoting.addr_serialize_types.get(broker) is not SerializeType.MSGPACK:
                assert time.monotonic() < deadline, "client never switched to MSGPACK"
                await asyncio.sleep(0.05)
            sent.clear()
            await p.send(Message("NegotiationT", b"sync"))
            await asyncio.gather(*(p.send_async(Message("NegotiationT", b"async")) for _ in range(5)))
            await p.send_batch([Message("NegotiationT", b"batch") for _ in range(3)])
            sends = [s for s in sent if s[1] in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)]
            assert len(sends) == 7
            assert {s[2] for s in sends} == {SerializeType.MSGPACK}
            # The broker answers in the request's serialize type.
            resp = await remoting.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000)
            assert resp.code == ResponseCode.SUCCESS and resp.serialize_type is SerializeType.MSGPACK
            # NameServer requests stay JSON: every one this client sent (a refresh asked for here may
            # share a request already in flight, so look at all of them, the first route lookups included).
            await p.instance.update_topic_route_info_from_name_server("NegotiationT")
            to_ns = [s for s in sent_all if s[0] == ns]
            assert to_ns and {s[2] for s in to_ns} == {SerializeType.JSON}
    finally:
        RemotingConnection._flush = real_flush  # type: ignore[method-assign]

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
