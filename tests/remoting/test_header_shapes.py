"""The frame decoder's shortcut for the SEND and PULL headers RocketMQ's own clients write (JSON from Java
and C++, the binary ROCKETMQ one from Java): the constant text of a producer queue's sends (a consumer
queue's pulls) is remembered from a first, generic decode, and later headers of that shape give exactly
what the generic decoder gives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting import codec
from remoting.codec import (
    FrameDecoder,
    PullFixed,
    SendFixed,
    decode_json_header,
    decode_rocketmq_header,
    encode,
)
from remoting.codes import LanguageCode, SerializeType
from remoting.command import RemotingCommand
from remoting.errors import ProtocolError
from remoting.headers import HeaderError, decode_send_header_v2, send_header_v2_of_command

# A Java client's SendMessageRequestHeaderV2 entries in its HashMap's order (a..m), l left out when null.
JAVA = {"a": "PG", "b": "ShapeT", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "", "h": "0", "i": "",
        "j": "0", "k": "false", "m": "false"}


def ext_of(g: str, i: str, *, l_field: str | None = None, **more: str) -> dict[str, str]:
    ext = {**JAVA, "g": g, "i": i, **more}
    if l_field is not None:
        ext = {k: ext[k] for k in "abcdefghijk"} | {"l": l_field, "m": ext["m"]}
    return ext


def json_header(code: int, opaque: int, ext: dict[str, Any]) -> bytes:
    """fastjson's layout: fields by name, no spaces."""
    return json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
                       "serializeTypeCurrentRPC": "JSON", "version": 395}, separators=(",", ":")).encode()


def frame_of(header: bytes, serialize_type: int, body: bytes = b"body") -> bytes:
    return ((4 + len(header) + len(body)).to_bytes(4, "big") + (serialize_type << 24 | len(header)).to_bytes(4, "big")
            + header + body)


def json_frame(code: int, opaque: int, ext: dict[str, Any]) -> bytes:
    return frame_of(json_header(code, opaque, ext), 0)


def rocketmq_frame(code: int, opaque: int, ext: dict[str, Any], body: bytes | None = b"body") -> bytes:
    return encode(RemotingCommand(code, opaque, 0, None, ext, body, LanguageCode.JAVA, 395, SerializeType.ROCKETMQ))


def generic(frame: bytes) -> RemotingCommand:
    word = int.from_bytes(frame[4:8], "big")
    hlen = word & 0xFFFFFF
    decode = decode_json_header if word >> 24 == 0 else decode_rocketmq_header
    cmd = decode(memoryview(frame)[8 : 8 + hlen])
    cmd.body = frame[8 + hlen :] or None
    cmd.frame_size = len(frame)
    return cmd


def same(frame: bytes) -> RemotingCommand | None:
    """The decoder's command for the frame, checked against the generic decoder's (or both refuse it)."""
    try:
        want = generic(frame)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            FrameDecoder().feed(frame)
        return None
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd == want
    assert cmd.ext_fields == want.ext_fields
    assert cmd.send_fixed is want.send_fixed and cmd.send_gi == want.send_gi
    assert (cmd.language, cmd.version, cmd.serialize_type) == (want.language, want.version, want.serialize_type)
    return cmd


FRAMES = {"json": json_frame, "rocketmq": rocketmq_frame}
SHAPES = {"json": codec._json_shapes, "rocketmq": codec._rocketmq_shapes}


@pytest.fixture(autouse=True)
def _fresh_shapes() -> None:
    for shapes in SHAPES.values():
        shapes.clear()


