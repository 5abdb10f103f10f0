"""CommitLog: the single append-only log of every message record, in fixed-size mapped files.

Put path (one lock round per call, single or batch): pass 1, outside the lock, validates every message
and prepares the variable parts (properties bytes, topic+properties tail, body CRC, tags code); pass 2,
under the lock -- where queue offset, physical offset and store time are known -- packs each record's
fixed part with one precompiled struct straight into the mapping and copies body and tail after it, so
every byte is written once and nothing is patched or copied again. A run never spans files: the tail of
a file that cannot take it gets a blank marker ([int32 remaining][BLANK_MAGIC_CODE]) and the run goes
to the next file, preallocated in the background.

A MessageBatch goes column by column (C-level maps over its lists: tails, sizes, CRCs, tags codes) and,
when its records all have one shape, is written with a single struct pack of all of them.
"""

from __future__ import annotations

import asyncio
import operator
import struct
import time
import zlib
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import TYPE_CHECKING, Any

import structlog

from remoting.message import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    MessageConst,
    MessageSysFlag,
    RecordLayout,
    decode_properties,
    encode_properties,
    host_to_bytes,
    java_string_hash,
)

from .dispatch import DispatchTuple
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .message import MessageExtBrokerInner, record_topic_part
from .results import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus
from .warm_ahead import CommitLogWarmAhead

if TYPE_CHECKING:
    from .message_store import DefaultMessageStore

log = structlog.get_logger(__name__)

# Enum members the put path uses per message, as module constants: Enum.MEMBER costs ~65 ns on Python 3.11.
_PUT_OK = PutMessageStatus.PUT_OK
_APPEND_OK = AppendMessageStatus.PUT_OK

END_FILE_MIN_BLANK_LENGTH = 4 + 4
_SIZE_MAGIC = struct.Struct(">iI")
_BLANK = struct.Struct(">iI")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PORT = struct.Struct(">i")
_LAYOUTS = tuple(RecordLayout.for_sys_flag(f << 4) for f in range(4))
# Per layout, the header fields check_record reads (total, magic, body CRC, queue id, queue offset, physical
# offset, sys flag, store timestamp, body length), the rest skipped: no bytes objects for the hosts.
_CHECK_HEADERS = tuple(
    struct.Struct(f">iIii4xqqi8x{layout.born_host_len}xq{layout.store_host_len}x4x8xi") for layout in _LAYOUTS
)
assert all(h.size == layout.body_pos for h, layout in zip(_CHECK_HEADERS, _LAYOUTS, strict=True))
_V6_BITS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
_TRAN_PREPARED = MessageSysFlag.TRANSACTION_PREPARED_TYPE
_PROP_KEYS = MessageConst.PROPERTY_KEYS
_PROP_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_PROP_TAGS = MessageConst.PROPERTY_TAGS
_CACHE_LIMIT = 4096


SECTOR = 512  # what a power cut may leave unwritten within a page: a sector reads as all zeros
_ZERO_SECTOR = bytes(SECTOR)


def _torn_after_body(mv: memoryview, tp: int, pp: int, end: int) -> bool:
    """Whether a 512-byte sector holding part of the record's topic or properties reads as all zeros: a
    record a power cut left half written (recovery's check). The body has its CRC; the topic and the
    properties have none, and a sector of theirs can be lost while the rest of the record is on disk.
    A valid record does not look like that: a topic has no zero byte, and properties end with a value
    (through the broker, the cluster's name: CLUSTER is added last) or a 0x02 separator; only a value
    ending in NUL bytes, stored last, could put a whole sector of zeros there. (A sector meeting only
    the properties' length, which is zero for a record without any, is not judged.)"""
    s = tp - tp % SECTOR
    props_end = pp + 2
    limit = len(mv)
    while s < end:
        e = min(s + SECTOR, limit)
        if (s < pp or (e > props_end and end > props_end)) and mv[s:e].tobytes() == _ZERO_SECTOR[: e - s]:
            return True
        s += SECTOR
    return False


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageBatch:
    """One batch send (MessageExtBatch) as the store takes it: the fields every message of a batch shares
    once, and per message only flag, body and properties -- no MessageExtBrokerInner per message. The
    put path writes its records in one tight loop (CommitLog._prepare_batch / put_many)."""

    __slots__ = (
        "topic",
        "queue_id",
        "sys_flag",
        "born_timestamp",
        "born_host",
        "store_host",
        "reconsume_times",
        "flags",
        "bodies",
        "properties_list",
        "properties_strings",
        "properties_bytes",
        "store_timestamp",
        "body_len",
        "properties_template",
        "consume_queue",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: tuple[str, int],
        store_host: tuple[str, int],
        reconsume_times: int,
        flags: list[int],
        bodies: list[bytes],
        properties_list: list[dict[str, str]],
        properties_strings: list[str] | None,
        properties_bytes: list[bytes] | None = None,
        *,
        body_len: int = -1,
        properties_template: tuple[tuple[bytes, ...], list[list[bytes]], int] | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.flags = flags
        self.bodies = bodies
        self.properties_list = properties_list  # each message's own properties plus the batch's
        # What is stored (the above without WAIT), as strings or already UTF-8 encoded (one is enough).
        self.properties_strings = properties_strings
        self.properties_bytes = properties_bytes
        self.store_timestamp = 0
        # Set only by whoever cut the columns with one struct (so every value has its field's length):
        # every body is body_len bytes, and message i's stored properties are pieces[0] + columns[0][i]
        # + pieces[1] + ... + pieces[-1], stored_len bytes for each message (properties_template =
        # (pieces, columns, stored_len)). The put path then writes each record from these parts as
        # they are: no per-message properties bytes, tails or sizes.
        self.body_len = body_len
        self.properties_template = properties_template
        self.consume_queue: Any = None  # as MessageExtBrokerInner.consume_queue

    def __len__(self) -> int:
        return len(self.bodies)

    @property
    def properties(self) -> dict[str, str]:
        """The first message's properties (what a caller reading msgs[0] of a list would see)."""
        return self.properties_list[0] if self.properties_list else {}

    def is_wait_store_msg_ok(self) -> bool:
        return self.properties.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK) != "false"

    def stored_properties_bytes(self) -> list[bytes]:
        """Each message's stored properties, UTF-8 encoded (from whichever form the batch holds)."""
        if self.properties_bytes is not None:
            return self.properties_bytes
        if self.properties_strings is not None:
            return [ps.encode("utf-8") for ps in self.properties_strings]
        if self.properties_template is not None:
            pieces, columns, _len = self.properties_template
            rows = zip(*columns, strict=True) if columns else repeat((), len(self.bodies))
            return [b"".join(_interleave(pieces, row)) for row in rows]
        return []

    def to_messages(self) -> list[MessageExtBrokerInner]:
        """The batch as one MessageExtBrokerInner per message (slow paths and wrappers)."""
        strings = self.properties_strings
        if strings is None:
            strings = [b.decode("utf-8") for b in self.stored_properties_bytes()]
        return [
            MessageExtBrokerInner(
                self.topic, body, self.queue_id, flag, props, ps, 0, self.sys_flag, self.born_timestamp,
                self.born_host, self.store_host, self.reconsume_times,
            )
            for flag, body, props, ps in zip(
                self.flags, self.bodies, self.properties_list, strings, strict=True
            )
        ]


