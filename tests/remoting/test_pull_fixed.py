"""The frame decoder's shortcut for our consumer's PULL_MESSAGE header (per-pull queueOffset, sysFlag and
commitOffset first, the queue's constant rest recognised by its bytes) gives exactly what the generic
msgpack decoder gives, and the pull header built from it equals PullMessageRequestHeader.decode's, also
when the queue, offset, flags or subscription change between pulls."""

from __future__ import annotations

import json

import msgpack
import pytest

from remoting.codec import FrameDecoder, PullFixed, decode_msgpack_header, encode_msgpack_request_head
from remoting.command import RemotingCommand
from remoting.headers import HeaderError, PullMessageRequestHeader, pull_header_of

PACK = msgpack.Packer(use_bin_type=True).pack
PER_PULL = ("queueOffset", "sysFlag", "commitOffset")


def fixed_fields(queue_id: int = 0, sub: str = "*", sub_version: int = 1, topic: str = "T") -> dict[str, str]:
    tmpl = PullMessageRequestHeader(
        consumer_group="CG", topic=topic, queue_id=queue_id, queue_offset=0, max_msg_nums=32,
        suspend_timeout_millis=15000, subscription=sub, sub_version=sub_version, expression_type="TAG",
    ).encode()
    return {k: v for k, v in tmpl.items() if k not in PER_PULL}


def consumer_frame(opaque: int, offset: str, sys_flag: str, commit: str, fields: dict[str, str]) -> bytes:
    """What client.consumer.pull_api._send_nowait writes."""
    parts = (bytes((0x80 | (len(fields) + 3),)), PACK("queueOffset"), PACK(offset), PACK("sysFlag"), PACK(sys_flag),
             PACK("commitOffset"), PACK(commit), PACK(fields)[1:])
    return encode_msgpack_request_head(11, opaque, parts, 0)


def generic(frame: bytes) -> RemotingCommand:
    hlen = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    cmd = decode_msgpack_header(memoryview(frame)[8 : 8 + hlen])
    cmd.body = frame[8 + hlen :] or None
    cmd.frame_size = len(frame)
    return cmd


def both(frame: bytes) -> tuple[RemotingCommand, RemotingCommand]:
    (cmd,) = FrameDecoder().feed(frame)
    return cmd, generic(frame)


@pytest.mark.parametrize("opaque", [0, 127, 128, 255, 256, 65535, 65536, 0x7FFFFFFF])
def test_shortcut_equals_generic_decode(opaque: int) -> None:
    cmd, ref = both(consumer_frame(opaque, "1234", "3", "0", fixed_fields()))
    assert cmd == ref
    assert list(cmd.ext_fields) == list(ref.ext_fields)  # the wire order too
    assert isinstance(cmd.send_fixed, PullFixed)
    assert pull_header_of(cmd.ext_fields, cmd.send_fixed) == PullMessageRequestHeader.decode(ref.ext_fields)


def test_changes_between_pulls_give_the_generic_header() -> None:
    """One decoder, one connection: the cached part is reused and switched correctly."""
    dec = FrameDecoder()
    cases = [
        ("0", "3", "0", fixed_fields()),
        ("32", "3", "0", fixed_fields()),  # next offset, same queue: the cache hit
        ("64", "1", "17", fixed_fields()),  # flags and commit offset change
        ("0", "3", "0", fixed_fields(queue_id=3)),  # another queue
        ("96", "3", "0", fixed_fields()),  # back to the first
        ("96", "3", "0", fixed_fields(sub="a || b", sub_version=2)),  # new subscription
        ("9" * 19, "7", "9" * 19, fixed_fields(topic="%RETRY%CG")),
        ("-1", "0", "-5", fixed_fields()),
    ]
    fixeds = []
    for i, (offset, flag, commit, fields) in enumerate(cases):
        frame = consumer_frame(i, offset, flag, commit, fields)
        (cmd,) = dec.feed(frame)
        ref = generic(frame)
        assert cmd == ref
        assert cmd.send_fixed is not None
        fixeds.append(cmd.send_fixed)
        # twice: the first call fills the PullFixed's memo, the second reads it
        for _ in range(2):
            h = pull_header_of(cmd.ext_fields, cmd.send_fixed)
            assert h == PullMessageRequestHeader.decode(ref.ext_fields)
        assert h.queue_offset == int(offset) and h.sys_flag == int(flag) and h.commit_offset == int(commit)
        assert h.queue_id == int(fields["queueId"]) and h.subscription == fields["subscription"]
    assert fixeds[0] is fixeds[1] is fixeds[2] is fixeds[4]
    assert fixeds[3] is not fixeds[0] and fixeds[5] is not fixeds[0]


def test_bad_per_pull_field_raises_as_generic() -> None:
    frame = consumer_frame(1, "12", "3", "0", fixed_fields())
    (cmd,) = FrameDecoder().feed(frame)
    pull_header_of(cmd.ext_fields, cmd.send_fixed)  # memo filled
    (cmd,) = FrameDecoder().feed(consumer_frame(2, "x1", "3", "0", fixed_fields()))
    with pytest.raises(HeaderError) as fast:
        pull_header_of(cmd.ext_fields, cmd.send_fixed)
    with pytest.raises(HeaderError) as slow:
        PullMessageRequestHeader.decode(cmd.ext_fields)
    assert str(fast.value) == str(slow.value)


