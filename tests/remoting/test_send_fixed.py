"""The frame decoder's shortcut for a producer's pipelined SEND header (per-message g and i first, the
constant rest recognised by its bytes) gives exactly what the generic msgpack decoder gives, and the
send header decoded from it equals decode_send_header_v2's."""

from __future__ import annotations

import copy
import dataclasses
import sys

import msgpack
import pytest

from remoting.codec import (
    FrameDecoder,
    SendFixed,
    decode_msgpack_header,
    encode,
    encode_msgpack_request_head,
    encode_parts,
)
from remoting.codes import LanguageCode, SerializeType
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.headers import decode_send_header_v2, send_header_v2_of, send_header_v2_of_command

PACK = msgpack.Packer(use_bin_type=True).pack
FIELDS = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "h": "0", "j": "0", "k": "false",
          "m": "false"}


def producer_frame(code: int, opaque: int, born: str, props: str, body: bytes, fields: dict[str, str] = FIELDS,
                   flag_oneway: bool = False) -> bytes:
    head = bytes((0x80 | (len(fields) + 2),)) + PACK("g")
    parts = (head, PACK(born), PACK("i"), PACK(props), PACK(fields)[1:])
    frame = encode_msgpack_request_head(code, opaque, parts, len(body)) + body
    if flag_oneway:  # flag 2 instead of 0 (the byte after the opaque)
        lead = 8 + len(PACK(opaque))
        frame = frame[: 8 + lead] + b"\x02" + frame[8 + lead + 1 :]
    return frame


def generic(frame: bytes) -> RemotingCommand:
    hlen = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    cmd = decode_msgpack_header(memoryview(frame)[8 : 8 + hlen])
    cmd.body = frame[8 + hlen :] or None
    cmd.frame_size = len(frame)
    return cmd


@pytest.mark.parametrize("code", [310, 320])
@pytest.mark.parametrize("opaque", [0, 127, 128, 255, 256, 65535, 65536, 0x7FFFFFFF])
@pytest.mark.parametrize("props", ["", "a\x01b", "x" * 31, "y" * 32, "z" * 255, "w" * 256, "é\x01✓" * 3000])
def test_shortcut_equals_generic_decode(code: int, opaque: int, props: str) -> None:
    frame = producer_frame(code, opaque, "1763800000123", props, b"body")
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd == generic(frame)
    assert isinstance(cmd.send_fixed, SendFixed)
    assert send_header_v2_of(cmd.ext_fields, cmd.send_fixed) == decode_send_header_v2(cmd.ext_fields)


def test_shortcut_across_reads_and_for_many_frames() -> None:
    frames = [producer_frame(310, i, str(1763800000000 + i), f"UNIQ_KEY\x01{i:032X}", bytes([i % 256]) * 700,
                             {**FIELDS, "e": str(i % 4)}) for i in range(40)]
    data = b"".join(frames)
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    for i in range(0, len(data), 997):  # partial frames: the decoder parses its bytearray buffer
        got += dec.feed(data[i : i + 997])
    assert got == [generic(f) for f in frames]
    assert all(c.send_fixed is not None for c in got)
    assert [send_header_v2_of(c.ext_fields, c.send_fixed).queue_id for c in got] == [i % 4 for i in range(40)]


def test_constant_values_are_one_object_per_value() -> None:
    """The constant header values of different SendFixed entries (one producer's queues) are the same
    interned objects: a send's topic matches the topic tables' interned keys by identity, and a command's
    copy of the template increfs shared objects, not each entry's own (cold, with 4 000 queues)."""
    topic = "".join(["Interned", "Topic"])  # built at run time: not a constant the compiler interned
    frames = [producer_frame(310, i, "1763800000123", "", b"b", {**FIELDS, "b": topic, "e": str(i)})
              for i in range(4)]
    cmds = FrameDecoder().feed(b"".join(frames))
    fixed = {id(c.send_fixed) for c in cmds}
    assert len(fixed) == 4  # one per queue
    assert all(c.ext_fields["b"] is sys.intern(topic) for c in cmds)
    assert all(c.ext_fields["a"] is cmds[0].ext_fields["a"] and c.ext_fields["k"] is cmds[0].ext_fields["k"]
               for c in cmds)
    assert send_header_v2_of(cmds[3].ext_fields, cmds[3].send_fixed).topic is sys.intern(topic)