@pytest.mark.parametrize("wire", ["json", "rocketmq"])
@pytest.mark.parametrize("code", [310, 320])
@pytest.mark.parametrize("l_field", [None, "16"])
def test_a_shape_is_learned_once_and_gives_the_generic_command(wire: str, code: int, l_field: str | None) -> None:
    frame = FRAMES[wire]
    props = ["", "UNIQ_KEY\x01AB12\x02", 'q"u\\o\tte\x01é✓\U0001f600', "x" * 3000]
    opaques = [0, 1, 7, 2**31 - 1] + ([-5] if wire == "rocketmq" else [])
    learned = None
    for k, (props_k, opaque) in enumerate(zip(props * 2, opaques * 2, strict=False)):
        cmd = same(frame(code, opaque, ext_of(str(1763800000000 + k), props_k, l_field=l_field)))
        assert cmd is not None and isinstance(cmd.send_fixed, SendFixed) and cmd.opaque == opaque
        if learned is None:
            learned = dict(SHAPES[wire])
            assert len(learned) == 1  # the first send taught the shape
        # The others were read by it (the same key, no new one).
        assert SHAPES[wire].keys() == learned.keys()
    # Another queue is another shape.
    same(frame(code, 3, ext_of("1", "p", l_field=l_field, e="2")))
    assert len(SHAPES[wire]) == 2


def test_the_shortcut_decodes_without_the_generic_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A learned shape is read by hand: the generic decoders are not called again."""
    frames = [json_frame(310, k, ext_of(str(k), f"i{k}")) for k in range(3)] + [
        rocketmq_frame(310, k, ext_of(str(k), f"i{k}")) for k in range(3)]
    FrameDecoder().feed(frames[0] + frames[3])  # learn both
    calls = []
    monkeypatch.setattr(codec, "decode_json_header", lambda *a: calls.append(a))
    monkeypatch.setattr(codec, "decode_rocketmq_header", lambda *a: calls.append(a))
    cmds = FrameDecoder().feed(b"".join(frames[1:3] + frames[4:]))
    assert calls == [] and [c.send_gi for c in cmds] == [(str(k), f"i{k}") for k in (1, 2, 1, 2)]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["json", "rocketmq"]), st.sampled_from([310, 320]), st.text(max_size=40),
       st.text(max_size=200), st.integers(-(2**31), 2**31 - 1), st.sampled_from(["PG", "é", 'a"b', "a\\u0001"]))
def test_any_born_timestamp_properties_and_opaque(wire: str, code: int, born: str, props: str, opaque: int,
                                                  group: str) -> None:
    """Whatever g, i, opaque and producer group hold (a non-digit g, escapes, a negative JSON opaque): the
    command is the generic decoder's, first and second time."""
    for _ in range(2):
        same(FRAMES[wire](code, opaque, ext_of(born, props, a=group)))


JSON_LEARNED = json_header(310, 5, ext_of("1763800000000", "UNIQ_KEY\x01AB"))


@pytest.mark.parametrize("edit", [
    (b'"opaque":5', b'"opaque":05'),  # not JSON
    (b'"opaque":5', b'"opaque":1_0'),  # int() would take it; JSON does not
    (b'"opaque":5', b'"opaque":5.0'),
    (b'"opaque":5', b'"opaque":-0'),
    (b'"opaque":5', b'"opaque":"5"'),
    (b'"opaque":5', b'"opaque": 5'),
    (b'"g":"1763800000000"', b'"g":"17638\\u0030"'),  # an escape in g
    (b'"g":"1763800000000"', b'"g":"\xef\xbc\x91"'),  # a non-ASCII digit
    (b"UNIQ_KEY\\u0001AB", b"UNIQ_KEY\\x01AB"),  # a bad escape in i
    (b"UNIQ_KEY\\u0001AB", b"UNIQ_KEY\x01AB"),  # a raw control character in i
    (b'"version":395}', b'"version":395}x'),  # extra data
    (b'"version":395}', b'"version":395} \n'),  # JSON whitespace after it
    (b'"version":395}', b'"version":395}\x0c'),  # not JSON whitespace
])
def test_json_headers_that_differ_from_a_learned_shape_read_as_the_generic_decoder_reads_them(
        edit: tuple[bytes, bytes]) -> None:
    same(frame_of(JSON_LEARNED, 0))
    assert len(codec._json_shapes) == 1
    header = JSON_LEARNED.replace(*edit)
    assert header != JSON_LEARNED
    same(frame_of(header, 0))