def _interleave(pieces: tuple[bytes, ...], values: Sequence[bytes]) -> list[bytes]:
    """pieces[0], values[0], pieces[1], ..., pieces[-1]."""
    out = [pieces[0]]
    for value, piece in zip(values, pieces[1:], strict=True):
        out.append(value)
        out.append(piece)
    return out


class CommitLog:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        cfg = store.message_store_config
        self.cfg = cfg
        self.mapped_file_queue = MappedFileQueue(
            cfg.store_path_commit_log(),
            cfg.mappedFileSizeCommitLog,
            preallocate=cfg.preallocateMappedFile,
        )
        self.mapped_file_size = cfg.mappedFileSizeCommitLog
        # "topic-queueId" -> next queue offset; assigned in the put path.
        self.topic_queue_table: dict[str, int] = {}
        self.begin_time_in_lock = 0
        self._put_lock = asyncio.Lock()
        self._next_file: asyncio.Future[MappedFile] | None = None
        self._next_file_offset = -1
        # Faults the pages ahead of the writer into its mapping on a thread (see warm_ahead.py); with warming
        # off, nothing does and the writer faults its pages in itself.
        self.warm_ahead: CommitLogWarmAhead | None = (
            CommitLogWarmAhead(store.commit_log_warm_executor, self._file_after, self.files_ahead)
            if cfg.warmMapedFileEnable
            else None
        )
        self._topic_cache: dict[str, bytes | None] = {}
        self._host_cache: dict[str, bytes] = {}
        self._sh_cache: dict[tuple[bytes, int], bytes] = {}
        self._hex_cache: dict[bytes, str] = {}

    # ------------------------------------------------------------------------------ offsets

    def get_min_offset(self) -> int:
        mf = self.mapped_file_queue.get_first_mapped_file()
        if mf is None:
            return -1
        return mf.file_from_offset

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    def remain_how_many_data_to_flush(self) -> int:
        return self.mapped_file_queue.remain_how_many_data_to_flush()

    @property
    def flushed_where(self) -> int:
        return self.mapped_file_queue.flushed_where

    # ------------------------------------------------------------------------------ reads

    def get_message(self, offset: int, size: int) -> memoryview | None:
        """The stored record bytes (a read-only slice of the mapping), or None if not (or no longer) there."""
        mfq = self.mapped_file_queue
        mf = mfq.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        return mf.select(offset - mf.file_from_offset, size)

    def get_data(self, offset: int) -> tuple[memoryview, MappedFile] | None:
        """From `offset` to the end of the written part of its file."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        mv = mf.select_to_end(offset - mf.file_from_offset)
        if mv is None:
            return None
        return mv, mf

    def get_record_size(self, offset: int) -> int:
        mv = self.get_message(offset, 4)
        if mv is None:
            return -1
        return _I32.unpack_from(mv, 0)[0]

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        if offset < self.get_min_offset():
            return -1
        mv = self.get_message(offset, size)
        if mv is None or len(mv) < 64:
            return -1
        sys_flag = _I32.unpack_from(mv, RecordLayout.SYS_FLAG_POS)[0]
        return _I64.unpack_from(mv, _LAYOUTS[(sys_flag >> 4) & 0x3].store_timestamp_pos)[0]

    # ------------------------------------------------------------------------------ record check

    def check_record(
        self, mv: memoryview, pos: int, check_crc: bool, file_from_offset: int, size_only: bool = False,
        head_only: bool = False,
    ) -> int | DispatchTuple:
        """Validate the record at `pos` of a file's view (RocketMQ's checkMessageAndReturnSize): -1 when it is
        not a valid record (torn tail, CRC mismatch, zeros, stale data), 0 for the blank that ends a file,
        else the record's dispatch tuple (store.dispatch) -- or, with `size_only` (the recovery scan, which
        keeps only where the valid records end), its size, and with `head_only` (the start-up catch-up, to
        skip what is dispatched already) (commit_log_offset, size, topic, queue_id, queue_offset,
        store_timestamp, sys_flag): the same checks, without decoding the properties."""
        end = len(mv)
        if pos + 8 > end:
            return -1
        total, magic = _SIZE_MAGIC.unpack_from(mv, pos)
        if magic == BLANK_MAGIC_CODE:
            return 0
        if magic != MAGIC_CODE or total < 56 or pos + total > end:
            return -1
        hosts = (_I32.unpack_from(mv, pos + RecordLayout.SYS_FLAG_POS)[0] >> 4) & 0x3
        body_pos = _LAYOUTS[hosts].body_pos
        if total < body_pos + 3:  # the fixed part: up to the body, the topic length and the properties length
            return -1
        _t, _m, crc, queue_id, queue_offset, phy_offset, sys_flag, store_ts, body_len = (
            _CHECK_HEADERS[hosts].unpack_from(mv, pos)
        )
        if phy_offset != file_from_offset + pos:
            return -1  # stale bytes from an older write
        body_pos += pos
        tp = body_pos + body_len
        if body_len < 0 or tp + 3 > pos + total:
            return -1
        if check_crc and body_len > 0 and zlib.crc32(mv[body_pos:tp]) & 0x7FFFFFFF != crc:
            log.warning("commitlog_crc_check_failed", offset=phy_offset)
            return -1
        topic_len = mv[tp]
        if topic_len > MAX_TOPIC_LENGTH:
            return -1
        pp = tp + 1 + topic_len
        if pp + 2 > pos + total:
            return -1
        props_len = _I16.unpack_from(mv, pp)[0]
        if props_len < 0 or pp + 2 + props_len != pos + total:  # (layout.record_size, from the positions)
            return -1
        last = pos + total - 1  # (the first and the last sector each hold a byte that is not zero)
        if (topic_len == 0 or mv[last] == 0 or last - tp >= SECTOR) and _torn_after_body(mv, tp, pp, last + 1):
            return -1
        try:
            topic = str(mv[tp + 1 : pp], "utf-8")
        except UnicodeDecodeError:
            return -1
        if size_only:  # (decoding the properties cannot fail: bad bytes decode as U+FFFD, as Java's do)
            return total  # type: ignore[no-any-return]
        if head_only:
            return (phy_offset, total, topic, queue_id, queue_offset, store_ts, sys_flag)
        props = decode_properties(mv[pp + 2 : pp + 2 + props_len]) if props_len > 0 else None
        keys = uniq = None
        if props:
            keys = props.get(_PROP_KEYS)
            uniq = props.get(_PROP_UNIQ)
        tags_code = self.store.compute_tags_code(topic, props)
        return (phy_offset, total, topic, queue_id, queue_offset, tags_code, store_ts, keys, uniq, sys_flag, props,
                None)

    # ------------------------------------------------------------------------------ recovery (start-up thread)

    def load_blocking(self) -> None:
        self.mapped_file_queue.load_blocking()

    def recover_normally_blocking(self, max_phy_offset_of_consume_queue: int) -> None:
        """Clean shutdown: trust the checkpoint and only re-validate the last 3 files."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            self.mapped_file_queue.flushed_where = 0
            self.store.destroy_logics_blocking()
            return
        self._recover_from_blocking(max(0, len(files) - 3), max_phy_offset_of_consume_queue, normal=True)

    def recover_abnormally_blocking(self, max_phy_offset_of_consume_queue: int, os_crashed: bool = False) -> int:
        """After a crash: start from the newest file whose first record is older than the checkpoint
        and re-validate everything after it (magic, sizes, CRC); cut at the first bad record. Returns
        where the consume queues' replay must start: the first valid record from that file on that its
        queue lacks (the end of the valid records when none does). Java's recoverAbnormally dispatches
        every record it reads; only those before the checkpoint are known to be in the queues on disk, but
        one that its queue holds needs nothing (each queue's units follow the log's order), so the
        scan, which reads every record anyway, finds the first one that does instead of a second pass
        reading them all again (ReputMessageService.do_reput_blocking).

        `os_crashed`: the OS went down too, so a consume queue unit written after the last flush may be
        torn (a 20-byte unit can straddle two disk sectors, and one of them be lost: a unit with its tags
        code zeroed still looks valid, and a consumer filtering by tag would never see its message).
        Units from the scan's first file on are dropped and dispatched again: those before it were
        flushed before the checkpoint the scan starts from was written."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            self.mapped_file_queue.flushed_where = 0
            self.store.destroy_logics_blocking()
            return 0
        index = len(files) - 1
        while index >= 0:
            if self._is_mapped_file_matched_recover(files[index]):
                break
            index -= 1
        index = max(index, 0)
        if os_crashed:
            start = files[index].file_from_offset
            if max_phy_offset_of_consume_queue > start:
                log.warning("consume_queues_cut_after_os_crash", offset=start)
                self.store.truncate_dirty_logic_files_blocking(start)
                max_phy_offset_of_consume_queue = start
        return self._recover_from_blocking(index, max_phy_offset_of_consume_queue, normal=False)

    def _is_mapped_file_matched_recover(self, mf: MappedFile) -> bool:
        mv = mf.mv
        total, magic = _SIZE_MAGIC.unpack_from(mv, 0)
        if magic != MAGIC_CODE:
            return False
        sys_flag = _I32.unpack_from(mv, RecordLayout.SYS_FLAG_POS)[0]
        store_ts = _I64.unpack_from(mv, _LAYOUTS[(sys_flag >> 4) & 0x3].store_timestamp_pos)[0]
        if store_ts == 0:
            return False
        cp = self.store.store_checkpoint
        if self.cfg.messageIndexEnable and self.cfg.messageIndexSafe:
            return store_ts <= cp.get_min_timestamp_index()
        return store_ts <= cp.get_min_timestamp()

    def _recover_from_blocking(
        self, index: int, max_phy_offset_of_consume_queue: int, *, normal: bool
    ) -> int:
        """Scan from file `index` to the last valid record and cut the log (and consume queues) there.
        Returns the end of the valid records, or, after a crash (not `normal`), the first valid record its
        consume queue lacks if one comes before that."""
        files = self.mapped_file_queue.mapped_files
        check_crc = self.cfg.checkCRCOnRecover
        check = self.check_record
        queue_holds = self.store.queue_holds
        mf = files[index]
        process_offset = mf.file_from_offset
        pos = 0
        scanned = 0
        first_lacking: int | None = None
        seeking = not normal  # until the first record a queue lacks: read heads, not only sizes
        while True:
            if seeking:
                head = check(mf.mv, pos, check_crc, mf.file_from_offset, head_only=True)
                if head.__class__ is tuple:
                    phy, size, topic, qid, _qo, _ts, sys_flag = head  # type: ignore[misc]
                    if not queue_holds(phy, size, topic, qid, sys_flag):
                        first_lacking = phy
                        seeking = False
                    pos += size
                    scanned += 1
                    continue
                size = head
            else:
                size = check(mf.mv, pos, check_crc, mf.file_from_offset, size_only=True)
            if size > 0:  # type: ignore[operator]
                pos += size  # type: ignore[operator]
                scanned += 1
            elif size == 0:
                index += 1
                if index >= len(files):
                    break
                mf = files[index]
                process_offset = mf.file_from_offset
                pos = 0
            else:
                break
        process_offset += pos
        log.info(
            "commitlog_recovered",
            mode="normal" if normal else "abnormal",
            max_offset=process_offset,
            scanned_records=scanned,
            first_lacking=first_lacking,
        )
        mfq = self.mapped_file_queue
        mfq.flushed_where = process_offset
        mfq.truncate_dirty_files_blocking(process_offset)
        last = mfq.get_last_mapped_file()
        if last is not None:
            last.flushed_position = last.wrote_position
        if max_phy_offset_of_consume_queue > process_offset:
            log.warning(
                "truncate_dirty_logic_files",
                max_phy_offset_of_cq=max_phy_offset_of_consume_queue,
                offset=process_offset,
            )
            self.store.truncate_dirty_logic_files_blocking(process_offset)
        return process_offset if first_lacking is None else first_lacking

    # ------------------------------------------------------------------------------ file rolling

    async def _roll_file(self) -> MappedFile:
        """Add the next file (made ahead of time by a worker thread when possible)."""
        mfq = self.mapped_file_queue
        loop = asyncio.get_running_loop()
        start = mfq.next_file_offset()
        fut = self._next_file
        self._next_file = None
        mf: MappedFile | None = None
        if fut is not None and self._next_file_offset == start:
            try:
                mf = await fut
            except Exception as e:  # noqa: BLE001 - retried synchronously below
                log.warning("commitlog_preallocate_failed", error=str(e))
                mf = None
        elif fut is not None:
            fut.add_done_callback(self._discard_file_result)
        if mf is None:
            mf = await loop.run_in_executor(self.store.commit_log_alloc_executor, mfq.create_file_blocking, start)
        mfq.add_mapped_file(mf)
        self._preallocate_next(mf.file_end_offset)
        return mf

    def _made_next_file(self) -> MappedFile | None:
        """The preallocated next file, once it has been made (None while in the making, or if that failed)."""
        fut = self._next_file
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        return fut.result()

    def _file_after(self, mf: MappedFile) -> MappedFile | None:
        """The preallocated file that follows `mf` (the writer's file), once it has been made."""
        return self._made_next_file() if self._next_file_offset == mf.file_end_offset else None

    def files_ahead(self) -> list[MappedFile]:
        """The writer's file unless full, then the preallocated next one once made: what the writer fills
        next, in order."""
        out: list[MappedFile] = []
        last = self.mapped_file_queue.get_last_mapped_file()
        if last is not None and not last.is_full():
            out.append(last)
        nxt = self._made_next_file()
        if nxt is not None:
            out.append(nxt)
        return out

    def _discard_file_result(self, fut: asyncio.Future[MappedFile]) -> None:
        """A preallocated file that is not needed after all: delete it off the loop."""
        if fut.cancelled() or fut.exception() is not None:
            return
        self.store.alloc_executor.submit(fut.result().destroy_blocking)

    def preallocate_next_file(self) -> None:
        """At start: make the file the writer goes to next (the first one, or the one after the recovered
        last) in the background. Otherwise the first roll after a restart waited for it on the put path
        (measured when files were also read in at creation: 0.3 s on recycled memory, 2.8 s on a VM's
        fresh memory for 1 GiB)."""
        if self._next_file is None:
            self._preallocate_next(self.mapped_file_queue.next_file_offset())

    def _preallocate_next(self, start: int) -> None:
        loop = asyncio.get_running_loop()
        self._next_file_offset = start
        self._next_file = loop.run_in_executor(
            self.store.commit_log_alloc_executor, self.mapped_file_queue.create_file_blocking, start
        )
        self._next_file.add_done_callback(_consume_exception)

    async def discard_preallocated(self) -> None:
        fut = self._next_file
        self._next_file = None
        if fut is None:
            return
        try:
            mf = await fut
        except Exception:  # noqa: BLE001 - nothing to clean up
            return
        await asyncio.get_running_loop().run_in_executor(self.store.alloc_executor, mf.destroy_blocking)

    # ------------------------------------------------------------------------------ put

    def _topic_part(self, topic: str) -> bytes | None:
        tp = self._topic_cache.get(topic, b"")
        if tp == b"":
            tp = record_topic_part(topic)
            if len(self._topic_cache) > _CACHE_LIMIT:
                self._topic_cache.clear()
            self._topic_cache[topic] = tp
        return tp

    def _tags_code(self, tags: str | None) -> int:
        """store.compute_tags_code's answer when its hook has none: TAGS' Java hash, cached."""
        if not tags:
            return 0
        cache = self.store.tags_code_cache
        code = cache.get(tags)
        if code is None:
            code = java_string_hash(tags)
            if len(cache) > 65536:
                cache.clear()
            cache[tags] = code
        return code

    def _store_host_bytes(self, ip: bytes, port: int) -> bytes:
        """ip + port as the offset msg id's prefix (one store host: cached)."""
        key = (ip, port)
        b = self._sh_cache.get(key)
        if b is None:
            if len(self._sh_cache) > _CACHE_LIMIT:
                self._sh_cache.clear()
            b = self._sh_cache[key] = ip + _PORT.pack(port)
        return b

    def _msg_id_prefix(self, host_bytes: bytes) -> str:
        """The hex of ip + port that starts every offset msg id of this store host (cached)."""
        h = self._hex_cache.get(host_bytes)
        if h is None:
            if len(self._hex_cache) > _CACHE_LIMIT:
                self._hex_cache.clear()
            h = self._hex_cache[host_bytes] = host_bytes.hex().upper()
        return h

    def _host_layout(
        self, born_host: tuple[str, int], store_host: tuple[str, int], sys_flag: int
    ) -> tuple[bytes, bytes, int, RecordLayout]:
        """(born ip bytes, store ip bytes, sys_flag, record layout): the IPv6 bits of sys_flag always
        follow the actual address families, and pick the layout."""
        born_ip = self._host_bytes(born_host)
        store_ip = self._host_bytes(store_host)
        sys_flag &= ~_V6_BITS
        if len(born_ip) == 16:
            sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
        if len(store_ip) == 16:
            sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
        return born_ip, store_ip, sys_flag, _LAYOUTS[sys_flag >> 4 & 0x3]

    def _host_bytes(self, host: tuple[str, int]) -> bytes:
        ip = host[0]
        b = self._host_cache.get(ip)
        if b is None:
            b = host_to_bytes(ip)
            if len(self._host_cache) > _CACHE_LIMIT:
                self._host_cache.clear()
            self._host_cache[ip] = b
        return b

    async def put_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> PutMessageResult:
        """Append a run of messages with one lock round; returns once they are in the page cache (the
        caller handles the flush wait)."""
        return (await self.put_many((msgs,)))[0]

    def _prepare(
        self, units: Sequence[Sequence[MessageExtBrokerInner]], results: list[PutMessageResult | None]
    ) -> list[tuple[int, list[tuple[Any, ...]], int]]:
        """Pass 1 (outside the lock): validate each put and prepare each record's variable parts. Returns
        [(unit index, items, total bytes)] for the good units; a bad unit's failure goes to results."""
        max_body = self.cfg.maxMessageSize
        max_total = self.mapped_file_size - END_FILE_MIN_BLANK_LENGTH
        store = self.store
        hook = store.tags_code_hook
        hook_topics = store.tags_code_hook_topics  # None: the hook may answer for any topic
        tags_cache = store.tags_code_cache
        crc32 = zlib.crc32
        i16 = _I16.pack
        prepared: list[tuple[int, list[tuple[Any, ...]], int]] = []
        last_topic: str | None = None
        topic_part = b""
        # (born_host, store_host, sys_flag) of the previous message -> its derived header bits
        last_hosts: tuple[object, object, int] = (None, None, -1)
        sys_flag = 0
        layout = _LAYOUTS[0]
        born_ip = store_ip = b""
        for ui, msgs in enumerate(units):
            if not msgs:
                results[ui] = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty message batch")
                continue
            if type(msgs) is MessageBatch:
                pb_or_bad = self._prepare_batch(msgs, max_body, max_total)
                if type(pb_or_bad) is _PreparedBatch:
                    prepared.append((ui, pb_or_bad, pb_or_bad.total))  # type: ignore[arg-type]
                else:
                    results[ui] = pb_or_bad  # type: ignore[assignment]
                continue
            if len(msgs) == 1:
                # One message with its properties in both forms (a pipelined single send, the common
                # unit): the loop below without its per-unit bookkeeping, and the hook's answer or the
                # cached TAGS hash without compute_tags_code's call. Anything else, or any failure, takes
                # the loop below (which gives the precise answer).
                m = msgs[0]
                topic = m.topic
                ps = m.properties_string
                props = m.properties
                body = m.body
                if ps and props and len(body) <= max_body:
                    cq = m.consume_queue
                    if cq is not None and cq.topic is topic:
                        tp = cq.record_topic_part
                    else:
                        tp = topic_part if topic == last_topic else self._topic_part(topic)
                    if tp is not None:
                        topic_part = tp
                        last_topic = topic
                        pb = ps.encode("utf-8")
                        if len(pb) <= MAX_PROPERTIES_LENGTH:
                            bh = m.born_host
                            sh = m.store_host
                            if bh is not last_hosts[0] or sh is not last_hosts[1] or m.sys_flag != last_hosts[2]:
                                last_hosts = (bh, sh, m.sys_flag)
                                born_ip, store_ip, sys_flag, layout = self._host_layout(bh, sh, m.sys_flag)
                            tags_code = (
                                hook(topic, props)
                                if hook is not None and (hook_topics is None or topic in hook_topics)
                                else None
                            )
                            if tags_code is None:
                                tags = props.get(_PROP_TAGS)
                                if tags:
                                    tags_code = tags_cache.get(tags)
                                    if tags_code is None:
                                        tags_code = store.compute_tags_code(topic, props)
                                else:
                                    tags_code = 0
                            m.tags_code = tags_code
                            tail = topic_part + i16(len(pb)) + pb
                            size = layout.body_pos + len(body) + len(tail)
                            if size <= max_total:
                                crc = m.body_crc if m.body_crc >= 0 else crc32(body) & 0x7FFFFFFF
                                prepared.append(
                                    (ui, [(m, size, layout, sys_flag, tail, crc, born_ip, store_ip, tags_code, props)],
                                     size)
                                )
                                continue
            prepared_items: list[tuple[Any, ...]] = []
            add_item = prepared_items.append
            total = 0
            body_total = 0
            bad: PutMessageResult | None = None
            for m in msgs:
                topic = m.topic
                if topic != last_topic:
                    tp = self._topic_part(topic)
                    if tp is None:
                        bad = PutMessageResult(
                            PutMessageStatus.MESSAGE_ILLEGAL,
                            None,
                            f"topic length must be 1..{MAX_TOPIC_LENGTH} bytes",
                        )
                        break
                    topic_part = tp
                    last_topic = topic
                body = m.body
                body_len = len(body)
                body_total += body_len
                if body_total > max_body:  # one message, or a whole batch (Java's encoder buffer limit)
                    bad = PutMessageResult(
                        PutMessageStatus.MESSAGE_ILLEGAL,
                        None,
                        f"message body size {body_total} exceeds maxMessageSize {max_body}",
                    )
                    break
                props = m.properties
                ps = m.properties_string
                if not ps:
                    if props:
                        ps = m.properties_string = encode_properties(props)
                    pb = ps.encode("utf-8") if ps else b""
                else:
                    pb = ps.encode("utf-8")
                    if not props:
                        props = m.properties = decode_properties(ps)
                if len(pb) > MAX_PROPERTIES_LENGTH:
                    bad = PutMessageResult(
                        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                        None,
                        f"properties size {len(pb)} exceeds {MAX_PROPERTIES_LENGTH}",
                    )
                    break
                bh = m.born_host
                sh = m.store_host
                if bh is not last_hosts[0] or sh is not last_hosts[1] or m.sys_flag != last_hosts[2]:
                    last_hosts = (bh, sh, m.sys_flag)
                    born_ip, store_ip, sys_flag, layout = self._host_layout(bh, sh, m.sys_flag)
                if hook is None or (hook_topics is not None and topic not in hook_topics):
                    tags = props.get(_PROP_TAGS) if props else None
                    if tags:
                        tags_code = tags_cache.get(tags)
                        if tags_code is None:
                            tags_code = store.compute_tags_code(topic, props)
                    else:
                        tags_code = 0
                else:
                    tags_code = store.compute_tags_code(topic, props)
                m.tags_code = tags_code
                tail = topic_part + i16(len(pb)) + pb
                size = layout.body_pos + body_len + len(tail)
                crc = m.body_crc if m.body_crc >= 0 else crc32(body) & 0x7FFFFFFF
                add_item((m, size, layout, sys_flag, tail, crc, born_ip, store_ip, tags_code, props))
                total += size
            if bad is None and total > max_total:
                bad = PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    None,
                    f"message(s) of {total} bytes do not fit in a commit log file of {self.mapped_file_size} bytes",
                )
            if bad is not None:
                results[ui] = bad
            else:
                prepared.append((ui, prepared_items, total))
        return prepared

    def _prepare_batch(
        self, batch: MessageBatch, max_body: int, max_total: int
    ) -> _PreparedBatch | PutMessageResult:
        """Pass 1 for a MessageBatch: what _prepare does per message, with everything the messages share
        (topic, hosts, flags, layout) worked out once, column by column with C-level maps (no Python
        step per message here). A batch of one shape (MessageBatch.properties_template) needs no
        per-record tails or sizes: all its records have one size."""
        tp = self._topic_part(batch.topic)
        if tp is None:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None, f"topic length must be 1..{MAX_TOPIC_LENGTH} bytes"
            )
        bodies = batch.bodies
        n = len(bodies)
        template = batch.properties_template
        uniform = template is not None and batch.body_len >= 0 and 1 < n <= _RECORDS_STRUCT_MAX_RECORDS
        body_total = n * batch.body_len if uniform else sum(map(len, bodies))
        if body_total > max_body:  # the whole batch (Java's encoder buffer limit)
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                None,
                f"message body size {body_total} exceeds maxMessageSize {max_body}",
            )
        born_ip, store_ip, sys_flag, layout = self._host_layout(batch.born_host, batch.store_host, batch.sys_flag)
        props_list = batch.properties_list
        if len(props_list) != n or len(batch.flags) != n:
            raise ValueError("MessageBatch columns differ in length")
        if uniform:
            pieces, columns, props_len = template  # type: ignore[misc]
            if any(len(col) != n for col in columns) or len(bodies[0]) != batch.body_len:
                raise ValueError("MessageBatch columns differ in length")
            pbs = None
            over = props_len if props_len > MAX_PROPERTIES_LENGTH else 0
        else:
            pbs = batch.stored_properties_bytes()
            if len(pbs) != n:
                raise ValueError("MessageBatch columns differ in length")
            over = max(map(len, pbs))
            if over > MAX_PROPERTIES_LENGTH:
                over = next(k for k in map(len, pbs) if k > MAX_PROPERTIES_LENGTH)
            else:
                over = 0
        if over:
            return PutMessageResult(
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                None,
                f"properties size {over} exceeds {MAX_PROPERTIES_LENGTH}",
            )
        # store.compute_tags_code per message, column-wise: the hook (the broker's schedule service has
        # one; it answers None outside SCHEDULE_TOPIC_XXXX) once per message, then TAGS' hash.
        if uniform and _PROP_TAGS not in props_list[0]:
            tags: list[str | None] = [None] * n  # one shape: every message names the first one's keys
        else:
            tags = list(map(dict.get, props_list, repeat(_PROP_TAGS)))
        hook = self.store.tags_code_hook
        hook_topics = self.store.tags_code_hook_topics
        if hook is not None and hook_topics is not None and batch.topic not in hook_topics:
            hook = None
        hooked = list(map(hook, repeat(batch.topic), props_list)) if hook is not None else None
        if hooked is not None and hooked.count(None) != n:
            tags_codes = [
                h if h is not None else self._tags_code(t) for h, t in zip(hooked, tags, strict=True)
            ]
        elif tags.count(None) == n:
            tags_codes = [0] * n
        else:
            tags_codes = list(map(self._tags_code, tags))
        crcs = list(map(operator.and_, map(zlib.crc32, bodies), repeat(0x7FFFFFFF)))
        if uniform:
            size = layout.body_pos + batch.body_len + len(tp) + 2 + props_len
            total = size * n
            sizes: list[int] | None = None
            tails: list[bytes] | None = None
            head = tp + _I16.pack(props_len) + pieces[0]
        else:
            size = 0
            tails = list(map(b"".join, zip(repeat(tp), map(_I16.pack, map(len, pbs)), pbs)))  # type: ignore[arg-type]
            sizes = list(map(layout.body_pos.__add__, map(operator.add, map(len, bodies), map(len, tails))))
            total = sum(sizes)
            head = b""
        if total > max_total:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                None,
                f"message(s) of {total} bytes do not fit in a commit log file of {self.mapped_file_size} bytes",
            )
        return _PreparedBatch(
            batch, layout, sys_flag, born_ip, store_ip, sizes, tails, crcs, tags_codes, total, size, head
        )

    def _write_batch(
        self, pb: _PreparedBatch, mm: Any, p: int, file_from: int, store_ts: int, add_pending: Any
    ) -> tuple[int, int, list[int]]:
        """Pass 2 for a MessageBatch (under the lock): pack every record straight into the mapping. Returns
        (end position, first queue offset, physical offsets)."""
        batch = pb.batch
        table = self.topic_queue_table
        topic = batch.topic
        qid = batch.queue_id
        cq = batch.consume_queue
        if cq is not None and cq.topic is topic and cq.queue_id == qid:
            key = cq.queue_key
        else:
            cq = None
            key = f"{topic}-{qid}"
        sys_flag = pb.sys_flag
        q = table.get(key, 0)
        first_qo = q
        step = 1
        if sys_flag & _TRAN_PREPARED:
            q = first_qo = step = 0  # prepared / rollback: not consumable, no queue slot
        layout = pb.layout
        pack = layout.header.pack_into
        fixed = layout.body_pos
        born_ts = batch.born_timestamp
        b_ip = pb.born_ip
        b_port = batch.born_host[1]
        s_ip = pb.store_ip
        s_port = batch.store_host[1]
        reconsume = batch.reconsume_times
        bodies = batch.bodies
        size = pb.record_size
        if size:
            # A batch of one shape: every record from the parts as they are, with one pack_into of a struct
            # of n records whose per-batch fields (size and magic; sys flag .. body length) are pre-packed
            # bytes and whose properties are the template's pieces around the wire's value columns.
            n = len(bodies)
            pieces, columns, _props_len = batch.properties_template  # type: ignore[misc]
            base = file_from + p
            phy_offsets = list(range(base, base + size * n, size))
            rest = _REST_STRUCTS[sys_flag >> 4 & 0x3].pack(
                sys_flag, born_ts, b_ip, b_port, store_ts, s_ip, s_port, reconsume, 0, batch.body_len
            )
            row: list[Any] = [_SIZE_MAGIC.pack(size, MAGIC_CODE), 0, qid, 0, 0, 0, rest, b"", pb.head]
            for piece in pieces[1:]:
                row.append(b"")
                row.append(piece)
            f = len(row)
            flat = row * n
            flat[1::f] = pb.crcs
            flat[3::f] = batch.flags
            flat[4::f] = range(q, q + n) if step else repeat(0, n)
            flat[5::f] = phy_offsets
            flat[7::f] = bodies
            for k, col in enumerate(columns):
                flat[9 + 2 * k :: f] = col
            _template_struct(len(rest), batch.body_len, pb.head, pieces, columns, n).pack_into(mm, p, *flat)
            p += size * n
            q += step * n
            if step:
                table[key] = q
            batch.store_timestamp = store_ts
            add_pending(
                (base, file_from + p, topic, qid, first_qo, store_ts, sys_flag, phy_offsets, [size] * n,
                 pb.tags_codes, batch.properties_list, _uniq_column(batch.properties_list[0], pieces, columns), cq)
            )
            return p, first_qo, phy_offsets
        sizes = pb.sizes
        tails = pb.tails
        n = len(sizes)
        phy_offsets = list(accumulate(sizes, initial=file_from + p))
        end = phy_offsets.pop() - file_from
        bl = len(bodies[0])
        tl = len(tails[0])
        if (
            1 < n <= _RECORDS_STRUCT_MAX_RECORDS
            and list(map(len, bodies)).count(bl) == n and list(map(len, tails)).count(tl) == n
        ):
            # Records of one shape (the common batch): all of them with one pack_into of a struct of n
            # records -- header fields, body and tail -- filled column by column.
            flat = [
                0, MAGIC_CODE, 0, qid, 0, 0, 0, sys_flag, born_ts, b_ip, b_port, store_ts, s_ip, s_port,
                reconsume, 0, bl, b"", b"",
            ] * n
            flat[0::19] = sizes
            flat[2::19] = pb.crcs
            flat[4::19] = batch.flags
            flat[5::19] = range(q, q + n) if step else [0] * n
            flat[6::19] = phy_offsets
            flat[17::19] = bodies
            flat[18::19] = tails
            _records_struct(layout.header.format, bl, tl, n).pack_into(mm, p, *flat)
            p = end
            q += step * n
        else:
            for size, body, tail, crc, flag, phy in zip(
                sizes, bodies, tails, pb.crcs, batch.flags, phy_offsets, strict=True
            ):
                bl = len(body)
                pack(
                    mm, p, size, MAGIC_CODE, crc, qid, flag, q, phy, sys_flag, born_ts, b_ip, b_port,
                    store_ts, s_ip, s_port, reconsume, 0, bl,
                )
                bp = p + fixed
                mm[bp : bp + bl] = body
                mm[bp + bl : p + size] = tail
                p += size
                q += step
        if step:
            table[key] = q
        batch.store_timestamp = store_ts
        # One dispatch run for the whole batch (see reput.DispatchRun), not a tuple per record.
        add_pending(
            (phy_offsets[0], file_from + p, topic, qid, first_qo, store_ts, sys_flag, phy_offsets, pb.sizes,
             pb.tags_codes, batch.properties_list, None, cq)
        )
        return p, first_qo, phy_offsets

    async def _file_with_room(self, mf: MappedFile | None, total: int) -> MappedFile:
        """The file the next run of `total` bytes goes to: the last one, or (after a blank marker) a new one."""
        if mf is None:
            mf = self.mapped_file_queue.get_last_mapped_file()
            if mf is None or mf.is_full():
                mf = await self._roll_file()
        if total + END_FILE_MIN_BLANK_LENGTH > mf.remaining():
            # Blank marker, then the whole run goes to a new file.
            wp = mf.wrote_position
            _BLANK.pack_into(mf.mm, wp, mf.file_size - wp, BLANK_MAGIC_CODE)
            mf.wrote_position = mf.file_size
            mf = await self._roll_file()
        return mf

    async def put_many(
        self, units: Sequence[Sequence[MessageExtBrokerInner] | MessageBatch]
    ) -> list[PutMessageResult]:
        """Append several independent puts (each one message or one batch) with one lock round and one
        hand-off to the dispatcher: pipelined sends of a connection are stored together. Each unit gets
        its own result (a bad unit fails alone) and never spans files.

        Pass 1 (outside the lock) validates and prepares the variable parts; pass 2 (under the lock, where
        queue offset, physical offset and store time are known) packs each record's fixed part straight
        into the mapping and copies body and tail after it -- every byte is written exactly once."""
        results: list[PutMessageResult | None] = [None] * len(units)
        prepared = self._prepare(units, results)
        if not prepared:
            return results  # type: ignore[return-value]

        async with self._put_lock:
            store_ts = now_ms()
            self.begin_time_in_lock = store_ts
            pending: list[tuple[Any, ...]] = []
            add_pending = pending.append
            table = self.topic_queue_table
            committed = 0  # records of fully written units: only those go to the dispatcher
            mf: MappedFile | None = None
            # The store host's bytes and msg id prefix, looked up again only when the host changes.
            last_s_ip: bytes | None = None
            last_s_port = -1
            hb = b""
            id_prefix = ""
            try:
                for i, items, total in prepared:
                    try:
                        # Await (a coroutine per unit) only when the current file cannot take the unit.
                        if mf is None or total + END_FILE_MIN_BLANK_LENGTH > mf.file_size - mf.wrote_position:
                            nf = await self._file_with_room(mf, total)
                        else:
                            nf = mf
                    except (OSError, ValueError) as e:
                        log.error("commitlog_create_mapped_file_failed", error=str(e))
                        results[i] = PutMessageResult(
                            PutMessageStatus.CREATE_MAPEDFILE_FAILED, None, f"create mapped file failed: {e}"
                        )
                        continue
                    if nf is not mf:
                        if mf is not None:
                            store_ts = now_ms()  # a roll awaited
                        mf = nf
                    mm = mf.mm
                    wp = mf.wrote_position
                    file_from = mf.file_from_offset
                    wrote_offset = file_from + wp
                    if type(items) is _PreparedBatch:
                        end, first_qo, phys = self._write_batch(items, mm, wp, file_from, store_ts, add_pending)
                        mf.wrote_position = end
                        mf.store_timestamp = store_ts
                        committed = len(pending)
                        b = items.batch
                        results[i] = PutMessageResult(
                            _PUT_OK,
                            AppendMessageResult(
                                _APPEND_OK, wrote_offset, total, None, store_ts, first_qo, len(phys),
                                self._store_host_bytes(items.store_ip, b.store_host[1]), phys,
                            ),
                        )
                        continue
                    if len(items) == 1:
                        # One message (a pipelined single send): the loop below without its per-run
                        # bookkeeping, and the offset msg id made here from a cached host prefix.
                        m, size, layout, sys_flag, tail, crc, b_ip, s_ip, tags_code, props = items[0]
                        qid = m.queue_id
                        topic = m.topic
                        cq = m.consume_queue
                        if cq is not None and cq.topic is topic and cq.queue_id == qid:
                            key = cq.queue_key  # (interned: its hash is kept, the table's key is this object)
                        else:
                            cq = None
                            key = f"{topic}-{qid}"
                        q = table.get(key, 0)
                        if sys_flag & _TRAN_PREPARED:
                            qo = 0  # prepared / rollback: not consumable, no queue slot
                        else:
                            qo = q
                            q += 1
                        table[key] = q
                        body = m.body
                        bp = wp + layout.body_pos
                        bl = len(body)
                        s_port = m.store_host[1]
                        layout.header.pack_into(
                            mm, wp, size, MAGIC_CODE, crc, qid, m.flag, qo, wrote_offset, sys_flag,
                            m.born_timestamp, b_ip, m.born_host[1], store_ts, s_ip, s_port, m.reconsume_times,
                            m.prepared_transaction_offset, bl,
                        )
                        mm[bp : bp + bl] = body
                        mm[bp + bl : wp + size] = tail
                        m.store_timestamp = store_ts
                        if props:
                            add_pending((wrote_offset, size, topic, qid, qo, tags_code, store_ts,
                                         props.get(_PROP_KEYS), props.get(_PROP_UNIQ), sys_flag, props, cq))
                        else:
                            add_pending((wrote_offset, size, topic, qid, qo, tags_code, store_ts, None, None, sys_flag,
                                         props, cq))
                        mf.wrote_position = wp + size
                        mf.store_timestamp = store_ts
                        committed = len(pending)
                        if s_ip is not last_s_ip or s_port != last_s_port:
                            last_s_ip = s_ip
                            last_s_port = s_port
                            hb = self._store_host_bytes(s_ip, s_port)
                            id_prefix = self._msg_id_prefix(hb)
                        results[i] = PutMessageResult(
                            _PUT_OK,
                            AppendMessageResult(
                                _APPEND_OK, wrote_offset, total, f"{id_prefix}{wrote_offset:016X}", store_ts, qo, 1, hb
                            ),
                        )
                        continue
                    first_pending = len(pending)
                    phy_offsets: list[int] = []
                    add_phy = phy_offsets.append
                    cur_key = ""
                    cur_topic: str | None = None
                    cur_qid = -1
                    q = 0
                    p = wp
                    for m, size, layout, sys_flag, tail, crc, b_ip, s_ip, tags_code, props in items:
                        qid = m.queue_id
                        if qid != cur_qid or m.topic != cur_topic:
                            if cur_topic is not None:
                                table[cur_key] = q
                            cur_topic = m.topic
                            cur_qid = qid
                            cur_key = f"{cur_topic}-{qid}"
                            q = table.get(cur_key, 0)
                        if sys_flag & _TRAN_PREPARED:
                            qo = 0  # prepared / rollback: not consumable, no queue slot
                        else:
                            qo = q
                            q += 1
                        phy = file_from + p
                        body = m.body
                        bp = p + layout.body_pos
                        bl = len(body)
                        layout.header.pack_into(
                            mm,
                            p,
                            size,
                            MAGIC_CODE,
                            crc,
                            qid,
                            m.flag,
                            qo,
                            phy,
                            sys_flag,
                            m.born_timestamp,
                            b_ip,
                            m.born_host[1],
                            store_ts,
                            s_ip,
                            m.store_host[1],
                            m.reconsume_times,
                            m.prepared_transaction_offset,
                            bl,
                        )
                        mm[bp : bp + bl] = body
                        mm[bp + bl : p + size] = tail
                        m.store_timestamp = store_ts
                        if props:
                            add_pending(
                                (
                                    phy,
                                    size,
                                    cur_topic,
                                    qid,
                                    qo,
                                    tags_code,
                                    store_ts,
                                    props.get(_PROP_KEYS),
                                    props.get(_PROP_UNIQ),
                                    sys_flag,
                                    props,
                                    None,
                                )
                            )
                        else:
                            add_pending(
                                (phy, size, cur_topic, qid, qo, tags_code, store_ts, None, None, sys_flag, props, None)
                            )
                        add_phy(phy)
                        p += size
                    table[cur_key] = q
                    # Publish: readers and the dispatcher only look below wrote_position.
                    mf.wrote_position = p
                    mf.store_timestamp = store_ts
                    committed = len(pending)
                    first = items[0]
                    results[i] = PutMessageResult(
                        _PUT_OK,
                        AppendMessageResult(
                            _APPEND_OK, wrote_offset, total, None, store_ts, pending[first_pending][4], len(items),
                            self._store_host_bytes(first[7], first[0].store_host[1]), phy_offsets,
                        ),
                    )
            finally:
                self.begin_time_in_lock = 0
                if committed:
                    self.store.reput_message_service.enqueue(
                        pending if committed == len(pending) else pending[:committed]
                    )
        if mf is not None and self.warm_ahead is not None:
            self.warm_ahead.note_written(mf)
        return results  # type: ignore[return-value]

    def set_topic_queue_table(self, table: dict[str, int]) -> None:
        self.topic_queue_table = table

    def remove_queue_from_topic_queue_table(self, topic: str, queue_id: int) -> None:
        self.topic_queue_table.pop(f"{topic}-{queue_id}", None)

    def is_os_page_cache_busy(self) -> bool:
        begin = self.begin_time_in_lock
        if begin == 0:
            return False
        return now_ms() - begin > self.cfg.osPageCacheBusyTimeOutMills