def test_other_shapes_take_the_generic_decoder() -> None:
    cases = [
        producer_frame(310, 5, "1763800000123", "p", b"b", flag_oneway=True),  # a oneway send: still fine
        producer_frame(310, 5, "1763800000123", "p", b"", {**FIELDS, "g": "dup"}),  # g twice
        producer_frame(310, 5, "not-a-number", "p", b"b"),  # bad born: the header decoder names it
        producer_frame(10, 5, "1763800000123", "p", b"b"),  # another request code
    ]
    # g not first: the generic path
    ext = {"a": "PG", "g": "1", "i": "p"}
    cases.append(encode_parts(RemotingCommand(310, 9, 0, None, ext, b"b", serialize_type=SerializeType.MSGPACK))[0]
                 + b"b")
    # a remark, and another language
    cases.append(encode_parts(RemotingCommand(310, 9, 0, "r", {"g": "1", "i": "p", "a": "x"}, b"b",
                                              serialize_type=SerializeType.MSGPACK))[0] + b"b")
    cases.append(encode_parts(RemotingCommand(310, 9, 0, None, {"g": "1", "i": "p", "a": "x"}, b"b",
                                              language=LanguageCode.JAVA, serialize_type=SerializeType.MSGPACK))[0]
                 + b"b")
    for frame in cases:
        (cmd,) = FrameDecoder().feed(frame)
        assert cmd == generic(frame)
    (bad_born,) = FrameDecoder().feed(cases[2])
    with pytest.raises(ValueError, match="bornTimestamp|'g'"):
        send_header_v2_of(bad_born.ext_fields, bad_born.send_fixed)
    (dup,) = FrameDecoder().feed(cases[1])
    assert dup.send_fixed is None


def _ext_slot_is_set(cmd: RemotingCommand) -> bool:
    """Is the ext_fields slot filled, read past RemotingCommand.__getattr__ (which would fill it)?"""
    try:
        RemotingCommand.__dict__["ext_fields"].__get__(cmd, RemotingCommand)
    except AttributeError:
        return False
    return True


def test_ext_fields_of_a_shortcut_send_are_built_on_first_read_only() -> None:
    """The send path reads g and i from send_gi and the rest from the SendFixed memo: the command's
    ext_fields dict is built only if something reads it, and is then what the generic decoder gives."""
    frames = [producer_frame(310, i, str(1763800000000 + i), f"UNIQ_KEY\x01{i:032X}", b"body") for i in range(3)]
    cmds = FrameDecoder().feed(b"".join(frames))
    assert [c.send_gi for c in cmds] == [(str(1763800000000 + i), f"UNIQ_KEY\x01{i:032X}") for i in range(3)]
    assert not any(map(_ext_slot_is_set, cmds))
    first = send_header_v2_of_command(cmds[0])  # learns the memo: builds that command's ext_fields
    assert first == decode_send_header_v2(generic(frames[0]).ext_fields)
    # The fields the broker's send path reads are the SendFixed's own, copied from the memo.
    f = cmds[0].send_fixed
    assert (f.topic, f.queue_id, f.sys_flag, f.flag, f.reconsume_times, f.batch) == (
        first.topic, first.queue_id, first.sys_flag, first.flag, first.reconsume_times, first.batch)
    assert f.topic is sys.intern(first.topic)
    # With the memo learnt, the others' headers come from it, g and i.
    assert [send_header_v2_of_command(c) for c in cmds[1:]] == [
        decode_send_header_v2(generic(f).ext_fields) for f in frames[1:]
    ]
    assert not _ext_slot_is_set(cmds[1]) and not _ext_slot_is_set(cmds[2])
    ext = cmds[1].ext_fields
    assert ext == generic(frames[1]).ext_fields and list(ext)[:2] == ["g", "i"]  # the wire order
    assert cmds[1].ext_fields is ext  # built once, then an ordinary slot
    assert cmds[1].ext("i") == f"UNIQ_KEY\x01{1:032X}"
    # Equality, copies and replace see the whole header too.
    assert cmds[2] == generic(frames[2])
    assert copy.copy(cmds[0]).ext_fields == generic(frames[0]).ext_fields
    assert dataclasses.replace(cmds[0], opaque=99).ext_fields == generic(frames[0]).ext_fields
    with pytest.raises(AttributeError, match="no_such_field"):
        cmds[0].no_such_field  # noqa: B018 - the access is the test


