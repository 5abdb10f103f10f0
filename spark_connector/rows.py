"""The source's row shape and the decoders that turn pulled records into it.

Columns (`SOURCE_SCHEMA`):

| column | type | what |
|---|---|---|
| topic | string | |
| brokerName | string | |
| queueId | int | |
| queueOffset | long | the message's consume-queue offset |
| msgId | string | the producer's unique id (UNIQ_KEY), else the broker's offset id (like RocketMQ's getMsgId) |
| offsetMsgId | string | the broker's id: store host + CommitLog offset (what queryMsgById takes) |
| tags | string | null when the message has none |
| keys | string | space-separated, as stored in the KEYS property; null when none |
| body | binary | decompressed when the producer compressed it |
| properties | map<string,string> | user properties; RocketMQ's own (TAGS, KEYS, UNIQ_KEY, WAIT, ...) only with includeSystemProperties=true |
| bornTimestamp | timestamp | when the producer created the message (like Spark's Kafka `timestamp`) |
| storeTimestamp | timestamp | when the broker stored it |
| reconsumeTimes | int | |

Records are decoded straight from the pull body into columns (no per-message objects), then
handed to Spark as `pyarrow.RecordBatch` (the default, `rowFormat=arrow`) or as tuples
(`rowFormat=tuples`); the benchmark measures both (bench/bench_spark.py).
"""

from __future__ import annotations

import array
import binascii
import itertools
import struct
import zlib
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from client.reader import PulledChunk
from remoting.message import MAGIC_CODE, MessageConst, MessageSysFlag, RecordLayout

__all__ = ["ArrowBatchBuilder", "SOURCE_SCHEMA", "batch_tuples", "chunk_tuples", "source_arrow_schema"]

SOURCE_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("brokerName", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("msgId", StringType()),
        StructField("offsetMsgId", StringType()),
        StructField("tags", StringType()),
        StructField("keys", StringType()),
        StructField("body", BinaryType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("reconsumeTimes", IntegerType()),
    ]
)

_SYSTEM_PROPS = frozenset(MessageConst.STRING_HASH_SET)
_TAGS = MessageConst.PROPERTY_TAGS
_KEYS = MessageConst.PROPERTY_KEYS
_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_COMPRESSED = MessageSysFlag.COMPRESSED_FLAG
_PROPS_LEN = struct.Struct(">h")
_LAYOUTS = tuple(RecordLayout.for_sys_flag(i << 4) for i in range(4))


def source_arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for SOURCE_SCHEMA (it checks batches against exactly this)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")


# The usual layout (IPv4 born and store hosts), with the fields the rows do not use skipped:
# total, magic, queueId, queueOffset, physicalOffset, sysFlag, bornTimestamp, storeTimestamp,
# reconsumeTimes, bodyLen.
_V4 = struct.Struct(">iI4xi4xqqiq8xq8xi8xi")
_V4_BODY_POS = 88
_V4_STORE_HOST_POS = 64
_HOSTV6_BITS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_BINARY = pa.binary()


class _Columns:
    """What the decoding loop collects per record; the columns are built from it in Arrow."""

    __slots__ = ("heads", "body", "props", "ids", "ids_fixed")

    def __init__(self) -> None:
        # (total, magic, queueId, queueOffset, physicalOffset, sysFlag, born, store, reconsume, bodyLen)
        self.heads: list[tuple[int, ...]] = []
        self.body: list[bytes | memoryview] = []
        self.props: list[memoryview] = []
        self.ids: list[bytes] = []  # store host + CommitLog offset, raw (16 bytes for IPv4)
        self.ids_fixed = True


