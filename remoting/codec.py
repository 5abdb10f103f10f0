"""Sans-I/O RemotingCommand codec: bytes in, commands out (and back). No sockets here.

Frame: int32 BE total length (header + body + 4, not itself), int32 BE
(serializeType << 24 | headerLength), header bytes, body bytes.
"""

from __future__ import annotations

import json
import operator
import struct
from collections.abc import Callable
from sys import intern
from typing import Any

import msgpack

from .codes import LanguageCode, RemotingFlag, SerializeType
from .command import DEFAULT_VERSION, RemotingCommand
from .errors import ProtocolError

MAX_FRAME_SIZE = 16 * 1024 * 1024

_PREFIX = struct.Struct(">II")
_LEN = struct.Struct(">I")
# RocketMQSerializable fixed part: code, language, version, opaque, flag.
_BIN_FIXED = struct.Struct(">hbhii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_BIN_LEAD = struct.Struct(">hbh")  # code, language, version: _BIN_FIXED up to the opaque

_SERIALIZE_NAMES = {SerializeType.JSON: "JSON", SerializeType.ROCKETMQ: "ROCKETMQ", SerializeType.MSGPACK: "JSON"}
_json_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_json_loads = json.loads
_json_quote = json.encoder.encode_basestring  # a str as _json_dumps writes it (ensure_ascii=False)
# The C scanner json.loads ends in, called directly: json.loads spends as long again on its own Python
# layers (encoding detection of bytes, whitespace checks) for a ~400-byte header (timeit: 1.5 against 2.7 us).
_json_scan = json.scanner.make_scanner(json.JSONDecoder())
_msgpack_packb = msgpack.Packer(use_bin_type=True).pack
_msgpack_unpackb = msgpack.unpackb
_language = LanguageCode.parse
_RPC_TYPE = RemotingFlag.RPC_TYPE
# Enum members bound once: a class attribute lookup on an Enum costs as much as a short function call,
# and these run for every frame.
_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ
_MSGPACK = SerializeType.MSGPACK
_LANGUAGE_BY_NUMBER = {int(m): m for m in LanguageCode}
# The msgpack header is a 7-array; its first byte (fixarray of 7) for spliced headers.
_FIXARRAY7 = b"\x97"


def _wire_str(v: Any) -> str:
    # Java peers expect every extFields value as a string; booleans in Java spelling.
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _stringify(ext: dict[str, Any]) -> dict[str, str]:
    for v in ext.values():
        if not isinstance(v, str):
            return {k: _wire_str(v) for k, v in ext.items() if v is not None}
    return ext


# ---------------------------------------------------------------- header encoders


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The header as JSON (fastjson's field order, extFields last, every value a str): the bytes json.dumps
    gives for that object, written out here with json's C string quoting. json.dumps spends most of its time
    setting up its encoder per call: 1.2 against 2.6 us (timeit) for a pull answer's header."""
    remark = cmd.remark
    ext = cmd.ext_fields
    if remark is not None and remark.__class__ is not str:
        return _encode_json_header_dumps(cmd)
    head = (f'{{"code":{int(cmd.code)},"flag":{int(cmd.flag)},"language":"{cmd.language.name}",'
            f'"opaque":{int(cmd.opaque)},"serializeTypeCurrentRPC":"JSON","version":{int(cmd.version)}')
    if remark is not None:
        head = f'{head},"remark":{_json_quote(remark)}'
    if not ext:
        return f"{head}}}".encode()
    items = []
    for k, v in ext.items():
        if v.__class__ is not str:
            if v is None:
                continue  # (_stringify drops None values)
            v = _wire_str(v)
        if k.__class__ is not str:
            return _encode_json_header_dumps(cmd)  # json.dumps' own key conversions
        items.append(f"{_json_quote(k)}:{_json_quote(v)}")
    return f'{head},"extFields":{{{",".join(items)}}}}}'.encode()


def _encode_json_header_dumps(cmd: RemotingCommand) -> bytes:
    """encode_json_header through json.dumps (what the fast path writes; any unusual value)."""
    header: dict[str, Any] = {
        "code": cmd.code,
        "flag": cmd.flag,
        "language": cmd.language.name,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields:
        header["extFields"] = _stringify(cmd.ext_fields)
    return _json_dumps(header).encode()


def json_answer_lead(code: int, language: LanguageCode) -> bytes:
    """encode_json_header's bytes of a bodiless answer (flag RPC_TYPE set, no remark) up to its opaque."""
    return f'{{"code":{int(code)},"flag":{int(_RPC_TYPE)},"language":"{language.name}","opaque":'.encode()


def json_answer_ext_head(version: int) -> str:
    """What follows the opaque in that answer, up to the first extFields key (the fields after the
    opaque, in encode_json_header's order); the fields, then "}}", end it."""
    return f',"serializeTypeCurrentRPC":"JSON","version":{int(version)},"extFields":{{'


def rocketmq_answer_lead(code: int, language: LanguageCode, version: int) -> bytes:
    """encode_rocketmq_header's bytes of an answer up to its opaque: code, language, version."""
    return _BIN_LEAD.pack(int(code), int(language), int(version))


# What follows the opaque in a bodiless answer's ROCKETMQ header: the flag (RPC_TYPE set) and an empty
# remark; then the extFields length and its entries (rocketmq_ext_entry), as encode_rocketmq_header writes.
ROCKETMQ_ANSWER_FLAG_NO_REMARK = struct.pack(">ii", int(RemotingFlag.RPC_TYPE), 0)
rocketmq_i32 = _I32.pack


def rocketmq_ext_key(key: str) -> bytes:
    """An extFields entry's key as a ROCKETMQ header writes it: its length (int16), then the key."""
    kb = key.encode()
    return _I16.pack(len(kb)) + kb


def rocketmq_ext_entry(key: str, value: str) -> bytes:
    """One extFields entry of a ROCKETMQ header: the key (rocketmq_ext_key), value length (int32), value."""
    vb = value.encode()
    return rocketmq_ext_key(key) + _I32.pack(len(vb)) + vb


def json_str(value: str) -> str:
    """`value` as encode_json_header writes a str (quoted, escaped, non-ASCII kept)."""
    return _json_quote(value)


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    parts = [_BIN_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag)]
    if cmd.remark:
        rb = cmd.remark.encode()
        parts.append(_I32.pack(len(rb)))
        parts.append(rb)
    else:
        parts.append(_I32.pack(0))
    if cmd.ext_fields:
        fields = []
        for k, v in cmd.ext_fields.items():
            if v is None:
                continue
            kb = k.encode()
            vb = _wire_str(v).encode()
            fields.append(_I16.pack(len(kb)))
            fields.append(kb)
            fields.append(_I32.pack(len(vb)))
            fields.append(vb)
        ext = b"".join(fields)
        parts.append(_I32.pack(len(ext)))
        parts.append(ext)
    else:
        parts.append(_I32.pack(0))
    return b"".join(parts)


def encode_msgpack_header(cmd: RemotingCommand) -> bytes:
    # Compact positional form: [code, language, version, opaque, flag, remark, extFields]. msgpack packs
    # the IntEnum language as the plain int it is.
    packed_ext = cmd.packed_ext
    if packed_ext is not None:
        # The builder already has extFields in msgpack form (the producer's cached SEND_MESSAGE_V2
        # pieces): pack the six scalars as a 6-array and splice the map in as the 7th element.
        return _FIXARRAY7 + _msgpack_packb((cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark))[
            1:
        ] + packed_ext
    return _msgpack_packb((cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields))


_HEADER_ENCODERS = {
    SerializeType.JSON: encode_json_header,
    SerializeType.ROCKETMQ: encode_rocketmq_header,
    SerializeType.MSGPACK: encode_msgpack_header,
}


def encode_header(cmd: RemotingCommand) -> bytes:
    return _HEADER_ENCODERS[cmd.serialize_type](cmd)


_pack_prefix = _PREFIX.pack


def encode_parts(cmd: RemotingCommand) -> tuple[bytes, bytes | bytearray | memoryview | None]:
    """Prefix+header as one bytes object, and the body untouched (so large bodies are not copied)."""
    st = cmd.serialize_type
    header = encode_msgpack_header(cmd) if st is _MSGPACK else _HEADER_ENCODERS[st](cmd)
    body = cmd.body
    blen = len(body) if body is not None else 0
    hlen = len(header)
    total = 4 + hlen + blen
    if total > MAX_FRAME_SIZE:
        raise ProtocolError(f"frame of {total} bytes exceeds the {MAX_FRAME_SIZE} byte limit")
    return _pack_prefix(total, (st << 24) | hlen) + header, (body if blen else None)


# encode_msgpack_request_head: per request code, the header's constant lead (fixarray of 7, code,
# language, version) and tail after the opaque (flag 0, remark nil).
_MSGPACK_REQUEST_LEADS: dict[int, bytes] = {}
_MSGPACK_FLAG0_NO_REMARK = b"\x00\xc0"
_MSGPACK_STYPE_BITS = int(SerializeType.MSGPACK) << 24


def encode_msgpack_request_head(code: int, opaque: int, ext_parts: tuple[bytes, ...], body_len: int) -> bytes:
    """Prefix + MSGPACK header of a plain request (flag 0, no remark, this side's language and version)
    whose extFields map is already packed, as the concatenation of `ext_parts`: the exact bytes
    encode_parts gives for RemotingCommand(code, opaque, 0, None, ..., packed_ext=b"".join(ext_parts),
    serialize_type=MSGPACK), built without a command object (the producer's pipelined sends)."""
    lead = _MSGPACK_REQUEST_LEADS.get(code)
    if lead is None:
        lead = _FIXARRAY7 + _msgpack_packb((code, LanguageCode.PYTHON, DEFAULT_VERSION))[1:]
        _MSGPACK_REQUEST_LEADS[code] = lead
    header = b"".join((lead, _msgpack_packb(opaque), _MSGPACK_FLAG0_NO_REMARK, *ext_parts))
    hlen = len(header)
    total = 4 + hlen + body_len
    if total > MAX_FRAME_SIZE:
        raise ProtocolError(f"frame of {total} bytes exceeds the {MAX_FRAME_SIZE} byte limit")
    return _pack_prefix(total, _MSGPACK_STYPE_BITS | hlen) + header


def encode(cmd: RemotingCommand) -> bytes:
    head, body = encode_parts(cmd)
    return head + bytes(body) if body is not None else head


# ---------------------------------------------------------------- header decoders


def _json_document(data: bytes | memoryview) -> Any:
    """json.loads(data) for a UTF-8 document (what RocketMQ's headers are): the scanner alone when the value
    starts at the first byte and only whitespace follows it, else json.loads (same result, or its error)."""
    text = str(data, "utf-8")
    try:
        obj, end = _json_scan(text, 0)
    except StopIteration:
        return _json_loads(text)
    if end != len(text) and text[end:].strip(" \t\n\r"):  # (JSON's whitespace only, as json.loads)
        return _json_loads(text)  # raises "Extra data"
    return obj


def _json_int(value: Any) -> int:
    return value if value.__class__ is int else int(value)


def decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    try:
        obj = _json_document(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"undecodable JSON header: {e}") from None
    if not isinstance(obj, dict) or "code" not in obj:
        raise ProtocolError("JSON header is not an object with a code")
    get = obj.get
    ext = get("extFields")
    if ext is not None and not isinstance(ext, dict):
        raise ProtocolError("JSON header extFields is not an object")
    remark = get("remark")
    if remark is not None and remark.__class__ is not str:
        remark = str(remark)
    try:
        # Positional: code, opaque, flag, remark, ext_fields, body, language, version, serialize_type.
        cmd = RemotingCommand(
            _json_int(obj["code"]), _json_int(get("opaque", 0)), _json_int(get("flag", 0)), remark, ext, None,
            _language(get("language", "OTHER")), _json_int(get("version", 0)), _JSON,
        )
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"bad JSON header field: {e}") from None
    if ext:
        _attach_fixed(cmd, ext)
    return cmd


def _attach_fixed(cmd: RemotingCommand, ext: dict[str, Any]) -> None:
    """A SEND or PULL decoded from a JSON or ROCKETMQ header (RocketMQ's own clients): its SendFixed /
    PullFixed, found by its constant values."""
    code = cmd.code
    if code == _SEND_MESSAGE_V2 or code == _SEND_BATCH_MESSAGE:
        _attach_send_fixed_by_values(cmd, ext)
    elif code == _PULL_MESSAGE:
        _attach_pull_fixed_by_values(cmd, ext)


def decode_rocketmq_header(data: bytes | memoryview) -> RemotingCommand:
    # One copy to bytes up front (a header is a few hundred bytes): slicing bytes and decoding the slice
    # costs less than a memoryview slice copied into bytes first, per key and value (a Java client's
    # SEND_MESSAGE_V2: 5.7 -> 4.1 us with its SendFixed attached, timeit).
    if data.__class__ is not bytes:
        data = bytes(data)
    n = len(data)
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(data, 0)
        pos = _BIN_FIXED.size
        (rlen,) = _I32.unpack_from(data, pos)
        pos += 4
        if rlen < 0 or pos + rlen > n:
            raise ProtocolError(f"binary header remark length {rlen} out of range")
        remark = data[pos : pos + rlen].decode() if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(data, pos)
        pos += 4
        if elen < 0 or pos + elen > n:
            raise ProtocolError(f"binary header extFields length {elen} out of range")
        ext: dict[str, str] | None = None
        if elen:
            ext = {}
            end = pos + elen
            unpack_h = _I16.unpack_from
            unpack_i = _I32.unpack_from
            while pos < end:
                klen = unpack_h(data, pos)[0]
                k0 = pos + 2
                pos = k0 + klen
                if klen < 0 or pos > end:
                    raise ProtocolError("binary header key length out of range")
                vlen = unpack_i(data, pos)[0]
                v0 = pos + 4
                if vlen < 0 or v0 + vlen > end:
                    raise ProtocolError("binary header value length out of range")
                ext[data[k0:pos].decode()] = data[v0 : v0 + vlen].decode()
                pos = v0 + vlen
    except struct.error as e:
        raise ProtocolError(f"truncated binary header: {e}") from None
    except UnicodeDecodeError as e:
        raise ProtocolError(f"binary header is not UTF-8: {e}") from None
    # Positional: code, opaque, flag, remark, ext_fields, body, language, version, serialize_type.
    cmd = RemotingCommand(code, opaque, flag, remark, ext, None, _language(lang), version, _ROCKETMQ)
    if ext:
        _attach_fixed(cmd, ext)
    return cmd


def decode_msgpack_header(data: bytes | memoryview) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag, remark, ext = _msgpack_unpackb(data)  # (raw=False: msgpack's default)
        if ext is not None and ext.__class__ is not dict:
            raise ProtocolError("msgpack header extFields is not a map")
        if (
            code.__class__ is not int
            or opaque.__class__ is not int
            or flag.__class__ is not int
            or version.__class__ is not int
        ):
            code, opaque, flag, version = int(code), int(opaque), int(flag), int(version)
        language = _LANGUAGE_BY_NUMBER.get(lang) if lang.__class__ is int else None
        if language is None:  # (not `or`: JAVA, what brokers answer with, is 0 and falsy)
            language = _language(lang)
        # Positional: code, opaque, flag, remark, ext_fields, body, language, version, serialize_type.
        return RemotingCommand(code, opaque, flag, remark, ext, None, language, version, _MSGPACK)
    except ProtocolError:
        raise
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"undecodable msgpack header: {e}") from None


