"""remoting.message: the v1 record codec, properties, Java hash and offset message ids."""

from __future__ import annotations

import socket
import struct
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting.message import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MessageConst,
    MessageSysFlag,
    PermName,
    RecordLayout,
    body_crc,
    create_offset_msg_id,
    decode_message,
    decode_messages,
    decode_offset_msg_id,
    decode_properties,
    encode_message_record,
    encode_properties,
    java_string_hash,
    uncompress_body,
)


def java_hash_reference(s: str) -> int:
    """Straight from the String.hashCode definition: s[0]*31^(n-1) + ... over UTF-16 code units."""
    units = struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be"))
    h = 0
    for u in units:
        h = (h * 31 + u) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


# ------------------------------------------------------------------------------------------ constants


def test_constants() -> None:
    assert MAGIC_CODE == 0xDAA320A7 and MAGIC_CODE - (1 << 32) == -626843481
    assert BLANK_MAGIC_CODE == 0xCBD43194 and BLANK_MAGIC_CODE - (1 << 32) == -875286124
    assert MessageSysFlag.TRANSACTION_PREPARED_TYPE == 0x4
    assert MessageSysFlag.TRANSACTION_COMMIT_TYPE == 0x8
    assert MessageSysFlag.TRANSACTION_ROLLBACK_TYPE == 0xC
    assert MessageSysFlag.BORNHOST_V6_FLAG == 0x10 and MessageSysFlag.STOREHOSTADDRESS_V6_FLAG == 0x20
    assert MessageSysFlag.get_transaction_value(0x1 | 0x8) == 0x8
    assert MessageSysFlag.reset_transaction_value(0x1 | 0x4, 0x8) == 0x1 | 0x8
    assert PermName.is_readable(6) and PermName.is_writeable(6)
    assert not PermName.is_writeable(PermName.PERM_READ)
    assert MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX == "UNIQ_KEY"
    assert MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET == "TRAN_PREPARED_QUEUE_OFFSET"
    assert MessageConst.KEY_SEPARATOR == " "


