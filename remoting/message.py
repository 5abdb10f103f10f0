"""Sans-I/O codec for RocketMQ message records (the v1 CommitLog record, also the pull-response body).

Shared by the store (writes/reads CommitLog records), the broker (pull responses, view-by-id) and the
client (decodes pull bodies). Layout: see `RecordLayout`; all integers big-endian.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

MAGIC_CODE: Final = 0xDAA320A7
BLANK_MAGIC_CODE: Final = 0xCBD43194
# Signed views, as Java writes them with putInt.
MAGIC_CODE_SIGNED: Final = MAGIC_CODE - (1 << 32)
BLANK_MAGIC_CODE_SIGNED: Final = BLANK_MAGIC_CODE - (1 << 32)

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

MAX_TOPIC_LENGTH: Final = 127  # v1 stores the topic length in one signed byte
MAX_PROPERTIES_LENGTH: Final = 32767  # stored as a signed short


class MessageSysFlag:
    COMPRESSED_FLAG: Final = 0x1
    MULTI_TAGS_FLAG: Final = 0x2
    TRANSACTION_NOT_TYPE: Final = 0
    TRANSACTION_PREPARED_TYPE: Final = 0x1 << 2
    TRANSACTION_COMMIT_TYPE: Final = 0x2 << 2
    TRANSACTION_ROLLBACK_TYPE: Final = 0x3 << 2
    BORNHOST_V6_FLAG: Final = 0x1 << 4
    STOREHOSTADDRESS_V6_FLAG: Final = 0x1 << 5
    NEED_UNWRAP_FLAG: Final = 0x1 << 6
    INNER_BATCH_FLAG: Final = 0x1 << 7
    # RocketMQ 4.9.4+: which compressor a COMPRESSED body used (0, from older clients and ours, is zlib)
    COMPRESSION_LZ4_TYPE: Final = 0x1 << 8
    COMPRESSION_ZSTD_TYPE: Final = 0x2 << 8
    COMPRESSION_ZLIB_TYPE: Final = 0x3 << 8
    COMPRESSION_TYPE_COMPARATOR: Final = 0x7 << 8

    @staticmethod
    def get_transaction_value(flag: int) -> int:
        return flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE

    @staticmethod
    def reset_transaction_value(flag: int, type_: int) -> int:
        return (flag & ~MessageSysFlag.TRANSACTION_ROLLBACK_TYPE) | type_

    @staticmethod
    def clear_compressed_flag(flag: int) -> int:
        return flag & ~MessageSysFlag.COMPRESSED_FLAG


def uncompress_body(body: bytes, sys_flag: int) -> bytes:
    """A COMPRESSED body, by the compressor its sysFlag names: zlib (RocketMQ's default, and no type from
    clients before 4.9.4), or LZ4 / ZSTD from a Java producer set to them (`rocketmq.message.compressType`),
    which need the optional `lz4` / `zstandard` packages. ValueError says what is missing or corrupt."""
    kind = (sys_flag & MessageSysFlag.COMPRESSION_TYPE_COMPARATOR) >> 8
    try:
        if kind in (0, 3):
            return zlib.decompress(body)
        if kind == 1:
            import lz4.frame  # type: ignore[import-not-found]  # optional: only for Java's LZ4 bodies

            return bytes(lz4.frame.decompress(body))
        if kind == 2:
            import zstandard  # type: ignore[import-not-found]  # optional: only for Java's ZSTD bodies

            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(body))
    except ImportError:
        name = "LZ4" if kind == 1 else "ZSTD"
        package = "lz4" if kind == 1 else "zstandard"
        raise ValueError(f"the body is {name}-compressed (a producer with compressType={name}): "
                         f"install the {package} package to read it") from None
    except Exception as e:  # zlib.error, lz4's RuntimeError, zstandard.ZstdError
        raise ValueError(f"cannot decompress the body: {e}") from None
    raise ValueError(f"unknown compression type {kind} in sysFlag {sys_flag:#x}")


class PermName:
    PERM_PRIORITY: Final = 0x1 << 3
    PERM_READ: Final = 0x1 << 2
    PERM_WRITE: Final = 0x1 << 1
    PERM_INHERIT: Final = 0x1 << 0

    @staticmethod
    def is_readable(perm: int) -> bool:
        return (perm & PermName.PERM_READ) == PermName.PERM_READ

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return (perm & PermName.PERM_WRITE) == PermName.PERM_WRITE

    @staticmethod
    def is_inherited(perm: int) -> bool:
        return (perm & PermName.PERM_INHERIT) == PermName.PERM_INHERIT

    @staticmethod
    def perm2string(perm: int) -> str:
        return (
            ("R" if PermName.is_readable(perm) else "-")
            + ("W" if PermName.is_writeable(perm) else "-")
            + ("X" if PermName.is_inherited(perm) else "-")
        )


class MessageConst:
    PROPERTY_KEYS: Final = "KEYS"
    PROPERTY_TAGS: Final = "TAGS"
    PROPERTY_WAIT_STORE_MSG_OK: Final = "WAIT"
    PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
    PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
    PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
    PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
    PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
    PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
    PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
    PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"
    PROPERTY_BUYER_ID: Final = "BUYER_ID"
    PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    PROPERTY_TRANSFER_FLAG: Final = "TRANSFER_FLAG"
    PROPERTY_CORRECTION_FLAG: Final = "CORRECTION_FLAG"
    PROPERTY_MQ2_FLAG: Final = "MQ2_FLAG"
    PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"
    PROPERTY_MSG_REGION: Final = "MSG_REGION"
    PROPERTY_TRACE_SWITCH: Final = "TRACE_ON"
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
    PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
    PROPERTY_CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
    PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    PROPERTY_INSTANCE_ID: Final = "INSTANCE_ID"
    PROPERTY_CORRELATION_ID: Final = "CORRELATION_ID"
    PROPERTY_MESSAGE_REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
    PROPERTY_MESSAGE_TTL: Final = "TTL"
    PROPERTY_REPLY_MESSAGE_ARRIVE_TIME: Final = "ARRIVE_TIME"
    PROPERTY_PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
    PROPERTY_CLUSTER: Final = "CLUSTER"
    PROPERTY_MESSAGE_TYPE: Final = "MSG_TYPE"
    PROPERTY_INNER_MULTI_DISPATCH: Final = "INNER_MULTI_DISPATCH"
    PROPERTY_INNER_MULTI_QUEUE_OFFSET: Final = "INNER_MULTI_QUEUE_OFFSET"

    KEY_SEPARATOR: Final = " "

    # System property names a user may not set (Java's STRING_HASH_SET).
    STRING_HASH_SET: Final = frozenset(
        {
            PROPERTY_TRACE_SWITCH,
            PROPERTY_MSG_REGION,
            PROPERTY_KEYS,
            PROPERTY_TAGS,
            PROPERTY_WAIT_STORE_MSG_OK,
            PROPERTY_DELAY_TIME_LEVEL,
            PROPERTY_RETRY_TOPIC,
            PROPERTY_REAL_TOPIC,
            PROPERTY_REAL_QUEUE_ID,
            PROPERTY_TRANSACTION_PREPARED,
            PROPERTY_PRODUCER_GROUP,
            PROPERTY_MIN_OFFSET,
            PROPERTY_MAX_OFFSET,
            PROPERTY_BUYER_ID,
            PROPERTY_ORIGIN_MESSAGE_ID,
            PROPERTY_TRANSFER_FLAG,
            PROPERTY_CORRECTION_FLAG,
            PROPERTY_MQ2_FLAG,
            PROPERTY_RECONSUME_TIME,
            PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
            PROPERTY_MAX_RECONSUME_TIMES,
            PROPERTY_CONSUME_START_TIMESTAMP,
            PROPERTY_INSTANCE_ID,
            PROPERTY_CORRELATION_ID,
            PROPERTY_MESSAGE_REPLY_TO_CLIENT,
            PROPERTY_MESSAGE_TTL,
            PROPERTY_REPLY_MESSAGE_ARRIVE_TIME,
            PROPERTY_PUSH_REPLY_TIME,
            PROPERTY_CLUSTER,
            PROPERTY_MESSAGE_TYPE,
            PROPERTY_INNER_MULTI_QUEUE_OFFSET,
        }
    )


# ------------------------------------------------------------------------------------------ properties


def encode_properties(props: Mapping[str, str | None] | None) -> str:
    """Java's MessageDecoder.messageProperties2String (4.9.x): name\\x01value\\x02..., no trailing \\x02."""
    if not props:
        return ""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None)