@pytest.mark.parametrize("header", [
    # a key twice: the generic decoder keeps the last value, so the shape is never remembered
    JSON_LEARNED.replace(b'"opaque":5,', b'"opaque":5,"opaque":6,'),
    JSON_LEARNED.replace(b'"h":"0"', b'"g":"2","h":"0"'),
    JSON_LEARNED.replace(b'"j":"0"', b'"i":"other","j":"0"'),
])
def test_json_headers_the_shortcut_cannot_stand_for_are_not_remembered(header: bytes) -> None:
    for _ in range(2):
        same(frame_of(header, 0))
    assert codec._json_shapes == {}


@pytest.mark.parametrize("old, first, then", [
    (b'"opaque":5,', b'"opaque":5,"opaque":5,', b'"opaque":7,"opaque":5,'),
    (b'"g":"1763800000000",', b'"g":"1763800000000","g":"1763800000000",', b'"g":"1763800000009","g":"1763800000000",'),
    (b'"i":"UNIQ_KEY\\u0001AB",', b'"i":"UNIQ_KEY\\u0001AB","i":"UNIQ_KEY\\u0001AB",',
     b'"i":"other","i":"UNIQ_KEY\\u0001AB",'),
])
def test_a_key_twice_with_equal_values_is_not_remembered_either(old: bytes, first: bytes, then: bytes) -> None:
    """The generic decoder keeps a duplicate key's last value: a shape learned from equal duplicates would
    give the first value for a later header whose duplicates differ."""
    assert JSON_LEARNED.count(old) == 1
    learned = JSON_LEARNED.replace(old, first)
    later = JSON_LEARNED.replace(old, then)
    assert json.loads(learned) and json.loads(later)  # both valid JSON
    same(frame_of(learned, 0))
    cmd = same(frame_of(later, 0))
    assert cmd is not None


def rocketmq_header(frame: bytes) -> bytes:
    return frame[8 : 8 + (int.from_bytes(frame[4:8], "big") & 0xFFFFFF)]


def test_rocketmq_headers_that_differ_from_a_learned_shape_read_as_the_generic_decoder_reads_them() -> None:
    base = rocketmq_header(rocketmq_frame(310, 5, ext_of("1763800000000", "UNIQ_KEY\x01AB")))
    same(frame_of(base, 1))
    assert len(codec._rocketmq_shapes) == 1
    ext_at = 21  # no remark: code, language, version, opaque, flag, remark length, extFields length
    variants = [
        base + b"\x00",  # a byte past the extFields (their length no longer ends the header)
        base[:ext_at - 4] + (len(base) - ext_at + 9).to_bytes(4, "big") + base[ext_at:],  # extFields too long
        base[:13] + (2**31 - 1).to_bytes(4, "big") + base[17:],  # remark length out of range
        base[:13] + (-1).to_bytes(4, "big", signed=True) + base[17:],
        base.replace(b"\x00\x00\x00\x0bUNIQ_KEY\x01AB", b"\x00\x00\x00\x0bUNIQ_KEY\xff\xfeA"),  # i not UTF-8
        base.replace(b"1763800000000", b"17638000000\xc3\xa9"),  # g of the same length, non-ASCII
        base[:-3],  # truncated
    ]
    for header in variants:
        assert header != base
        same(frame_of(header, 1))