class SendFixed:
    """The extFields entries every pipelined SEND of one producer, topic and queue share (all but the
    per-message g and i), decoded once per distinct byte string by FrameDecoder. `header` is free for
    headers.send_header_v2_of to keep those fields decoded as a send header (a memo tuple, whose fields
    the broker's send path reads it also copies into `topic` .. `reconsume_times`), `queue_hint` for the
    receiving server to keep what it found for the header's queue (which must tell whose it is: a process
    may hold several servers, and this cache is the process's)."""

    # What a send reads first (count, header and its copied fields, queue_hint) leads the object: with 4 000
    # queues it is cold on every send, and these share its first cache lines (the memo tuple was more).
    __slots__ = (
        "count", "header", "topic", "queue_id", "batch", "sys_flag", "flag", "reconsume_times", "queue_hint",
        "ext", "template",
    )

    def __init__(self, ext: dict[str, Any], count: int) -> None:
        self.count = count  # map entries of the whole extFields (ext plus g and i)
        self.header: Any = None
        # Set with a memo tuple in header (headers.send_header_v2_of), read only while it is one.
        self.topic: str = ""
        self.queue_id = 0
        self.batch = False
        self.sys_flag = 0
        self.flag = 0
        self.reconsume_times: int | None = None
        self.queue_hint: Any = None
        self.ext = ext  # shared by every command decoded with it: read only
        # The whole extFields with g and i first (the wire order), for a command's own copy: dict.copy of
        # a dict sized for all its keys is one clone, where {"g": .., "i": .., **ext} inserts key by key
        # and resizes on the way.
        self.template: dict[str, Any] = {"g": None, "i": None, **ext}