def test_send_header_of_command_names_a_bad_born_timestamp() -> None:
    frames = [producer_frame(310, 1, "1763800000123", "p", b"b"), producer_frame(310, 2, "soon", "p", b"b")]
    good, bad = FrameDecoder().feed(b"".join(frames))
    send_header_v2_of_command(good)  # the memo, learnt
    with pytest.raises(ValueError, match="bornTimestamp|'g'"):
        send_header_v2_of_command(bad)


class _Transport:
    def __init__(self) -> None:
        self.out: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def writelines(self, bufs: list[bytes]) -> None:
        self.out.extend(bytes(b) for b in bufs)


async def test_send_responses_writes_what_encode_parts_gives() -> None:
    conn = RemotingConnection(None)
    t = _Transport()
    conn.transport = t  # type: ignore[assignment]
    reqs, resps, want = [], [], []
    for i, (st, body) in enumerate([(SerializeType.MSGPACK, None), (SerializeType.MSGPACK, b"payload"),
                                    (SerializeType.JSON, None), (SerializeType.ROCKETMQ, None)]):
        req = RemotingCommand(310, 1000 + i, 0, None, {"a": "b"}, None, serialize_type=st)
        resp = RemotingCommand(0, 0, 0, "ok" if i else None, {"msgId": "X", "queueId": "1"}, body,
                               LanguageCode.JAVA)
        expect = RemotingCommand(0, req.opaque, 1, resp.remark, dict(resp.ext_fields or {}), body,
                                 LanguageCode.JAVA, serialize_type=st)
        head, b = encode_parts(expect)
        want.append(head + (bytes(b) if b is not None else b""))
        reqs.append(req)
        resps.append(resp)
    conn.send_responses(reqs, resps)
    conn._flush()
    assert b"".join(t.out) == b"".join(want)


def java_frame(code: int, opaque: int, ext: dict, body: bytes = b"body") -> bytes:
    """A SEND as RocketMQ's Java client frames it: a JSON header (fastjson's field order), every value a str."""
    import json

    header = json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 395}, separators=(",", ":")).encode()
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body


