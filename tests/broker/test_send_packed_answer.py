"""A pipelined send's answer to a MSGPACK request is built as header bytes (PackedResponse) in
SendMessageProcessor._put_units, and to a JSON or ROCKETMQ request (RocketMQ's own clients) as JSON or
binary header bytes (PackedJsonResponse, PackedRocketmqResponse): the frame send_responses writes for each
must be byte for byte the frame the
generic encoder writes for handle_put_message_result's RemotingCommand, whatever the queue, offset,
transaction id, region, trace switch, store host, opaque and store status; other serialize types get
the command itself."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from remoting.codec import encode_parts
from remoting.codes import ResponseCode, SerializeType
from remoting.command import RemotingCommand
from remoting.connection import PackedJsonResponse, PackedResponse, PackedRocketmqResponse, RemotingConnection
from store.results import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus
from tests.broker.conftest import running_broker


class _Transport:
    def __init__(self) -> None:
        self.out: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def writelines(self, bufs: list[bytes]) -> None:
        self.out.extend(bytes(b) for b in bufs)


_UNIQS = [
    "C0A8000100002A9F0000000000000001",  # a producer's id: 32 hex digits (str8)
    "short",  # fixstr
    None,  # no UNIQ_KEY: no transactionId
    "ключ-ünïcode",  # not ASCII: generic path
    "x" * 300,  # longer than a str8: generic path
    "y" * 31,
    'quote"and\\backslash',  # JSON escapes: generic path
]
_QUEUES = [0, 3, 255, 256, 1000]
_OFFSETS = [0, 1, 127, 2**31, 2**40 + 7]
_OPAQUES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, -1, -32, -33, -(2**31)]
_STATUSES = [PutMessageStatus.PUT_OK] * 4 + [
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.SERVICE_NOT_AVAILABLE,
]
_M, _J, _R = SerializeType.MSGPACK, SerializeType.JSON, SerializeType.ROCKETMQ
_TYPES = [_M, _M, _J, _R, _R, _J, _M, _J]  # (8: out of step with the other lists; batches take the even ones)


def _frame(req: RemotingCommand, resp: RemotingCommand) -> bytes:
    """What the generic encoder writes for `resp` answering `req` (as send_responses' slow path)."""
    expect = RemotingCommand(resp.code, req.opaque, resp.flag | 1, resp.remark,
                             dict(resp.ext_fields) if resp.ext_fields is not None else None,
                             resp.body, resp.language, resp.version, req.serialize_type)
    head, body = encode_parts(expect)
    return head + (bytes(body) if body is not None else b"")


@pytest.mark.parametrize(("region", "trace"), [("DefaultRegion", False), ("区域", True), ("", True)])
async def test_packed_answers_are_the_generic_bytes(tmp_path: Path, region: str, trace: bool) -> None:
    async with running_broker(tmp_path, regionId=region, traceOn=trace) as h:
        proc = h.controller.send_message_processor
        n = 240
        cmds, units, slots, results, msgs = [], [], [], [], []
        for k in range(n):
            uniq = _UNIQS[k % len(_UNIQS)]
            props = {"WAIT": "true"} if uniq is None else {"WAIT": "true", "UNIQ_KEY": uniq}
            msg = SimpleNamespace(topic="PackedT", properties=props)
            queue_id = _QUEUES[k % len(_QUEUES)]
            host = bytes([127, 0, 0, 1, 0, 0, 0x51, 0x52]) if k % 2 else bytes(range(16)) + b"\x00\x00\x27\x10"
            ar = AppendMessageResult(AppendMessageStatus.PUT_OK, wrote_offset=1000 * k, wrote_bytes=100,
                                     logics_offset=_OFFSETS[k % len(_OFFSETS)], store_host_bytes=host)
            results.append(PutMessageResult(_STATUSES[k % len(_STATUSES)], ar))
            cmds.append(RemotingCommand(310, _OPAQUES[k % len(_OPAQUES)], 0, None, {}, None,
                                        serialize_type=_TYPES[k % len(_TYPES)]))
            if k % 6 == 4:  # a batch: msgId is every id comma-joined (a str16 once past 255 chars)
                nb = 1 + k % 40
                batch = SimpleNamespace(topic="PackedB", properties={})
                ar.phy_offsets = [1000 * k + 50 * j for j in range(nb)]
                ar.msg_num = nb
                units.append(batch)  # type: ignore[arg-type]
                msgs.append(batch)
                slots.append((k, queue_id, 100, nb))
                continue
            units.append((msg,))
            msgs.append(msg)
            slots.append((k, queue_id, 100, 0))

        async def put_many(u):  # type: ignore[no-untyped-def]
            assert u is units
            return results

        out: list = [None] * n
        stats = h.controller.broker_stats
        await proc._put_units(put_many, units, slots, out, cmds)  # type: ignore[arg-type]
        packed = sum(type(r) is PackedResponse for r in out)
        assert packed >= 20  # the common case takes the packed path
        for kind in (PackedJsonResponse, PackedRocketmqResponse):
            assert sum(type(r) is kind for r in out) >= 4, kind
            assert any(type(out[k]) is kind and slots[k][3] > 8 for k in range(n)), kind  # batches too
        assert any(type(out[k]) is PackedResponse and slots[k][3] > 8 for k in range(n))  # str16 msgIds
        counted = (stats.put_nums, stats.put_size, dict(stats.topic_put_nums))
        want = []
        for k in range(n):
            generic = proc.handle_put_message_result(results[k], msgs[k], slots[k][1], 100, slots[k][3])  # type: ignore[arg-type]
            want.append(_frame(cmds[k], generic))
            kinds = {PackedResponse: _M, PackedJsonResponse: _J, PackedRocketmqResponse: _R}
            if type(out[k]) in kinds:
                assert cmds[k].serialize_type is kinds[type(out[k])]
                # What a caller reading the fields sees is the same answer.
                assert (out[k].code, out[k].remark, out[k].ext_fields) == (
                    generic.code, generic.remark, generic.ext_fields)
                assert out[k].command().language == generic.language
        # Each stored send was counted once, as handle_put_message_result counts it.
        assert (stats.put_nums, stats.put_size, dict(stats.topic_put_nums)) == (
            2 * counted[0], 2 * counted[1], {t: 2 * v for t, v in counted[2].items()})
        conn = RemotingConnection(None)
        t = _Transport()
        conn.transport = t  # type: ignore[assignment]
        conn.send_responses(cmds, out)
        conn._flush()
        assert t.out == want
        # A packed answer to a request of another serialize type goes out as its command.
        t.out.clear()
        for kind, others in ((PackedResponse, (_J, _R)), (PackedJsonResponse, (_M, _R)), (PackedRocketmqResponse, (_M, _J))):
            first = next(r for r in out if type(r) is kind)
            for st in others:
                req = RemotingCommand(310, 77, 0, None, {}, None, serialize_type=st)
                conn.send_responses([req], [first])
                conn._flush()
                assert t.out[-1] == _frame(req, first.command())
                assert first.code == ResponseCode.SUCCESS


async def test_pipelined_msgpack_sends_get_packed_answers(tmp_path: Path) -> None:
    """Through a real connection: a run of MSGPACK sends is answered (and decoded by the client) as
    before."""
    import asyncio

    from remoting.body import TopicConfig
    from tests.broker.helpers import send_v2

    async with running_broker(tmp_path) as h:
        h.controller.topic_config_manager.update_topic_config(
            TopicConfig(topic_name="PackedLive", read_queue_nums=2, write_queue_nums=2))
        uniqs = [f"C0A80001000000000000000000{k:06X}" for k in range(8)]
        cmds = [send_v2("PackedLive", b"b", queue_id=k % 2, properties=f"WAIT\x01true\x02UNIQ_KEY\x01{u}")
                for k, u in enumerate(uniqs)]
        for c in cmds:
            c.serialize_type = SerializeType.MSGPACK
        seen = []
        proc = h.controller.send_message_processor
        put_units = proc._put_units

        async def spy(put_many, units, slots, out, cmds):  # type: ignore[no-untyped-def]
            await put_units(put_many, units, slots, out, cmds)
            seen.extend(type(r) for r in out)

        proc._put_units = spy  # type: ignore[method-assign]
        futs = [await h.client.invoke_future(h.addr, c, 5000) for c in cmds]
        resps = await asyncio.wait_for(asyncio.gather(*futs), 10)
        assert [r.code for r in resps] == [ResponseCode.SUCCESS] * 8
        assert [r.ext_fields["transactionId"] for r in resps] == uniqs
        assert [r.ext_fields["queueId"] for r in resps] == [str(k % 2) for k in range(8)]
        assert all(r.serialize_type is SerializeType.MSGPACK for r in resps)
        assert PackedResponse in seen


async def test_pipelined_json_sends_take_the_memoized_path_and_get_packed_answers(tmp_path: Path) -> None:
    """Through a real connection, sends as RocketMQ's Java client writes them (JSON header, every extFields
    value a str): the send path reads the SendFixed's memo (no header object), each is answered with a
    PackedJsonResponse, and what is stored is what was sent, in its queue."""
    import asyncio

    from remoting.body import TopicConfig
    from remoting.headers import SendMessageRequestHeader
    from remoting.message import decode_message

    async with running_broker(tmp_path) as h:
        c = h.controller
        c.topic_config_manager.update_topic_config(
            TopicConfig(topic_name="JsonLive", read_queue_nums=2, write_queue_nums=2))
        uniqs = [f"C0A80001000000000000000000{k:06X}" for k in range(8)]
        cmds = []
        for k, u in enumerate(uniqs):
            ext = {"a": "PG", "b": "JsonLive", "c": "TBW102", "d": "4", "e": str(k % 2), "f": "0",
                   "g": str(1763800000000 + k), "h": "0", "i": f"TAGS\x01t{k}\x02WAIT\x01true\x02UNIQ_KEY\x01{u}",
                   "j": "0", "k": "false", "m": "false"}  # (no l: Java leaves a null maxReconsumeTimes out)
            cmds.append(RemotingCommand.request(310, ext, f"body-{k}".encode()))  # JSON, as the client's default
        proc = c.send_message_processor
        put_units = proc._put_units
        seen: list[type] = []

        async def spy(put_many, units, slots, out, cmds):  # type: ignore[no-untyped-def]
            await put_units(put_many, units, slots, out, cmds)
            seen.extend(type(r) for r in out)

        proc._put_units = spy  # type: ignore[method-assign]
        built: list[int] = []
        real_init = SendMessageRequestHeader.__init__

        def counting_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            built.append(1)
            real_init(self, *args, **kwargs)

        SendMessageRequestHeader.__init__ = counting_init  # type: ignore[method-assign]
        try:
            # The first send of each queue's SendFixed decodes its header (once).
            firsts = [await asyncio.wait_for(await h.client.invoke_future(h.addr, cmd, 5000), 10) for cmd in cmds[:2]]
            built.clear()
            futs = [await h.client.invoke_future(h.addr, cmd, 5000) for cmd in cmds[2:]]
            resps = [*firsts, *await asyncio.wait_for(asyncio.gather(*futs), 10)]
        finally:
            SendMessageRequestHeader.__init__ = real_init  # type: ignore[method-assign]
        assert built == []
        assert seen == [PackedJsonResponse] * 8
        assert [r.code for r in resps] == [ResponseCode.SUCCESS] * 8
        assert all(r.serialize_type is SerializeType.JSON for r in resps)
        assert [r.ext_fields["transactionId"] for r in resps] == uniqs
        assert [r.ext_fields["queueId"] for r in resps] == [str(k % 2) for k in range(8)]
        assert [r.ext_fields["queueOffset"] for r in resps] == [str(k // 2) for k in range(8)]
        store = c.message_store
        assert await store.wait_dispatched(5)
        for k, r in enumerate(resps):
            (buf,) = store.get_message("G", "JsonLive", k % 2, k // 2, 1).message_buffers
            m = decode_message(bytes(buf))[0]
            assert m.body == f"body-{k}".encode() and m.properties["UNIQ_KEY"] == uniqs[k]
            assert m.properties["TAGS"] == f"t{k}" and m.born_timestamp == 1763800000000 + k
            assert m.msg_id == r.ext_fields["msgId"]
