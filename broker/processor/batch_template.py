"""One-struct decode of a SEND_BATCH_MESSAGE body whose messages all have one shape (what every client
sends): the same body length and the same property items -- names in the same order, each value of
the same length in every message. The first message is the template; one precompiled struct then
cuts every message of the batch into header fields, body, and per property item its fixed
`[\\x02]name\\x01` prefix and its value, so the whole batch is checked column by column with C-level
calls (`tuple.count`, one join per varying value column) and nothing is decoded message by message.

The stored properties (the message's items without WAIT, then the batch's items) are given as a
template too: constant byte pieces around the varying value columns, so the store writes each record
straight from the wire's value bytes (no per-message properties string is built).

Anything else (mixed shapes, odd or non-canonical properties, invalid UTF-8, a name the batch also
sets) is refused with None: _build_batch then takes its general path, which gives the same result.
"""

from __future__ import annotations

import struct
from itertools import repeat

from remoting.message import MessageConst

_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGICCODE BODYCRC FLAG BODYLEN
_SHORT = struct.Struct(">h")
_PROP_WAIT = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
_SEP_B = b"\x02"
_NV_B = b"\x01"

# Batches of more messages take the general path: a struct's size grows with its field count.
MAX_MESSAGES = 1024
_MAX_ITEMS = 16
_CACHE_MAX = 16


class _Template:
    """The shape of a batch: its struct and, per property item, the prefix bytes and the name."""

    __slots__ = ("struct", "fields", "prefixes", "names", "names_b", "wait")

    def __init__(self, n: int, body_len: int, skeleton: tuple[tuple[bytes, int], ...]) -> None:
        prefixes: list[bytes] = []
        fmt = [f"i8xii{body_len}sh"]  # TOTALSIZE, FLAG, BODYLEN, BODY, PROPERTIES length
        for k, (name, value_len) in enumerate(skeleton):
            p = (_SEP_B if k else b"") + name + _NV_B
            prefixes.append(p)
            fmt.append(f"{len(p)}s{value_len}s")
        self.struct = struct.Struct(">" + "".join(fmt) * n)
        self.fields = 5 + 2 * len(skeleton)
        self.prefixes = tuple(prefixes)
        self.names_b = tuple(name for name, _ in skeleton)
        self.names = tuple(name.decode("utf-8") for name in self.names_b)  # UnicodeDecodeError: no template
        self.wait = self.names.index(_PROP_WAIT) if _PROP_WAIT in self.names else -1


_TEMPLATES: dict[tuple[int, int, tuple[tuple[bytes, int], ...]], _Template | None] = {}


def first_record_shape(data: bytes) -> tuple[int, int, int, int] | None:
    """(message count, record size, body length, properties length) when a batch body could be
    MAX_MESSAGES or fewer (but at least 2) records all the size of the first one; None when its first
    record is malformed or the body is not a whole number of such records. The records themselves are
    checked by the caller."""
    if len(data) < 44:
        return None
    total, _magic, _crc, _flag, body_len = _HEAD.unpack_from(data, 0)
    if body_len < 0 or total < 22 + body_len or total > len(data):
        return None
    (props_len,) = _SHORT.unpack_from(data, 20 + body_len)
    if props_len < 0 or 22 + body_len + props_len != total:
        return None
    n, rest = divmod(len(data), total)
    if rest or n < 2 or n > MAX_MESSAGES:
        return None
    return n, total, body_len, props_len


