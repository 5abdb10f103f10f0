"""Disk reclamation: CleanCommitLogService and CleanConsumeQueueService (RocketMQ semantics).

Commit log files older than fileReservedTime hours go at deleteWhen o'clock, or at once when the disk
is fuller than diskMaxUsedSpaceRatio; past diskSpaceCleanForciblyRatio files go regardless of age, past
diskSpaceWarningLevelRatio writes are refused (DISK_FULL) until space is back. Consume queue and index
files wholly behind the commit log's min offset follow. Decisions are made on the loop; stat/unlink run
on the store's allocation thread.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import structlog

from remoting.loop import in_slices

if TYPE_CHECKING:
    from .consume_queue import ConsumeQueue
    from .index_service import IndexFile
    from .mapped_file import MappedFile
    from .message_store import DefaultMessageStore

log = structlog.get_logger(__name__)

DELETE_FILES_BATCH_MAX = 10
CLEAN_SLICE_QUEUES = 256  # consume queues looked at per loop turn after a CommitLog file went
MAX_MANUAL_DELETE_FILE_TIMES = 20


def default_disk_usage_probe(path: str) -> float:
    """Used fraction (0..1) of the filesystem holding `path`, as Java's
    UtilAll.getDiskPartitionSpaceUsedPercent (4.9) computes it, i.e. df's Use%: used / (used + available
    to unprivileged users), rounded up to a hundredth. Blocks reserved for root count as neither, so a
    filesystem with a large reserve is not reported full while most of it is free. -1 when unreadable."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    if st.f_blocks <= 0:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if entire <= 0:
        return -1.0
    return -(-used * 100 // entire) / 100.0


def is_it_time_to_do(when: str) -> bool:
    """Java UtilAll.isItTimeToDo: `when` is hours separated by ';' (e.g. "04" or "04;16")."""
    hour = time.localtime().tm_hour
    for part in when.split(";"):
        part = part.strip()
        if part.isdigit() and int(part) == hour:
            return True
    return False


class CleanCommitLogService:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.clean_immediately = False
        self.manual_delete_file_several_times = 0
        self.last_disk_ratio = 0.0

    def execute_delete_files_manually(self) -> None:
        self.manual_delete_file_several_times = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("execute_delete_files_manually")

    async def run(self) -> int:
        timeup = is_it_time_to_do(self.store.message_store_config.deleteWhen)
        spacefull = await self.is_space_to_delete()
        manual = self.manual_delete_file_several_times > 0
        if not (timeup or spacefull or manual):
            return 0
        if manual:
            self.manual_delete_file_several_times -= 1
        cfg = self.store.message_store_config
        clean_at_once = cfg.cleanFileForciblyEnable and self.clean_immediately
        log.info(
            "commitlog_clean_begin",
            reserved_hours=cfg.fileReservedTime,
            timeup=timeup,
            spacefull=spacefull,
            manual=manual,
            clean_at_once=clean_at_once,
        )
        count = await self.delete_expired_files(cfg.fileReservedTime * 3600 * 1000, clean_at_once)
        if count == 0 and spacefull:
            log.warning("disk_space_will_be_full_soon_but_no_file_deleted")
        return count

    async def is_space_to_delete(self) -> bool:
        store = self.store
        cfg = store.message_store_config
        ratio_limit = cfg.disk_max_used_space_ratio() / 100.0
        loop = asyncio.get_running_loop()
        ratio = await loop.run_in_executor(store.alloc_executor, store.disk_usage_probe)
        self.last_disk_ratio = ratio
        self.clean_immediately = False
        if ratio > cfg.diskSpaceWarningLevelRatio:
            if store.running_flags.get_and_make_disk_full():
                log.error("disk_maybe_full_soon_marking_disk_full", ratio=round(ratio, 4))
            self.clean_immediately = True
        elif ratio > cfg.diskSpaceCleanForciblyRatio:
            self.clean_immediately = True
        else:
            if not store.running_flags.get_and_make_disk_ok():
                log.info("disk_space_ok_again", ratio=round(ratio, 4))
        return ratio < 0 or ratio > ratio_limit

    async def delete_expired_files(self, expired_ms: int, clean_at_once: bool) -> int:
        store = self.store
        cl = store.commit_log
        mfq = cl.mapped_file_queue
        candidates = list(mfq.mapped_files[:-1])  # never the file being written
        if not candidates:
            return 0
        # Never delete what the dispatcher has not read yet.
        reput_from = store.reput_message_service.reput_from_offset
        candidates = [mf for mf in candidates if mf.file_end_offset <= reput_from]
        loop = asyncio.get_running_loop()

        def pick() -> list[MappedFile]:
            now = time.time() * 1000
            out = []
            for mf in candidates:
                if clean_at_once or now >= mf.last_modified_timestamp_blocking() + expired_ms:
                    out.append(mf)
                    if len(out) >= DELETE_FILES_BATCH_MAX:
                        break
                else:
                    break  # keep the log contiguous: never delete in the middle
            return out

        victims = await loop.run_in_executor(store.alloc_executor, pick)
        if victims and victims[-1].file_end_offset > store.durable_dispatch_offset:
            # Nor records whose consume queue units are not on disk yet: after a power cut, a queue that lost
            # such units while the file's deletion stayed would have a hole the replay cannot fill (it puts
            # the next record's unit in the hole, and every later unit sits off its queue offset, so
            # consumers skip messages). RocketMQ deletes without them; one full consume queue flush first.
            await store.flush_consume_queue_service.do_flush(0, write_checkpoint=False)
            victims = [mf for mf in victims if mf.file_end_offset <= store.durable_dispatch_offset]
        if not victims:
            return 0
        # Only a prefix of the current list may go (it may have changed while we were stat-ing).
        head = mfq.mapped_files[: len(victims)]
        victims = [a for a, b in zip(victims, head, strict=False) if a is b]
        if not victims:
            return 0
        mfq.remove_first_files(victims)
        interval = store.message_store_config.deleteCommitLogFilesInterval / 1000

        def destroy() -> None:
            for i, mf in enumerate(victims):
                mf.destroy_blocking()
                if interval > 0 and i + 1 < len(victims):
                    time.sleep(interval)
            # The deletions durable before the consume queue and index files that follow them go: a power
            # cut that undid these but kept those would bring back records whose queue units are gone.
            mfq.sync_dir_blocking()

        await loop.run_in_executor(store.alloc_executor, destroy)
        log.info("commitlog_files_deleted", count=len(victims), min_offset=cl.get_min_offset())
        return len(victims)


class CleanConsumeQueueService:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.last_physical_min_offset = 0

    async def run(self) -> int:
        store = self.store
        min_offset = store.commit_log.get_min_offset()
        if min_offset <= self.last_physical_min_offset:
            return 0
        self.last_physical_min_offset = min_offset
        cq_victims: list[tuple[ConsumeQueue, list[MappedFile]]] = []
        # A slice of queues per loop turn: each is a look at its first file's last unit and a binary search
        # in it, pages that can be cold by now (with 16 000 queues, one pass held the loop for its sum).
        async for part in in_slices(store.all_consume_queues(), CLEAN_SLICE_QUEUES):
            for cq in part:
                if cq.removed:
                    continue  # its topic deleted meanwhile: its files go with it
                files = cq.files_expired_by_offset(min_offset)
                if files:
                    cq.mapped_file_queue.remove_first_files(files)
                    cq_victims.append((cq, files))
                cq.correct_min_offset(min_offset)
        idx_victims: list[IndexFile] = []
        if store.index_service is not None:
            idx_victims = store.index_service.files_expired_by_offset(min_offset)
            store.index_service.remove_files(idx_victims)
        if not cq_victims and not idx_victims:
            return 0
        interval = store.message_store_config.deleteConsumeQueueFilesInterval / 1000

        def destroy() -> None:
            for _cq, files in cq_victims:
                for mf in files:
                    mf.destroy_blocking()
                if interval > 0:
                    time.sleep(min(interval, 0.01))
            for f in idx_victims:
                f.destroy_blocking()

        await asyncio.get_running_loop().run_in_executor(store.alloc_executor, destroy)
        n = sum(len(files) for _cq, files in cq_victims) + len(idx_victims)
        log.info("logic_files_deleted", count=n, commitlog_min_offset=min_offset)
        return n