# The producer (client.producer) writes a pipelined SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE header as the
# 7-array with its language and version, and an extFields map that starts with g (born timestamp) and
# i (properties) -- the only entries that change per message -- followed by the rest in bytes it
# caches. FrameDecoder reads such a header without the generic decoder: the lead and the two strings
# by hand, the rest looked up by its bytes (decoded with unpackb the first time). Anything else, or any
# doubt, takes decode_msgpack_header, whose result this equals.
_SEND_LEAD_310 = _FIXARRAY7 + _msgpack_packb((310, LanguageCode.PYTHON, DEFAULT_VERSION))[1:]
_SEND_LEAD_320 = _FIXARRAY7 + _msgpack_packb((320, LanguageCode.PYTHON, DEFAULT_VERSION))[1:]
_SEND_LEAD_LEN = len(_SEND_LEAD_310)
_G_KEY = b"\xa1g"
_I_KEY = b"\xa1i"
_send_fixed: dict[bytes, SendFixed] = {}
_SEND_FIXED_MAX = 16384  # distinct (producer, topic, queue, flags) headers remembered (~2 KB each); cleared when full
_PYTHON = LanguageCode.PYTHON


# One str object per distinct constant value (group, topic, default topic, "0", "false", ...) across every
# SendFixed and PullFixed (sys.intern, which the store and the topic config manager use for topic names
# too). A command's copy of a template increfs each value, and a send's topic is a key in several
# per-topic dicts: with a producer's 4 000 queues each SendFixed's own value objects were cold cache
# lines on every send, and a topic key that was an equal but different object cost a string compare
# against a cold one. (1 000 topics: broker CPU 0.2-1.0 us a message less in three A/Bs.)
def _interned_values(ext: dict[str, Any]) -> dict[str, Any]:
    return {k: intern(v) if v.__class__ is str else v for k, v in ext.items()}


