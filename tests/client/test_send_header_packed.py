"""SEND requests built with their header map pre-packed for MSGPACK (the producer's cached pieces)
decode to exactly the fields the JSON/ROCKETMQ forms carry, for every field combination."""

from __future__ import annotations

import time

import pytest

from client import Producer
from client.message import MessageQueue
from client.producer.producer import _HEADER_CACHE_MAX, _Prepared
from remoting.codec import FrameDecoder, encode_msgpack_request_head, encode_parts
from remoting.codes import RequestCode, SerializeType
from remoting.headers import decode_send_header_v2


def _producer(**kw: object) -> Producer:
    p = Producer("packed_pg", "127.0.0.1:1", **kw)  # type: ignore[arg-type]
    p._header_base = {"a": "packed_pg", "c": "TBW102", "d": "4", "j": "0", "k": "false"}
    return p


def _wire_ext(cmd, st: SerializeType) -> dict[str, str]:  # type: ignore[no-untyped-def]
    cmd.serialize_type = st
    head, body = encode_parts(cmd)
    (decoded,) = FrameDecoder().feed(head + (bytes(body) if body is not None else b""))
    assert decoded.code == cmd.code and decoded.body == cmd.body and decoded.serialize_type is st
    return decoded.ext_fields


@pytest.mark.parametrize(
    ("sys_flag", "flag", "reconsume", "max_reconsume", "batch"),
    [(0, 0, 0, None, False), (1, 7, 3, 16, False), (0, 0, 0, None, True), (4, 0, 0, 0, False)],
)
def test_packed_header_decodes_to_the_same_fields(
    sys_flag: int, flag: int, reconsume: int, max_reconsume: int | None, batch: bool
) -> None:
    p = _producer()
    prepared = _Prepared("PackedTopic", b"body", sys_flag, flag, "KEYS\x01k1\x02UNIQ_KEY\x01u1", "u1", batch,
                         reconsume, max_reconsume)
    mq = MessageQueue("PackedTopic", "broker-a", 5)
    for _ in range(2):  # the first build fills the cache, the second reuses it
        cmd = p._build_request(prepared, mq, True)
        assert cmd.packed_ext is not None
        assert cmd.code == (RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2)
        expected = dict(cmd.ext_fields)
        assert ("l" in expected) == (max_reconsume is not None)
        assert _wire_ext(cmd, SerializeType.MSGPACK) == expected
        assert _wire_ext(cmd, SerializeType.JSON) == expected
        assert _wire_ext(cmd, SerializeType.ROCKETMQ) == expected
        h = decode_send_header_v2(expected)
        assert (h.topic, h.queue_id, h.sys_flag, h.flag, h.batch) == ("PackedTopic", 5, sys_flag, flag, batch)
        assert h.max_reconsume_times == max_reconsume and h.reconsume_times == reconsume


def test_not_packed_unless_asked_and_v1_never_packed() -> None:
    p = _producer()
    prepared = _Prepared("PackedTopic", b"body", 0, 0, "", "u1")
    mq = MessageQueue("PackedTopic", "broker-a", 0)
    assert p._build_request(prepared, mq).packed_ext is None
    v1 = _producer(send_smart_msg=False)._build_request(prepared, mq, True)
    assert v1.code == RequestCode.SEND_MESSAGE and v1.packed_ext is None
    assert _wire_ext(v1, SerializeType.MSGPACK)["topic"] == "PackedTopic"


def test_header_cache_is_bounded() -> None:
    p = _producer()
    mq = MessageQueue("PackedTopic", "broker-a", 0)
    for i in range(_HEADER_CACHE_MAX + 10):
        cmd = p._build_request(_Prepared("PackedTopic", b"b", 0, i, "", "u"), mq, True)
        assert cmd.ext_fields["h"] == str(i)
    assert len(p._header_cache) <= _HEADER_CACHE_MAX


@pytest.mark.parametrize(
    ("sys_flag", "flag", "reconsume", "max_reconsume", "batch"),
    [(0, 0, 0, None, False), (1, 7, 3, 16, False), (0, 0, 0, None, True)],
)
def test_commandless_frame_equals_the_packed_command_frame(
    monkeypatch: pytest.MonkeyPatch, sys_flag: int, flag: int, reconsume: int, max_reconsume: int | None, batch: bool
) -> None:
    """The pipelined fast path's frame (no RemotingCommand) is byte for byte the packed command's."""
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_123_456_789)
    p = _producer()
    prepared = _Prepared("PackedTopic", b"body" * 100, sys_flag, flag, "WAIT\x01true\x02UNIQ_KEY\x01u1", "u1",
                         batch, reconsume, max_reconsume)
    mq = MessageQueue("PackedTopic", "broker-a", 3)
    cmd = p._build_request(prepared, mq, True)
    cmd.serialize_type = SerializeType.MSGPACK
    cmd.opaque = 4242
    head, body = encode_parts(cmd)
    code, parts = p._packed_request(prepared, mq)
    assert code == cmd.code
    assert encode_msgpack_request_head(code, 4242, parts, len(prepared.body)) == head and body == prepared.body