@pytest.mark.parametrize("key", ["g", "i"])
def test_rocketmq_headers_with_a_key_twice_are_not_remembered(key: str) -> None:
    ext = ext_of("1", "1")
    once = rocketmq_header(rocketmq_frame(310, 5, ext))

    def with_second(first_value: bytes, second_value: bytes) -> bytes:
        """The header with `key`'s value set to first_value and another `key` entry after the others."""
        entry = b"\x00\x01" + key.encode() + (1).to_bytes(4, "big")
        h = once.replace(entry + b"1", entry + first_value, 1)
        extra = entry + second_value
        return h[:17] + (len(h) - 21 + len(extra)).to_bytes(4, "big") + h[21:] + extra

    want = ("2", "1") if key == "g" else ("1", "2")
    for header in (with_second(b"1", b"2"), with_second(b"1", b"2"), with_second(b"2", b"2"), with_second(b"3", b"2")):
        cmd = same(frame_of(header, 1))  # equal duplicates (the third) must not teach a shape the fourth would use
        assert cmd is not None and cmd.send_gi == want
    assert codec._rocketmq_shapes == {}


# A Java client's PullMessageRequestHeader: fastjson writes the fields by name, a HashMap in its own order.
PULL = {"consumerGroup": "CG", "topic": "ShapeT", "queueId": "3", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "3", "commitOffset": "0", "suspendTimeoutMillis": "20000", "subscription": "*", "subVersion": "1",
        "expressionType": "TAG"}
HASHMAP_ORDER = ["queueOffset", "topic", "sysFlag", "subVersion", "queueId", "commitOffset", "consumerGroup",
                 "maxMsgNums", "subscription", "suspendTimeoutMillis", "expressionType"]


def pull_frame(wire: str, opaque: int, **values: str) -> bytes:
    ext = {**PULL, **values}
    if wire == "json":
        return frame_of(json_header(11, opaque, dict(sorted(ext.items()))), 0, b"")
    return rocketmq_frame(11, opaque, {k: ext[k] for k in HASHMAP_ORDER + [k for k in ext if k not in HASHMAP_ORDER]},
                          None)


@pytest.mark.parametrize("wire", ["json", "rocketmq"])
def test_a_pull_shape_is_learned_once_and_gives_the_generic_command(wire: str) -> None:
    for k, (offset, commit, flag) in enumerate([("0", "0", "3"), ("7", "6", "3"), ("123456789", "0", "2"),
                                                  ("5", "4", "7"), ("9", "8", "3")]):
        cmd = same(pull_frame(wire, 100 + k, queueOffset=offset, commitOffset=commit, sysFlag=flag))
        assert cmd is not None and isinstance(cmd.send_fixed, PullFixed)
        assert (cmd.ext_fields["queueOffset"], cmd.ext_fields["commitOffset"], cmd.ext_fields["sysFlag"]) == (
            offset, commit, flag)
        assert len(SHAPES[wire]) == 1
    same(pull_frame(wire, 9, queueId="4"))  # another queue, another shape
    assert len(SHAPES[wire]) == 2


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["json", "rocketmq"]), st.text(max_size=12), st.text(max_size=12), st.text(max_size=4),
       st.integers(-(2**31), 2**31 - 1), st.sampled_from(["CG", "é", 'a"b', "sys\\flag"]))
def test_any_pull_offsets_and_flags(wire: str, offset: str, commit: str, flag: str, opaque: int, group: str) -> None:
    for _ in range(2):
        same(pull_frame(wire, opaque, queueOffset=offset, commitOffset=commit, sysFlag=flag, consumerGroup=group))


@pytest.mark.parametrize("wire", ["json", "rocketmq"])
@pytest.mark.parametrize("kind", ["send", "pull"])
def test_other_constant_entries_are_kept_with_the_shape(wire: str, kind: str) -> None:
    """An entry the SendFixed / PullFixed does not keep (a newer client's, the C++ core's AccessKey) is constant
    in the shape's text: the shape keeps it, and a header whose entry differs is another shape."""
    def frame(k: int, access: str) -> bytes:
        if kind == "pull":
            return pull_frame(wire, k, AccessKey=access, queueOffset=str(k))
        return FRAMES[wire](310, k, ext_of(str(k), f"p{k}", AccessKey=access))

    for k in range(3):
        cmd = same(frame(k, "ak"))
        assert cmd is not None and cmd.ext_fields["AccessKey"] == "ak"
    assert len(SHAPES[wire]) == 1
    cmd = same(frame(9, "other"))
    assert cmd is not None and cmd.ext_fields["AccessKey"] == "other" and len(SHAPES[wire]) == 2


