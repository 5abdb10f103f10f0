"""IndexFile and IndexService: a hash index from `topic#key` to commit log offsets.

IndexFile layout (RocketMQ's): a 40-byte header [beginTimestamp i64][endTimestamp i64]
[beginPhyOffset i64][endPhyOffset i64][hashSlotCount i32][indexCount i32], then maxHashSlotNum int32
slots (the newest index number in that bucket), then maxIndexNum 20-byte entries [keyHash i32]
[phyOffset i64][timeDiff seconds i32][prevIndex i32]. Index numbers start at 1; 0 ends a chain.
Files are sparse (created by truncate), named yyyyMMddHHmmssSSS.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
import time
from collections.abc import Callable
from datetime import datetime
from itertools import repeat

import structlog

from remoting.message import MessageConst, MessageSysFlag, java_hash_unsigned, java_string_hash

from .mapped_file import OS_PAGE_SIZE, map_in_huge_pages, no_read_around, populate_mapping_blocking
from .mapped_file_queue import remove_in_place
from .results import QueryOffsetResult

log = structlog.get_logger(__name__)

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_I32 = struct.Struct(">i")
_INT_MIN = -(1 << 31)
_INT_MAX = (1 << 31) - 1
_MAX_RUN = 1024  # keys per put_key_hashes call (its struct grows with the count)
# Entries kept faulted in ahead of the live file's writer: two 2 MiB folios, ~210 000 entries.
ENTRIES_AHEAD = 4 * 1024 * 1024


@functools.lru_cache(maxsize=80)
def _swap_structs(n: int) -> tuple[struct.Struct, struct.Struct]:
    """n int32s in native and in big-endian order: packing with one and unpacking with the other swaps
    the bytes of all of them in two calls."""
    return struct.Struct(f"={n}i"), struct.Struct(f">{n}i")


@functools.lru_cache(maxsize=80)
def _entries_struct(n: int) -> struct.Struct:
    """n consecutive index entries in one struct."""
    return struct.Struct(">" + "iqii" * n)


def index_key_hash(key: str) -> int:
    """abs(String.hashCode()), with Integer.MIN_VALUE (whose abs is negative in Java) mapped to 0."""
    h = java_string_hash(key)
    return 0 if h == _INT_MIN else abs(h)


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


# Code units 48..78 ('0'..'9', ':'..'@', 'A'..'N': every hex digit) as base-31 digits c - 48; anything
# else becomes 'v', which int(..., 31) refuses.
_B31_FROM_48 = bytes(
    b"0123456789abcdefghijklmnopqrstu"[c - 48] if 48 <= c < 79 else ord("v") for c in range(256)
)
_MASK32 = 0xFFFFFFFF
_CACHE_LIMIT = 4096
_SUFFIX = 4  # a UNIQ_KEY's counter: 4 hex digits
_SUFFIX_SCALE = 31**_SUFFIX
_MAX_HEADS = 4  # distinct prefixes in one run hashed by prefix (a run straddling a millisecond has two)
# hash(topic#head) * 31^4 + hash(suffix) stays below 2^32 + 2^22: a base this far from 2^31 and 2^32 gives
# every key of the run the same sign, so no per-key branch is needed.
_SUFFIX_BOUND = 1 << 22


@functools.lru_cache(maxsize=1)
def _pair_tables() -> tuple[list[int], list[int]]:
    """Two ASCII characters c0 c1 as one big-endian 16-bit value -> their part of a 4-character Java hash:
    (31*c0 + c1) * 31^2 for the first pair, 31*c0 + c1 for the second. Lists (a comprehension indexes
    them with a specialised op), each value one shared object (~4 000 of them): 512 KiB in all."""
    shared: dict[int, int] = {}
    pair = [shared.setdefault(v, v) for v in (31 * (x >> 8) + (x & 0xFF) for x in range(1 << 15))]
    high: dict[int, int] = {}
    return [high.setdefault(p, p * 961) for p in pair], pair


@functools.lru_cache(maxsize=80)
def _head_pairs_struct(n: int, count: int) -> struct.Struct:
    """count keys of n bytes as (prefix bytes, first suffix pair, second suffix pair) each."""
    return struct.Struct(f">{f'{n - _SUFFIX}sHH' * count}")


@functools.lru_cache(maxsize=80)
def _keys_struct(n: int, count: int) -> struct.Struct:
    return struct.Struct(f"{n}s" * count)


def _abs_signed(unsigned: list[int]) -> list[int]:
    """index_key_hash of unsigned Java hashes: abs of the signed value, MIN_VALUE -> 0."""
    return [u if u < 0x80000000 else (0x100000000 - u) & 0x7FFFFFFF for u in unsigned]


class _TopicTerms(dict[str, int]):
    """topic -> java_hash_unsigned(topic + "#") * 31^n mod 2^32, computed on first use."""

    def __init__(self, n: int, topic_hash: Callable[[str], int]) -> None:
        super().__init__()
        self.scale = pow(31, n, 1 << 32)
        self.topic_hash = topic_hash

    def __missing__(self, topic: str) -> int:
        v = self[topic] = (self.topic_hash(topic) * self.scale) & _MASK32
        return v


class TopicKeyHasher:
    """java_hash_unsigned(f"{topic}#{key}") for the dispatcher's per-record UNIQ_KEY index entry, without
    building the string: hash("topic#") is cached per topic, and a key of code units 48..78 (a hex
    UNIQ_KEY always is) hashes with one translate and one int() parse, since each unit is 48 + a base-31
    digit: hash(key) = int(digits, 31) + 48 * (31^(n-1) + ... + 1). Anything else takes the plain way."""

    __slots__ = ("_prefix", "_scale", "_last_head", "_terms")

    def __init__(self) -> None:
        self._prefix: dict[str, int] = {}
        self._scale: dict[int, tuple[int, int]] = {}  # len -> (31^n, 48 * sum(31^i, i < n)) mod 2^32
        self._last_head: tuple[str, bytes, int] = ("", b"", 0)  # (topic, prefix, its hash * 31^4) of the last run
        self._terms: dict[int, _TopicTerms] = {}  # key length n -> topic -> hash("topic#") * 31^n mod 2^32

    def _topic_hash(self, topic: str) -> int:
        """java_hash_unsigned(topic + "#"), cached per topic (hot callers try the cache inline first)."""
        hp = self._prefix.get(topic)
        if hp is None:
            if len(self._prefix) > _CACHE_LIMIT:
                self._prefix.clear()
            hp = self._prefix[topic] = java_hash_unsigned(topic + "#")
        return hp

    def hash_unsigned(self, topic: str, key: str) -> int:
        hp = self._prefix.get(topic)
        if hp is None:
            hp = self._topic_hash(topic)
        n = len(key)
        sc = self._scale.get(n)
        if sc is None:
            if n == 0 or n > 64:
                return java_hash_unsigned(f"{topic}#{key}")
            sc = self._scale[n] = (pow(31, n, 1 << 32), 48 * sum(31**i for i in range(n)) & _MASK32)
        try:
            hk = int(key.encode("ascii").translate(_B31_FROM_48), 31)
        except (UnicodeEncodeError, ValueError):
            return java_hash_unsigned(f"{topic}#{key}")
        return (hp * sc[0] + hk + sc[1]) & _MASK32

    def index_hashes(self, topic: str, keys: list[str]) -> list[int] | None:
        """index_key_hash(f"{topic}#{key}") (abs of the signed Java hash, MIN_VALUE -> 0) of every key, with
        C-level calls when the keys all have one length (the UNIQ_KEYs of one run); None when they do not
        (hash them one by one)."""
        count = len(keys)
        n = len(keys[0]) if keys else 0
        if not n or list(map(len, keys)).count(n) != count:
            return None
        joined = "".join(keys)
        if not joined.isascii():
            # Rare: the exact Java hash of each key (UTF-16 code units), one by one.
            return _abs_signed([self.hash_unsigned(topic, k) for k in keys])
        return self.index_hashes_ascii(topic, joined.encode("ascii"), n, count)

    def index_hashes_mixed(self, topics: list[str], keys: list[str]) -> list[int]:
        """index_key_hash(f"{topic}#{key}") of each (topic, key) pair. In bulk when the keys are ASCII, of one
        length n and at most _MAX_HEADS prefixes but their last 4 characters (one producer's UNIQ_KEYs of a
        millisecond or a few, sent round-robin over topics): hash(topic#) * 31^n + hash(prefix) * 31^4 +
        hash(suffix), the first term cached per topic, the second per prefix, the last from the pair
        tables. Else one by one. (46 keys over 1 000 topics, a key: one prefix ~280 ns, two ~375 ns, one by
        one ~565 ns.)"""
        count = len(keys)
        n = len(keys[0]) if keys else 0
        if _SUFFIX < n <= 64 and list(map(len, keys)).count(n) == count:
            joined = "".join(keys)
            if joined.isascii():
                vals = _head_pairs_struct(n, count).unpack(joined.encode("ascii"))
                heads = vals[0::3]
                head = heads[0]
                one = heads.count(head) == count
                # Several prefixes: the keys of a gathered group span a millisecond or more (the client's
                # UNIQ_KEY holds its time) -- 61% of them with 1 000 topics, each hashed one by one before.
                distinct = (head,) if one else set(heads)
                if len(distinct) <= _MAX_HEADS:
                    terms = self._terms.get(n)
                    if terms is None or len(terms) > _CACHE_LIMIT:
                        terms = self._terms[n] = _TopicTerms(n, self._topic_hash)
                    ph, pl = _pair_tables()
                    # hash(prefix) * 31^4 of each key: one for all, or looked up per key by its prefix
                    bases = {h: (java_hash_unsigned(h.decode("ascii")) * _SUFFIX_SCALE) & _MASK32 for h in distinct}
                    cs = repeat(bases[head], count) if one else map(bases.__getitem__, heads)
                    # abs of the signed value (MIN_VALUE -> 0) in the same pass: as _abs_signed
                    return [
                        u if (u := (t + c + ph[a] + pl[b]) & _MASK32) < 0x80000000 else (0x100000000 - u) & 0x7FFFFFFF
                        for t, c, a, b in zip(map(terms.__getitem__, topics), cs, vals[1::3], vals[2::3], strict=True)
                    ]
        return _abs_signed(list(map(self.hash_unsigned, topics, keys)))

    def index_hashes_ascii(self, topic: str, blob: bytes, n: int, count: int) -> list[int] | None:
        """index_hashes of `count` ASCII keys of `n` bytes each, given back to back in `blob` (a batch's
        UNIQ_KEY column joined). None when they do not hash in bulk (hash them one by one).

        Keys that share all but their last 4 characters (the UNIQ_KEYs of one batch: client prefix, time,
        then a 4-hex-digit counter) hash as hash(topic#prefix) * 31^4 + hash(suffix), the suffix hash from
        two small tables indexed by its character pairs, which one struct cuts out of the blob with the
        prefixes: one comprehension step per key, no per-key string or dict look-up. A run whose keys change prefix (a batch straddling a
        millisecond) is hashed per stretch of one prefix."""
        if n > _SUFFIX and count * n == len(blob):
            vals = _head_pairs_struct(n, count).unpack(blob)
            heads = vals[0::3]
            first = heads[0]
            if heads.count(first) == count:
                spans = [(0, count, first)]
            else:
                spans = []
                i = 0
                while i < count and len(spans) < _MAX_HEADS:
                    head = heads[i]
                    k = heads.count(head)
                    if heads[i : i + k].count(head) != k:
                        break  # a prefix coming back later: not stretches
                    spans.append((i, i + k, head))
                    i += k
                if i < count:
                    spans = []
            if spans:
                ph, pl = _pair_tables()
                out: list[int] = []
                last_topic, last_head, last_base = self._last_head
                for i, j, head in spans:
                    if head == last_head and topic == last_topic:
                        base = last_base
                    else:
                        base = (self.hash_unsigned(topic, head.decode("ascii")) * _SUFFIX_SCALE) & _MASK32
                        last_topic, last_head, last_base = topic, head, base
                        self._last_head = (topic, head, base)
                    pairs = zip(vals[3 * i + 1 : 3 * j : 3], vals[3 * i + 2 : 3 * j : 3], strict=True)
                    if base < 0x80000000 - _SUFFIX_BOUND:  # every key's signed hash is positive
                        out += [base + ph[a] + pl[b] for a, b in pairs]
                    elif 0x80000000 < base < 0x100000000 - _SUFFIX_BOUND:  # every key's is negative: abs
                        neg = 0x100000000 - base
                        out += [neg - ph[a] - pl[b] for a, b in pairs]
                    else:
                        out += _abs_signed([(base + ph[a] + pl[b]) & _MASK32 for a, b in pairs])
                return out
        hp = self._prefix.get(topic)
        if hp is None:
            hp = self._topic_hash(topic)
        if n > 64:
            return None
        sc = self._scale.get(n)
        if sc is None:
            sc = self._scale[n] = (pow(31, n, 1 << 32), 48 * sum(31**i for i in range(n)) & _MASK32)
        try:
            keys = _keys_struct(n, count).unpack(blob)
            hks = map(int, map(bytes.translate, keys, repeat(_B31_FROM_48)), repeat(31))
            unsigned = list(map(_MASK32.__and__, map((hp * sc[0] + sc[1]).__add__, hks)))
        except (struct.error, ValueError):
            return None
        return _abs_signed(unsigned)


# The live file's share of entries used at which the next one is made ahead (IndexService.next_wanted).
NEXT_AHEAD_FULL = 0.75


class IndexFile:
    def __init__(self, file_name: str, hash_slot_num: int, index_num: int, fd: int, mm: mmap.mmap) -> None:
        self.file_name = file_name
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = self.file_size_for(hash_slot_num, index_num)
        self._fd = fd
        self.mm = mm
        self._entries_pos = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        # The hash slots as native int32s: put_key_hashes reads and writes slots by index (no buffer round
        # per call, as struct's pack_into/unpack_from take), byte-swapping them to the file's big-endian in
        # bulk.
        self._slots = memoryview(mm)[INDEX_HEADER_SIZE : self._entries_pos].cast("i")
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        self.flushed_index_count = 0
        self.flushed_end_timestamp = 0
        self._header_dirty = False
        self._closed = False
        # File offset up to which the pages were faulted in for writing (the live file: header, slots, and
        # the entries just ahead of the writer; see warm_range).
        self.warmed_to = 0

    def warm_range(self) -> tuple[int, int] | None:
        """The next stretch of entries to fault in ahead of the writer (populate_blocking, on a thread), once
        the writer is within half of ENTRIES_AHEAD of the end of what was; None when it is not. The stretch is
        claimed: asked again, this says None. Each first write into a 2 MiB stretch of entries otherwise
        zero-filled it in a fault on the event loop, every ~105 000 entries (0.4 ms; ~4 ms on a host that
        has taken the memory back)."""
        if self._closed or self.warmed_to >= self.file_size:
            return None
        pos = self._entries_pos + self.index_count * INDEX_SIZE
        if pos + ENTRIES_AHEAD // 2 <= self.warmed_to:
            return None
        start = max(self.warmed_to, pos - pos % OS_PAGE_SIZE)
        self.warmed_to = end = min(start + ENTRIES_AHEAD, self.file_size)
        return start, end

    def populate_blocking(self, start: int, end: int, *, write: bool = True) -> bool:
        """Fault [start, end) in for writing, or (write=False) for reading without dirtying anything
        (mapped_file.populate_mapping_blocking): worker thread."""
        if self._closed:
            return False
        return populate_mapping_blocking(self.mm, start, end, write=write)

    def set_live(self, live: bool) -> None:
        """Huge pages while this is the file being written, 4 KiB pages once it is only read (see
        mapped_file.map_in_huge_pages)."""
        if not self._closed:
            map_in_huge_pages(self.mm, live)

    @property
    def number(self) -> int:
        """The file's name (its creation time, yyyyMMddHHmmssSSS) as a number: files sort by it."""
        return int(os.path.basename(self.file_name))

    @staticmethod
    def file_size_for(hash_slot_num: int, index_num: int) -> int:
        return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE

    @classmethod
    def create_blocking(
        cls, file_name: str, hash_slot_num: int, index_num: int, end_phy_offset: int, end_timestamp: int,
        *, publish: bool = True,
    ) -> IndexFile:
        """A new, live file. publish=False leaves it under its temporary name (made ahead of need: a crash
        before publish_blocking leaves only a .tmp, which load_blocking removes)."""
        size = cls.file_size_for(hash_slot_num, index_num)
        os.makedirs(os.path.dirname(file_name), exist_ok=True)
        tmp = file_name + ".tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)  # sparse: 420 MB by default, never written up front
            mm = mmap.mmap(fd, size)
            # Hash slots are written at random and entries appended 20 bytes at a time, on the event loop:
            # a fault on an uncached page must not read (zero-fill) the whole read-ahead window around it.
            no_read_around(mm)
            # The new, live file in huge pages. A first write into a 2 MiB stretch then zero-fills it in one
            # fault: ~0.4 ms here, where its 512 faults of 4 KiB took ~3.6 ms in all.
            map_in_huge_pages(mm)
            f = cls(file_name, hash_slot_num, index_num, fd, mm)
            # The header and slot table, here on the allocation thread: the first sends write slots all over
            # them at once, and each first write into a 2 MiB stretch was a zero-filling fault on the loop.
            f.warmed_to = min(f._entries_pos + ENTRIES_AHEAD, f.file_size)
            f.populate_blocking(0, f.warmed_to)
            f._continue_from(end_phy_offset, end_timestamp)
            if publish:
                os.rename(tmp, file_name)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        log.info("index_file_created", file=file_name)
        return f

    def publish_blocking(self, end_phy_offset: int, end_timestamp: int) -> None:
        """Take up where the previous file ended, and the file's own name (one made with publish=False)."""
        self._continue_from(end_phy_offset, end_timestamp)
        os.rename(self.file_name + ".tmp", self.file_name)

    def _continue_from(self, end_phy_offset: int, end_timestamp: int) -> None:
        """Start (empty) where the previous file ended, in memory and in the header."""
        if end_phy_offset > 0:
            self.begin_phy_offset = self.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            self.begin_timestamp = self.end_timestamp = end_timestamp
        self._write_header()

    @classmethod
    def open_blocking(cls, file_name: str, hash_slot_num: int, index_num: int) -> IndexFile:
        size = cls.file_size_for(hash_slot_num, index_num)
        fd = os.open(file_name, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise ValueError(f"{file_name}: length {actual} does not match index geometry ({size})")
            mm = mmap.mmap(fd, size)
            no_read_around(mm)  # (and 4 KiB pages: a loaded file is old unless IndexService says it is live)
        except BaseException:
            os.close(fd)
            raise
        f = cls(file_name, hash_slot_num, index_num, fd, mm)
        (
            f.begin_timestamp,
            f.end_timestamp,
            f.begin_phy_offset,
            f.end_phy_offset,
            f.hash_slot_count,
            f.index_count,
        ) = _HEADER.unpack_from(mm, 0)
        if f.index_count <= 0:
            f.index_count = 1
        f._roll_forward()
        f.flushed_index_count = f.index_count
        f.flushed_end_timestamp = f.end_timestamp
        return f

    def _roll_forward(self) -> None:
        """The header is written lazily (once per dispatch round), so after a crash it may lag: count
        the complete entries written after it (files are append-only and start zeroed)."""
        count = self.index_count
        mm = self.mm
        entries = self._entries_pos
        found = 0
        while count < self.index_num:
            h, phy, time_diff, prev = _ENTRY.unpack_from(mm, entries + count * INDEX_SIZE)
            if h == 0 and phy == 0 and time_diff == 0 and prev == 0:
                break
            count += 1
            found += 1
            if phy > self.end_phy_offset:
                self.end_phy_offset = phy
            ts = self.begin_timestamp + time_diff * 1000
            if ts > self.end_timestamp:
                self.end_timestamp = ts
        if found:
            self.index_count = count
            self._header_dirty = True
            self._write_header()
            log.info("index_file_rolled_forward", file=self.file_name, entries=found)

    def commit_header(self) -> None:
        """Write the in-memory header fields to the mapping (once per dispatch round, and before fsync)."""
        if self._header_dirty:
            self._write_header()

    def _write_header(self) -> None:
        self._header_dirty = False
        _HEADER.pack_into(
            self.mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    # ------------------------------------------------------------------------------ write

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def free_entries(self) -> int:
        return max(0, self.index_num - self.index_count)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        return self.put_key_hash(index_key_hash(key), phy_offset, store_timestamp)

    def put_key_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add an entry for a key whose index_key_hash is `key_hash`."""
        count = self.index_count
        if count >= self.index_num:
            return False
        mm = self.mm
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        slot_value = _I32.unpack_from(mm, slot_pos)[0]
        entries = self._entries_pos
        if slot_value == count:
            # A crash between the slot update and the count update: the entry it points at is
            # complete, so continue the chain from that entry's predecessor (avoids a self-loop).
            slot_value = _ENTRY.unpack_from(mm, entries + count * INDEX_SIZE)[3]
        if slot_value <= INVALID_INDEX or slot_value >= count:
            slot_value = INVALID_INDEX
        begin_ts = self.begin_timestamp
        if begin_ts <= 0:
            time_diff = 0
        else:
            time_diff = (store_timestamp - begin_ts) // 1000
            if time_diff > _INT_MAX:
                time_diff = _INT_MAX
            elif time_diff < 0:
                time_diff = 0
        # Entry first, then the slot; the header follows lazily (open() rolls forward over entries
        # written after the last header write).
        _ENTRY.pack_into(mm, entries + count * INDEX_SIZE, key_hash, phy_offset, time_diff, slot_value)
        _I32.pack_into(mm, slot_pos, count)
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
            self._write_header()  # begin timestamp anchors every time diff: persist it at once
        else:
            self._header_dirty = True
        return True

    def put_key_hashes(self, hashes: list[int], phy_offsets: list[int], store_timestamp: int) -> bool:
        """put_key_hash for the keys of one dispatch run (one store time, offsets not falling: a record's
        keys share its offset) with C-level calls: all entries with one pack (they are consecutive), then
        the slots. False, having written nothing, when the run does not fit the common case (room, a started
        file, no torn slot): put them one by one then."""
        n = len(hashes)
        count = self.index_count
        if n > _MAX_RUN or count <= 1 or count + n > self.index_num or self.begin_timestamp <= 0:
            return False
        hsn = self.hash_slot_num
        slots = [h % hsn for h in hashes]
        view = self._slots
        native, big = _swap_structs(n)
        prevs = big.unpack(native.pack(*map(view.__getitem__, slots)))
        if min(prevs) < 0 or max(prevs) >= count:
            return False  # a torn update or a bad slot: put_key_hash repairs those
        if len(set(slots)) != n:
            # Keys of one slot in the run (one key on many records, as a benchmark's send second): each entry
            # chains to the run's previous one in its slot, as one-by-one puts would; the slots are set in
            # order below, so each ends at its last entry.
            prevs = list(prevs)
            last: dict[int, int] = {}
            for j, slot in enumerate(slots):
                at = last.get(slot)
                if at is not None:
                    prevs[j] = count + at
                last[slot] = j
        time_diff = (store_timestamp - self.begin_timestamp) // 1000
        if time_diff > _INT_MAX:
            time_diff = _INT_MAX
        elif time_diff < 0:
            time_diff = 0
        flat: list[int] = [time_diff] * (4 * n)
        flat[0::4] = hashes
        flat[1::4] = phy_offsets
        flat[3::4] = prevs
        # Entries first, then the slots (as put_key_hash: a slot never points at an unwritten entry).
        _entries_struct(n).pack_into(self.mm, self._entries_pos + count * INDEX_SIZE, *flat)
        any(map(view.__setitem__, slots, native.unpack(big.pack(*range(count, count + n)))))  # all None: runs them all
        self.hash_slot_count += prevs.count(INVALID_INDEX)
        self.index_count = count + n
        self.end_phy_offset = phy_offsets[-1]
        self.end_timestamp = store_timestamp
        self._header_dirty = True
        return True

    def has_entry(self, key_hash: int, phy_offset: int) -> bool:
        """Is there an entry for (key_hash, phy_offset)? Chains run newest first, i.e. by falling phy
        offset, so only the head of the chain needs looking at."""
        count = self.index_count
        mm = self.mm
        entries = self._entries_pos
        nxt = _I32.unpack_from(mm, INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE)[0]
        for _ in range(count):
            if nxt <= INVALID_INDEX or nxt >= count:
                return False
            h, phy, _td, prev = _ENTRY.unpack_from(mm, entries + nxt * INDEX_SIZE)
            if phy < phy_offset:
                return False
            if h == key_hash and phy == phy_offset:
                return True
            if prev >= nxt:
                return False
            nxt = prev
        return False

    def mark_dispatched(self, phy_offset: int, store_timestamp: int) -> None:
        """A record without keys passed by: remember how far the index has seen the commit log so a
        restart does not replay a long keyless tail."""
        if phy_offset > self.end_phy_offset:
            self.end_phy_offset = phy_offset
            if store_timestamp > self.end_timestamp:
                self.end_timestamp = store_timestamp
            self._header_dirty = True

    # ------------------------------------------------------------------------------ read

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offsets(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        if self._closed or self.index_count <= 1:
            return
        key_hash = index_key_hash(key)
        mm = self.mm
        count = self.index_count
        slot_value = _I32.unpack_from(
            mm, INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        )[0]
        entries = self._entries_pos
        if slot_value == count and count < self.index_num:
            slot_value = _ENTRY.unpack_from(mm, entries + count * INDEX_SIZE)[3]  # torn put: skip it
        if slot_value <= INVALID_INDEX or slot_value >= count:
            return
        begin_ts = self.begin_timestamp
        nxt = slot_value
        for _ in range(count):  # bound the walk even if a chain were corrupt
            if len(out) >= max_num:
                break
            h, phy, time_diff, prev = _ENTRY.unpack_from(mm, entries + nxt * INDEX_SIZE)
            if time_diff < 0:
                break
            time_read = begin_ts + time_diff * 1000
            if h == key_hash and begin <= time_read <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev >= nxt or time_read < begin:
                break
            nxt = prev

    # ------------------------------------------------------------------------------ disk

    def fsync_blocking(self) -> None:
        if not self._closed:
            os.fdatasync(self._fd)

    def close_blocking(self) -> None:
        if self._closed:
            return
        self.commit_header()
        self._closed = True
        self._slots.release()
        try:
            self.mm.close()
        except BufferError:
            pass
        os.close(self._fd)

    def destroy_blocking(self) -> None:
        self.close_blocking()
        try:
            os.unlink(self.file_name)
        except FileNotFoundError:
            pass
        log.info("index_file_destroyed", file=self.file_name)


class IndexService:
    def __init__(self, store_path: str, hash_slot_num: int, index_num: int, max_msgs_num_batch: int) -> None:
        self.store_path = store_path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.max_msgs_num_batch = max_msgs_num_batch
        self.index_file_list: list[IndexFile] = []
        self.key_hasher = TopicKeyHasher()
        # The next file, made ahead on the allocation thread once the live one is NEXT_AHEAD_FULL full
        # (prepare_next_blocking): made at the roll, its slot table faulted in (50-90 ms here) held up the
        # dispatcher every index_num keys (~4 minutes at 85k msgs/s with the default 20 M).
        self._next: IndexFile | None = None
        self._next_pending = False
        self._lost_from: int | None = None  # files dropped at load: their records are indexed again from here

    # ------------------------------------------------------------------------------ load / recover

    def load_blocking(self, os_crashed: bool = False, checkpoint_file: int = 0, checkpoint_ts: int = 0) -> None:
        """Open the index files. `os_crashed`: the OS went down since the store last ran (see
        _drop_unsynced_blocking); `checkpoint_file`/`checkpoint_ts`: the store checkpoint's index file
        and index timestamp."""
        _pair_tables()  # built here, at start-up (worker thread): the first keys' dispatch spent ~10 ms on it
        if not os.path.isdir(self.store_path):
            return
        names = []
        for name in os.listdir(self.store_path):
            path = os.path.join(self.store_path, name)
            if name.endswith(".tmp"):
                os.unlink(path)
            elif name.isdigit():
                names.append(name)
        for name in sorted(names):
            try:
                f = IndexFile.open_blocking(
                    os.path.join(self.store_path, name), self.hash_slot_num, self.index_num
                )
            except ValueError as e:
                log.error("index_file_load_failed", file=name, error=str(e))
                continue
            self.index_file_list.append(f)
        if os_crashed:
            self._drop_unsynced_blocking(checkpoint_file, checkpoint_ts)
        if self.index_file_list and self.index_file_list[-1].index_count < self.index_num:
            live = self.index_file_list[-1]
            live.set_live(True)  # the one new entries go to
            # Its slot table read in here (start-up, worker thread), not by the loop's first random slot
            # accesses, each of which read a 2 MiB stretch from disk when the page cache was cold.
            live.populate_blocking(0, live._entries_pos, write=False)

    def _drop_unsynced_blocking(self, checkpoint_file: int, checkpoint_ts: int) -> None:
        """After the OS went down (a power cut, a kernel crash) rather than only the store's process, an
        index file written since its last fsync may have lost any of its sectors, its header and slots
        too, so what it says cannot be trusted. The file the last checkpoint was taken in had entries
        added after it, and later files were never synced whole: drop them, and have the records they
        covered indexed again from where the files before them end (truncate_past_blocking returns it).
        Without a recorded file (a store from before it was recorded) this is RocketMQ's rule: drop the
        files with entries newer than the checkpoint's index timestamp; without either, all of them.
        RocketMQ drops them without indexing their records again unless messageIndexSafe is set; keys
        are looked up by people after an incident, so we index them again."""
        files = self.index_file_list
        keep: list[IndexFile] = []
        if checkpoint_file > 0:
            keep = [f for f in files if f.number < checkpoint_file]
        elif checkpoint_ts > 0:
            for f in files:
                if f.end_timestamp > checkpoint_ts:
                    break
                keep.append(f)
        dropped = files[len(keep) :]
        if not dropped:
            return
        self._lost_from = keep[-1].end_phy_offset if keep else 0
        for f in dropped:
            f.destroy_blocking()
        self.index_file_list = keep
        log.warning(
            "index_files_dropped_after_os_crash",
            files=[os.path.basename(f.file_name) for f in dropped],
            reindex_from=self._lost_from,
        )

    def truncate_past_blocking(self, max_phy_offset: int) -> int | None:
        """The commit log now ends at `max_phy_offset`: drop index files holding entries at or past it
        (they would point at records that no longer exist). Returns the commit log offset the index must
        be rebuilt from (or from before, when files were dropped at load), or None when nothing was."""
        rebuild_from, self._lost_from = self._lost_from, None
        while self.index_file_list:
            f = self.index_file_list[-1]
            if f.end_phy_offset < max_phy_offset:
                break
            if len(self.index_file_list) == 1 and f.index_count <= 1 and f.end_phy_offset == 0:
                break  # a fresh store's first file (made at start): no record, nothing past any cut
            # Entries (or, for an empty file, the dispatch mark) at or past the cut: drop the file.
            rebuild_from = f.begin_phy_offset if rebuild_from is None else min(rebuild_from, f.begin_phy_offset)
            self.index_file_list.pop()
            f.destroy_blocking()
        if rebuild_from is not None:
            rebuild_from = min(rebuild_from, max_phy_offset)
        return rebuild_from

    def dispatch_progress(self) -> int | None:
        """Commit log offset of the last record the index saw (None: no index file yet)."""
        if not self.index_file_list:
            return None
        return self.index_file_list[-1].end_phy_offset

    # ------------------------------------------------------------------------------ write path

    def has_room(self, needed: int) -> bool:
        files = self.index_file_list
        if not files:
            return False
        if needed <= 0:
            return True  # only the header is touched
        return files[-1].index_num - files[-1].index_count >= min(needed, self.index_num - 1)

    def commit_header(self) -> None:
        if self.index_file_list:
            self.index_file_list[-1].commit_header()

    def roll_blocking(self) -> None:
        """Start a new index file continuing from the last one (worker thread; appends only)."""
        last = self.index_file_list[-1] if self.index_file_list else None
        if last is not None and last.index_count <= 1:
            return  # an empty file has all the room there is
        end_phy = last.end_phy_offset if last else 0
        end_ts = last.end_timestamp if last else 0
        f = self._next
        if f is not None:
            try:
                f.publish_blocking(end_phy, end_ts)
                self._next = None
            except OSError as e:
                log.error("index_file_publish_failed", file=f.file_name, error=str(e))
                self._drop_next_blocking()
                f = None
        if f is None:
            f = IndexFile.create_blocking(self._new_file_name(), self.hash_slot_num, self.index_num, end_phy, end_ts)
        if last is not None:
            last.set_live(False)
        self.index_file_list.append(f)

    def next_wanted(self) -> bool:
        """Is it time to make the next file ahead (loop thread)? Claims it: asked again, this says False
        until prepare_next_blocking has run."""
        if self._next is not None or self._next_pending or not self.index_file_list:
            return False
        if self.index_file_list[-1].index_count < self.index_num * NEXT_AHEAD_FULL:
            return False
        self._next_pending = True
        return True

    def prepare_next_blocking(self) -> None:
        """Make the next file under its temporary name (allocation thread, which also runs roll_blocking:
        the two never overlap)."""
        try:
            if self._next is None:
                self._next = IndexFile.create_blocking(
                    self._new_file_name(), self.hash_slot_num, self.index_num, 0, 0, publish=False
                )
        finally:
            self._next_pending = False

    def _drop_next_blocking(self) -> None:
        f, self._next = self._next, None
        if f is not None:
            f.close_blocking()
            try:
                os.unlink(f.file_name + ".tmp")
            except FileNotFoundError:
                pass

    def _new_file_name(self) -> str:
        now = time.time()
        while True:
            dt = datetime.fromtimestamp(now)
            name = dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"
            path = os.path.join(self.store_path, name)
            if not os.path.exists(path) and not any(f.file_name == path for f in self.index_file_list):
                return path
            now += 0.001

    @staticmethod
    def keys_needed(keys: str | None, uniq_key: str | None) -> int:
        n = 1 if uniq_key else 0
        if keys:
            n += sum(1 for k in keys.split(MessageConst.KEY_SEPARATOR) if k)
        return n

    @staticmethod
    def key_hash(topic: str, key: str) -> int:
        """index_key_hash(topic + "#" + key): abs of the signed Java hash, MIN_VALUE -> 0."""
        h = java_hash_unsigned(f"{topic}#{key}")
        if h & 0x80000000:
            h = 0 if h == 0x80000000 else 0x100000000 - h
        return h

    def indexed_past(self, commit_log_offset: int) -> bool:
        """Whether the live index file is past this record (build_index would skip it)."""
        files = self.index_file_list
        return bool(files) and commit_log_offset < files[-1].end_phy_offset

    def build_index(
        self,
        topic: str,
        commit_log_offset: int,
        store_timestamp: int,
        sys_flag: int,
        keys: str | None,
        uniq_key: str | None,
    ) -> None:
        if not self.index_file_list:
            return
        f = self.index_file_list[-1]
        end = f.end_phy_offset
        if commit_log_offset < end:
            return  # indexed already (replay after restart)
        # The last record indexed may have been cut short by a crash between two of its keys: on a
        # replay of it, add only the keys that are missing.
        replay = commit_log_offset == end and f.index_count > 1
        if sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            f.mark_dispatched(commit_log_offset, store_timestamp)
            return
        wrote = False
        if uniq_key:
            h = self.key_hash(topic, uniq_key)
            if not (replay and f.has_entry(h, commit_log_offset)):
                wrote = f.put_key_hash(h, commit_log_offset, store_timestamp)
        if keys:
            for k in keys.split(MessageConst.KEY_SEPARATOR):
                if k:
                    h = self.key_hash(topic, k)
                    if replay and f.has_entry(h, commit_log_offset):
                        continue
                    if not f.put_key_hash(h, commit_log_offset, store_timestamp):
                        log.warning("index_file_full_dropping_key", key=k, offset=commit_log_offset)
                        break
                    wrote = True
        if not wrote:
            f.mark_dispatched(commit_log_offset, store_timestamp)

    def _run_file(self, first_phy_offset: int, sys_flag: int) -> IndexFile | None:
        """The file a run's keys go to in bulk, or None: no file yet, a rollback (not indexed), or a replay
        (the run starts at or before what the file already holds)."""
        files = self.index_file_list
        if not files or sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            return None
        f = files[-1]
        return None if first_phy_offset <= f.end_phy_offset else f

    def build_index_uniq_run(
        self, topic: str, phy_offsets: list[int], store_timestamp: int, sys_flag: int, uniq_keys: list[str]
    ) -> bool:
        """build_index for a dispatch run whose records each have a UNIQ_KEY and no KEYS, in one go. False,
        having indexed nothing, when the run is not that simple (a replay, a rollback, no room, keys that
        do not hash in bulk): index it record by record then."""
        f = self._run_file(phy_offsets[0], sys_flag)
        if f is None:
            return False
        hashes = self.key_hasher.index_hashes(topic, uniq_keys)
        if hashes is None:
            return False
        return f.put_key_hashes(hashes, phy_offsets, store_timestamp)

    def build_index_uniq_records(
        self, topics: list[str], phy_offsets: list[int], store_timestamp: int, uniq_keys: list[str]
    ) -> bool:
        """build_index_uniq_run for single records of one store time, `topics[i]` being record i's topic:
        one topic hashes its keys in bulk; several (pipelined sends round-robin over topics) hash them one
        by one, and the entries and slots are still written in one go."""
        topic = topics[0]
        if topics.count(topic) == len(topics):
            return self.build_index_uniq_run(topic, phy_offsets, store_timestamp, 0, uniq_keys)
        f = self._run_file(phy_offsets[0], 0)
        if f is None:
            return False
        return f.put_key_hashes(self.key_hasher.index_hashes_mixed(topics, uniq_keys), phy_offsets, store_timestamp)

    def build_index_keyed_records(
        self, topics: list[str], phy_offsets: list[int], store_timestamp: int, keys: list[str], key_at: list[int]
    ) -> bool:
        """build_index_uniq_records for entries of single records some of which have KEYS too: each record's
        UNIQ_KEY entry followed by one a key (build_index's order), `key_at` the (rising) places of the KEYS
        entries, `topics` and `phy_offsets` each entry's record's. The UNIQ_KEYs hash in bulk as there, the
        keys likewise (when of one length and few prefixes: ids, or upstream's benchmark key, the send
        second) or one by one; all go in one run. False, having indexed nothing, when it does not go in bulk."""
        f = self._run_file(phy_offsets[0], 0)
        if f is None:
            return False
        n = len(keys)
        is_key = [False] * n
        for j in key_at:
            is_key[j] = True
        u_at = [i for i in range(n) if not is_key[i]]
        uniqs = [keys[i] for i in u_at]
        ks = [keys[j] for j in key_at]
        hasher = self.key_hasher
        topic = topics[0]
        if topics.count(topic) == n:
            uh = hasher.index_hashes(topic, uniqs)
            if uh is None:
                return False
            kh = hasher.index_hashes(topic, ks)
            if kh is None:
                kh = _abs_signed([hasher.hash_unsigned(topic, k) for k in ks])
        else:
            uh = hasher.index_hashes_mixed([topics[i] for i in u_at], uniqs)
            kh = hasher.index_hashes_mixed([topics[j] for j in key_at], ks)
        hashes = [0] * n
        if 2 * len(key_at) == n and key_at == list(range(1, n, 2)):
            hashes[0::2] = uh  # one key a record: every other entry
            hashes[1::2] = kh
        else:
            for i, h in zip(u_at, uh, strict=True):
                hashes[i] = h
            for j, h in zip(key_at, kh, strict=True):
                hashes[j] = h
        return f.put_key_hashes(hashes, phy_offsets, store_timestamp)

    def build_index_uniq_column(
        self, topic: str, phy_offsets: list[int], store_timestamp: int, sys_flag: int, column: list[bytes]
    ) -> bool:
        """build_index_uniq_run with the run's UNIQ_KEYs given as the batch's value column (UTF-8 bytes, all
        of one length: see store.dispatch): hashed straight from the joined column when it is ASCII."""
        f = self._run_file(phy_offsets[0], sys_flag)
        if f is None:
            return False
        blob = b"".join(column)
        if not blob.isascii():
            return False
        hashes = self.key_hasher.index_hashes_ascii(topic, blob, len(column[0]), len(column))
        if hashes is None:
            return False
        return f.put_key_hashes(hashes, phy_offsets, store_timestamp)

    # ------------------------------------------------------------------------------ query

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        max_num = min(max_num, self.max_msgs_num_batch)
        phy_offsets: list[int] = []
        last_ts = 0
        last_phy = 0
        files = self.index_file_list
        full_key = build_key(topic, key)
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                last_ts = f.end_timestamp
                last_phy = f.end_phy_offset
            if f.is_time_matched(begin, end):
                f.select_phy_offsets(phy_offsets, full_key, max_num, begin, end)
            if f.begin_timestamp < begin or len(phy_offsets) >= max_num:
                break
        return QueryOffsetResult(phy_offsets, last_ts, last_phy)

    # ------------------------------------------------------------------------------ flush / cleanup

    def flush_snapshot(self) -> list[tuple[IndexFile, int, int]]:
        """Files with entries not yet fsynced: (file, index count, end timestamp) as of now."""
        self.commit_header()
        return [
            (f, f.index_count, f.end_timestamp)
            for f in self.index_file_list
            if f.index_count != f.flushed_index_count or f.end_timestamp != f.flushed_end_timestamp
        ]

    def files_expired_by_offset(self, offset: int) -> list[IndexFile]:
        """Index files (never the last) whose every entry points before the commit log min offset."""
        out = []
        for f in self.index_file_list[:-1]:
            if f.end_phy_offset < offset:
                out.append(f)
            else:
                break
        return out

    def remove_files(self, files: list[IndexFile]) -> None:
        # In place: roll_blocking appends from the allocation thread (see mapped_file_queue).
        remove_in_place(self.index_file_list, files)

    def destroy_blocking(self) -> None:
        self._drop_next_blocking()
        for f in self.index_file_list:
            f.destroy_blocking()
        self.index_file_list = []

    def close_blocking(self) -> None:
        self._drop_next_blocking()  # (a file made ahead holds nothing yet)
        for f in self.index_file_list:
            f.close_blocking()