# ------------------------------------------------------------------------------------------ java hash


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("TagA", 2598919),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(1 << 31)),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
    ],
)
def test_java_string_hash_known_values(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected
    assert java_hash_reference(s) == expected


@given(st.text(max_size=300))
def test_java_string_hash_matches_definition(s: str) -> None:
    assert java_string_hash(s) == java_hash_reference(s)


def test_java_string_hash_long_strings() -> None:
    for n in (7, 8, 9, 31, 4000, 4001, 10000):
        s = "".join(chr(32 + (i * 7) % 200) for i in range(n))
        assert java_string_hash(s) == java_hash_reference(s)


# ------------------------------------------------------------------------------------------ properties


def test_properties_encoding_matches_java() -> None:
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    s = encode_properties(props)
    assert s == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC"  # 4.9.x: no trailing separator
    assert decode_properties(s) == props
    assert decode_properties(s + "\x02") == props  # older writers end with a separator
    assert decode_properties(s.encode()) == props
    assert decode_properties(memoryview(s.encode())) == props
    assert decode_properties("") == {}
    assert encode_properties({}) == ""
    # Java drops pairs with an empty name or value.
    assert decode_properties("A\x01\x02\x01B\x02C\x01D") == {"C": "D"}


prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


@given(st.dictionaries(prop_text, prop_text, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


# ------------------------------------------------------------------------------------------ record


def hand_built_record() -> bytes:
    """A v1 record assembled field by field from the layout table (IPv4 hosts)."""
    body = b"Hello RocketMQ"
    topic = b"TopicTest"
    props = b"TAGS\x01TagA\x02KEYS\x01OrderID001"
    total = 91 + len(body) + len(topic) + len(props)
    out = b""
    out += struct.pack(">i", total)  # 1 TOTALSIZE
    out += bytes.fromhex("DAA320A7")  # 2 MAGICCODE
    out += struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)  # 3 BODYCRC
    out += struct.pack(">i", 3)  # 4 QUEUEID
    out += struct.pack(">i", 7)  # 5 FLAG
    out += struct.pack(">q", 42)  # 6 QUEUEOFFSET
    out += struct.pack(">q", 123456)  # 7 PHYSICALOFFSET
    out += struct.pack(">i", 0)  # 8 SYSFLAG
    out += struct.pack(">q", 1700000000000)  # 9 BORNTIMESTAMP
    out += bytes([10, 0, 0, 1]) + struct.pack(">i", 50000)  # 10 BORNHOST
    out += struct.pack(">q", 1700000000123)  # 11 STORETIMESTAMP
    out += bytes([10, 0, 0, 2]) + struct.pack(">i", 10911)  # 12 STOREHOSTADDRESS
    out += struct.pack(">i", 2)  # 13 RECONSUMETIMES
    out += struct.pack(">q", 99)  # 14 Prepared Transaction Offset
    out += struct.pack(">i", len(body)) + body  # 15 BODY
    out += bytes([len(topic)]) + topic  # 16 TOPIC
    out += struct.pack(">h", len(props)) + props  # 17 PROPERTIES
    assert len(out) == total
    return out


def test_encode_matches_hand_built_record() -> None:
    rec = encode_message_record(
        topic="TopicTest",
        queue_id=3,
        flag=7,
        body=b"Hello RocketMQ",
        properties="TAGS\x01TagA\x02KEYS\x01OrderID001",
        sys_flag=0,
        born_timestamp=1700000000000,
        born_host=("10.0.0.1", 50000),
        store_host=("10.0.0.2", 10911),
        reconsume_times=2,
        prepared_transaction_offset=99,
        queue_offset=42,
        physical_offset=123456,
        store_timestamp=1700000000123,
    )
    assert bytes(rec) == hand_built_record()


def test_decode_hand_built_record() -> None:
    raw = hand_built_record()
    msg, nxt = decode_message(raw)
    assert nxt == len(raw)
    assert msg.topic == "TopicTest"
    assert msg.body == b"Hello RocketMQ"
    assert msg.queue_id == 3 and msg.flag == 7 and msg.queue_offset == 42
    assert msg.commit_log_offset == 123456
    assert msg.born_host == ("10.0.0.1", 50000) and msg.store_host == ("10.0.0.2", 10911)
    assert msg.born_timestamp == 1700000000000 and msg.store_timestamp == 1700000000123
    assert msg.reconsume_times == 2 and msg.prepared_transaction_offset == 99
    assert msg.tags == "TagA" and msg.keys == "OrderID001" and msg.uniq_key is None
    assert msg.get_property("TAGS") == "TagA"
    assert msg.store_size == len(raw)
    assert msg.body_crc == zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF
    assert msg.msg_id == create_offset_msg_id("10.0.0.2", 10911, 123456)


def test_record_layout_offsets() -> None:
    v4 = RecordLayout.for_sys_flag(0)
    assert (v4.queue_offset_pos, v4.physical_offset_pos, v4.store_timestamp_pos) == (20, 28, 56)
    assert v4.fixed_size == 91 and v4.body_pos == 88
    v6 = RecordLayout.for_sys_flag(MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG)
    assert v6.store_timestamp_pos == 68 and v6.fixed_size == 91 + 24
    born6 = RecordLayout.for_sys_flag(MessageSysFlag.BORNHOST_V6_FLAG)
    assert born6.store_timestamp_pos == 68 and born6.store_host_pos == 76 and born6.fixed_size == 103


def test_patch_in_place_via_layout() -> None:
    rec = encode_message_record(
        topic="T",
        queue_id=0,
        flag=0,
        body=b"x",
        properties="",
        sys_flag=0,
        born_timestamp=1,
        born_host=("1.2.3.4", 1),
        store_host=("5.6.7.8", 2),
    )
    layout = RecordLayout.for_sys_flag(0)
    struct.pack_into(">q", rec, layout.queue_offset_pos, 11)
    struct.pack_into(">q", rec, layout.physical_offset_pos, 22)
    struct.pack_into(">q", rec, layout.store_timestamp_pos, 33)
    msg, _ = decode_message(rec)
    assert (msg.queue_offset, msg.commit_log_offset, msg.store_timestamp) == (11, 22, 33)


def test_ipv6_hosts_round_trip() -> None:
    flags = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    rec = encode_message_record(
        topic="T6",
        queue_id=1,
        flag=0,
        body=b"six",
        properties="",
        sys_flag=flags,
        born_timestamp=5,
        born_host=("::1", 1234),
        store_host=("fe80::1", 10911),
        physical_offset=77,
    )
    assert len(rec) == 91 + 24 + 3 + 2
    msg, _ = decode_message(rec)
    assert msg.born_host == ("::1", 1234) and msg.store_host == ("fe80::1", 10911)
    assert decode_offset_msg_id(msg.msg_id) == ("fe80::1", 10911, 77)
    with pytest.raises(ValueError):
        encode_message_record(
            topic="T",
            queue_id=0,
            flag=0,
            body=b"",
            properties="",
            sys_flag=0,
            born_timestamp=0,
            born_host=("::1", 1),
            store_host=("1.2.3.4", 1),
        )


def test_compressed_body() -> None:
    body = b"compress me " * 50
    rec = encode_message_record(
        topic="T",
        queue_id=0,
        flag=0,
        body=zlib.compress(body),
        properties="",
        sys_flag=MessageSysFlag.COMPRESSED_FLAG,
        born_timestamp=0,
        born_host=("1.2.3.4", 1),
        store_host=("1.2.3.4", 2),
    )
    assert decode_message(rec, decompress_body=True)[0].body == body
    assert decode_message(rec)[0].body == zlib.compress(body)
    assert decode_message(rec, read_body=False)[0].body == b""


def test_compression_type_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """RocketMQ 4.9.4+ producers name their compressor in sysFlag bits 8-10: zlib (3, Java's default, which
    sends 0x301) reads as before; LZ4 (1) and ZSTD (2) need optional packages, and say which."""
    body = b"compress me " * 50

    def record(sys_flag: int, payload: bytes) -> bytes:
        return encode_message_record(topic="T", queue_id=0, flag=0, body=payload, properties="", sys_flag=sys_flag,
                                     born_timestamp=0, born_host=("1.2.3.4", 1), store_host=("1.2.3.4", 2))

    zlib_java = MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB_TYPE
    assert decode_message(record(zlib_java, zlib.compress(body)), decompress_body=True)[0].body == body
    assert decode_messages(record(zlib_java, zlib.compress(body)), decompress_body=True)[0].body == body
    assert uncompress_body(zlib.compress(body), zlib_java) == body
    monkeypatch.setitem(sys.modules, "lz4", None)  # (as if not installed, whatever this machine has)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    lz4 = MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_LZ4_TYPE
    with pytest.raises(ValueError, match="LZ4-compressed .*install the lz4 package"):
        decode_message(record(lz4, b"\x04\x22\x4d\x18"), decompress_body=True)
    with pytest.raises(ValueError, match="LZ4-compressed .*install the lz4 package"):
        _ = decode_messages(record(lz4, b"\x04\x22\x4d\x18"), decompress_body=True)[0].body  # decoded on first read
    with pytest.raises(ValueError, match="ZSTD-compressed .*install the zstandard package"):
        uncompress_body(b"\x28\xb5\x2f\xfd", MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZSTD_TYPE)
    with pytest.raises(ValueError, match="unknown compression type 4"):
        uncompress_body(b"x", MessageSysFlag.COMPRESSED_FLAG | (4 << 8))
    with pytest.raises(ValueError, match="cannot decompress"):
        uncompress_body(b"not zlib", MessageSysFlag.COMPRESSED_FLAG)


def test_bad_records_raise_value_error() -> None:
    raw = hand_built_record()
    with pytest.raises(ValueError, match="magic"):
        decode_message(raw[:4] + b"\x00\x00\x00\x00" + raw[8:])
    with pytest.raises(ValueError, match="truncated"):
        decode_message(raw[:-1])
    with pytest.raises(ValueError, match="truncated"):
        decode_message(raw[:5])
    with pytest.raises(ValueError):
        decode_messages(raw + raw[:10])
    assert body_crc(b"Hello RocketMQ") == zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF


def test_encode_limits() -> None:
    kw = dict(
        queue_id=0,
        flag=0,
        body=b"",
        sys_flag=0,
        born_timestamp=0,
        born_host=("1.1.1.1", 1),
        store_host=("1.1.1.1", 2),
    )
    with pytest.raises(ValueError, match="topic"):
        encode_message_record(topic="t" * 128, properties="", **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="properties"):
        encode_message_record(topic="t", properties="p" * 32768, **kw)  # type: ignore[arg-type]


hosts = st.sampled_from([("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 8080), ("2001:db8::7", 10911)])


@settings(max_examples=150)
@given(
    topic=st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 127),
    body=st.binary(max_size=2000),
    props=st.dictionaries(prop_text, prop_text, max_size=5),
    queue_id=st.integers(0, 1 << 20),
    flag=st.integers(-(1 << 31), (1 << 31) - 1),
    tran=st.sampled_from([0, 0x4, 0x8, 0xC]),
    born=hosts,
    stored=hosts,
    ts=st.integers(0, 1 << 45),
    queue_offset=st.integers(0, 1 << 50),
    phy=st.integers(0, 1 << 50),
    reconsume=st.integers(0, 1000),
)
def test_record_round_trip(
    topic: str,
    body: bytes,
    props: dict[str, str],
    queue_id: int,
    flag: int,
    tran: int,
    born: tuple[str, int],
    stored: tuple[str, int],
    ts: int,
    queue_offset: int,
    phy: int,
    reconsume: int,
) -> None:
    sys_flag = tran
    if ":" in born[0]:
        sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
    if ":" in stored[0]:
        sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    rec = encode_message_record(
        topic=topic,
        queue_id=queue_id,
        flag=flag,
        body=body,
        properties=encode_properties(props),
        sys_flag=sys_flag,
        born_timestamp=ts,
        born_host=born,
        store_host=stored,
        reconsume_times=reconsume,
        queue_offset=queue_offset,
        physical_offset=phy,
        store_timestamp=ts + 1,
    )
    two = bytes(rec) + bytes(rec)
    msgs = decode_messages(two)
    assert len(msgs) == 2
    m = msgs[0]
    assert (m.topic, m.body, m.properties, m.queue_id, m.flag) == (topic, body, props, queue_id, flag)
    assert (m.sys_flag, m.born_host, m.store_host, m.reconsume_times) == (sys_flag, born, stored, reconsume)
    assert (m.queue_offset, m.commit_log_offset, m.store_timestamp) == (queue_offset, phy, ts + 1)
    assert m.body_crc == zlib.crc32(body) & 0x7FFFFFFF
    assert decode_offset_msg_id(m.msg_id) == (stored[0], stored[1], phy)


# ------------------------------------------------------------------------------------------ msg id


def test_offset_msg_id_known_value() -> None:
    # From the seed report: 10.66.51.58:10911, offset 20247029.
    msg_id = create_offset_msg_id("10.66.51.58", 10911, 20247029)
    assert msg_id == "0A42333A00002A9F000000000134F1F5"
    assert decode_offset_msg_id(msg_id) == ("10.66.51.58", 10911, 20247029)
    assert decode_offset_msg_id(msg_id.lower()) == ("10.66.51.58", 10911, 20247029)


@given(
    ip=st.ip_addresses(),
    port=st.integers(0, 65535),
    offset=st.integers(0, (1 << 63) - 1),
)
def test_offset_msg_id_round_trip(ip: object, port: int, offset: int) -> None:
    host = str(ip)
    msg_id = create_offset_msg_id(host, port, offset)
    assert len(msg_id) == (32 if ":" not in host else 56) and msg_id == msg_id.upper()
    h, p, o = decode_offset_msg_id(msg_id)
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    assert socket.inet_pton(fam, h) == socket.inet_pton(fam, host)
    assert (p, o) == (port, offset)


def test_offset_msg_id_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        decode_offset_msg_id("nothex")
    with pytest.raises(ValueError):
        decode_offset_msg_id("00" * 10)