@pytest.mark.parametrize("layout", ["opaque last", "extFields last", "remark", "spaced"])
def test_other_json_layouts_are_read_as_the_generic_decoder_reads_them(layout: str) -> None:
    """Another client's field order (the opaque or extFields last, a remark) is learned as its own shape; a
    header with spaces after its colons is not found by the shortcut and stays generic."""
    def header(opaque: int, g: str) -> bytes:
        ext = ext_of(g, "UNIQ_KEY\x01" + g)
        fields: dict[str, Any] = {"code": 310, "extFields": ext, "flag": 0, "language": "GO", "opaque": opaque,
                                  "version": 317}
        if layout == "opaque last":
            fields = {k: v for k, v in fields.items() if k != "opaque"} | {"opaque": opaque}
        elif layout == "extFields last":
            fields = {k: v for k, v in fields.items() if k != "extFields"} | {"extFields": ext}
        elif layout == "remark":
            fields["remark"] = "a \"quoted\" remark"
        separators = (", ", ": ") if layout == "spaced" else (",", ":")
        return json.dumps(fields, separators=separators).encode()

    for k in range(3):
        cmd = same(frame_of(header(40 + k, str(1763800000000 + k)), 0))
        assert cmd is not None and cmd.opaque == 40 + k
    assert len(codec._json_shapes) == (0 if layout == "spaced" else 1)


@pytest.mark.parametrize("go_order", [False, True])
@pytest.mark.parametrize("edit", [(b'"flag":0', b'"flag":1'), (b'"version":395', b'"version":396'),
                                  (b'"language":"JAVA"', b'"language":"GO"'), (b'"code":310', b'"code":320')])
def test_every_constant_field_around_the_opaque_is_in_the_shape(go_order: bool, edit: tuple[bytes, bytes]) -> None:
    """A header that differs from a learned one in any field but the variable ones is not read by that shape
    (fastjson's order, and Go's, whose opaque comes before the extFields)."""
    def header(opaque: int, g: str) -> bytes:
        fields: dict[str, Any] = {"code": 310, "extFields": ext_of(g, "p" + g), "flag": 0, "language": "JAVA",
                                  "opaque": opaque, "serializeTypeCurrentRPC": "JSON", "version": 395}
        if go_order:
            fields = {k: fields[k] for k in ("code", "language", "version", "opaque", "flag", "extFields")}
        return json.dumps(fields, separators=(",", ":")).encode()

    same(frame_of(header(1, "1763800000001"), 0))
    assert len(codec._json_shapes) == 1
    edited = header(2, "1763800000002").replace(*edit)
    cmd = same(frame_of(edited, 0))
    assert cmd is not None and cmd.opaque == 2


@pytest.mark.parametrize("wire", ["json", "rocketmq"])
def test_frames_split_across_reads_are_read_by_their_shape_too(wire: str) -> None:
    """A frame completed from the decoder's buffer (a bytearray) is matched as one read whole."""
    frames = [FRAMES[wire](310, k, ext_of(str(k), f"p{k}")) for k in range(3)] + [pull_frame(wire, 9)]
    want = [generic(f) for f in frames]
    decoder = FrameDecoder()
    got = [cmd for f in frames for k in range(0, len(f), 7) for cmd in decoder.feed(f[k : k + 7])]
    assert got == want and [c.send_gi for c in got[:3]] == [(str(k), f"p{k}") for k in range(3)]
    assert len(SHAPES[wire]) == 2  # the send's and the pull's


