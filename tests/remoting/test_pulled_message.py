"""decode_messages returns PulledMessageExt, decoded on demand: every attribute must read (and write)
exactly as an eagerly decoded MessageExt's, whatever is read first."""

from __future__ import annotations

import dataclasses
import zlib

import pytest

from remoting.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    PulledMessageExt,
    add_properties,
    decode_message,
    decode_messages,
    encode_message_record,
)

FIELDS = [f.name for f in dataclasses.fields(MessageExt)]


def record(i: int = 0, *, sys_flag: int = 0, body: bytes | None = None, props: str | None = None) -> bytes:
    v6 = sys_flag & (MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG)
    return bytes(
        encode_message_record(
            topic=f"Topic{i}",
            queue_id=3,
            flag=7 + i,
            body=body if body is not None else f"body-{i}".encode() * (i + 1),
            properties=props if props is not None else f"TAGS\x01Tag{i}\x02KEYS\x01k{i} x\x02UNIQ_KEY\x01U{i}",
            sys_flag=sys_flag,
            born_timestamp=1700000000000 + i,
            born_host=("::1", 50000) if v6 & MessageSysFlag.BORNHOST_V6_FLAG else ("10.0.0.1", 50000),
            store_host=("fe80::2", 10911) if v6 & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else ("10.0.0.2", 10911),
            reconsume_times=i,
            prepared_transaction_offset=99 + i,
            queue_offset=40 + i,
            physical_offset=123456 + 1000 * i,
            store_timestamp=1700000000123 + i,
        )
    )


def eager(raw: bytes, decompress: bool = False) -> list[MessageExt]:
    out, pos = [], 0
    while pos < len(raw):
        m, pos = decode_message(raw, pos, decompress_body=decompress)
        out.append(m)
    return out


@pytest.mark.parametrize(
    "sys_flag",
    [0, MessageSysFlag.BORNHOST_V6_FLAG, MessageSysFlag.STOREHOSTADDRESS_V6_FLAG,
     MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG],
)
@pytest.mark.parametrize("first", ["body", "properties", "topic", "msg_id", "tags", "queue_offset"])
def test_every_field_matches_the_eager_decoder(sys_flag: int, first: str) -> None:
    raw = b"".join(record(i, sys_flag=sys_flag) for i in range(3))
    lazy = decode_messages(raw)
    assert all(isinstance(m, PulledMessageExt) and isinstance(m, MessageExt) for m in lazy)
    for m, e in zip(lazy, eager(raw), strict=True):
        getattr(m, first)  # whichever part is decoded first, the rest must still come out right
        assert {f: getattr(m, f) for f in FIELDS} == {f: getattr(e, f) for f in FIELDS}
        assert (m.tags, m.keys, m.uniq_key, m.offset_msg_id) == (e.tags, e.keys, e.uniq_key, e.offset_msg_id)
        assert m.stored_body_length == len(e.body)
    assert decode_messages(raw) == decode_messages(bytearray(raw))  # dataclass equality still works


def test_writes_before_the_first_read_stick() -> None:
    [m] = decode_messages(record(1))
    m.topic = "Origin"  # as reset_retry_topic does, before anything else was decoded
    m.reconsume_times = 5
    m.body = b"replaced"
    assert (m.topic, m.reconsume_times, m.body) == ("Origin", 5, b"replaced")
    assert m.store_host == ("10.0.0.2", 10911) and m.queue_offset == 41  # the rest still decodes
    m.properties = {"A": "1"}
    assert m.properties == {"A": "1"} and m.tags is None


def test_add_properties_before_and_after_parsing() -> None:
    msgs = decode_messages(record(0) + record(1))
    msgs[1].properties["X"] = "parsed first"
    add_properties(msgs, ((MessageConst.PROPERTY_MIN_OFFSET, "0"), (MessageConst.PROPERTY_MAX_OFFSET, "9")))
    add_properties(msgs, (("CONSUME_START_TIME", "123"),))
    for i, m in enumerate(msgs):
        p = m.properties
        assert p["TAGS"] == f"Tag{i}" and p["MIN_OFFSET"] == "0" and p["MAX_OFFSET"] == "9"
        assert p["CONSUME_START_TIME"] == "123"
    assert msgs[1].properties["X"] == "parsed first"
    plain = MessageExt(properties={"A": "1"})
    add_properties([plain], (("B", "2"),))
    assert plain.properties == {"A": "1", "B": "2"}


def test_compressed_body_and_its_stored_length() -> None:
    body = b"compress me " * 50
    raw = record(0, sys_flag=MessageSysFlag.COMPRESSED_FLAG, body=zlib.compress(body))
    [m] = decode_messages(raw, decompress_body=True)
    assert m.body == body and m.stored_body_length == len(zlib.compress(body))
    assert decode_messages(raw)[0].body == zlib.compress(body)
    [bad] = decode_messages(record(0, sys_flag=MessageSysFlag.COMPRESSED_FLAG, body=b"not zlib"), decompress_body=True)
    with pytest.raises(ValueError, match="decompress"):
        _ = bad.body


def test_input_buffer_is_copied() -> None:
    buf = bytearray(record(2))
    [m] = decode_messages(memoryview(buf))
    buf[:] = b"\x00" * len(buf)
    assert m.body == b"body-2" * 3 and m.topic == "Topic2"


def test_corrupt_records() -> None:
    raw = record(0)
    with pytest.raises(ValueError, match="magic"):
        decode_messages(raw[:4] + b"\x00\x00\x00\x00" + raw[8:])
    with pytest.raises(ValueError, match="truncated"):
        decode_messages(raw + raw[:50])
    bad_body_len = bytearray(raw)
    bad_body_len[84:88] = (10_000).to_bytes(4, "big")
    with pytest.raises(ValueError, match="body length"):
        decode_messages(bytes(bad_body_len))
    bad_props_len = bytearray(raw)
    bad_props_len[-len("TAGS\x01Tag0\x02KEYS\x01k0 x\x02UNIQ_KEY\x01U0") - 2] = 0x7F
    [m] = decode_messages(bytes(bad_props_len))  # sizes are checked where they are read
    with pytest.raises(ValueError, match="do not add up"):
        _ = m.properties


def test_copy_pickle_replace_and_equality_with_eager_messages() -> None:
    import copy
    import pickle

    raw = record(1)
    [m] = decode_messages(raw)
    [e] = eager(raw)
    assert m == e and e == m and m != decode_messages(record(2))[0]
    for clone in (copy.copy(m), copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert type(clone) is MessageExt and clone == e
    [m2] = decode_messages(raw)
    r = dataclasses.replace(m2, topic="Other")
    assert r.topic == "Other" and r.body == e.body and r.properties == e.properties and r.msg_id == e.msg_id
    assert r.stored_body_length == len(e.body)


def test_get_property_reads_added_properties_without_parsing() -> None:
    [m] = decode_messages(record(1))
    add_properties([m], (("CONSUME_START_TIME", "1"),))
    add_properties([m], (("CONSUME_START_TIME", "2"),))
    assert m.get_property("CONSUME_START_TIME") == "2"
    assert m._done == 0  # still unparsed
    assert m.get_property("TAGS") == "Tag1" and m.properties["CONSUME_START_TIME"] == "2"