# A SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE with a JSON or ROCKETMQ header (RocketMQ's own clients send these)
# gets a SendFixed too, found by its constant values (a..m but g and i: what the send header reads), so that
# the broker's send path takes the memoized route our producer's MSGPACK sends take. Other entries (a C++
# client's AccessKey, Signature, ...) are not in it: the send header reads none of them, and the command
# keeps its whole ext_fields. A Java client leaves l (maxReconsumeTimes) out unless it is set; m may be
# missing too (the generic header memo then declines, and the send path decodes the header each time).
_SEND_MESSAGE_V2 = 310
_SEND_BATCH_MESSAGE = 320
_SEND_V2_CONSTANT_NAMES = ("a", "b", "c", "d", "e", "f", "h", "j", "k", "l", "m")
_send_v2_required = operator.itemgetter("a", "b", "c", "d", "e", "f", "h", "j", "k")
_send_fixed_by_values: dict[tuple[Any, ...], SendFixed] = {}
_STR_OR_NONE = frozenset((str, type(None)))


def _named_constants(names: tuple[str, ...], values: tuple[Any, ...]) -> dict[str, Any]:
    """A JSON header's constant entries by name, as a SendFixed / PullFixed keeps them (absent ones left out)."""
    return _interned_values({n: v for n, v in zip(names, values, strict=True) if v is not None})


def _remember(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], fixed: Any, limit: int) -> Any:
    if len(cache) >= limit:
        cache.clear()
    cache[key] = fixed
    return fixed


def _attach_send_fixed_by_values(cmd: RemotingCommand, ext: dict[str, Any]) -> None:
    get = ext.get
    try:
        key = (*_send_v2_required(ext), get("l"), get("m"))
        if not _STR_OR_NONE.issuperset(map(type, key)):
            # Numbers (the C++ core writes d, e, f, h and l so): exact types in the key as well, since 1, 1.0
            # and True are equal keys that decode differently, and a SendFixed's header memo is exact.
            key += tuple(map(type, key))
        g = ext["g"]
        i = ext["i"]
        if g.__class__ is not str or i.__class__ is not str:
            return
        if key[9] is None and get("maxReconsumeTimes") is not None:
            return  # the long name stands in for l: not a memoizable header
        fixed = _send_fixed_by_values.get(key)
    except (KeyError, TypeError):  # an entry missing (the generic decoder names it), or unhashable
        return
    if fixed is None:
        constant = _named_constants(_SEND_V2_CONSTANT_NAMES, key[:11])
        fixed = _remember(_send_fixed_by_values, key, SendFixed(constant, len(constant) + 2), _SEND_FIXED_MAX)
    cmd.send_fixed = fixed
    cmd.send_gi = (g, i)


def _learn_send_fixed(rest: bytes, count: int) -> SendFixed | None:
    """Decode the constant part of a producer's SEND extFields once (None: not this shape)."""
    k = count - 2
    if not 0 < k <= 15:
        return None
    try:
        ext = _msgpack_unpackb(bytes((0x80 | k,)) + rest)
    except Exception:  # noqa: BLE001 - anything msgpack refuses goes to the generic decoder
        return None
    if ext.__class__ is not dict or len(ext) != k or "g" in ext or "i" in ext:
        return None
    fixed = SendFixed(_interned_values(ext), count)
    if len(_send_fixed) >= _SEND_FIXED_MAX:
        _send_fixed.clear()
    _send_fixed[rest] = fixed
    return fixed


def _fixed_tail(cache: dict[bytes, Any], learn: Callable[[bytes, int], Any], src: bytes | bytearray, e: int,
                hend: int, count: int) -> Any:
    """The cached fixed part (SendFixed / PullFixed) for the header's constant tail src[e:hend] of a map
    of `count` entries, learnt on first sight; None when it cannot be (the generic decoder takes it)."""
    rest = src[e:hend]
    if rest.__class__ is not bytes:
        rest = bytes(rest)
    fixed = cache.get(rest)
    if fixed is None:
        return learn(rest, count)
    return fixed if fixed.count == count else None


def _after_lead(src: bytes | bytearray, p: int, first_key: bytes, hend: int) -> tuple[int, int, int, int] | None:
    """The header's opaque, flag and map marker after a code/language/version lead ending at p, when the
    flag is a positive fixint, the remark nil and the map a fixmap whose first key is first_key; with the
    position after that key. None for any other shape (the generic decoder takes it)."""
    b = src[p]
    if b < 0x80:
        opaque = b
        p += 1
    elif b == 0xCC:
        opaque = src[p + 1]
        p += 2
    elif b == 0xCD:
        opaque = src[p + 1] << 8 | src[p + 2]
        p += 3
    elif b == 0xCE:
        (opaque,) = _LEN.unpack_from(src, p + 1)
        p += 5
    else:
        return None
    flag = src[p]
    m = src[p + 2]
    if flag >= 0x80 or src[p + 1] != 0xC0 or m & 0xF0 != 0x80 or not src.startswith(first_key, p + 3, hend):
        return None
    return opaque, flag, m, p + 3 + len(first_key)


def _decode_send(
    src: bytes | bytearray, h: int, hend: int, body: bytes | None, frame_size: int
) -> RemotingCommand | None:
    """A producer's pipelined SEND header at src[h:hend] (see _SEND_LEAD_310), or None to decode it the
    generic way. Every read is bounds-checked against hend; every shape msgpack allows but this does
    not expect returns None."""
    if hend - h < _SEND_LEAD_LEN + 12:
        return None
    if src.startswith(_SEND_LEAD_310, h):
        code = 310
    elif src.startswith(_SEND_LEAD_320, h):
        code = 320
    else:
        return None
    lead = _after_lead(src, h + _SEND_LEAD_LEN, _G_KEY, hend)
    if lead is None:
        return None
    opaque, flag, m, p = lead
    t = src[p]
    e = p + 1 + (t & 0x1F)
    if t & 0xE0 != 0xA0 or e + 3 > hend or not src.startswith(_I_KEY, e):
        return None
    try:
        born = src[p + 1 : e].decode()
        p = e + 2
        t = src[p]
        if t & 0xE0 == 0xA0:
            q = p + 1
            e = q + (t & 0x1F)
        elif t == 0xD9:
            q = p + 2
            e = q + src[p + 1]
        elif t == 0xDA:
            q = p + 3
            e = q + (src[p + 1] << 8 | src[p + 2])
        else:
            return None
        if e > hend:
            return None
        props = src[q:e].decode()
    except (UnicodeDecodeError, IndexError):
        return None
    fixed = _fixed_tail(_send_fixed, _learn_send_fixed, src, e, hend, m & 0x0F)
    if fixed is None:
        return None
    # Positional: code, opaque, flag, remark, ext_fields, body, language, version, serialize_type,
    # frame_size, packed_ext, send_fixed, send_gi. ext_fields is left unset: built from fixed and (g, i)
    # when first read (RemotingCommand.send_gi).
    cmd = RemotingCommand(
        code, opaque, flag, None, None, body, _PYTHON, DEFAULT_VERSION, _MSGPACK, frame_size, None, fixed,
        (born, props),
    )
    del cmd.ext_fields
    return cmd