def test_a_signed_json_send_is_read_by_its_shape_with_the_signature_as_a_variable_entry() -> None:
    """The C++ core signs every request (AccessKey, OnsChannel, a Signature of its own, numbers as numbers):
    its sends to a queue share one shape all the same."""
    def frame(k: int) -> bytes:
        ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": f"sig{k}/+=", **ext_of(str(k), f"p{k}"),
               "d": 4, "e": 1, "l": 16}
        return frame_of(json.dumps({"code": 310, "extFields": dict(sorted(ext.items())), "flag": 0, "language": "CPP",
                                    "opaque": k, "remark": "", "version": 333}, separators=(",", ":")).encode() + b"\n",
                        0)

    for k in range(4):
        cmd = same(frame(k))
        assert cmd is not None and cmd.ext_fields["Signature"] == f"sig{k}/+=" and cmd.send_gi == (str(k), f"p{k}")
    assert len(codec._json_shapes) == 1


def cpp_send_frame(n: int, **values: Any) -> bytes:
    """A SEND_MESSAGE_V2 as the C++ core writes it (real-client-wire.md): signed, d e f h l as numbers."""
    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": f"sig{n}/+=", **ext_of(str(n), f"p{n}"),
           "d": 4, "e": 1, "f": 0, "h": 0, "k": "0", "l": 16, "m": "0", **values}
    return frame_of(json.dumps({"code": 310, "extFields": dict(sorted(ext.items())), "flag": 0, "language": "CPP",
                                "opaque": n, "remark": "", "version": 333}, separators=(",", ":")).encode() + b"\n", 0)


def test_a_cpp_send_header_with_numbers_is_decoded_from_its_send_fixed_memo() -> None:
    """The C++ core's numbers do not keep its sends from the SendFixed's memo of the decoded constant fields:
    after the first, a send's header is its g and i on top of the memo, and equals the full decode."""
    for k in range(3):
        cmd = same(cpp_send_frame(k))
        assert cmd is not None
        h = send_header_v2_of_command(cmd)
        assert h == decode_send_header_v2(cmd.ext_fields)
        assert (h.queue_id, h.default_topic_queue_nums, h.max_reconsume_times, h.born_timestamp) == (1, 4, 16, k)
        assert cmd.send_fixed.header.__class__ is tuple  # the memo (False: decoded in full every time)


@pytest.mark.parametrize(("field", "first", "then"), [("a", 1, True), ("a", 1, 1.0), ("k", 1, 1.0)])
def test_equal_numbers_of_other_types_do_not_share_a_send_fixed(field: str, first: Any, then: Any) -> None:
    """1, True and 1.0 are equal dict keys but decode differently (producer group "1", "true" or "1.0"; unit
    mode true or false): each header gets what the full decoder gives it, memo or not."""
    for k, value in enumerate((first, then, first, then)):
        cmd = same(cpp_send_frame(k, **{field: value}))
        assert cmd is not None
        try:
            want = decode_send_header_v2(cmd.ext_fields)
        except HeaderError:
            with pytest.raises(HeaderError):
                send_header_v2_of_command(cmd)
        else:
            assert send_header_v2_of_command(cmd) == want


@pytest.mark.parametrize("wire", ["json", "rocketmq"])
def test_other_signed_headers_go_to_the_generic_decoder_at_once(wire: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed pull (the C++ core writes its offsets as numbers) and any signed ROCKETMQ header: no shape is
    looked for, none learned, and the command is the generic decoder's."""
    looked: list[Any] = []
    monkeypatch.setattr(codec, "_json_shape", lambda *a: looked.append(a))
    monkeypatch.setattr(codec, "_rocketmq_shape", lambda *a: looked.append(a))
    signed = {"AccessKey": "", "OnsChannel": "ALIYUN"}
    frames = [pull_frame(wire, 5, **signed, Signature="sig=")]
    if wire == "rocketmq":
        frames += [FRAMES[wire](310, k, {**signed, "Signature": f"sig{k}=", **ext_of(str(k), "p")}) for k in range(2)]
    for f in frames:
        cmd = same(f)
        assert cmd is not None and cmd.ext_fields["OnsChannel"] == "ALIYUN"
    assert looked == [] and SHAPES[wire] == {}