class _PreparedBatch:
    """A MessageBatch after pass 1: per-record sizes, topic+properties tails, body CRCs and tags codes; or,
    for a batch of one shape, the one record size and the bytes before its first value column (topic,
    properties length, first piece) instead of sizes and tails."""

    __slots__ = (
        "batch", "layout", "sys_flag", "born_ip", "store_ip", "sizes", "tails", "crcs", "tags_codes", "total",
        "record_size", "head",
    )

    def __init__(
        self,
        batch: MessageBatch,
        layout: RecordLayout,
        sys_flag: int,
        born_ip: bytes,
        store_ip: bytes,
        sizes: list[int],
        tails: list[bytes],
        crcs: list[int],
        tags_codes: list[int],
        total: int,
        record_size: int = 0,
        head: bytes = b"",
    ) -> None:
        self.batch = batch
        self.layout = layout
        self.sys_flag = sys_flag
        self.born_ip = born_ip
        self.store_ip = store_ip
        self.sizes = sizes
        self.tails = tails
        self.crcs = crcs
        self.tags_codes = tags_codes
        self.total = total
        self.record_size = record_size
        self.head = head


_RECORDS_STRUCTS: dict[tuple[str, int, int, int], struct.Struct] = {}
# Bigger batches go record by record: a struct's size grows with its field count (~0.6 MB at this cap).
_RECORDS_STRUCT_MAX_RECORDS = 1024


