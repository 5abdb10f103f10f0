"""DefaultMessageStore: the store facade the broker talks to.

Threading model: every data structure is owned by the event-loop thread. Start-up (load + recovery +
catch-up dispatch) runs as one blocking job on a worker thread before the loop touches the store;
afterwards worker threads only run blocking syscalls (fsync, file creation/preallocation, unlink, stat)
handed to them by the loop.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import fcntl
import itertools
import operator
import os
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import structlog

from remoting.loop import in_slices
from remoting.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decode_message,
    decode_record_properties,
    java_string_hash,
)

from .checkpoint import StoreCheckpoint
from .cleanup import (
    CLEAN_SLICE_QUEUES,
    CleanCommitLogService,
    CleanConsumeQueueService,
    default_disk_usage_probe,
)
from .commit_log import CommitLog, MessageBatch, now_ms
from .config import CQ_STORE_UNIT_SIZE, BrokerRole, MessageStoreConfig
from .consume_queue import CQ_UNIT, ConsumeQueue
from .filter import MessageFilter
from .flush import FlushCommitLogService, FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from .index_service import IndexService
from .mapped_file import MappedFile, fsync_dir, syncfs_blocking
from .message import MessageExtBrokerInner
from .reput import ArrivalListener, ArrivalRunFilter, InlineDispatchListener, ReputMessageService
from .results import (
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from .stats import StoreStatsService

log = structlog.get_logger(__name__)

TagsCodeHook = Callable[[str, "dict[str, str]"], "int | None"]

RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
_MIN_LONG = -(1 << 63)
_TRAN_MASK = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_TRAN_NOT = MessageSysFlag.TRANSACTION_NOT_TYPE
_TRAN_COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE
_NO_QUEUES: dict[int, ConsumeQueue] = {}
_APPEND_PUT_OK = AppendMessageStatus.PUT_OK
_CQ_UNITS_STRUCTS: dict[int, struct.Struct] = {}


def current_boot_id() -> str | None:
    """The running kernel's boot id (Linux), new at every boot; None where there is none."""
    return _read_text("/proc/sys/kernel/random/boot_id")


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cq_units_struct(n: int) -> struct.Struct:
    """A Struct unpacking `n` consume queue units at once (offset, size, tags code, repeated)."""
    st = _CQ_UNITS_STRUCTS.get(n)
    if st is None:
        if len(_CQ_UNITS_STRUCTS) >= 4096:
            _CQ_UNITS_STRUCTS.clear()
        st = _CQ_UNITS_STRUCTS[n] = struct.Struct(">" + "qiq" * n)
    return st


class StoreNotAvailableError(RuntimeError):
    """The store is shut down or not readable (Java's getMessage returns null here)."""


class RunningFlags:
    NOT_READABLE_BIT = 1
    NOT_WRITEABLE_BIT = 1 << 1
    WRITE_LOGICS_QUEUE_ERROR_BIT = 1 << 2
    WRITE_INDEX_FILE_ERROR_BIT = 1 << 3
    DISK_FULL_BIT = 1 << 4

    def __init__(self) -> None:
        self.flag_bits = 0

    def is_readable(self) -> bool:
        return not self.flag_bits & self.NOT_READABLE_BIT

    def is_writeable(self) -> bool:
        return not self.flag_bits & (
            self.NOT_WRITEABLE_BIT
            | self.WRITE_LOGICS_QUEUE_ERROR_BIT
            | self.DISK_FULL_BIT
            | self.WRITE_INDEX_FILE_ERROR_BIT
        )

    def is_disk_full(self) -> bool:
        return bool(self.flag_bits & self.DISK_FULL_BIT)

    def get_and_make_disk_full(self) -> bool:
        """Set DISK_FULL; True if the disk was OK before."""
        was_ok = not self.flag_bits & self.DISK_FULL_BIT
        self.flag_bits |= self.DISK_FULL_BIT
        return was_ok

    def get_and_make_disk_ok(self) -> bool:
        """Clear DISK_FULL; True if the disk was OK already."""
        was_ok = not self.flag_bits & self.DISK_FULL_BIT
        self.flag_bits &= ~self.DISK_FULL_BIT
        return was_ok

    def make_logics_queue_error(self) -> None:
        self.flag_bits |= self.WRITE_LOGICS_QUEUE_ERROR_BIT

    def make_index_file_error(self) -> None:
        self.flag_bits |= self.WRITE_INDEX_FILE_ERROR_BIT


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 1024**3