def _decode_into(chunk: PulledChunk, c: _Columns) -> int:
    """Append the chunk's records with lo <= queue offset < hi to `c` (tags are checked later, in
    Arrow); returns how many. Per record: one struct unpack and a few slices, no copies of bodies."""
    data = chunk.body
    mv = memoryview(data)
    lo, hi = chunk.lo, chunk.hi
    pos, end = 0, len(data)
    unpack_v4 = _V4.unpack_from
    unpack_plen = _PROPS_LEN.unpack_from
    a_head, a_body, a_props, a_id = c.heads.append, c.body.append, c.props.append, c.ids.append
    kept = 0
    while pos < end:
        if end - pos < _V4_BODY_POS:
            raise ValueError(f"corrupt record in pull body of {chunk.mq} at byte {pos}: truncated")
        head = unpack_v4(data, pos)
        total, magic, _qid, qoff, _phy, sys_flag, _born, _store, _re, body_len = head
        if sys_flag & _HOSTV6_BITS:
            layout = _LAYOUTS[(sys_flag >> 4) & 3]
            f = layout.header.unpack_from(data, pos)
            head = (total, magic, f[3], f[5], f[6], f[7], f[8], f[11], f[14], f[16])
            body_len = f[16]
            bpos = pos + layout.body_pos
            shp = pos + layout.store_host_pos
            host = data[shp : shp + layout.store_host_len]
            c.ids_fixed = False
        else:
            bpos = pos + _V4_BODY_POS
            host = data[pos + _V4_STORE_HOST_POS : pos + _V4_STORE_HOST_POS + 8]
        rec_end = pos + total
        if magic != MAGIC_CODE or total <= 0 or rec_end > end or body_len < 0 or bpos + body_len + 3 > rec_end:
            raise ValueError(f"corrupt record in pull body of {chunk.mq} at byte {pos}")
        if lo <= qoff < hi:
            p = bpos + body_len
            p += 1 + data[p]  # the topic: the chunk's queue names it
            plen = unpack_plen(data, p)[0]
            a_head(head)
            if sys_flag & _COMPRESSED and body_len:
                a_body(zlib.decompress(mv[bpos : bpos + body_len]))
            else:
                a_body(mv[bpos : bpos + body_len])
            a_props(mv[p + 2 : p + 2 + plen])
            a_id(host + data[pos + 28 : pos + 36])
            kept += 1
        pos = rec_end
    return kept


def _binary_array(parts: list[bytes | memoryview], type_: pa.DataType = _BINARY) -> pa.Array:
    """A binary (or string) array from byte slices: one join, no per-value conversion."""
    n = len(parts)
    data = b"".join(parts)
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(map(len, parts)))
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _hex_ids(ids: list[bytes], fixed: bool) -> pa.Array:
    """Upper-case hex of each id (RocketMQ's offset message id)."""
    if not fixed:
        return pa.array([i.hex().upper() for i in ids], pa.string())
    n = len(ids)
    text = binascii.hexlify(b"".join(ids)).upper()
    offsets = array.array("i", range(0, 32 * n + 1, 32))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _offsets_after_drop(offsets: pa.Array, keep: pa.Array) -> pa.Array:
    """List offsets after removing the items where `keep` is false."""
    kept_before = pc.cumulative_sum(pc.cast(keep, pa.int32()))
    table = pa.concat_arrays([pa.array([0], pa.int32()), kept_before.cast(pa.int32())])
    return pc.take(table, offsets)