# The SEND and PULL headers RocketMQ's own clients write (JSON from Java and C++, ROCKETMQ from Java with
# -Drocketmq.serialize.type=ROCKETMQ) are read the way our clients' MSGPACK ones are. A producer queue's
# sends repeat everything but the opaque, g (born timestamp) and i (properties), and a Signature when signed
# (the C++ core signs every request); a consumer queue's pulls everything but the opaque, queueOffset,
# sysFlag and commitOffset. Those are found in the bytes (their keys searched for) and the rest, the
# header's shape, is looked up by its text. The first header of a shape is decoded the generic way, and
# remembered only if its variable values were where the generic decoder found them and each key occurs once
# (the generic decoder keeps a duplicate key's last value): a remembered shape gives the command the generic
# decoder gives (ext_fields equal; entries the send / pull header does not read are constant in the text and
# kept in the shape's template). Anything else, or any doubt, takes the generic decoder; at once a signed pull
# (the C++ core's offsets are numbers) or a signed ROCKETMQ header. Decode per frame (FrameDecoder.feed,
# timeit): a Java-style send 3.7 (JSON) and 4.8 us (ROCKETMQ) -> 3.0 and 2.9, against MSGPACK's 1.5; a pull
# 3.9 and 5.3 -> 3.1 and 3.3, against 1.7; the C++ core's send 4.0 -> 3.6.
_JSON_SIGNATURE = b'"Signature":'
_RMQ_SIGNATURE = rocketmq_ext_key("Signature")
_json_scanstring = json.decoder.scanstring
_SEND_VARIABLE = ("g", "i")
_PULL_VARIABLE = ("commitOffset", "queueOffset", "sysFlag")  # (in a JSON header's order: fastjson sorts by name)
_JSON_SEND_KEYS = tuple(f'"{n}":"' for n in _SEND_VARIABLE)
_JSON_PULL_KEYS = tuple(f'"{n}":"' for n in _PULL_VARIABLE)
_RMQ_SEND_KEYS = tuple(map(rocketmq_ext_key, _SEND_VARIABLE))
_RMQ_PULL_KEYS = tuple(map(rocketmq_ext_key, _PULL_VARIABLE))
# A header's first bytes (JSON: the code as fastjson and jsoncpp write it first; ROCKETMQ: the int16 code) ->
# the variable keys, their names, and what must occur once for a shape to be learned (the keys and the opaque's).
_JSON_SEND = (_JSON_SEND_KEYS, _SEND_VARIABLE, ('"opaque":', *(k[:-1] for k in _JSON_SEND_KEYS)))
_JSON_PULL = (_JSON_PULL_KEYS, _PULL_VARIABLE, ('"opaque":', *(k[:-1] for k in _JSON_PULL_KEYS)))
# A signed send (the C++ core's): its Signature is one more variable entry (jsoncpp sorts it before a..m).
_JSON_SIGNED_SEND_KEYS = ('"Signature":"', *_JSON_SEND_KEYS)
_JSON_SIGNED_SEND = (_JSON_SIGNED_SEND_KEYS, ("Signature", *_SEND_VARIABLE),
                     ('"opaque":', *(k[:-1] for k in _JSON_SIGNED_SEND_KEYS)))
# (unsigned, signed): a signed pull (the C++ core's numbers for its offsets) stays with the generic decoder
_JSON_SHAPED = {b'{"code":310,': (_JSON_SEND, _JSON_SIGNED_SEND), b'{"code":320,': (_JSON_SEND, _JSON_SIGNED_SEND),
                b'{"code":11,"': (_JSON_PULL, None)}
_RMQ_SEND = (_RMQ_SEND_KEYS, _SEND_VARIABLE, _RMQ_SEND_KEYS)
_RMQ_PULL = (_RMQ_PULL_KEYS, _PULL_VARIABLE, _RMQ_PULL_KEYS)
_RMQ_SHAPED = {_I16.pack(310): _RMQ_SEND, _I16.pack(320): _RMQ_SEND, _I16.pack(11): _RMQ_PULL}
# shape -> (SendFixed or PullFixed, code, flag, remark, language, version, the whole extFields with None for
# the variable entries, for a command's own copy; None for a plain send, whose ext_fields are built from its
# SendFixed when first read). Entries the send / pull header does not read (the C++ core's AccessKey and
# OnsChannel) are constant in the shape's text, so they are in its template.
_Shape = tuple[Any, int, int, "str | None", LanguageCode, int, "dict[str, Any] | None"]
_json_shapes: dict[tuple[str, ...], _Shape] = {}
_rocketmq_shapes: dict[tuple[bytes, ...], _Shape] = {}
_SHAPES_MAX = 16384  # cleared when full, as the SendFixed caches


def _json_opaque(text: str) -> int | None:
    """A JSON integer literal's value (-?(0|[1-9][0-9]*)); None for anything else."""
    digits = text[1:] if text[:1] == "-" else text
    if not digits or not digits.isascii() or not digits.isdigit() or (digits[0] == "0" and len(digits) > 1):
        return None
    return int(text)


