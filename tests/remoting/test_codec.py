"""Sans-I/O codec: round trips for every header type, real-client frames, and bad input."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting import FrameDecoder, ProtocolError, RemotingCommand, SerializeType, encode
from remoting.codec import decode_frame, encode_rocketmq_header
from remoting.codes import LanguageCode, RequestCode
from remoting.headers import SendMessageRequestHeader, decode_send_header_v2

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.one_of(st.none(), text.filter(bool)),
    ext_fields=st.one_of(st.none(), st.dictionaries(text.filter(bool), text, min_size=1, max_size=6)),
    body=st.one_of(st.none(), st.binary(min_size=1, max_size=300)),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(0, 2**15 - 1),
    serialize_type=st.sampled_from(list(SerializeType)),
)


def _same(a: RemotingCommand, b: RemotingCommand) -> None:
    assert (a.code, a.opaque, a.flag, a.remark, a.language, a.version, a.serialize_type) == (
        b.code,
        b.opaque,
        b.flag,
        b.remark,
        b.language,
        b.version,
        b.serialize_type,
    )
    assert (a.ext_fields or None) == (b.ext_fields or None)
    assert (a.body or None) == (b.body or None)


@settings(max_examples=300, deadline=None)
@given(commands)
def test_round_trip_every_serialize_type(cmd: RemotingCommand) -> None:
    out = FrameDecoder().feed(encode(cmd))
    assert len(out) == 1
    _same(cmd, out[0])


@settings(max_examples=100, deadline=None)
@given(st.lists(commands, min_size=1, max_size=8), st.integers(1, 64))
def test_decoder_reassembles_arbitrary_chunks(cmds: list[RemotingCommand], chunk: int) -> None:
    data = b"".join(encode(c) for c in cmds)
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    for i in range(0, len(data), chunk):
        out.extend(dec.feed(data[i : i + chunk]))
    assert len(out) == len(cmds)
    for a, b in zip(cmds, out, strict=True):
        _same(a, b)
    assert dec.buffered == 0


def _frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


# Exact headers captured from the official C++ 2.1.0 core (real-client-wire.md).
CPP_ROUTE = (
    b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",'
    b'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":333}\n'
)
CPP_SEND = (
    b'{"code":310,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"...","a":"PID-test",'
    b'"b":"TopicTest","c":"TBW102","d":4,"e":0,"f":0,"g":"1795309820763","h":0,'
    b'"i":"KEYS\\u0001k1\\u0002TAGS\\u0001tagA\\u0002UNIQ_KEY\\u00017F0000013B05771650536C65F35B0000\\u0002WAIT'
    b'\\u0001true\\u0002myprop\\u0001v1\\u0002","j":"0","k":"0","l":16,"m":"0"},"flag":0,"language":"CPP",'
    b'"opaque":1,"remark":"","version":333}\n'
)


def test_decodes_cpp_route_request() -> None:
    (cmd,) = FrameDecoder().feed(_frame(CPP_ROUTE))
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert cmd.language is LanguageCode.CPP
    assert cmd.version == 333
    assert cmd.ext("topic") == "TopicTest"
    assert not cmd.is_response and not cmd.is_oneway


def test_decodes_cpp_send_v2_with_numbers_and_signature_fields() -> None:
    (cmd,) = FrameDecoder().feed(_frame(CPP_SEND, b"Hello RocketMQ"))
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    h = decode_send_header_v2(cmd.ext_fields)
    assert isinstance(h, SendMessageRequestHeader)
    assert (h.producer_group, h.topic, h.default_topic) == ("PID-test", "TopicTest", "TBW102")
    assert (h.default_topic_queue_nums, h.queue_id, h.sys_flag, h.flag) == (4, 0, 0, 0)
    assert h.born_timestamp == 1795309820763
    assert h.unit_mode is False and h.batch is False and h.max_reconsume_times == 16
    assert "UNIQ_KEY\x017F0000013B05771650536C65F35B0000\x02" in (h.properties or "")
    assert cmd.body == b"Hello RocketMQ"


def test_send_v2_without_l_and_m_fields() -> None:
    ext = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1", "h": "0", "i": "", "j": "0"}
    ext["k"] = True  # a boolean, as some clients send
    h = decode_send_header_v2(ext)
    assert h.max_reconsume_times is None and h.batch is False and h.unit_mode is True and h.queue_id == 1


def test_response_matches_what_clients_accept() -> None:
    req = FrameDecoder().feed(_frame(CPP_SEND, b"x"))[0]
    resp = req.response(0, ext_fields={"msgId": "ABC", "queueId": 0, "queueOffset": 1})
    raw = encode(resp)
    total, word = struct.unpack(">II", raw[:8])
    assert total == len(raw) - 4 and word >> 24 == 0
    hdr = json.loads(raw[8 : 8 + (word & 0xFFFFFF)])
    assert hdr["code"] == 0 and hdr["flag"] == 1 and hdr["opaque"] == 1
    assert hdr["language"] == "JAVA" and hdr["serializeTypeCurrentRPC"] == "JSON"
    # Java peers read every extFields value as a string.
    assert hdr["extFields"] == {"msgId": "ABC", "queueId": "0", "queueOffset": "1"}


def test_rocketmq_binary_header_layout_matches_java() -> None:
    cmd = RemotingCommand(code=11, opaque=7, flag=2, remark="r", ext_fields={"k": "v"}, language=LanguageCode.JAVA)
    cmd.version = 395
    expected = (
        struct.pack(">hbhii", 11, 0, 395, 7, 2)
        + struct.pack(">i", 1)
        + b"r"
        + struct.pack(">i", 2 + 1 + 4 + 1)
        + struct.pack(">h", 1)
        + b"k"
        + struct.pack(">i", 1)
        + b"v"
    )
    assert encode_rocketmq_header(cmd) == expected
    back = decode_frame(struct.pack(">I", (1 << 24) | len(expected)) + expected)
    assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields) == (11, 7, 2, "r", {"k": "v"})


@pytest.mark.parametrize(
    "data, reason",
    [
        (struct.pack(">I", 17 * 1024 * 1024), "exceeds"),
        (struct.pack(">II", 8, (9 << 24) | 4) + b"abcd", "unknown serialize type"),
        (_frame(b"{not json"), "undecodable JSON"),
        (_frame(b'{"code":1}\x0c'), "undecodable JSON"),  # past the value only JSON's whitespace
        (_frame(b'{"code":1}{"code":2}'), "undecodable JSON"),
        (_frame(b"[1,2]"), "not an object"),
        (struct.pack(">II", 8, 100) + b"abcd", "header length"),
        (struct.pack(">I", 2) + b"ab", "too small"),
        (_frame(b"\x00\x01", stype=1), "truncated binary header"),
    ],
)
def test_bad_frames_raise_protocol_error(data: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        FrameDecoder().feed(data)


def test_truncated_frame_at_eof() -> None:
    dec = FrameDecoder()
    assert dec.feed(encode(RemotingCommand(code=1))[:-3]) == []
    with pytest.raises(ProtocolError, match="inside a frame"):
        dec.at_eof()


def _json_header_reference(cmd: RemotingCommand) -> bytes:
    """The JSON header as json.dumps writes it: fastjson's field order, extFields last with every value a
    str (Java spelling for booleans, None dropped), non-ASCII kept."""
    header: dict = {"code": cmd.code, "flag": cmd.flag, "language": cmd.language.name, "opaque": cmd.opaque,
                    "serializeTypeCurrentRPC": "JSON", "version": cmd.version}
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields:
        header["extFields"] = {k: v if isinstance(v, str) else ("true" if v else "false") if isinstance(v, bool)
                               else str(v) for k, v in cmd.ext_fields.items() if v is not None}
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()


_ext_values = st.one_of(st.text(max_size=40), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(
    code=st.integers(-(2**31), 2**31 - 1), opaque=st.integers(-(2**31), 2**31 - 1), flag=st.integers(0, 3),
    version=st.integers(0, 1000), language=st.sampled_from(list(LanguageCode)),
    remark=st.one_of(st.none(), st.text(max_size=60)),
    ext=st.one_of(st.none(), st.dictionaries(st.text(max_size=12), _ext_values, max_size=8)),
)
def test_json_header_is_what_json_dumps_writes(code: int, opaque: int, flag: int, version: int,
                                               language: LanguageCode, remark: str | None, ext: dict | None) -> None:
    cmd = RemotingCommand(code, opaque, flag, remark, ext, None, language, version)
    frame = encode(cmd)
    hlen = struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF
    assert frame[8:8 + hlen] == _json_header_reference(cmd)
    back = decode_frame(frame[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.version) == (code, opaque, flag, remark, version)


@settings(max_examples=300, deadline=None)
@given(
    code=st.integers(-(2**15), 2**15 - 1), opaque=st.integers(-(2**31), 2**31 - 1), flag=st.integers(0, 3),
    remark=st.one_of(st.none(), st.text(min_size=1, max_size=60)),
    ext=st.one_of(st.none(), st.dictionaries(st.text(max_size=12), st.text(max_size=40), min_size=1, max_size=8)),
)
def test_rocketmq_header_round_trips(code: int, opaque: int, flag: int, remark: str | None, ext: dict | None) -> None:
    cmd = RemotingCommand(code, opaque, flag, remark, ext, None, LanguageCode.JAVA, 395, SerializeType.ROCKETMQ)
    back = decode_frame(encode(cmd)[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields, back.language, back.serialize_type) == (
        code, opaque, flag, remark, ext, LanguageCode.JAVA, SerializeType.ROCKETMQ)


@pytest.mark.parametrize("cut", [1, 2, 5, 9])
def test_a_truncated_rocketmq_ext_entry_is_refused(cut: int) -> None:
    cmd = RemotingCommand(11, 1, 0, None, {"topic": "T", "queueId": "0"}, None, LanguageCode.JAVA, 395,
                          SerializeType.ROCKETMQ)
    header = encode_rocketmq_header(cmd)
    # shorten the header without fixing its extFields length: the last entry runs past the end
    frame = struct.pack(">I", (1 << 24) | (len(header) - cut)) + header[:-cut]
    with pytest.raises(ProtocolError, match="binary header"):
        decode_frame(frame)


def test_a_json_header_may_end_in_whitespace_as_the_cpp_client_sends_it() -> None:
    for tail in (b"\n", b" \t\r\n", b""):
        (cmd,) = FrameDecoder().feed(_frame(b'{"code":105,"extFields":{"topic":"T"},"opaque":3}' + tail))
        assert (cmd.code, cmd.opaque, cmd.ext_fields) == (105, 3, {"topic": "T"})
    (cmd,) = FrameDecoder().feed(_frame(b' {"code":105}'))  # before it too (json.loads' way)
    assert cmd.code == 105