class ArrowBatchBuilder:
    """Accumulates pulled records; `take()` returns them as one pyarrow.RecordBatch.

    The Python loop only cuts records apart; properties are split, the tags/keys/msgId columns
    looked up, system properties dropped and the tag filter applied with Arrow compute kernels.
    """

    def __init__(self, include_system_properties: bool = False) -> None:
        self.include_sys = include_system_properties
        self.schema = source_arrow_schema()
        self._props_type = self.schema.field("properties").type
        self._ts_type = pa.timestamp("us", tz="UTC")
        self._system = pa.array(sorted(_SYSTEM_PROPS), pa.string())
        self._cols = _Columns()
        self._runs: list[tuple[str, str, int]] = []  # (topic, broker, row count) per added chunk
        self._want: frozenset[str] | None = None

    def __len__(self) -> int:
        return len(self._cols.heads)

    def add(self, chunk: PulledChunk) -> int:
        """Append the chunk's records within its [lo, hi); returns how many (before the tag filter)."""
        if chunk.tags is not None:
            self._want = chunk.tags if self._want is None else self._want | chunk.tags
        added = _decode_into(chunk, self._cols)
        if added:
            self._runs.append((chunk.mq.topic, chunk.mq.broker_name, added))
        return added

    def _properties(self, raw: list[memoryview]) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
        """(properties map, tags, keys, uniq key) from the raw property strings."""
        arr = _binary_array(raw)
        try:
            strings = arr.cast(pa.string())
        except pa.ArrowInvalid:
            strings = pa.array([bytes(b).decode("utf-8", "replace") for b in raw], pa.string())
        items = pc.split_pattern(strings, "\x02")
        flat = items.values
        # Items without a separator become "\x01" (an empty name and value, dropped below), so
        # every item splits in two: the name up to the first \x01, the value after it (Java's rule).
        flat = pc.if_else(pc.match_substring(flat, "\x01"), flat, "\x01")
        kv = pc.split_pattern(flat, "\x01", max_splits=1)
        names, values = pc.list_element(kv, 0), pc.list_element(kv, 1)
        valid = pc.and_(pc.greater(pc.utf8_length(names), 0), pc.greater(pc.utf8_length(values), 0))
        offsets = items.offsets
        full = pa.MapArray.from_arrays(
            _offsets_after_drop(offsets, valid), pc.filter(names, valid), pc.filter(values, valid)
        )
        tags = pc.map_lookup(full, MessageConst.PROPERTY_TAGS, "last")
        keys = pc.map_lookup(full, MessageConst.PROPERTY_KEYS, "last")
        uniq = pc.map_lookup(full, MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "last")
        if self.include_sys:
            props = full
        else:
            keep = pc.and_(valid, pc.invert(pc.is_in(names, value_set=self._system)))
            props = pa.MapArray.from_arrays(
                _offsets_after_drop(offsets, keep), pc.filter(names, keep), pc.filter(values, keep)
            )
        return props.cast(self._props_type), tags, keys, uniq

    def take(self) -> pa.RecordBatch | None:
        """The accumulated rows as a RecordBatch (None when none are left after the tag filter);
        the builder starts over."""
        c = self._cols
        if not c.heads:
            return None
        topics: list[str] = []
        brokers: list[str] = []
        for t, b, n in self._runs:
            topics += [t] * n
            brokers += [b] * n
        _total, _magic, qid, qoff, _phy, _sys, born, store, reconsume, _blen = zip(*c.heads, strict=True)
        props, tags, keys, uniq = self._properties(c.props)
        offset_ids = _hex_ids(c.ids, c.ids_fixed)
        ts = self._ts_type
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(topics, pa.string()),
                pa.array(brokers, pa.string()),
                pa.array(qid, pa.int32()),
                pa.array(qoff, pa.int64()),
                pc.coalesce(uniq, offset_ids),
                offset_ids,
                tags,
                keys,
                _binary_array(c.body),
                props,
                pc.multiply(pa.array(born, pa.int64()), 1000).cast(ts),
                pc.multiply(pa.array(store, pa.int64()), 1000).cast(ts),
                pa.array(reconsume, pa.int32()),
            ],
            schema=self.schema,
        )
        want = self._want
        self._cols = _Columns()
        self._runs = []
        self._want = None
        if want is not None:
            mask = pc.fill_null(pc.is_in(tags, value_set=pa.array(sorted(want), pa.string())), False)
            batch = batch.filter(mask)
            if batch.num_rows == 0:
                return None
        return batch


def batch_tuples(batch: pa.RecordBatch) -> Iterator[tuple]:  # type: ignore[type-arg]
    """A RecordBatch of SOURCE_SCHEMA as Spark rows (tuples), converted column by column."""
    cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    pi = batch.schema.get_field_index("properties")
    cols[pi] = [dict(p) if p is not None else None for p in cols[pi]]
    return zip(*cols, strict=True)


def chunk_tuples(chunk: PulledChunk, include_system_properties: bool = False) -> Iterator[tuple]:  # type: ignore[type-arg]
    """The chunk's kept records as Spark rows (tuples in SOURCE_SCHEMA order)."""
    b = ArrowBatchBuilder(include_system_properties)
    b.add(chunk)
    batch = b.take()
    if batch is not None:
        yield from batch_tuples(batch)