def _json_shape(text: str, keys: tuple[str, ...]) -> tuple[tuple[str, ...], list[str], int] | None:
    """A JSON header's shape (the text but the string values of `keys`, found in this order, and the opaque's
    value), those values and the opaque; None when it is not laid out so. The opaque may come after the
    extFields (Java's fastjson and C++'s jsoncpp sort the fields by name) or before them (Go's encoding/json
    keeps its struct's order)."""
    shape: list[str] = []
    values: list[str] = []
    p = 0
    for key in keys:
        k = text.find(key, p)
        if k < 0:
            return None
        vs = k + len(key)
        try:
            value, ve = _json_scanstring(text, vs)  # json's own string scanner: escapes, control characters
        except ValueError:
            return None
        shape.append(text[p:vs])
        values.append(value)
        p = ve - 1  # (the closing quote starts the next piece)
    k = text.find('"opaque":')
    if k < 0:
        return None
    os_ = k + 9
    oe = text.find(",", os_)
    close = text.find("}", os_)
    if oe < 0 or 0 <= close < oe:
        oe = close
        if oe < 0:
            return None
    o = text[os_:oe]
    if o.isdigit() and o.isascii() and (o[0] != "0" or len(o) == 1):  # (the usual: a non-negative int)
        opaque: int | None = int(o)
    else:
        opaque = _json_opaque(o)
        if opaque is None:
            return None
    if os_ > p:  # after the values
        shape.append(text[p:os_])
        shape.append(text[oe:])
    elif oe < len(shape[0]):  # before them: the first piece split around it
        first = shape[0]
        shape[0] = first[oe:]
        shape.insert(0, first[:os_])
        shape.append(text[p:])
    else:
        return None  # (between them: no client writes that)
    return tuple(shape), values, opaque  # type: ignore[return-value]


def _rocketmq_shape(data: bytes, keys: tuple[bytes, ...]) -> tuple[tuple[bytes, ...], list[str], int] | None:
    """A ROCKETMQ header's shape (the bytes but the opaque, the extFields length and the values of `keys`,
    with their lengths), those values and the opaque; None when it is not laid out so."""
    n = len(data)
    es = 21 + int.from_bytes(data[13:17], "big", signed=True)  # past the remark and the extFields length
    if not 21 <= es <= n or data[es - 4 : es] != (n - es).to_bytes(4, "big"):  # (the extFields end the header)
        return None
    found = []
    values = []
    try:
        for key in keys:
            k = data.find(key, es)
            if k < 0:
                return None
            ls = k + len(key)  # the value's length
            vs = ls + 4
            ve = vs + _LEN.unpack_from(data, ls)[0]
            if ve > n:
                return None
            found.append((ls, ve))
            values.append(data[vs:ve].decode())
    except (UnicodeDecodeError, struct.error):
        return None
    shape = [data[:5], data[9 : es - 4]]
    p = es
    for ls, ve in sorted(found) if found[0][0] > found[-1][0] or len(found) > 2 else found:
        shape.append(data[p:ls])  # (empty where values overlap: then it is no remembered shape)
        p = ve
    shape.append(data[p:])
    return tuple(shape), values, _I32.unpack_from(data, 5)[0]


def _shaped_command(shape: _Shape, names: tuple[str, ...], values: list[str], opaque: int, st: SerializeType
                    ) -> RemotingCommand:
    """The command of a header of a remembered shape, with these variable values."""
    fixed, code, flag, remark, language, version, template = shape
    if template is None:  # a send of g and i only
        # Positional: code, opaque, flag, remark, ext_fields, body, language, version, serialize_type,
        # frame_size, packed_ext, send_fixed, send_gi (ext_fields built from the last two when read).
        cmd = RemotingCommand(code, opaque, flag, remark, None, None, language, version, st, 0, None, fixed,
                              (values[0], values[1]))
        del cmd.ext_fields
        return cmd
    ext = template.copy()
    if fixed.__class__ is SendFixed:
        for name, value in zip(names, values, strict=True):
            ext[name] = value
        # (g and i are the last variable entries: a signed header's Signature comes first)
        return RemotingCommand(code, opaque, flag, remark, ext, None, language, version, st, 0, None, fixed,
                               (values[-2], values[-1]))
    ext["commitOffset"], ext["queueOffset"], ext["sysFlag"] = values
    return RemotingCommand(code, opaque, flag, remark, ext, None, language, version, st, 0, None, fixed)


def _shape_of(cmd: RemotingCommand, names: tuple[str, ...], values: list[str], opaque: int) -> _Shape | None:
    """The shape entry of the header the generic decoder made `cmd` from (its variable values and opaque
    found as `values` and `opaque`), if a command made from it would equal `cmd`; else None."""
    fixed = cmd.send_fixed
    if fixed is None or cmd.opaque != opaque:
        return None
    ext = cmd.ext_fields
    if ext is None:
        return None
    for name, value in (*zip(names, values, strict=True), *fixed.ext.items()):
        if ext.get(name, ext) != value:
            return None
    template: dict[str, Any] | None = None
    if len(ext) != len(fixed.ext) + len(names) or len(names) != 2 or fixed.__class__ is not SendFixed:
        template = {**dict.fromkeys(names), **fixed.ext}
        for k, v in ext.items():
            if k not in template:
                template[k] = v  # (an entry neither the SendFixed / PullFixed nor the variable ones hold)
    return fixed, cmd.code, cmd.flag, cmd.remark, cmd.language, cmd.version, template


def _decode_json_shaped(data: bytes | memoryview, keys: tuple[str, ...], names: tuple[str, ...],
                        once: tuple[str, ...]) -> RemotingCommand:
    """decode_json_header for a SEND / PULL header: its shape looked up, or the generic decode (and the shape
    learned from it)."""
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        return decode_json_header(data)  # (its error)
    return _decode_shaped(data, text, keys, names, once, _json_shape, _json_shapes, decode_json_header, _JSON)


def _decode_rocketmq_shaped(data: bytes | memoryview, keys: tuple[bytes, ...], names: tuple[str, ...],
                            once: tuple[bytes, ...]) -> RemotingCommand:
    """decode_rocketmq_header for a SEND / PULL header: as _decode_json_shaped."""
    if data.__class__ is not bytes:
        data = bytes(data)
    return _decode_shaped(data, data, keys, names, once, _rocketmq_shape, _rocketmq_shapes, decode_rocketmq_header,
                          _ROCKETMQ)


def _decode_shaped(data: Any, text: Any, keys: Any, names: tuple[str, ...], once: Any, find: Any,
                   shapes: dict[Any, _Shape], generic: Callable[[Any], RemotingCommand], st: SerializeType
                   ) -> RemotingCommand:
    """The header `text` (JSON's str, ROCKETMQ's bytes) by its shape (`find`), or by `generic` (and its shape
    remembered in `shapes` when a command made from it would equal the generic one and each of `once`, the
    variable keys and the opaque's, occurs once in it)."""
    found = find(text, keys)
    if found is None:
        return generic(data)
    shape = shapes.get(found[0])
    if shape is not None:
        return _shaped_command(shape, names, found[1], found[2], st)
    cmd = generic(data)
    shape = _shape_of(cmd, names, found[1], found[2])
    if shape is not None and all(text.count(k) == 1 for k in once):
        _remember(shapes, found[0], shape, _SHAPES_MAX)
    return cmd