def test_bad_fixed_field_raises_every_time() -> None:
    fields = fixed_fields()
    del fields["consumerGroup"]
    frame = consumer_frame(1, "12", "3", "0", fields)
    for _ in range(2):
        (cmd,) = FrameDecoder().feed(frame)
        assert cmd == generic(frame)
        with pytest.raises(HeaderError, match="consumerGroup"):
            pull_header_of(cmd.ext_fields, cmd.send_fixed)


def other_order_frame(fields: dict[str, str]) -> bytes:
    ext = {**fields, "queueOffset": "5", "sysFlag": "3", "commitOffset": "0"}  # per-pull last (a Java-like order)
    return encode_msgpack_request_head(11, 7, (PACK(ext),), 0)


@pytest.mark.parametrize(
    "frame",
    [
        other_order_frame(fixed_fields()),
        # a per-pull entry repeated in the rest: the generic decoder's last-wins must apply
        consumer_frame(3, "5", "3", "0", {**fixed_fields(), "queueOffset": "77"}),
        # a non-string per-pull value
        encode_msgpack_request_head(11, 3, (bytes((0x80 | (len(fixed_fields()) + 3),)), PACK("queueOffset"), PACK(5), PACK("sysFlag"),
                                            PACK("3"), PACK("commitOffset"), PACK("0"),
                                            PACK(fixed_fields())[1:]), 0),
        # nothing constant after the per-pull entries
        encode_msgpack_request_head(11, 3, (PACK({"queueOffset": "1", "sysFlag": "3", "commitOffset": "0"}),), 0),
    ],
)
def test_other_shapes_take_the_generic_decoder(frame: bytes) -> None:
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd.send_fixed is None
    assert cmd == generic(frame)
    try:
        ref = PullMessageRequestHeader.decode(cmd.ext_fields)
    except HeaderError:
        with pytest.raises(HeaderError):
            pull_header_of(cmd.ext_fields, cmd.send_fixed)
        return
    assert pull_header_of(cmd.ext_fields, cmd.send_fixed) == ref


def json_pull(opaque: int, fields: dict, offset: str = "5", sys_flag: str = "3", commit: str = "0") -> RemotingCommand:
    """A PULL_MESSAGE as a Java consumer frames it (JSON), decoded."""
    from remoting.codec import encode

    cmd = RemotingCommand(11, opaque, 0, None, {**fields, "queueOffset": offset, "sysFlag": sys_flag,
                                                "commitOffset": commit})
    frame = encode(cmd)
    assert json.loads(frame[8:])["code"] == 11
    (out,) = FrameDecoder().feed(frame)
    assert out.ext_fields == cmd.ext_fields
    return out


def test_a_json_pull_gets_a_pull_fixed_by_its_constant_values() -> None:
    """A JSON pull (RocketMQ's own consumers) is matched to a PullFixed by the values PullMessageRequestHeader
    reads but the per-pull three: the header built from it equals the generic decode, pull after pull."""
    pulls = [json_pull(k, fixed_fields(queue_id=k % 2), offset=str(k * 32), sys_flag=str(k % 4), commit=str(k))
             for k in range(6)]
    assert all(isinstance(c.send_fixed, PullFixed) for c in pulls)
    assert pulls[0].send_fixed is pulls[2].send_fixed is pulls[4].send_fixed is not pulls[1].send_fixed
    for c in pulls:
        assert pull_header_of(c.ext_fields, c.send_fixed) == PullMessageRequestHeader.decode(c.ext_fields)
    # Another subscription, or an entry left out (a null Java field is not sent): a PullFixed of its own.
    other = json_pull(9, fixed_fields(sub="a || b", sub_version=7))
    fields = fixed_fields()
    del fields["expressionType"]
    bare = json_pull(10, fields)
    assert len({id(pulls[0].send_fixed), id(other.send_fixed), id(bare.send_fixed)}) == 3
    for c in (other, bare, json_pull(11, fields)):
        assert pull_header_of(c.ext_fields, c.send_fixed) == PullMessageRequestHeader.decode(c.ext_fields)


def test_json_pulls_with_bad_fields_raise_as_generic() -> None:
    json_pull(1, fixed_fields())  # a PullFixed whose header is then known
    c = json_pull(2, fixed_fields(), offset="x1")
    with pytest.raises(HeaderError) as fast:
        pull_header_of(c.ext_fields, c.send_fixed)
    with pytest.raises(HeaderError) as slow:
        PullMessageRequestHeader.decode(c.ext_fields)
    assert str(fast.value) == str(slow.value)
    fields = fixed_fields()
    del fields["consumerGroup"]
    for k in range(2):
        c = json_pull(3 + k, fields)
        with pytest.raises(HeaderError, match="consumerGroup"):
            pull_header_of(c.ext_fields, c.send_fixed)
    ext = {**fixed_fields(), "topic": ["not", "hashable"], "queueOffset": "5", "sysFlag": "3", "commitOffset": "0"}
    header = json.dumps({"code": 11, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": 5,
                         "serializeTypeCurrentRPC": "JSON", "version": 395}).encode()
    (c,) = FrameDecoder().feed((4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header)
    assert c.send_fixed is None and c.ext_fields == ext


def test_many_frames_in_one_read_and_split_reads() -> None:
    frames = [consumer_frame(i, str(i * 32), "3", "0", fixed_fields(queue_id=i % 4)) for i in range(40)]
    data = b"".join(frames)
    dec = FrameDecoder()
    out = []
    for i in range(0, len(data), 97):
        out += dec.feed(data[i : i + 97])
    assert out == [generic(f) for f in frames]
    assert sum(c.send_fixed is not None for c in out) == 40