def decode_properties(s: str | bytes | bytearray | memoryview | None) -> dict[str, str]:
    """Java's string2messageProperties: tolerant of a trailing \\x02; drops empty names/values like Java."""
    if not s:
        return {}
    if not isinstance(s, str):
        s = bytes(s).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for item in s.split(PROPERTY_SEPARATOR):
        k, sep, v = item.partition(NAME_VALUE_SEPARATOR)
        if sep and k and v:
            out[k] = v
    return out


# ------------------------------------------------------------------------------------------ Java hash

_B31_DIGITS = b"0123456789abcdefghijklmnopqrstu"
# Each Latin-1 code unit c = 31*q + r with q, r < 31, so a string's Java hash (a base-31 polynomial of
# its code units) is int(R, 31) + 31*int(Q, 31) mod 2^32 -- two C-speed parses instead of a Python loop.
_B31_LOW = bytes(_B31_DIGITS[c % 31] for c in range(256))
_B31_HIGH = bytes(_B31_DIGITS[c // 31] for c in range(256))
_MASK32 = 0xFFFFFFFF


def java_hash_unsigned(s: str) -> int:
    """Java String.hashCode() as an unsigned 32-bit value."""
    n = len(s)
    if n == 0:
        return 0
    try:
        b = s.encode("latin-1")
    except UnicodeEncodeError:
        return _java_hash_utf16(s)
    if n < 8 or n > 4000:  # short: a loop is as fast; long: int() caps non-power-of-2 digit strings
        h = 0
        for c in b:
            h = (31 * h + c) & _MASK32
        return h
    return (int(b.translate(_B31_LOW), 31) + 31 * int(b.translate(_B31_HIGH), 31)) & _MASK32


def _java_hash_utf16(s: str) -> int:
    data = s.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & _MASK32
    return h


def java_string_hash(s: str) -> int:
    """Java String.hashCode(): signed 32-bit, computed over UTF-16 code units."""
    h = java_hash_unsigned(s)
    return h - 0x100000000 if h & 0x80000000 else h


# ------------------------------------------------------------------------------------------ hosts


def host_to_bytes(host: str) -> bytes:
    """IP text to 4 (IPv4) or 16 (IPv6) bytes."""
    if ":" in host:
        return socket.inet_pton(socket.AF_INET6, host)
    return socket.inet_aton(host)


def bytes_to_host(b: bytes | memoryview) -> str:
    if len(b) == 4:
        return socket.inet_ntoa(bytes(b))
    return socket.inet_ntop(socket.AF_INET6, bytes(b))


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """Java UtilAll.crc32: CRC32 masked to 31 bits (so it is never negative as a Java int)."""
    return zlib.crc32(body) & 0x7FFFFFFF


# ------------------------------------------------------------------------------------------ layout


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """Byte offsets of a v1 record's fields; they depend only on the two IPv6 sys flag bits."""

    born_host_len: int  # address + port: 8 (IPv4) or 20 (IPv6)
    store_host_len: int
    header: struct.Struct  # TOTALSIZE .. BODY length (inclusive)
    born_host_pos: int
    store_timestamp_pos: int
    store_host_pos: int
    reconsume_times_pos: int
    body_len_pos: int
    body_pos: int

    TOTAL_SIZE_POS = 0
    MAGIC_CODE_POS = 4
    BODY_CRC_POS = 8
    QUEUE_ID_POS = 12
    FLAG_POS = 16
    QUEUE_OFFSET_POS = 20
    PHYSICAL_OFFSET_POS = 28
    SYS_FLAG_POS = 36
    BORN_TIMESTAMP_POS = 40

    @property
    def queue_offset_pos(self) -> int:
        return self.QUEUE_OFFSET_POS

    @property
    def physical_offset_pos(self) -> int:
        return self.PHYSICAL_OFFSET_POS

    @property
    def fixed_size(self) -> int:
        """Record size without body, topic and properties bytes (91 for IPv4 hosts)."""
        return self.body_pos + 1 + 2

    def record_size(self, body_len: int, topic_len: int, props_len: int) -> int:
        return self.body_pos + body_len + 1 + topic_len + 2 + props_len

    @staticmethod
    def for_sys_flag(sys_flag: int) -> RecordLayout:
        return _LAYOUTS[(sys_flag >> 4) & 0x3]


def _make_layout(born_v6: bool, store_v6: bool) -> RecordLayout:
    born_ip = 16 if born_v6 else 4
    store_ip = 16 if store_v6 else 4
    # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
    # BORNHOST(ip, port) STORETIMESTAMP STOREHOST(ip, port) RECONSUMETIMES PREPAREDTXOFFSET BODYLEN
    fmt = f">iIiiiqqiq{born_ip}siq{store_ip}siiqi"
    born_host_pos = 48
    store_ts_pos = born_host_pos + born_ip + 4
    store_host_pos = store_ts_pos + 8
    reconsume_pos = store_host_pos + store_ip + 4
    body_len_pos = reconsume_pos + 4 + 8
    header = struct.Struct(fmt)
    assert header.size == body_len_pos + 4
    return RecordLayout(
        born_host_len=born_ip + 4,
        store_host_len=store_ip + 4,
        header=header,
        born_host_pos=born_host_pos,
        store_timestamp_pos=store_ts_pos,
        store_host_pos=store_host_pos,
        reconsume_times_pos=reconsume_pos,
        body_len_pos=body_len_pos,
        body_pos=body_len_pos + 4,
    )


_LAYOUTS: Final = (
    _make_layout(False, False),
    _make_layout(True, False),
    _make_layout(False, True),
    _make_layout(True, True),
)

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_SIZE_MAGIC = struct.Struct(">iI")
_QOFF_PHY = struct.Struct(">qq")
# Fields before the hosts are the same in every layout.
_HEAD = struct.Struct(">iIiiiqqiq")


def encode_message_record(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    body: bytes | bytearray | memoryview,
    properties: str,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_host: tuple[str, int],
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    body_crc: int | None = None,
) -> bytearray:
    """Encode one v1 CommitLog record. Host byte widths follow the BORNHOST/STOREHOST V6 sys flag bits."""
    layout = _LAYOUTS[(sys_flag >> 4) & 0x3]
    born_ip = host_to_bytes(born_host[0])
    store_ip = host_to_bytes(store_host[0])
    if len(born_ip) + 4 != layout.born_host_len or len(store_ip) + 4 != layout.store_host_len:
        raise ValueError("host address family does not match the IPv6 bits of sys_flag")
    topic_b = topic.encode("utf-8")
    props_b = properties.encode("utf-8")
    if len(topic_b) > MAX_TOPIC_LENGTH:
        raise ValueError(f"topic too long: {len(topic_b)} > {MAX_TOPIC_LENGTH} bytes")
    if len(props_b) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties too long: {len(props_b)} > {MAX_PROPERTIES_LENGTH} bytes")
    body_len = len(body)
    total = layout.body_pos + body_len + 1 + len(topic_b) + 2 + len(props_b)
    crc = (zlib.crc32(body) & 0x7FFFFFFF) if body_crc is None else body_crc
    buf = bytearray(total)
    layout.header.pack_into(
        buf,
        0,
        total,
        MAGIC_CODE,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_ip,
        born_host[1],
        store_timestamp,
        store_ip,
        store_host[1],
        reconsume_times,
        prepared_transaction_offset,
        body_len,
    )
    pos = layout.body_pos
    buf[pos : pos + body_len] = body
    pos += body_len
    buf[pos] = len(topic_b)
    buf[pos + 1 : pos + 1 + len(topic_b)] = topic_b
    pos += 1 + len(topic_b)
    _I16.pack_into(buf, pos, len(props_b))
    buf[pos + 2 :] = props_b
    return buf


# ------------------------------------------------------------------------------------------ msg id


def create_offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    """Broker-side message id: store host ip + port int32 + commit log offset int64, upper-case hex."""
    return (host_to_bytes(host) + struct.pack(">iq", port, commit_log_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(host, port, commit log offset) from an offset msg id (32 hex chars IPv4, 56 IPv6)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"not an offset message id: {msg_id!r}") from None
    if len(raw) == 16:
        ip_len = 4
    elif len(raw) == 28:
        ip_len = 16
    else:
        raise ValueError(f"not an offset message id (bad length {len(msg_id)}): {msg_id!r}")
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    return bytes_to_host(raw[:ip_len]), port, offset


def offset_msg_id_from_bytes(store_host_bytes: bytes, commit_log_offset: int) -> str:
    """Fast path when the store host is already in wire form (ip bytes + port int32)."""
    return (store_host_bytes + _I64.pack(commit_log_offset)).hex().upper()


# ------------------------------------------------------------------------------------------ MessageExt


class MessagePropertyAccessors:
    """Named views of the common properties, shared by every message class with a `properties` dict."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@dataclass(slots=True)
class MessageExt(MessagePropertyAccessors):
    topic: str = ""
    body: bytes = b""
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    store_size: int = 0
    queue_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    msg_id: str = ""
    commit_log_offset: int = 0
    body_crc: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def put_property(self, name: str, value: str) -> None:
        self.properties[name] = value

    @property
    def offset_msg_id(self) -> str:
        return self.msg_id

    @property
    def stored_body_length(self) -> int:
        """Body bytes as stored (a pulled message reads it from its record without copying the body
        out, so the compressed length when the body came compressed); ProcessQueue's size count."""
        return len(self.body)


def decode_message(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    *,
    read_body: bool = True,
    decompress_body: bool = False,
    _cache: dict[bytes, str] | None = None,
) -> tuple[MessageExt, int]:
    """Decode the record at `offset`; returns (message, offset of the next record).

    `_cache` (decode_messages passes one per body) memoises host strings and msg id prefixes, which
    repeat across the records of one pull response."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    if end - offset < 8:
        raise ValueError(f"truncated message record at offset {offset}: {end - offset} bytes left")
    total, magic = _SIZE_MAGIC.unpack_from(mv, offset)
    if magic != MAGIC_CODE:
        raise ValueError(f"bad magic code 0x{magic:08X} at offset {offset}")
    if total <= 0 or offset + total > end:
        raise ValueError(
            f"truncated message record at offset {offset}: size {total}, {end - offset} bytes left"
        )
    sys_flag = _I32.unpack_from(mv, offset + RecordLayout.SYS_FLAG_POS)[0]
    layout = _LAYOUTS[(sys_flag >> 4) & 0x3]
    if total < layout.fixed_size:
        raise ValueError(f"record at offset {offset} is smaller ({total}) than its fixed part")
    (
        _total,
        _magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phy_offset,
        _sys,
        born_ts,
        born_ip,
        born_port,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body_len,
    ) = layout.header.unpack_from(mv, offset)
    rec_end = offset + total
    pos = offset + layout.body_pos
    if body_len < 0 or pos + body_len + 3 > rec_end:
        raise ValueError(f"corrupt record at offset {offset}: body length {body_len}")
    body = b""
    if read_body and body_len > 0:
        body = bytes(mv[pos : pos + body_len])
        if decompress_body and sys_flag & MessageSysFlag.COMPRESSED_FLAG:
            try:
                body = uncompress_body(body, sys_flag)
            except ValueError as e:
                raise ValueError(f"record at offset {offset}: {e}") from None
    pos += body_len
    topic_len = mv[pos]
    if topic_len > 127:  # a signed byte in Java
        raise ValueError(f"corrupt record at offset {offset}: topic length {topic_len - 256}")
    pos += 1
    if pos + topic_len + 2 > rec_end:
        raise ValueError(f"corrupt record at offset {offset}: topic overruns the record")
    topic = str(mv[pos : pos + topic_len], "utf-8")
    pos += topic_len
    props_len = _I16.unpack_from(mv, pos)[0]
    pos += 2
    if props_len < 0 or pos + max(props_len, 0) != rec_end:
        raise ValueError(f"corrupt record at offset {offset}: size fields do not add up to {total}")
    props = decode_properties(str(mv[pos : pos + props_len], "utf-8", "replace")) if props_len > 0 else {}
    if _cache is None:
        _cache = {}
    born = _cache.get(born_ip)
    if born is None:
        born = _cache[born_ip] = bytes_to_host(born_ip)
    store_key = store_ip + _I32.pack(store_port)
    store = _cache.get(store_key)
    if store is None:
        store = _cache[store_key] = bytes_to_host(store_ip)
        _cache[b"#" + store_key] = store_key.hex().upper()
    msg = MessageExt(
        topic=topic,
        body=body,
        flag=flag,
        properties=props,
        queue_id=queue_id,
        store_size=total,
        queue_offset=queue_offset,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=(born, born_port),
        store_timestamp=store_ts,
        store_host=(store, store_port),
        msg_id=_cache[b"#" + store_key] + _I64.pack(phy_offset).hex().upper(),
        commit_log_offset=phy_offset,
        body_crc=crc,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
    )
    return msg, rec_end


# ------------------------------------------------------------------------------------------ pull bodies

# The base class's slot descriptors: PulledMessageExt keeps its decoded body and properties in them.
_BODY_SLOT = MessageExt.__dict__["body"]
_PROPS_SLOT = MessageExt.__dict__["properties"]
# Fields before the hosts (same in every layout): what a pull-body decode reads eagerly.
_PULL_HEAD = struct.Struct(">iIiiiqqi")  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
_MIN_SIZE = tuple(layout.fixed_size for layout in _LAYOUTS)
_BODY_LEN_POS = tuple(layout.body_len_pos for layout in _LAYOUTS)
_NO_EXTRA: tuple[tuple[str, str], ...] = ()
_HEADER_DONE = 1
_BODY_DONE = 2
_PROPS_DONE = 4
_DECOMPRESS = 8
# ip bytes -> text and (ip, port) bytes -> msg id prefix; few distinct hosts, bounded anyway.
_HOST_CACHE: dict[bytes, str] = {}
_HOST_CACHE_MAX = 1024


def decode_record_properties(buf: bytes | bytearray | memoryview) -> dict[str, str]:
    """The properties of the one record in `buf`, read straight from its size fields without building a
    MessageExt (what a broker's property filter needs of each record it scans: ~1 us against ~4 for
    decode_message). ValueError when the record is corrupt."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    if end < _MIN_SIZE[0]:
        raise ValueError(f"truncated message record: {end} bytes")
    sys_flag = _I32.unpack_from(mv, RecordLayout.SYS_FLAG_POS)[0]
    k = (sys_flag >> 4) & 0x3
    if end < _MIN_SIZE[k]:
        raise ValueError(f"truncated message record: {end} bytes")
    body_len = _I32.unpack_from(mv, _BODY_LEN_POS[k])[0]
    pos = _BODY_LEN_POS[k] + 4 + body_len
    if body_len < 0 or pos + 3 > end:
        raise ValueError(f"corrupt record: body length {body_len}")
    pos += 1 + mv[pos]
    if pos + 2 > end:
        raise ValueError("corrupt record: topic overruns the record")
    props_len = _I16.unpack_from(mv, pos)[0]
    pos += 2
    if props_len < 0 or pos + props_len > end:
        raise ValueError(f"corrupt record: properties length {props_len}")
    return decode_properties(str(mv[pos : pos + props_len], "utf-8", "replace")) if props_len > 0 else {}


def _cached_host(ip: bytes) -> str:
    host = _HOST_CACHE.get(ip)
    if host is None:
        if len(_HOST_CACHE) >= _HOST_CACHE_MAX:
            _HOST_CACHE.clear()
        host = _HOST_CACHE[ip] = bytes_to_host(ip)
    return host


_MSG_ID_PREFIX: dict[tuple[bytes, int], str] = {}


def _msg_id_prefix(store_ip: bytes, store_port: int) -> str:
    if len(_MSG_ID_PREFIX) >= _HOST_CACHE_MAX:
        _MSG_ID_PREFIX.clear()
    prefix = _MSG_ID_PREFIX[(store_ip, store_port)] = (store_ip + _I32.pack(store_port)).hex().upper()
    return prefix


_HEADER_FIELDS = (
    "topic", "flag", "body_crc", "commit_log_offset", "born_timestamp", "born_host", "store_timestamp", "store_host",
    "reconsume_times", "prepared_transaction_offset", "msg_id",
)


def _header_field(name: str) -> property:
    index = _HEADER_FIELDS.index(name)

    def get(self: PulledMessageExt) -> object:
        if not self._done & _HEADER_DONE:
            self._decode_header()
        return self._hdr[index]

    def put(self: PulledMessageExt, value: object) -> None:
        self._decode_header()  # so a later first read cannot overwrite the value set here
        hdr = list(self._hdr)
        hdr[index] = value
        self._hdr = tuple(hdr)

    return property(get, put)


def _eager_message_ext(values: dict[str, object]) -> MessageExt:
    return MessageExt(**values)  # type: ignore[arg-type]


class PulledMessageExt(MessageExt):
    """A MessageExt of a pull-response body, decoded on demand (what `decode_messages` returns).

    Decoding a record eagerly costs ~4 us in Python, most of it on fields a consumer may never read
    (hosts, msg id, properties, a body copy). Here `queue_id`, `queue_offset`, `store_size` and
    `sys_flag` are read at once; the other header fields are decoded together on the first read of
    any of them, `body` (copied, decompressed) and `properties` (parsed) each on their first read.
    Every attribute reads and writes as on MessageExt; a value written before it was first read
    stays. Properties added by the client before the first read (`add_properties`) are merged in
    then. Holds the pull body until every lazy part of every message of it was read.
    """

    # stored_body_length: a slot here, shadowing MessageExt's property (read at C speed in bulk).
    __slots__ = ("_buf", "_pos", "_done", "_extra", "_hdr", "stored_body_length")
    _buf: bytes
    _pos: int
    _done: int  # _HEADER_DONE | _BODY_DONE | _PROPS_DONE | _DECOMPRESS (flags, no exceptions on reads)
    _extra: tuple[tuple[str, str], ...]  # properties to merge at their first read
    _hdr: tuple[object, ...]  # the decoded header fields, in _HEADER_FIELDS order (one store)

    def __init__(self, **fields: object) -> None:
        """A fully decoded instance from field values (what dataclasses.replace builds)."""
        self._done = _HEADER_DONE | _BODY_DONE | _PROPS_DONE
        self._extra = _NO_EXTRA
        self._hdr = (None,) * len(_HEADER_FIELDS)
        MessageExt.__init__(self, **fields)  # type: ignore[arg-type]
        self.stored_body_length = len(self.body)

    def _field_values(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in MessageExt.__dataclass_fields__}

    def __reduce__(self) -> tuple[object, ...]:
        # copy / pickle: a plain, fully decoded MessageExt (no pull body carried along).
        return _eager_message_ext, (self._field_values(),)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        names = MessageExt.__dataclass_fields__
        return all(getattr(self, n) == getattr(other, n) for n in names)

    __hash__ = None  # type: ignore[assignment]  # mutable, like MessageExt

    def get_property(self, name: str) -> str | None:
        if not self._done & _PROPS_DONE:
            # A property the client added (e.g. CONSUME_START_TIME, read by the expired-message
            # sweep on the event loop) without parsing -- and without racing a listener thread.
            for key, value in reversed(self._extra):
                if key == name:
                    return value
        return self.properties.get(name)

    def _decode_header(self) -> None:
        if self._done & _HEADER_DONE:
            return
        buf = self._buf
        pos = self._pos
        layout = _LAYOUTS[(self.sys_flag >> 4) & 0x3]
        (
            _total, _magic, crc, _qid, flag, _qoff, phy_offset, _sys, born_ts, born_ip, born_port,
            store_ts, store_ip, store_port, reconsume, prepared, body_len,
        ) = layout.header.unpack_from(buf, pos)
        topic_pos = pos + layout.body_pos + body_len
        rec_end = pos + self.store_size
        if body_len < 0 or topic_pos + 3 > rec_end:
            raise ValueError(f"corrupt record at offset {pos}: body length {body_len}")
        topic_len = buf[topic_pos]
        if topic_len > 127 or topic_pos + 3 + topic_len > rec_end:
            raise ValueError(f"corrupt record at offset {pos}: topic length {topic_len}")
        born = _HOST_CACHE.get(born_ip) or _cached_host(born_ip)
        store = _HOST_CACHE.get(store_ip) or _cached_host(store_ip)
        prefix = _MSG_ID_PREFIX.get((store_ip, store_port)) or _msg_id_prefix(store_ip, store_port)
        self._hdr = (
            str(buf[topic_pos + 1 : topic_pos + 1 + topic_len], "utf-8"), flag, crc, phy_offset, born_ts,
            (born, born_port), store_ts, (store, store_port), reconsume, prepared, f"{prefix}{phy_offset:016X}",
        )
        self._done |= _HEADER_DONE

    def _sizes(self) -> tuple[int, int]:
        """(body position, body length); decode_messages checked the length against the record size."""
        return self._pos + _LAYOUTS[(self.sys_flag >> 4) & 0x3].body_pos, self.stored_body_length

    @property
    def body(self) -> bytes:  # type: ignore[override]
        done = self._done
        if done & _BODY_DONE:
            return _BODY_SLOT.__get__(self, None)  # type: ignore[no-any-return]
        body_pos, body_len = self._sizes()
        body = self._buf[body_pos : body_pos + body_len]
        if done & _DECOMPRESS and self.sys_flag & MessageSysFlag.COMPRESSED_FLAG and body:
            try:
                body = uncompress_body(body, self.sys_flag)
            except ValueError as e:
                raise ValueError(f"record at offset {self._pos}: {e}") from None
        _BODY_SLOT.__set__(self, body)
        self._done |= _BODY_DONE
        return body

    @body.setter
    def body(self, value: bytes) -> None:
        _BODY_SLOT.__set__(self, value)
        self._done |= _BODY_DONE

    @property
    def properties(self) -> dict[str, str]:  # type: ignore[override]
        if self._done & _PROPS_DONE:
            return _PROPS_SLOT.__get__(self, None)  # type: ignore[no-any-return]
        buf = self._buf
        pos = self._pos
        body_pos, body_len = self._sizes()
        topic_pos = body_pos + body_len
        props_pos = topic_pos + 1 + buf[topic_pos]
        rec_end = pos + self.store_size
        if props_pos + 2 > rec_end:
            raise ValueError(f"corrupt record at offset {pos}: topic overruns the record")
        props_len = _I16.unpack_from(buf, props_pos)[0]
        props_pos += 2
        if props_len < 0 or props_pos + props_len != rec_end:
            raise ValueError(f"corrupt record at offset {pos}: size fields do not add up to {self.store_size}")
        props = decode_properties(str(buf[props_pos:rec_end], "utf-8", "replace")) if props_len else {}
        extra = self._extra
        if extra:
            props.update(extra)
            self._extra = _NO_EXTRA
        _PROPS_SLOT.__set__(self, props)
        self._done |= _PROPS_DONE
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._extra = _NO_EXTRA
        _PROPS_SLOT.__set__(self, value)
        self._done |= _PROPS_DONE

    topic = _header_field("topic")
    flag = _header_field("flag")
    body_crc = _header_field("body_crc")
    commit_log_offset = _header_field("commit_log_offset")
    born_timestamp = _header_field("born_timestamp")
    born_host = _header_field("born_host")
    store_timestamp = _header_field("store_timestamp")
    store_host = _header_field("store_host")
    msg_id = _header_field("msg_id")
    reconsume_times = _header_field("reconsume_times")
    prepared_transaction_offset = _header_field("prepared_transaction_offset")


def add_properties(msgs: Iterable[MessageExt], pairs: tuple[tuple[str, str], ...]) -> None:
    """Put the same properties on every message; a pulled message whose properties were not parsed
    yet takes them at its first read (no parsing now). `pairs` is shared, never mutated."""
    for m in msgs:
        if type(m) is PulledMessageExt and not m._done & _PROPS_DONE:
            extra = m._extra
            m._extra = extra + pairs if extra else pairs
        else:
            m.properties.update(pairs)


def decode_messages(
    buf: bytes | bytearray | memoryview, *, read_body: bool = True, decompress_body: bool = False
) -> list[MessageExt]:
    """Decode a pull-response body (records back to back) into PulledMessageExt (decoded on demand;
    the record sizes and magic codes are checked here). read_body=False decodes eagerly, bodiless."""
    if not read_body:
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        eager: list[MessageExt] = []
        pos = 0
        cache: dict[bytes, str] = {}
        while pos < len(mv):
            msg, pos = decode_message(mv, pos, read_body=False, _cache=cache)
            eager.append(msg)
        return eager
    if type(buf) is not bytes:
        buf = bytes(buf)  # the messages keep it: never a view of memory that may change or go
    out: list[MessageExt] = []
    append = out.append
    new = object.__new__
    cls = PulledMessageExt
    unpack = _PULL_HEAD.unpack_from
    min_size = _MIN_SIZE
    body_len_pos = _BODY_LEN_POS
    i32 = _I32.unpack_from
    done = _DECOMPRESS if decompress_body else 0
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < 40:
            raise ValueError(f"truncated message record at offset {pos}: {end - pos} bytes left")
        total, magic, _crc, queue_id, _flag, queue_offset, _phy, sys_flag = unpack(buf, pos)
        if magic != MAGIC_CODE:
            raise ValueError(f"bad magic code 0x{magic:08X} at offset {pos}")
        if pos + total > end:
            raise ValueError(f"truncated message record at offset {pos}: size {total}, {end - pos} bytes left")
        layout = sys_flag & 0x30
        if total < min_size[layout >> 4]:
            raise ValueError(f"record at offset {pos} is smaller ({total}) than its fixed part")
        body_len = i32(buf, pos + body_len_pos[layout >> 4])[0]
        if body_len < 0 or body_len > total - min_size[layout >> 4]:
            raise ValueError(f"corrupt record at offset {pos}: body length {body_len}")
        m = new(cls)
        m._buf = buf
        m._pos = pos
        m._done = done
        m._extra = _NO_EXTRA
        m.queue_id = queue_id
        m.queue_offset = queue_offset
        m.sys_flag = sys_flag
        m.store_size = total
        m.stored_body_length = body_len
        append(m)
        pos += total
    return out


__all__ = [
    "BLANK_MAGIC_CODE",
    "MAGIC_CODE",
    "MAX_PROPERTIES_LENGTH",
    "MAX_TOPIC_LENGTH",
    "MessageConst",
    "MessageExt",
    "MessageSysFlag",
    "PulledMessageExt",
    "PermName",
    "RecordLayout",
    "add_properties",
    "body_crc",
    "bytes_to_host",
    "create_offset_msg_id",
    "decode_message",
    "decode_messages",
    "decode_offset_msg_id",
    "decode_properties",
    "encode_message_record",
    "encode_properties",
    "host_to_bytes",
    "java_hash_unsigned",
    "java_string_hash",
    "offset_msg_id_from_bytes",
]