@pytest.mark.parametrize("code", [310, 320])
@pytest.mark.parametrize("l_field", [None, "16"])
def test_a_json_send_gets_a_send_fixed_by_its_constant_values(code: int, l_field: str | None) -> None:
    """A JSON send (RocketMQ's own clients) is matched to a SendFixed by its a..m values but g and i: the
    send header from it equals the generic decoder's, and sends that differ only in g and i share it."""
    java_fields = dict(FIELDS) if l_field is None else {**FIELDS, "l": l_field}  # Java leaves a null l out
    cmds = FrameDecoder().feed(b"".join(
        java_frame(code, k, {**java_fields, "g": str(1763800000000 + k), "i": f"UNIQ_KEY\x01{k:032X}"})
        for k in range(3)))
    assert {id(c.send_fixed) for c in cmds} == {id(cmds[0].send_fixed)}
    for k, cmd in enumerate(cmds):
        assert isinstance(cmd.send_fixed, SendFixed)
        assert cmd.send_gi == (str(1763800000000 + k), f"UNIQ_KEY\x01{k:032X}")
        assert cmd.serialize_type is SerializeType.JSON and cmd.opaque == k and cmd.body == b"body"
        assert cmd.ext_fields == {**java_fields, "g": str(1763800000000 + k), "i": f"UNIQ_KEY\x01{k:032X}"}
        assert send_header_v2_of_command(cmd) == decode_send_header_v2(cmd.ext_fields)
    # Another queue: another SendFixed. The C++ core's extra entries (AccessKey, Signature) and int values
    # change nothing about the header; its ints key a SendFixed of their own.
    (other,) = FrameDecoder().feed(java_frame(code, 9, {**java_fields, "e": "2", "g": "1", "i": ""}))
    assert other.send_fixed is not cmds[0].send_fixed and other.send_fixed.ext["e"] == "2"
    cpp = {**java_fields, "AccessKey": "", "Signature": "abc=", "d": 4, "e": 1, "g": "5", "i": "p"}
    (c1,) = FrameDecoder().feed(java_frame(code, 10, cpp))
    (c2,) = FrameDecoder().feed(java_frame(code, 11, {**cpp, "Signature": "other="}))
    assert c1.send_fixed is c2.send_fixed is not cmds[0].send_fixed
    assert send_header_v2_of_command(c2) == decode_send_header_v2(c2.ext_fields)
    assert c2.ext_fields["Signature"] == "other="
    # A send without m (some clients): matched too, its header decoded the generic way every time.
    for k in range(2):
        (bare,) = FrameDecoder().feed(java_frame(code, 12 + k, {**{n: v for n, v in java_fields.items() if n != "m"},
                                                                 "g": "7", "i": "q"}))
        assert bare.send_fixed is not None
        assert send_header_v2_of_command(bare) == decode_send_header_v2(bare.ext_fields)


@pytest.mark.parametrize("ext", [
    FIELDS | {"g": 1763800000000, "i": ""},  # a number for g
    FIELDS | {"g": "1", "i": "", "maxReconsumeTimes": "3"},  # the long name standing in for l
    FIELDS | {"g": "1", "i": "", "b": ["not", "hashable"]},
    FIELDS | {"i": ""},  # no g: the generic decoder names it
    {k: v for k, v in FIELDS.items() if k != "a"} | {"g": "1", "i": ""},  # no producer group
])
def test_json_sends_of_other_shapes_take_the_generic_decoder(ext: dict) -> None:
    (cmd,) = FrameDecoder().feed(java_frame(310, 1, ext))
    assert cmd.send_fixed is None and cmd.send_gi is None
    assert cmd.ext_fields == ext


def test_a_rocketmq_send_and_pull_get_their_fixed_parts_too() -> None:
    """A Java client configured for the binary ROCKETMQ header: its sends and pulls are matched as JSON ones are."""
    from remoting.codec import PullFixed

    def frame(code: int, opaque: int, ext: dict) -> bytes:
        return encode(RemotingCommand(code, opaque, 0, None, ext, b"b" if code != 11 else None, LanguageCode.JAVA, 395,
                                      SerializeType.ROCKETMQ))

    sends = FrameDecoder().feed(b"".join(frame(310, k, {**FIELDS, "g": str(k), "i": f"UNIQ_KEY\x01{k}"}) for k in range(3)))
    assert sends[0].send_fixed is sends[1].send_fixed is sends[2].send_fixed is not None
    assert [c.send_gi for c in sends] == [(str(k), f"UNIQ_KEY\x01{k}") for k in range(3)]
    for c in sends:
        assert c.serialize_type is SerializeType.ROCKETMQ
        assert send_header_v2_of_command(c) == decode_send_header_v2(c.ext_fields)
    pull = {"consumerGroup": "G", "topic": "T", "queueId": "1", "queueOffset": "5", "maxMsgNums": "32", "sysFlag": "3",
            "commitOffset": "0", "suspendTimeoutMillis": "15000", "subscription": "*", "subVersion": "1"}
    (p,) = FrameDecoder().feed(frame(11, 9, pull))
    assert isinstance(p.send_fixed, PullFixed)