def _records_struct(header_format: str, body_len: int, tail_len: int, n: int) -> struct.Struct:
    """n records of one shape (header, body of body_len bytes, tail of tail_len bytes) as one struct
    (a bounded cache: batches of one producer repeat the same shape)."""
    key = (header_format, body_len, tail_len, n)
    st = _RECORDS_STRUCTS.get(key)
    if st is None:
        if len(_RECORDS_STRUCTS) >= 16:
            _RECORDS_STRUCTS.clear()
        st = _RECORDS_STRUCTS[key] = struct.Struct(
            header_format[0] + f"{header_format[1:]}{body_len}s{tail_len}s" * n
        )
    return st


# Per layout: SYSFLAG .. BODYLEN, the header fields after PHYSICALOFFSET (per batch in _write_batch).
_REST_STRUCTS = tuple(struct.Struct(">" + layout.header.format[len(">iIiiiqq"):]) for layout in _LAYOUTS)
assert all(
    st.size == layout.body_pos - RecordLayout.SYS_FLAG_POS for st, layout in zip(_REST_STRUCTS, _LAYOUTS, strict=True)
)
_TEMPLATE_STRUCTS: dict[tuple[Any, ...], struct.Struct] = {}


def _template_struct(
    rest_len: int, body_len: int, head: bytes, pieces: tuple[bytes, ...], columns: list[list[bytes]], n: int
) -> struct.Struct:
    """n records of a batch of one shape (see _write_batch) as one struct (a bounded cache: batches of one
    producer repeat the same shape)."""
    key = (rest_len, body_len, len(head), tuple(map(len, pieces)), tuple(len(col[0]) for col in columns), n)
    st = _TEMPLATE_STRUCTS.get(key)
    if st is None:
        if len(_TEMPLATE_STRUCTS) >= 16:
            _TEMPLATE_STRUCTS.clear()
        one = f"8siiiqq{rest_len}s{body_len}s{len(head)}s" + "".join(
            f"{len(col[0])}s{len(piece)}s" for col, piece in zip(columns, pieces[1:], strict=True)
        )
        st = _TEMPLATE_STRUCTS[key] = struct.Struct(">" + one * n)
    return st


_UNIQ_PIECE = b"\x02" + _PROP_UNIQ.encode() + b"\x01"


def _uniq_column(
    props: dict[str, str], pieces: tuple[bytes, ...], columns: list[list[bytes]]
) -> list[bytes] | None:
    """The dispatch run's UNIQ_KEY column (see store.dispatch) of a batch of one shape: its UNIQ_KEY value
    column when it has one and no KEYS (every message names the same keys as the first), else None."""
    if _PROP_KEYS in props or _PROP_UNIQ not in props:
        return None
    for piece, col in zip(pieces, columns):  # noqa: B905 - one piece more than columns: the last has none
        # The item's name ends the piece before the column: after a separator, or first of all.
        if piece.endswith(_UNIQ_PIECE) or piece == _UNIQ_PIECE[1:]:
            return col
    return None


def _consume_exception(fut: asyncio.Future[MappedFile]) -> None:
    if not fut.cancelled():
        fut.exception()