def _template(data: bytes) -> tuple[_Template, int, int, int, int] | None:
    """(template, message count, record size, body length, properties length) from the first message."""
    shape = first_record_shape(data)
    if shape is None:
        return None
    n, total, body_len, props_len = shape
    if props_len == 0:
        return None
    items = data[22 + body_len : total].split(_SEP_B)
    if len(items) > _MAX_ITEMS:
        return None
    skeleton = []
    for item in items:
        name, sep, value = item.partition(_NV_B)
        # Canonical items only: one name\x01value each, neither empty (what the decoder keeps as is).
        if not name or not value or _NV_B in value:
            return None
        skeleton.append((name, len(value)))
    key = (n, body_len, tuple(skeleton))
    t = _TEMPLATES.get(key, False)
    if t is False:
        try:
            t = _Template(n, body_len, key[2])
            if len(set(t.names)) != len(t.names):
                t = None  # a name twice: the decoder keeps the last one
        except UnicodeDecodeError:
            t = None
        if len(_TEMPLATES) >= _CACHE_MAX:
            _TEMPLATES.clear()
        _TEMPLATES[key] = t
    if t is None:
        return None
    return t, n, total, body_len, props_len  # type: ignore[return-value]


def decode_uniform_batch(
    data: bytes, batch_props: dict[str, str], batch_b: bytes
) -> tuple[list[int], list[bytes], int, list[dict[str, str]], tuple[bytes, ...], list[list[bytes]], int] | None:
    """(flags, bodies, body length, properties dicts, stored constant pieces, stored value columns, stored
    properties length) of a batch of one shape, or None (see the module docstring).

    Message i's stored properties are pieces[0] + columns[0][i] + pieces[1] + ... + pieces[-1]: its own
    items without WAIT, then `batch_b` (the batch's encoded items, never empty: it holds CLUSTER). Its
    dict is its own items (WAIT included) plus `batch_props`."""
    found = _template(data)
    if found is None:
        return None
    t, n, total, body_len, props_len = found
    names = t.names
    if not batch_props.keys().isdisjoint(names):
        return None  # the message's own value must win: the general path handles that
    v = t.struct.unpack(data)
    f = t.fields
    if v[0::f].count(total) != n or v[2::f].count(body_len) != n or v[4::f].count(props_len) != n:
        return None
    prefixes = t.prefixes
    m = len(prefixes)
    for k in range(m):
        if v[5 + 2 * k :: f].count(prefixes[k]) != n:
            return None
    # Per item: one value for all messages (decoded once), or a column checked and decoded in one go.
    consts: list[str | None] = [None] * m
    varying: list[tuple[int, list[str], list[bytes]]] = []
    for k in range(m):
        col = v[6 + 2 * k :: f]
        first = col[0]
        try:
            if col.count(first) == n:
                consts[k] = first.decode("utf-8")  # the template's own value: no separator in it
                continue
            j = _NV_B.join(col)
            if j.count(_NV_B) != n - 1 or _SEP_B in j:
                return None  # a separator inside a value: not canonical
            strs = j.decode("utf-8").split("\x01")
        except UnicodeDecodeError:
            return None
        varying.append((k, strs, list(col)))
    # The dicts: the constant items and the batch's, then each varying item set per message.
    base = {names[k]: s for k, s in enumerate(consts) if s is not None}
    base.update(batch_props)
    props_list = list(map(dict.copy, repeat(base, n)))
    for k, strs, _col in varying:
        name = names[k]
        for d, s in zip(props_list, strs, strict=True):
            d[name] = s
    # The stored properties as pieces: items without WAIT (constant values folded into the pieces).
    pieces: list[bytes] = []
    columns: list[list[bytes]] = []
    cur = b""
    kept = 0
    var_at = {k: col for k, _strs, col in varying}
    names_b = t.names_b
    for k in range(m):
        if k == t.wait:
            continue
        cur += (_SEP_B if kept else b"") + names_b[k] + _NV_B
        kept += 1
        col = var_at.get(k)
        if col is None:
            cur += v[6 + 2 * k]
        else:
            pieces.append(cur)
            columns.append(col)
            cur = b""
    pieces.append(cur + _SEP_B + batch_b if kept else cur + batch_b)
    stored_len = sum(map(len, pieces)) + sum(len(col[0]) for col in columns)
    return list(v[1::f]), list(v[3::f]), body_len, props_list, tuple(pieces), columns, stored_len