class PullFixed:
    """The extFields entries every PULL_MESSAGE of one consumer queue shares (all but the per-pull
    queueOffset, sysFlag and commitOffset), decoded once per distinct byte string by FrameDecoder and
    handed on in RemotingCommand.send_fixed (a pull is never a send). `header` is free for
    headers.pull_header_of to keep those fields decoded."""

    __slots__ = ("ext", "count", "header", "template")

    def __init__(self, ext: dict[str, Any], count: int) -> None:
        self.ext = ext  # read only
        self.count = count  # map entries of the whole extFields (ext plus the three per-pull ones)
        self.header: Any = None
        # The whole extFields in wire order (per-pull entries first), for a command's own copy.
        self.template: dict[str, Any] = {"queueOffset": None, "sysFlag": None, "commitOffset": None, **ext}


# Our consumer (client.consumer.pull_api) writes a PULL_MESSAGE header as the 7-array with its language and
# version, and an extFields map that starts with queueOffset, sysFlag and commitOffset (short strings)
# followed by the queue's constant entries in bytes it caches. FrameDecoder reads such a header as it
# reads a pipelined send's (_decode_send): the per-pull strings by hand, the rest looked up by its
# bytes. Anything else (real RocketMQ clients: JSON, other orders) takes the generic decoder.
_PULL_LEAD = _FIXARRAY7 + _msgpack_packb((11, LanguageCode.PYTHON, DEFAULT_VERSION))[1:]
_PULL_LEAD_LEN = len(_PULL_LEAD)
_K_QUEUE_OFFSET = _msgpack_packb("queueOffset")
_K_SYS_FLAG = _msgpack_packb("sysFlag")
_K_COMMIT_OFFSET = _msgpack_packb("commitOffset")
_PULL_PER = ("queueOffset", "sysFlag", "commitOffset")
_pull_fixed: dict[bytes, PullFixed] = {}
_PULL_FIXED_MAX = 16384  # distinct (consumer, queue, subscription) headers remembered; cleared when full
# lead, opaque, flag, nil, map head, the three keys and values at least 1 byte each, a fixed entry
_PULL_MIN = _PULL_LEAD_LEN + 4 + len(_K_QUEUE_OFFSET) + len(_K_SYS_FLAG) + len(_K_COMMIT_OFFSET) + 3 + 2


def _learn_pull_fixed(rest: bytes, count: int) -> PullFixed | None:
    """Decode the constant part of a consumer's PULL extFields once (None: not this shape)."""
    k = count - 3
    if not 0 < k <= 12:
        return None
    try:
        ext = _msgpack_unpackb(bytes((0x80 | k,)) + rest)
    except Exception:  # noqa: BLE001 - anything msgpack refuses goes to the generic decoder
        return None
    if ext.__class__ is not dict or len(ext) != k or any(n in ext for n in _PULL_PER):
        return None
    fixed = PullFixed(_interned_values(ext), count)
    if len(_pull_fixed) >= _PULL_FIXED_MAX:
        _pull_fixed.clear()
    _pull_fixed[rest] = fixed
    return fixed


# A JSON or ROCKETMQ PULL_MESSAGE (a Java push consumer's) gets a PullFixed too, found by its constant values (what
# PullMessageRequestHeader reads but the three per-pull entries; an absent one as None).
_PULL_MESSAGE = 11
_PULL_CONSTANT_NAMES = ("consumerGroup", "topic", "queueId", "maxMsgNums", "suspendTimeoutMillis", "subscription",
                        "subVersion", "expressionType")
_pull_fixed_by_values: dict[tuple[Any, ...], PullFixed] = {}


def _attach_pull_fixed_by_values(cmd: RemotingCommand, ext: dict[str, Any]) -> None:
    get = ext.get
    key = tuple(get(n) for n in _PULL_CONSTANT_NAMES)
    try:
        fixed = _pull_fixed_by_values.get(key)
    except TypeError:  # an unhashable value: the generic decoder refuses it
        return
    if fixed is None:
        constant = _named_constants(_PULL_CONSTANT_NAMES, key)
        fixed = _remember(_pull_fixed_by_values, key, PullFixed(constant, len(constant) + 3), _PULL_FIXED_MAX)
    cmd.send_fixed = fixed


def _decode_pull(
    src: bytes | bytearray, h: int, hend: int, body: bytes | None, frame_size: int
) -> RemotingCommand | None:
    """A consumer's PULL_MESSAGE header at src[h:hend] (see _PULL_LEAD), or None to decode it the generic
    way. Every key match is bounded by hend; any other shape returns None."""
    if hend - h < _PULL_MIN or not src.startswith(_PULL_LEAD, h):
        return None
    lead = _after_lead(src, h + _PULL_LEAD_LEN, _K_QUEUE_OFFSET, hend)
    if lead is None:
        return None
    opaque, flag, m, p = lead
    try:
        # three fixstr values, each followed by the next key (the last by the fixed rest)
        t = src[p]
        e = p + 1 + (t & 0x1F)
        if t & 0xE0 != 0xA0 or not src.startswith(_K_SYS_FLAG, e, hend):
            return None
        queue_offset = src[p + 1 : e].decode()
        p = e + len(_K_SYS_FLAG)
        t = src[p]
        e = p + 1 + (t & 0x1F)
        if t & 0xE0 != 0xA0 or not src.startswith(_K_COMMIT_OFFSET, e, hend):
            return None
        sys_flag = src[p + 1 : e].decode()
        p = e + len(_K_COMMIT_OFFSET)
        t = src[p]
        e = p + 1 + (t & 0x1F)
        if t & 0xE0 != 0xA0 or e >= hend:
            return None
        commit_offset = src[p + 1 : e].decode()
    except (UnicodeDecodeError, IndexError):
        return None
    fixed = _fixed_tail(_pull_fixed, _learn_pull_fixed, src, e, hend, m & 0x0F)
    if fixed is None:
        return None
    ext = fixed.template.copy()
    ext["queueOffset"] = queue_offset
    ext["sysFlag"] = sys_flag
    ext["commitOffset"] = commit_offset
    # Positional: code, opaque, flag, remark, ext_fields, body, language, version, serialize_type,
    # frame_size, packed_ext, send_fixed.
    return RemotingCommand(
        11, opaque, flag, None, ext, body, _PYTHON, DEFAULT_VERSION, _MSGPACK, frame_size, None, fixed,
    )