class DefaultMessageStore:
    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        tags_code_hook: TagsCodeHook | None = None,
        disk_usage_probe: Callable[[], float] | None = None,
    ) -> None:
        self.message_store_config = config
        self.tags_code_hook = tags_code_hook
        # The topics tags_code_hook can answer for (None: any). A batch's messages share one topic, so a
        # batch to any other topic skips the per-message hook calls.
        self.tags_code_hook_topics: frozenset[str] | None = None
        self.disk_usage_probe: Callable[[], float] = disk_usage_probe or partial(
            default_disk_usage_probe, config.storePathRootDir
        )
        self.running_flags = RunningFlags()
        self.store_stats_service = StoreStatsService()
        self.store_checkpoint = StoreCheckpoint(config.store_checkpoint_path())
        # The CommitLog's pages ahead of the writer (warm_ahead.py) are read on a thread of their own: the
        # window's reads must not wait behind a file being made on store-cl-alloc, nor that behind them.
        self.commit_log_warm_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-cl-warm")
        self.commit_log = CommitLog(self)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.index_service: IndexService | None = (
            IndexService(
                config.store_path_index(), config.maxHashSlotNum, config.maxIndexNum, config.maxMsgsNumBatch
            )
            if config.messageIndexEnable
            else None
        )
        self.reput_message_service = ReputMessageService(self)
        # The commit log offset below which every record's consume queue unit is on disk (set at start-up,
        # after recovery, and by each full consume queue flush): CleanCommitLogService deletes no file past it.
        self.durable_dispatch_offset = 0
        self.flush_commit_log_service: FlushCommitLogService = (
            GroupCommitService(self) if config.is_sync_flush() else FlushRealTimeService(self)
        )
        self.flush_consume_queue_service = FlushConsumeQueueService(self)
        self.clean_commit_log_service = CleanCommitLogService(self)
        self.clean_consume_queue_service = CleanConsumeQueueService(self)
        self.arrival_listeners: list[ArrivalListener] = []
        # Told of each put before it is answered (the broker's held pulls): see put_many.
        self.inline_dispatch_listener: InlineDispatchListener | None = None
        # Per listener, a (topic, queue_id) predicate asked once per batch run / per queue: a listener that
        # cares about few queues (held pulls, the schedule topic) is then not called for every record.
        self.arrival_run_filters: dict[ArrivalListener, ArrivalRunFilter] = {}
        # Separate threads: a slow fsync must not hold up creating the next file (and vice versa).
        self.flush_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-flush")
        self.alloc_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-alloc")
        # CommitLog files (1 GiB, fallocated ahead of use; they used to be read in here too, ~1-2 s) get a
        # thread of their own, so consume queue and index files that the dispatcher waits for never
        # queue behind one (a first start stalled dispatch, and so delivery, for ~2 s).
        self.commit_log_alloc_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-cl-alloc")
        # The next index file, made ahead (50-90 ms of faulting its slot table in): not on store-alloc, where
        # a new queue's first file would wait behind it.
        self.index_alloc_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-index-alloc")
        # Indirection so tests can slow the disk down.
        self.commit_log_fsync: Callable[[MappedFile], None] = MappedFile.fsync_blocking
        self.tags_code_cache: dict[str, int] = {}
        # Per deleted topic, the commit log's end when it was deleted, kept while dispatch is behind it.
        # The topic's records before that offset went down with the topic: the dispatcher must not build
        # them into a new ConsumeQueue (that brought deleted messages back, under the queue offsets that
        # sends after the delete are given again from 0). Mutated in place: the dispatcher holds it.
        self.deleted_topic_offsets: dict[str, int] = {}
        self._total_memory = _total_physical_memory()
        self._tasks: list[asyncio.Task[None]] = []
        self._background: list[Future[None]] = []
        self._lock_fd = -1
        self.shutdown_flag = True
        self.last_exit_ok = True

    # ================================================================================ lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.last_exit_ok = await loop.run_in_executor(self.alloc_executor, self._load_and_recover_blocking)
        # the disk's used share from the start, not only after the clean service's first round (10 s)
        with contextlib.suppress(OSError):
            ratio = await loop.run_in_executor(self.alloc_executor, self.disk_usage_probe)
            self.clean_commit_log_service.last_disk_ratio = ratio
        self.shutdown_flag = False
        self.commit_log.preallocate_next_file()
        self.reput_message_service.start()
        self.flush_commit_log_service.start()
        self.flush_consume_queue_service.start()
        if self.commit_log.warm_ahead is not None:
            self.commit_log.warm_ahead.start(self.commit_log.mapped_file_queue.get_last_mapped_file)
        self._tasks.append(loop.create_task(self._clean_resource_loop(), name="CleanResourceService"))
        self._tasks.append(loop.create_task(self._stats_loop(), name="StoreStatsService"))
        log.info(
            "message_store_started",
            root=self.message_store_config.storePathRootDir,
            last_exit_ok=self.last_exit_ok,
            commitlog_min=self.commit_log.get_min_offset(),
            commitlog_max=self.commit_log.get_max_offset(),
        )

    def _load_and_recover_blocking(self) -> bool:
        cfg = self.message_store_config
        os.makedirs(cfg.storePathRootDir, exist_ok=True)
        self._lock_fd = os.open(os.path.join(cfg.storePathRootDir, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise RuntimeError(
                f"lock failed, a message store is already running in {cfg.storePathRootDir}"
            ) from None
        try:
            abort = cfg.abort_file_path()
            last_exit_ok = not os.path.exists(abort)
            boot_id = current_boot_id()
            # The abort file holds the boot it was made in. A crash of this process alone leaves every
            # write in the page cache, so the files are whole; after the OS went down too (power cut,
            # kernel crash, a new boot), pages written since their last fsync may be torn.
            os_crashed = not last_exit_ok and (boot_id is None or _read_text(abort) != boot_id)
            log.info("message_store_loading", last_exit_ok=last_exit_ok, os_crashed=os_crashed)
            cp = self.store_checkpoint
            cp.load_blocking()
            self.commit_log.load_blocking()
            self._load_consume_queues_blocking()
            if self.index_service is not None:
                self.index_service.load_blocking(os_crashed, cp.index_file, cp.index_msg_timestamp)
            self._recover_blocking(last_exit_ok, os_crashed)
            if not last_exit_ok:
                self._sync_recovered_blocking()
            # A clean stop flushed every queue, and after a crash what recovery dispatched was just synced.
            self.durable_dispatch_offset = self.reput_message_service.reput_from_offset
            if self.index_service is not None and not self.index_service.index_file_list:
                # The first index file now, not at the first message: making it (its slot table faulted
                # in, 50-90 ms here) held up the dispatch of a fresh broker's first messages, and the
                # queue files they needed waited behind it on the same thread (e2e max 54-64 ms).
                self.index_service.roll_blocking()
        except BaseException:
            os.close(self._lock_fd)  # let a fixed-up retry take the lock
            self._lock_fd = -1
            raise
        # Abort marker: present for as long as we run; a clean shutdown removes it.
        fd = os.open(abort, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, (boot_id or "").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        # Its name too (POSIX asks for the directory's fsync; ext4 and xfs give it with the file's): a
        # marker lost in a power cut would make the next start take the crash for a clean exit.
        fsync_dir(os.path.dirname(os.path.abspath(abort)))
        return last_exit_ok

    def _sync_recovered_blocking(self) -> None:
        """Make what recovery changed durable before anything new is written: the tails it cut were
        zeroed in the page cache only, and a new record written over a zeroed tail could, after a power
        cut, come back as its new sectors mixed with the old bytes of the ones not yet written (no zero
        sector to tell it by, and a body CRC that still matches). One syncfs per filesystem of the store."""
        cfg = self.message_store_config
        seen: set[int] = set()
        for path in (cfg.store_path_commit_log(), cfg.store_path_consume_queue(), cfg.store_path_index()):
            try:
                dev = os.stat(path).st_dev
            except FileNotFoundError:
                continue
            if dev in seen:
                continue
            seen.add(dev)
            if not syncfs_blocking(path):
                os.sync()  # no syncfs here: every filesystem, once, at start-up
                return

    def _load_consume_queues_blocking(self) -> None:
        cfg = self.message_store_config
        root = cfg.store_path_consume_queue()
        if not os.path.isdir(root):
            return
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            # The same str object as the topic of every send that decodes it (remoting.codec interns the
            # constant header values): a dict lookup then matches by identity, with no compare against a
            # cold key string.
            topic = sys.intern(topic)
            for qid_s in os.listdir(tdir):
                try:
                    qid = int(qid_s)
                except ValueError:
                    continue
                cq = ConsumeQueue(
                    topic,
                    qid,
                    root,
                    cfg.mapped_file_size_consume_queue(),
                    preallocate=False,  # sparse, see find_consume_queue
                )
                cq.load_blocking()
                cq.owner = self
                self.consume_queue_table.setdefault(topic, {})[qid] = cq

    def _recover_blocking(self, last_exit_ok: bool, os_crashed: bool = False) -> None:
        max_phy_of_cq = -1
        for qmap in self.consume_queue_table.values():
            for cq in qmap.values():
                cq.recover_blocking()
                max_phy_of_cq = max(max_phy_of_cq, cq.max_physic_offset)
        cl = self.commit_log
        # After a crash, dispatch from the first record some consume queue lacks (the scan finds it), not
        # only past the furthest queue: the queues are flushed one after another, so one can have lost units
        # that are older than another's newest.
        recovered_from: int | None = None
        if last_exit_ok:
            cl.recover_normally_blocking(max_phy_of_cq)
        else:
            recovered_from = cl.recover_abnormally_blocking(max_phy_of_cq, os_crashed)
        # Rebuild derived data past what the consume queues / index already hold.
        min_off = max(cl.get_min_offset(), 0)
        cq_progress = min_off
        for qmap in self.consume_queue_table.values():
            for cq in qmap.values():
                cq_progress = max(cq_progress, cq.max_physic_offset)
        reput_from = cq_progress
        if self.index_service is not None:
            rebuild = self.index_service.truncate_past_blocking(cl.get_max_offset())
            progress = self.index_service.dispatch_progress()
            if rebuild is not None:
                reput_from = min(reput_from, rebuild)
            elif progress is not None:
                reput_from = min(reput_from, progress)
            elif cl.get_max_offset() > min_off:
                reput_from = min_off  # no index at all (lost, or the index was off): rebuild it
        if recovered_from is not None:
            reput_from = min(reput_from, recovered_from)
        reput_from = max(reput_from, min_off)
        rs = self.reput_message_service
        rs.reput_from_offset = reput_from
        n = rs.do_reput_blocking()
        log.info(
            "store_recovered",
            last_exit_ok=last_exit_ok,
            reput_from=reput_from,
            redispatched=n,
            commitlog_max=cl.get_max_offset(),
        )
        self.recover_topic_queue_table()

    def recover_topic_queue_table(self) -> None:
        table: dict[str, int] = {}
        min_phy = self.commit_log.get_min_offset()
        for qmap in self.consume_queue_table.values():
            for cq in qmap.values():
                table[cq.queue_key] = cq.get_max_offset_in_queue()
                cq.correct_min_offset(min_phy)
        self.commit_log.set_topic_queue_table(table)

    def truncate_dirty_logic_files_blocking(self, phy_offset: int) -> None:
        for qmap in self.consume_queue_table.values():
            for cq in qmap.values():
                if cq.max_physic_offset >= phy_offset or cq.get_last_offset() > phy_offset:
                    cq.truncate_dirty_logic_files_blocking(phy_offset)

    def destroy_logics_blocking(self) -> None:
        for qmap in self.consume_queue_table.values():
            for cq in qmap.values():
                cq.removed = True
                cq.destroy_blocking()
        self.consume_queue_table.clear()
        if self.index_service is not None:
            self.index_service.destroy_blocking()

    async def shutdown(self) -> None:
        if self.shutdown_flag:
            return
        self.shutdown_flag = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001
                log.exception("store_task_failed_on_shutdown")
        self._tasks.clear()
        if self.commit_log.warm_ahead is not None:
            await self.commit_log.warm_ahead.stop()
        await self.reput_message_service.shutdown()
        await self.flush_commit_log_service.shutdown()
        await self.flush_consume_queue_service.shutdown()
        await self.commit_log.discard_preallocated()
        await self.wait_background_io()
        clean = (
            self.running_flags.flag_bits
            & (RunningFlags.WRITE_LOGICS_QUEUE_ERROR_BIT | RunningFlags.WRITE_INDEX_FILE_ERROR_BIT)
        ) == 0 and not self.reput_message_service.is_commit_log_available()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.alloc_executor, self._close_blocking, clean)
        # Idle by now; don't wait on the loop for the threads to exit.
        self.flush_executor.shutdown(wait=False)
        self.alloc_executor.shutdown(wait=False)
        self.commit_log_alloc_executor.shutdown(wait=False)
        self.index_alloc_executor.shutdown(wait=False)
        self.commit_log_warm_executor.shutdown(wait=False)
        log.info("message_store_shutdown", clean=clean, commitlog_max=self.commit_log.get_max_offset())

    def _close_blocking(self, clean: bool) -> None:
        mfq = self.commit_log.mapped_file_queue
        if mfq.store_timestamp > 0:
            self.store_checkpoint.physic_msg_timestamp = mfq.store_timestamp
        self.store_checkpoint.shutdown_blocking()
        mfq.close_blocking()
        for qmap in self.consume_queue_table.values():
            for cq in qmap.values():
                cq.close_blocking()
        if self.index_service is not None:
            self.index_service.close_blocking()
        if clean:
            try:
                os.unlink(self.message_store_config.abort_file_path())
            except FileNotFoundError:
                pass
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    async def destroy(self) -> None:
        """Delete every store file (tests / admin)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.alloc_executor, self._destroy_blocking)

    def _destroy_blocking(self) -> None:
        self.destroy_logics_blocking()
        self.commit_log.mapped_file_queue.destroy_blocking()

    async def _clean_resource_loop(self) -> None:
        cfg = self.message_store_config
        while True:
            await asyncio.sleep(cfg.cleanResourceInterval / 1000)
            try:
                await self.clean_commit_log_service.run()
                await self.clean_consume_queue_service.run()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep the service alive
                log.exception("clean_resource_failed")

    async def _stats_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.store_stats_service.sample(self.dispatch_behind_bytes())

    async def clean_expired_files_now(self) -> int:
        """Run one round of both clean services (admin / tests)."""
        n = await self.clean_commit_log_service.run()
        n += await self.clean_consume_queue_service.run()
        return n

    async def check_disk_space_now(self) -> bool:
        """Re-probe the disk now (updates the DISK_FULL flag). True if writes are allowed."""
        await self.clean_commit_log_service.is_space_to_delete()
        return self.running_flags.is_writeable()

    def execute_delete_files_manually(self) -> None:
        self.clean_commit_log_service.execute_delete_files_manually()

    # ================================================================================ put

    def compute_tags_code(self, topic: str, properties: dict[str, str] | None) -> int:
        hook = self.tags_code_hook
        if hook is not None:
            v = hook(topic, properties or {})
            if v is not None:
                return v
        if not properties:
            return 0
        tags = properties.get(MessageConst.PROPERTY_TAGS)
        if not tags:
            return 0
        code = self.tags_code_cache.get(tags)
        if code is None:
            code = java_string_hash(tags)
            if len(self.tags_code_cache) > 65536:
                self.tags_code_cache.clear()
            self.tags_code_cache[tags] = code
        return code

    def _check_store_status(self) -> PutMessageResult | None:
        if self.shutdown_flag:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "message store is not running"
            )
        if self.message_store_config.brokerRole == BrokerRole.SLAVE:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "message store is a slave")
        flags = self.running_flags
        if not flags.is_writeable():
            if flags.is_disk_full():
                remark = (
                    f"disk full: used ratio {self.clean_commit_log_service.last_disk_ratio:.3f} is over "
                    f"{self.message_store_config.diskSpaceWarningLevelRatio:.2f}; writes resume once space is back"
                )
            else:
                remark = f"message store is not writeable, flags={flags.flag_bits:#x}"
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, None, remark)
        if self.commit_log.is_os_page_cache_busy():
            return PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, None, "os page cache busy")
        return None

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        return await self.put_messages((msg,))

    async def put_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> PutMessageResult:
        """Append one or more messages with one lock round and (SYNC_FLUSH) one flush wait."""
        return (await self.put_many((msgs,)))[0]

    async def put_many(
        self, units: Sequence[Sequence[MessageExtBrokerInner] | MessageBatch]
    ) -> list[PutMessageResult]:
        """Store several independent puts (each one message or one batch, e.g. the pipelined sends of one
        connection) with one lock round, one dispatcher hand-off and (SYNC_FLUSH) one flush wait.
        Returns one result per unit, as put_messages would have."""
        bad = self._check_store_status()
        if bad is not None:
            return [bad] + [
                PutMessageResult(bad.status, None, bad.remark) for _ in range(len(units) - 1)
            ]
        t0 = time.monotonic()
        results = await self.commit_log.put_many(units)
        stats = self.store_stats_service
        cfg = self.message_store_config
        sync = cfg.is_sync_flush()
        inline = self.inline_dispatch_listener
        if inline is not None and not sync and inline.any_waiting():
            # Something waits on a queue this put wrote to (a held pull): dispatch the put now and let the
            # listener answer what woke, before the put itself is answered. The waiting reader gets the
            # messages one dispatch task hop and one write earlier (e2e p99 0.70-0.83 -> 0.48-0.60 ms with
            # an auto-batching producer here); a put nobody waits for is answered first, as before.
            for msgs in units:
                if not msgs:
                    continue
                m = msgs if type(msgs) is MessageBatch else msgs[0]
                if inline.wants_inline(m.topic, m.queue_id):
                    await self.reput_message_service.dispatch_inline()
                    inline.dispatched_inline()
                    break
        wait_to = -1  # end offset the SYNC_FLUSH waiters need on disk
        waiters: list[PutMessageResult] = []
        for msgs, result in zip(units, results, strict=True):
            ar = result.append_result
            if ar is None or ar.status is not _APPEND_PUT_OK:  # (AppendMessageResult.is_ok without the call)
                stats.put_message_failed_times += 1
                continue
            stats.put_message_times_total += ar.msg_num
            stats.put_message_size_total += ar.wrote_bytes
            # A MessageBatch answers for itself (its first message's WAIT), a list by its first message.
            if sync and (msgs if type(msgs) is MessageBatch else msgs[0]).is_wait_store_msg_ok():
                waiters.append(result)
                end = ar.wrote_offset + ar.wrote_bytes
                if end > wait_to:
                    wait_to = end
        if sync:
            svc = self.flush_commit_log_service
            assert isinstance(svc, GroupCommitService)
            if waiters:
                if not await svc.wait_for_flush(wait_to):
                    flushed = self.commit_log.flushed_where
                    for result in waiters:
                        ar = result.append_result
                        assert ar is not None
                        if flushed < ar.wrote_offset + ar.wrote_bytes:
                            result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                            result.remark = (
                                f"flush to disk took longer than syncFlushTimeout={cfg.syncFlushTimeout}ms"
                            )
            else:
                svc.wakeup()
        elif not cfg.flushCommitLogTimed:
            self.flush_commit_log_service.wakeup()
        elapsed = int((time.monotonic() - t0) * 1000)
        if elapsed:
            stats.record_put_time(elapsed, len(results))
        else:  # nearly every round: "[<=0ms]" without a call
            stats.put_times[0] += len(results)
        return results

    # ================================================================================ consume queues

    def queue_holds(self, phy: int, size: int, topic: str, queue_id: int, sys_flag: int) -> bool:
        """Whether the record at `phy` (CommitLog.check_record's head fields) needs nothing from its consume
        queue (start-up): a prepared or rolled-back transaction's goes to none, any other is held once its
        queue has a unit at or past it (each queue's units follow the log's order; put_message_position_info
        would do nothing)."""
        tran = sys_flag & _TRAN_MASK
        if tran != _TRAN_NOT and tran != _TRAN_COMMIT:
            return True
        cq = self.consume_queue_table.get(topic, _NO_QUEUES).get(queue_id)
        return cq is not None and phy + size <= cq.max_physic_offset

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue's ConsumeQueue, created (in memory; files come later) if new."""
        qmap = self.consume_queue_table.get(topic)
        if qmap is None:
            qmap = self.consume_queue_table[topic] = {}
        cq = qmap.get(queue_id)
        if cq is None:
            cfg = self.message_store_config
            cq = ConsumeQueue(
                topic,
                queue_id,
                cfg.store_path_consume_queue(),
                cfg.mapped_file_size_consume_queue(),
                # Sparse, as Java's: one 6 MB file per queue preallocated came to 24 GB of disk for
                # 1 000 topics x 4 queues (measured). Units are rebuilt from the CommitLog after a
                # crash, and the disk-space guard refuses writes before the disk fills.
                preallocate=False,
            )
            cq.owner = self
            qmap[queue_id] = cq
            # The queue's next offset under the queue's own key object: puts handed the queue look it up
            # with that object, matched by identity (see ConsumeQueue.queue_key).
            tqt = self.commit_log.topic_queue_table
            q = tqt.pop(cq.queue_key, None)
            if q is not None:
                tqt[cq.queue_key] = q
        return cq

    def all_consume_queues(self) -> list[ConsumeQueue]:
        """Every consume queue now, as a list: the background passes over them (flush, clean-up) go a
        slice per loop turn, so the table may change under them."""
        return [cq for qmap in list(self.consume_queue_table.values()) for cq in qmap.values()]

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        qmap = self.consume_queue_table.get(topic)
        return None if qmap is None else qmap.get(queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return 0 if cq is None else cq.get_max_offset_in_queue()

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return -1 if cq is None else cq.get_min_offset_in_queue()

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return 0 if cq is None else cq.get_message_total_in_queue()

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        unit = cq.get_unit(consume_queue_offset)
        return 0 if unit is None else unit[0]

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after `timestamp_ms` (the max offset when every message is older)."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(
            timestamp_ms, self.commit_log.pickup_store_timestamp, self.commit_log.get_min_offset()
        )

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_offset: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        unit = cq.get_unit(consume_offset)
        if unit is None:
            return -1
        return self.commit_log.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())

    def get_earliest_message_time_store(self) -> int:
        """Store time of the oldest record in the commit log (-1 if empty)."""
        min_off = self.commit_log.get_min_offset()
        if min_off < 0:
            return -1
        size = self.commit_log.get_record_size(min_off)
        return self.commit_log.pickup_store_timestamp(min_off, size) if size > 0 else -1

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int) -> bool:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return False
        unit = cq.get_unit(consume_offset)
        if unit is None:
            return False
        return self._check_in_disk_by_commit_offset(unit[0], self.commit_log.get_max_offset())

    def _memory_for_hot_data(self) -> int:
        return int(self._total_memory * (self.message_store_config.accessMessageInMemoryMaxRatio / 100.0))

    def _check_in_disk_by_commit_offset(self, offset_py: int, max_offset_py: int) -> bool:
        return (max_offset_py - offset_py) > self._memory_for_hot_data()

    def stored_before_delete(self, topic: str, phy_offset: int) -> bool:
        """Whether the record at `phy_offset` went down with its deleted topic (deleted_topic_offsets):
        the dispatcher then indexes it but builds no queue from it."""
        cut = self.deleted_topic_offsets.get(topic)
        return cut is not None and phy_offset < cut

    def delete_topics(self, topics: set[str] | Sequence[str]) -> int:
        """Drop the consume queues of `topics` (their commit log records age out normally). The queues
        vanish at once; their files are deleted on the store's I/O thread. Records of the topics stored
        before now and not dispatched yet are never dispatched to a queue. Returns the queue count."""
        victims: list[ConsumeQueue] = []
        gone = set(topics)
        cut = self.commit_log.get_max_offset()
        behind = self.reput_message_service.reput_from_offset < cut
        deleted = self.deleted_topic_offsets
        for topic in gone:
            if behind and deleted.get(topic, -1) < cut:
                deleted[topic] = cut  # records stored but not dispatched yet: see deleted_topic_offsets
            qmap = self.consume_queue_table.pop(topic, None)
            if not qmap:
                continue
            for cq in qmap.values():
                cq.removed = True  # a put or dispatch holding it looks the queue up again
                self.commit_log.remove_queue_from_topic_queue_table(cq.topic, cq.queue_id)
                victims.append(cq)
        if behind:
            # Queues whose records are all undispatched have no ConsumeQueue yet: their next queue
            # offsets go too, so sends after the delete start again at 0 there as well.
            table = self.commit_log.topic_queue_table
            for key in [k for k in table if k.rpartition("-")[0] in gone]:
                del table[key]
        if victims:
            self._destroy_queues(victims)
            log.info("topics_deleted", topics=sorted({cq.topic for cq in victims}), queues=len(victims))
        return len(victims)

    def _destroy_queues(self, victims: list[ConsumeQueue]) -> Future[None]:
        """Delete the files of consume queues already out of the table, on the store's I/O thread (the one
        that creates queue files, so a file still being made for one of them is made before it goes).
        shutdown and wait_background_io wait for it."""

        def destroy() -> None:
            for cq in victims:
                cq.destroy_blocking()

        fut = self.alloc_executor.submit(destroy)
        self._background.append(fut)
        return fut

    def clean_unused_topic(self, topics_in_use: set[str]) -> int:
        """Delete consume queues of topics not in `topics_in_use` (system schedule/op topics are kept)."""
        unused = {
            t
            for t in self.consume_queue_table
            if t not in topics_in_use and t not in (RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC)
        }
        return self.delete_topics(unused)

    async def clean_expired_consume_queues(self) -> int:
        """Destroy the consume queues whose last unit points below the commit log's min offset (every
        message they index is deleted) and forget topics left with none: RocketMQ's
        cleanExpiredConsumerQueue (the broker's CLEAN_EXPIRED_CONSUMEQUEUE). A queue's next offset goes
        with it, so a later send to it starts again at 0. Answers once the files are gone; returns the
        queue count.

        Kept: the schedule topic's queues (ScheduleMessageService's per-level offsets point into them, and
        a queue restarting at 0 would leave those offsets past its end), queues with no unit yet (one just
        made), and queues with records stored but not dispatched yet (not upstream's check: its queue
        would be rebuilt at their old offsets while the next send got offset 0)."""
        min_offset = self.commit_log.get_min_offset()
        if min_offset <= 0:
            return 0  # no commit log file deleted yet: every unit still points at a record
        victims: list[ConsumeQueue] = []
        next_offsets = self.commit_log.topic_queue_table
        # A slice of queues per loop turn, as CleanConsumeQueueService: each look reads its last file's last
        # unit, a page that can be cold, and with thousands of queues one pass held the loop for their sum.
        async for part in in_slices(self.all_consume_queues(), CLEAN_SLICE_QUEUES):
            for cq in part:
                if cq.removed or cq.topic == RMQ_SYS_SCHEDULE_TOPIC:
                    continue
                last = cq.get_last_offset()
                if last < 0 or last >= min_offset:
                    continue
                if next_offsets.get(cq.queue_key, 0) > cq.get_max_offset_in_queue():
                    continue
                qmap = self.consume_queue_table.get(cq.topic)
                if qmap is None or qmap.get(cq.queue_id) is not cq:
                    continue  # replaced meanwhile (its topic deleted and sent to again)
                del qmap[cq.queue_id]
                if not qmap:
                    del self.consume_queue_table[cq.topic]
                cq.removed = True  # a put or dispatch holding it looks the queue up again
                self.commit_log.remove_queue_from_topic_queue_table(cq.topic, cq.queue_id)
                victims.append(cq)
                log.debug("consume_queue_expired", topic=cq.topic, queue_id=cq.queue_id, last_offset=last,
                          commitlog_min_offset=min_offset)
        if not victims:
            return 0
        await asyncio.wrap_future(self._destroy_queues(victims))
        topics = {cq.topic for cq in victims}
        log.info(
            "expired_consume_queues_destroyed",
            queues=len(victims),
            topics=sorted(topics),
            topics_removed=sorted(t for t in topics if t not in self.consume_queue_table),
            commitlog_min_offset=min_offset,
        )
        return len(victims)

    async def wait_background_io(self) -> None:
        """Wait for file deletions handed to the I/O thread (tests / admin)."""
        pending, self._background = self._background, []
        for fut in pending:
            await asyncio.wrap_future(fut)

    # ================================================================================ get

    def _next_offset_correction(self, old_offset: int, new_offset: int) -> int:
        cfg = self.message_store_config
        if cfg.brokerRole != BrokerRole.SLAVE or cfg.offsetCheckInSlave:
            return new_offset
        return old_offset

    def prepare_consume_queue(self, topic: str, queue_id: int) -> bool:
        """A consumer waits (a held pull) on a queue that has never had a message: create the queue's
        first consume queue file now, on the allocation thread, so that dispatching the queue's first
        message does not wait for it. Dispatch is one task: a wait for new files there stalled every
        queue, 8-30 ms (more under disk load) at the start of each new topic's first messages. True
        when a file was ordered. Reput's own creation of the same file (same thread) is then a no-op."""
        if self.shutdown_flag or f"{topic}-{queue_id}" in self.commit_log.topic_queue_table:
            return False  # a message was put: the dispatcher creates the file it needs
        cq = self.find_consume_queue(topic, queue_id)
        if cq.mapped_file_queue.mapped_files:
            return False
        try:
            fut = self.alloc_executor.submit(cq.create_next_file_blocking, 0)
        except RuntimeError:  # the executor is shut down (store closing)
            return False
        fut.add_done_callback(self._prepared)
        return True

    @staticmethod
    def _prepared(fut: Future[None]) -> None:
        e = None if fut.cancelled() else fut.exception()
        if e is not None:  # the dispatcher tries again when the first message comes
            log.warning("prepare_consume_queue_failed", error=f"{type(e).__name__}: {e}")

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
        max_total_bytes: int | None = None,
    ) -> GetMessageResult:
        """Read up to `max_msg_nums` records from queue offset `offset` (DefaultMessageStore.getMessage).

        The returned buffers are read-only slices of the mapped CommitLog (no copies). Without
        `max_total_bytes` the transfer caps are RocketMQ's (maxTransfer{Bytes,Count}OnMessageIn{Memory,Disk});
        with it, the caps are `max_total_bytes` and `max_msg_nums` alone.
        """
        self._check_readable()
        begin = time.monotonic()
        stats = self.store_stats_service
        status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
        next_begin_offset = offset
        min_offset = 0
        max_offset = 0
        result = GetMessageResult()

        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            status = GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
            next_begin_offset = self._next_offset_correction(offset, 0)
        else:
            min_offset = cq.get_min_offset_in_queue()
            max_offset = cq.get_max_offset_in_queue()
            if max_offset == 0:
                status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
                next_begin_offset = self._next_offset_correction(offset, 0)
            elif offset < min_offset:
                status = GetMessageStatus.OFFSET_TOO_SMALL
                next_begin_offset = self._next_offset_correction(offset, min_offset)
            elif offset == max_offset:
                status = GetMessageStatus.OFFSET_OVERFLOW_ONE
                next_begin_offset = self._next_offset_correction(offset, offset)
            elif offset > max_offset:
                status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
                next_begin_offset = self._next_offset_correction(offset, max_offset)
            else:
                buf = cq.get_index_buffer(offset)
                if buf is None:
                    status = GetMessageStatus.OFFSET_FOUND_NULL
                    next_begin_offset = self._next_offset_correction(offset, cq.roll_next_file(offset))
                    log.warning(
                        "consume_queue_access_failed",
                        topic=topic,
                        queue_id=queue_id,
                        offset=offset,
                        min_offset=min_offset,
                        max_offset=max_offset,
                    )
                else:
                    # Read only here: a pull at the queue's end (held for long polling) needs none of it.
                    max_offset_py = self.commit_log.get_max_offset()
                    hot = self._memory_for_hot_data()
                    status, consumed, max_phy_pulling = self._fill_get_result(
                        result, buf[0], offset, max_msg_nums, message_filter, max_total_bytes, max_offset_py, hot
                    )
                    next_begin_offset = offset + consumed
                    result.suggest_pulling_from_slave = (max_offset_py - max_phy_pulling) > hot
        if status == GetMessageStatus.FOUND:
            stats.get_message_times_total_found += 1
            stats.get_message_transfered_msg_count += result.message_count
        else:
            stats.get_message_times_total_miss += 1
        elapsed = int((time.monotonic() - begin) * 1000)
        if elapsed > stats.get_message_entire_time_max:
            stats.get_message_entire_time_max = elapsed
        result.status = status
        result.next_begin_offset = next_begin_offset
        result.max_offset = max_offset
        result.min_offset = min_offset
        return result

    def at_queue_end(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether get_message(offset) would answer OFFSET_OVERFLOW_ONE (the queue has messages and `offset`
        is its end), counted as get_message counts that miss, without building a result: the usual
        long-polling pull, which finds nothing new and is held. Raises as get_message does when the store
        cannot be read."""
        self._check_readable()
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None or offset <= 0 or offset != cq.get_max_offset_in_queue() or offset < cq.get_min_offset_in_queue():
            return False
        self.store_stats_service.get_message_times_total_miss += 1
        return True

    def _check_readable(self) -> None:
        """Raise StoreNotAvailableError when reads are refused (shut down, or flagged not readable)."""
        if self.shutdown_flag:
            raise StoreNotAvailableError("message store has shut down")
        if not self.running_flags.is_readable():
            raise StoreNotAvailableError("message store is not readable")

    def _fill_get_result(
        self,
        result: GetMessageResult,
        units: memoryview,
        start_offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
        max_total_bytes: int | None,
        max_offset_py: int,
        hot: int,
    ) -> tuple[GetMessageStatus, int, int]:
        cfg = self.message_store_config
        cl = self.commit_log
        mfq = cl.mapped_file_queue
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        max_filter_bytes = max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE)
        n_bytes = min(len(units), max_filter_bytes)
        n_bytes -= n_bytes % CQ_STORE_UNIT_SIZE
        if max_total_bytes is None:
            mem_bytes = cfg.maxTransferBytesOnMessageInMemory
            mem_count = cfg.maxTransferCountOnMessageInMemory
            disk_bytes = cfg.maxTransferBytesOnMessageInDisk
            disk_count = cfg.maxTransferCountOnMessageInDisk
        else:
            mem_bytes = disk_bytes = max_total_bytes
            mem_count = disk_count = max_msg_nums
        cq_filter = cl_filter = None
        if message_filter is not None:
            if not getattr(message_filter, "matches_every_unit", False):  # ("*": no call per unit)
                cq_filter = message_filter.is_matched_by_consume_queue
            if getattr(message_filter, "needs_commit_log_match", True):  # (False: no per-record decoding)
                cl_filter = getattr(message_filter, "is_matched_by_commit_log", None)
        buffers = result.message_buffers
        offsets = result.message_queue_offsets
        if cl_filter is None:
            fast = self._fill_get_result_run(
                result, units, n_bytes // CQ_STORE_UNIT_SIZE, start_offset, max(1, min(max_msg_nums, mem_count)),
                mem_bytes, cq_filter, max_offset_py - hot,
            )
            if fast is not None:
                return fast
        total = 0
        count = 0
        consumed = 0
        max_phy_pulling = 0
        next_phy_file_start = _MIN_LONG
        cur: MappedFile | None = None
        cur_from = 0
        cur_mv: memoryview | None = None
        for offset_py, size_py, tags_code in CQ_UNIT.iter_unpack(units[:n_bytes]):
            max_phy_pulling = offset_py
            if offset_py < next_phy_file_start:
                consumed += 1
                continue
            if count:
                if max_msg_nums <= count:
                    break
                if (max_offset_py - offset_py) > hot:
                    if total + size_py > disk_bytes or count > disk_count - 1:
                        break
                elif total + size_py > mem_bytes or count > mem_count - 1:
                    break
            if cq_filter is not None and not cq_filter(tags_code):
                consumed += 1
                continue
            # Consecutive records are almost always in the same file: skip the lookup then.
            rel = offset_py - cur_from
            if cur is None or rel < 0 or rel + size_py > cur.wrote_position or cur.is_closed:
                cur = mfq.find_mapped_file_by_offset(offset_py)
                if cur is None or cur.is_closed:
                    cur = None
                else:
                    cur_from = cur.file_from_offset
                    cur_mv = cur.mv
                    rel = offset_py - cur_from
            if cur is None or rel + size_py > cur.wrote_position or size_py <= 0:
                if total == 0:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = cl.roll_next_file(offset_py)
                consumed += 1
                cur = None
                continue
            sel = cur_mv[rel : rel + size_py]  # type: ignore[index]
            if cl_filter is not None:
                try:
                    props = decode_record_properties(sel)
                except ValueError:
                    props = None
                if not cl_filter(sel, props):
                    if total == 0:
                        status = GetMessageStatus.NO_MATCHED_MESSAGE
                    consumed += 1
                    continue
            buffers.append(sel)
            offsets.append(start_offset + consumed)
            total += size_py
            count += 1
            status = GetMessageStatus.FOUND
            next_phy_file_start = _MIN_LONG
            consumed += 1
        result.message_count = count
        result.buffer_total_size = total
        return status, consumed, max_phy_pulling

    def _fill_get_result_run(
        self,
        result: GetMessageResult,
        units: memoryview,
        n_units: int,
        start_offset: int,
        max_count: int,
        max_bytes: int,
        cq_filter: Callable[[int], bool] | None,
        hot_from_py: int,
    ) -> tuple[GetMessageStatus, int, int] | None:
        """_fill_get_result's common case without a Python step per record: every unit in reach
        matches the tag filter, the records are in memory (hot) and in one mapped file. Same result
        as the loop (what it takes, `consumed`, max_phy_pulling); None when the case does not apply."""
        n = min(n_units, max_count + 1)  # +1: the loop also reads the unit it stops at
        if n <= 0:
            return None
        if n == 1:
            # One record in reach (a woken long-polling pull, usually): the steps below for one unit.
            phy, size, tags_code = CQ_UNIT.unpack_from(units, 0)
            if size <= 0 or (cq_filter is not None and not cq_filter(tags_code)) or phy < hot_from_py:
                return None
            mf = self.commit_log.mapped_file_queue.find_mapped_file_by_offset(phy)
            if mf is None or mf.is_closed:
                return None
            rel = phy - mf.file_from_offset
            if rel < 0 or rel + size > mf.wrote_position:
                return None
            result.set_run(mf.mv[rel : rel + size], phy, (phy,), (size,))
            result.message_queue_offsets.append(start_offset)
            result.message_count = 1
            result.buffer_total_size = size
            return GetMessageStatus.FOUND, 1, phy
        vals = _cq_units_struct(n).unpack_from(units, 0)
        phys = vals[0::3]
        sizes = vals[1::3]
        if min(sizes) <= 0:
            return None  # a bad unit: the loop handles it
        k = min(n, max_count)
        if cq_filter is not None and not all(map(cq_filter, vals[2 : 3 * k : 3])):
            return None
        sums = list(itertools.accumulate(sizes[:k]))
        k = max(1, bisect.bisect_right(sums, max_bytes))  # the first record is taken whatever its size
        mf = self.commit_log.mapped_file_queue.find_mapped_file_by_offset(phys[0])
        if mf is None or mf.is_closed:
            return None
        base = mf.file_from_offset
        taken = phys[:k]
        lowest = min(taken)  # checked over every record: no order assumed
        if lowest < hot_from_py:
            return None  # on disk: other transfer caps, the loop handles it
        ends = tuple(map(operator.add, taken, sizes))  # a tuple, as `taken` is: compared below
        if lowest < base or max(ends) - base > mf.wrote_position:
            return None  # not all in this file's written part
        mv = mf.mv
        if taken[1:] == ends[:-1]:
            # Back to back (a batch, or one writer per queue): one slice, answered in one copy; the
            # per-record slices are cut only if someone reads message_buffers.
            first = taken[0]
            result.set_run(mv[first - base : ends[-1] - base], first, taken, sizes[:k])
        else:
            result.message_buffers.extend([mv[p - base : p - base + z] for p, z in zip(taken, sizes, strict=False)])
        result.message_queue_offsets.extend(range(start_offset, start_offset + k))
        result.message_count = k
        result.buffer_total_size = sums[k - 1]
        return GetMessageStatus.FOUND, k, phys[k] if k < n else phys[n - 1]

    # ================================================================================ lookups

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> MessageExt | None:
        mv = self.select_one_message_by_offset_view(commit_log_offset, size)
        if mv is None:
            return None
        try:
            return decode_message(mv)[0]
        except ValueError:
            return None

    def select_one_message_by_offset_view(
        self, commit_log_offset: int, size: int | None = None
    ) -> memoryview | None:
        cl = self.commit_log
        if size is None:
            size = cl.get_record_size(commit_log_offset)
        if size is None or size <= 0:
            return None
        return cl.get_message(commit_log_offset, size)

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> bytes | None:
        mv = self.select_one_message_by_offset_view(commit_log_offset, size)
        return None if mv is None else bytes(mv)

    def query_message(
        self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
    ) -> QueryMessageResult:
        """Messages of `topic` whose KEYS or UNIQ_KEY include `key`, stored within [begin_ts, end_ts].

        Index hits are checked against the record itself, so hash collisions and entries left behind
        by a truncated commit log are never served."""
        result = QueryMessageResult()
        idx = self.index_service
        if idx is None:
            return result
        qr = idx.query_offset(topic, key, max_num, begin_ts, end_ts)
        result.index_last_update_timestamp = qr.index_last_update_timestamp
        result.index_last_update_phyoffset = qr.index_last_update_phyoffset
        seen: set[int] = set()
        for phy in qr.phy_offsets:
            if phy in seen:
                continue
            seen.add(phy)
            mv = self.select_one_message_by_offset_view(phy)
            if mv is None:
                continue
            try:
                msg = decode_message(mv, read_body=False)[0]
            except ValueError:
                continue
            if msg.topic != topic or not _has_key(msg.properties, key):
                continue
            result.message_buffers.append(mv)
            result.phy_offsets.append(phy)
            result.buffer_total_size += len(mv)
        return result

    # ================================================================================ misc API

    def add_arrival_listener(self, cb: ArrivalListener, run_filter: ArrivalRunFilter | None = None) -> None:
        """cb(topic, queue_id, logic_offset_after, tags_code, store_timestamp, properties), on the loop
        thread, once per dispatched consumable message. With `run_filter`, records reach cb only when
        run_filter(topic, queue_id) is true: asked once per batch, and for single records once per queue,
        the answer kept until arrival_interest_changed(topic, queue_id). It must be true whenever cb could
        act on a record of that queue, and its owner must call arrival_interest_changed whenever a queue's
        answer may turn true (a pull held on it)."""
        self.arrival_listeners.append(cb)
        if run_filter is not None:
            self.arrival_run_filters[cb] = run_filter
        self.reput_message_service.forget_wanted()

    def arrival_interest_changed(self, topic: str, queue_id: int) -> None:
        """A listener's run filter may now want records of this queue (see add_arrival_listener)."""
        self.reput_message_service.forget_wanted(topic, queue_id)

    def remove_arrival_listener(self, cb: ArrivalListener) -> None:
        try:
            self.arrival_listeners.remove(cb)
        except ValueError:
            pass
        if cb not in self.arrival_listeners:
            self.arrival_run_filters.pop(cb, None)
        self.reput_message_service.forget_wanted()

    def get_commit_log_max_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def get_commit_log_min_offset(self) -> int:
        return self.commit_log.get_min_offset()

    @property
    def max_physical_offset(self) -> int:
        return self.commit_log.get_max_offset()

    @property
    def min_physical_offset(self) -> int:
        return self.commit_log.get_min_offset()

    @property
    def confirm_offset(self) -> int:
        # No replication here: everything written is confirmed.
        return self.commit_log.get_max_offset()

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.flushed_where

    def dispatch_behind_bytes(self) -> int:
        return self.reput_message_service.behind()

    async def wait_dispatched(self, timeout: float | None = None) -> bool:
        """Wait until everything written so far is in the consume queues and index."""
        return await self.reput_message_service.wait_caught_up(timeout)

    def now(self) -> int:
        return now_ms()

    def runtime_info(self) -> dict[str, str]:
        info = self.store_stats_service.runtime_info()
        cl = self.commit_log
        info.update(
            {
                "commitLogMinOffset": str(cl.get_min_offset()),
                "commitLogMaxOffset": str(cl.get_max_offset()),
                "commitLogFlushedOffset": str(cl.flushed_where),
                "remainHowManyDataToFlush": str(cl.remain_how_many_data_to_flush()),
                "dispatchBehindBytes": str(self.dispatch_behind_bytes()),
                "commitLogDiskRatio": f"{self.clean_commit_log_service.last_disk_ratio:.4f}",
                "consumeQueueDiskRatio": f"{self.clean_commit_log_service.last_disk_ratio:.4f}",
                "pageCacheLockTimeMills": str(
                    now_ms() - cl.begin_time_in_lock if cl.begin_time_in_lock else 0
                ),
                "runningFlags": str(self.running_flags.flag_bits),
                "earliestMessageTimeStamp": str(self.get_earliest_message_time_store()),
                "consumeQueueCount": str(sum(len(q) for q in self.consume_queue_table.values())),
                "indexFileCount": str(len(self.index_service.index_file_list) if self.index_service else 0),
            }
        )
        return info

    def debug_state(self) -> dict[str, Any]:
        return {
            "commitlog_files": [mf.file_name for mf in self.commit_log.mapped_file_queue.mapped_files],
            "reput_from": self.reput_message_service.reput_from_offset,
            "flushed_where": self.commit_log.flushed_where,
        }


def _has_key(props: dict[str, str], key: str) -> bool:
    if props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key:
        return True
    keys = props.get(MessageConst.PROPERTY_KEYS)
    return bool(keys) and key in keys.split(MessageConst.KEY_SEPARATOR)