_HEADER_DECODERS: dict[int, Callable[[bytes | memoryview], RemotingCommand]] = {
    SerializeType.JSON: decode_json_header,
    SerializeType.ROCKETMQ: decode_rocketmq_header,
    SerializeType.MSGPACK: decode_msgpack_header,
}


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame *without* its 4-byte total-length prefix."""
    mv = memoryview(frame)
    if len(mv) < 4:
        raise ProtocolError("frame shorter than its header-length field")
    (word,) = _LEN.unpack_from(mv, 0)
    stype = word >> 24
    hlen = word & 0xFFFFFF
    if hlen > len(mv) - 4:
        raise ProtocolError(f"header length {hlen} exceeds frame length {len(mv) - 4}")
    decoder = _HEADER_DECODERS.get(stype)
    if decoder is None:
        raise ProtocolError(f"unknown serialize type {stype}")
    cmd = decoder(mv[4 : 4 + hlen])
    if len(mv) > 4 + hlen:
        cmd.body = bytes(mv[4 + hlen :])
    cmd.frame_size = len(mv) + 4
    return cmd


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, get complete commands out.

    After a ProtocolError the stream is unusable (framing is lost): close the connection.
    """

    __slots__ = ("_buf", "_max_frame")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._max_frame = max_frame_size

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        out: list[RemotingCommand] = []
        src = data if type(data) is bytes else bytes(data)
        start = 0
        buf = self._buf
        if buf:
            # A frame is split across reads: complete it from the head of this read and decode it from the
            # buffer, then parse the rest of the read in place (only the split frame is copied, not the read).
            view = memoryview(src)
            if len(buf) < 4:
                start = min(4 - len(buf), len(src))
                buf += view[:start]
                if len(buf) < 4:
                    return out
            (length,) = _LEN.unpack_from(buf, 0)
            self._check_length(length)
            need = 4 + length - len(buf)
            if need > len(src) - start:
                buf += view[start:] if start else src
                return out
            buf += view[start : start + need]
            start += need
            self._parse(buf, out, 0)
            buf.clear()
            if start == len(src):
                return out
        pos = self._parse(src, out, start)
        if pos < len(src):
            buf += memoryview(src)[pos:] if pos else src
        return out

    def _check_length(self, length: int) -> None:
        if length > self._max_frame:
            raise ProtocolError(f"frame of {length} bytes exceeds the {self._max_frame} byte limit")
        if length < 4:
            raise ProtocolError(f"frame length {length} is too small")

    def _parse(self, src: bytes | bytearray, out: list[RemotingCommand], pos: int) -> int:
        """Decode the whole frames in `src` from `pos` on into `out`; returns where they end. `src` is a read
        (bytes, sliced as is) or the buffer holding one frame split across reads (bytearray, copied out)."""
        n = len(src)
        max_frame = self._max_frame
        unpack = _PREFIX.unpack_from
        whole = src.__class__ is bytes
        mv = memoryview(src)
        try:
            while True:
                if n - pos < 8:
                    # A whole frame is at least 8 bytes; a length read alone is still checked at once.
                    if n - pos >= 4:
                        self._check_length(_LEN.unpack_from(src, pos)[0])
                    return pos
                # The length and the serialize-type word with one unpack.
                length, word = unpack(src, pos)
                if length > max_frame or length < 4:
                    self._check_length(length)
                end = pos + 4 + length
                if end > n:
                    return pos
                # decode_frame, inlined: one frame per request on every connection.
                hlen = word & 0xFFFFFF
                hstart = pos + 8
                hend = hstart + hlen
                if hend > end:
                    raise ProtocolError(f"header length {hlen} exceeds frame length {length - 4}")
                if word >> 24 == 2:  # MSGPACK: a producer's pipelined send or our consumer's pull first
                    body = (src[hend:end] if whole else bytes(mv[hend:end])) if end > hend else None
                    # (a code of 128 or more, as SENDs have: answers, with small codes, skip the call)
                    cmd = None
                    if hlen > 20:
                        c = src[hstart + 1]
                        if c == 0xCD:
                            cmd = _decode_send(src, hstart, hend, body, length + 4)
                        elif c == 11:  # PULL_MESSAGE (a fixint code)
                            cmd = _decode_pull(src, hstart, hend, body, length + 4)
                    if cmd is None:
                        cmd = decode_msgpack_header(mv[hstart:hend])
                        cmd.body = body
                        cmd.frame_size = length + 4
                    out.append(cmd)
                    pos = end
                    continue
                st = word >> 24
                if st == 0:  # JSON: a Java client's sends and pulls by their shapes (the C++ core's are signed)
                    lead = src[hstart : hstart + 12]
                    shaped = _JSON_SHAPED.get(lead if whole else bytes(lead))
                    if shaped is not None:
                        shaped = shaped[0] if src.find(_JSON_SIGNATURE, hstart, hend) < 0 else shaped[1]
                    if shaped is not None:
                        cmd = _decode_json_shaped(mv[hstart:hend], *shaped)
                    else:
                        cmd = decode_json_header(mv[hstart:hend])
                elif st == 1:  # ROCKETMQ: the same
                    lead = src[hstart : hstart + 2]
                    shaped = _RMQ_SHAPED.get(lead if whole else bytes(lead)) if hlen > 21 else None
                    if shaped is not None and src.find(_RMQ_SIGNATURE, hstart, hend) < 0:
                        cmd = _decode_rocketmq_shaped(mv[hstart:hend], *shaped)
                    else:
                        cmd = decode_rocketmq_header(mv[hstart:hend])
                else:
                    decoder = _HEADER_DECODERS.get(st)
                    if decoder is None:
                        raise ProtocolError(f"unknown serialize type {st}")
                    cmd = decoder(mv[hstart:hend])
                if end > hend:
                    cmd.body = src[hend:end] if whole else bytes(mv[hend:end])
                cmd.frame_size = length + 4
                out.append(cmd)
                pos = end
        finally:
            mv.release()  # a bytearray cannot be resized while a view of it exists

    def at_eof(self) -> None:
        """Call when the peer closed: a partial frame left over is a truncated frame."""
        if self._buf:
            n = len(self._buf)
            self._buf.clear()
            raise ProtocolError(f"connection closed inside a frame ({n} bytes buffered)")
