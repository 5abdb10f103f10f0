"""Flush services. fsyncs run on the store's flush thread; the loop only decides what and when.

* FlushRealTimeService (ASYNC_FLUSH): every flushIntervalCommitLog ms, fsync when at least
  flushCommitLogLeastPages pages are dirty; everything every flushCommitLogThoroughInterval ms.
* GroupCommitService (SYNC_FLUSH): puts wait for their end offset to be on disk; all waiters that
  arrive while one fsync runs share the next one (group commit).
* FlushConsumeQueueService: consume queues and index files, plus the checkpoint on thorough rounds.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from typing import TYPE_CHECKING

import structlog

from remoting.loop import cancel_and_wait, in_slices

from .aio_fsync import AioFsync
from .mapped_file import MappedFile, syncfs_blocking

if TYPE_CHECKING:
    from .consume_queue import ConsumeQueue
    from .index_service import IndexFile
    from .mapped_file_queue import MappedFileQueue
    from .message_store import DefaultMessageStore

log = structlog.get_logger(__name__)

RETRY_TIMES_OVER = 10


class FlushCommitLogService:
    """Shared plumbing: one fsync step of the commit log on the flush thread."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._event = asyncio.Event()

    def wakeup(self) -> None:
        self._event.set()

    async def flush_step(self, flush_least_pages: int) -> bool:
        """fsync the file at the flush position if worth it. True if something was flushed."""
        store = self.store
        mfq = store.commit_log.mapped_file_queue
        target = mfq.flush_target(flush_least_pages)
        if target is None:
            return False
        mf, wp = target
        ts = mf.store_timestamp
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(store.flush_executor, store.commit_log_fsync, mf)
        mfq.flush_done(mf, wp, ts)
        if mfq.store_timestamp > 0:
            store.store_checkpoint.physic_msg_timestamp = mfq.store_timestamp
        return True

    async def flush_until(self, offset: int) -> None:
        mfq = self.store.commit_log.mapped_file_queue
        for _ in range(len(mfq.mapped_files) + 2):
            if mfq.flushed_where >= offset:
                return
            if not await self.flush_step(0):
                return

    async def flush_all(self) -> None:
        await self.flush_until(self.store.commit_log.get_max_offset())

    def start(self) -> None:
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=type(self).__name__)

    async def shutdown(self) -> None:
        self._stopped = True
        self._event.set()
        await cancel_and_wait(self._task)
        self._task = None
        try:
            await self.flush_all()
        except OSError as e:
            log.error("commitlog_final_flush_failed", error=str(e))

    async def _run(self) -> None:
        raise NotImplementedError


class FlushRealTimeService(FlushCommitLogService):
    async def _run(self) -> None:
        cfg = self.store.message_store_config
        last_thorough = time.monotonic()
        while not self._stopped:
            least = cfg.flushCommitLogLeastPages
            now = time.monotonic()
            if now >= last_thorough + cfg.flushCommitLogThoroughInterval / 1000:
                last_thorough = now
                least = 0
            interval = cfg.flushIntervalCommitLog / 1000
            if cfg.flushCommitLogTimed:
                await asyncio.sleep(interval)
            else:
                self._event.clear()
                try:
                    await asyncio.wait_for(self._event.wait(), interval)
                except TimeoutError:
                    pass
            try:
                # One pass may cross several files when the writer ran far ahead.
                for _ in range(len(self.store.commit_log.mapped_file_queue.mapped_files) + 1):
                    if not await self.flush_step(least):
                        break
            except OSError as e:
                log.error("commitlog_flush_failed", error=str(e))


class GroupCommitService(FlushCommitLogService):
    """Group commit without a service task: the put path starts an fsync itself when none is running
    (so it is not queued behind the dispatcher's turn on the loop), and each fsync's completion callback
    answers every waiter it covers and at once starts the next one for whatever was written meanwhile --
    all puts that arrive during one fsync share the next. No sleeping, no polling.

    Each fdatasync is submitted to the kernel (Linux AIO, see aio_fsync.py) and its end read from an
    eventfd the loop polls: a thread had to wait for a CPU and the GIL before it could start the fsync
    (~0.6 ms per fsync on a busy 2-core machine). Where Linux AIO is not available, or the store's
    `commit_log_fsync` is not the plain MappedFile.fsync_blocking (tests inject slow or failing ones),
    the fsyncs run on a thread of the service's own, fed through a SimpleQueue and answering with one
    call_soon_threadsafe (an executor round trip -- two futures chained across threads, a Condition, two
    loop hops -- cost the loop ~30 us each). One timer (armed for the oldest waiter) times waiters out,
    instead of a timer per put."""

    def __init__(self, store: DefaultMessageStore) -> None:
        super().__init__(store)
        self._requests: list[tuple[int, asyncio.Future[bool], float]] = []  # (offset, waiter, deadline)
        self._inflight: asyncio.Future[None] | None = None
        self._inflight_job: tuple[MappedFile, int, int] | None = None
        self._failed = False  # the last fsync raised: the next put (not the callback) retries
        self._jobs: queue.SimpleQueue[MappedFile | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._aio: AioFsync | None = None
        self._aio_unavailable = False
        self._timer: asyncio.TimerHandle | None = None

    async def wait_for_flush(self, next_offset: int) -> bool:
        """True once [.., next_offset) is on disk; False after syncFlushTimeout."""
        mfq = self.store.commit_log.mapped_file_queue
        if mfq.flushed_where >= next_offset:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        deadline = loop.time() + self.store.message_store_config.syncFlushTimeout / 1000
        self._requests.append((next_offset, fut, deadline))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire_due)
        self._failed = False
        self._kick()
        return await fut

    def flush_in_flight(self) -> asyncio.Future[None] | None:
        """The running fsync, if any (the dispatcher lets its waiters answer first). It never holds an
        exception (the service logs errors), so awaiting it does not raise."""
        return self._inflight

    def wakeup(self) -> None:
        # Puts that did not ask to wait (WAIT=false) are flushed too, as in Java's GroupCommitService.
        self._kick()

    def _kick(self) -> None:
        """Start an fsync of everything written so far unless one is running (its callback goes on)."""
        if self._inflight is not None or self._stopped:
            return
        store = self.store
        target = store.commit_log.mapped_file_queue.flush_target(0)
        if target is None:
            self._answer()
            return
        mf, wp = target
        loop = asyncio.get_running_loop()
        self._inflight = loop.create_future()
        self._inflight_job = (mf, wp, mf.store_timestamp)
        if store.commit_log_fsync is MappedFile.fsync_blocking and self._submit_aio(mf, loop):
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._fsync_loop, args=(loop,), name="store-group-commit", daemon=True
            )
            self._thread.start()
        self._jobs.put(mf)

    def _submit_aio(self, mf: MappedFile, loop: asyncio.AbstractEventLoop) -> bool:
        """Hand the fdatasync of `mf` to the kernel; False (use the thread) where that cannot be done."""
        aio = self._aio
        if aio is None:
            if self._aio_unavailable:
                return False
            aio = AioFsync.open()
            if aio is None:
                self._aio_unavailable = True
                log.info("group_commit_fsync", path="thread", reason="linux aio not available")
                return False
            self._aio = aio
            loop.add_reader(aio.eventfd, self._on_aio_done)
            log.info("group_commit_fsync", path="linux_aio")
        if mf.is_closed:
            loop.call_soon(self._on_flushed, None)  # as fsync_blocking: nothing of it left to sync
            return True
        try:
            aio.submit_fdatasync(mf.fd)
        except OSError as e:
            log.warning("group_commit_fsync", path="thread", reason="linux aio refused the fsync", error=str(e))
            self._aio_unavailable = True
            self._close_aio(loop)
            return False
        return True

    def _on_aio_done(self) -> None:
        aio = self._aio
        if aio is None:
            return
        try:
            done = aio.reap()
        except OSError as e:  # pragma: no cover - io_getevents on a valid context does not fail
            log.error("group_commit_reap_failed", error=str(e))
            return
        for _token, res in done:
            self._on_flushed(None if res >= 0 else OSError(-res, f"fdatasync: {os.strerror(-res)}"))

    def _close_aio(self, loop: asyncio.AbstractEventLoop) -> None:
        aio, self._aio = self._aio, None
        if aio is None:
            return
        loop.remove_reader(aio.eventfd)
        if aio.in_flight:
            # io_destroy would block the loop until the disk answers.
            log.warning("group_commit_aio_left_in_flight", in_flight=aio.in_flight)
            aio.abandon()
            return
        aio.close()

    def _fsync_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The service's thread: fsync each file it is handed, then tell the loop (_on_flushed)."""
        jobs = self._jobs
        while True:
            mf = jobs.get()
            if mf is None:
                return
            err: BaseException | None = None
            try:
                self.store.commit_log_fsync(mf)  # looked up per job: tests swap it
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which logs it
                err = e
            try:
                loop.call_soon_threadsafe(self._on_flushed, err)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def _on_flushed(self, err: BaseException | None) -> None:
        fut = self._inflight
        job = self._inflight_job
        self._inflight = None
        self._inflight_job = None
        try:
            if job is None:
                return
            mf, wp, ts = job
            mfq = self.store.commit_log.mapped_file_queue
            if err is not None:
                log.error("group_commit_flush_failed", error=str(err))
                self._failed = True
                # Answer the waiters (not flushed -> False) instead of spinning on a failing disk.
                self._answer(fail_all=True)
                return
            mfq.flush_done(mf, wp, ts)
            if mfq.store_timestamp > 0:
                self.store.store_checkpoint.physic_msg_timestamp = mfq.store_timestamp
            self._answer()
            if not self._failed and mfq.flushed_where < self.store.commit_log.get_max_offset():
                self._kick()  # written while this fsync ran (or the next file): the next group
        finally:
            # After the waiters: they are woken first, the dispatcher (waiting on this) after them.
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _answer(self, fail_all: bool = False) -> None:
        reqs = self._requests
        if not reqs:
            return
        flushed = self.store.commit_log.mapped_file_queue.flushed_where
        keep: list[tuple[int, asyncio.Future[bool], float]] = []
        for req in reqs:
            fut = req[1]
            if fut.done():
                continue
            if flushed >= req[0]:
                fut.set_result(True)
            elif fail_all:
                fut.set_result(False)
            else:
                keep.append(req)
        self._requests = keep

    def _expire_due(self) -> None:
        """The oldest waiter's deadline: time out every waiter past its deadline, re-arm for the next."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        keep: list[tuple[int, asyncio.Future[bool], float]] = []
        for req in self._requests:
            offset, fut, deadline = req
            if fut.done():
                continue
            if deadline <= now:
                log.warning(
                    "sync_flush_timeout", offset=offset, timeout_ms=self.store.message_store_config.syncFlushTimeout
                )
                fut.set_result(False)
            else:
                keep.append(req)
        self._requests = keep
        if keep:
            self._timer = loop.call_at(min(r[2] for r in keep), self._expire_due)

    def start(self) -> None:
        self._stopped = False

    async def _run(self) -> None:  # pragma: no cover - no service task (see the class docstring)
        return None

    async def shutdown(self) -> None:
        # Let an fsync in progress finish and answer its waiters before the final flush.
        self._stopped = True
        fut = self._inflight
        if fut is not None:
            try:
                await asyncio.wait_for(
                    asyncio.shield(fut), self.store.message_store_config.syncFlushTimeout / 1000
                )
            except (TimeoutError, asyncio.CancelledError, OSError):
                pass
        if self._thread is not None:
            self._jobs.put(None)  # the thread ends after the fsync it runs, if any
            self._thread = None
        self._close_aio(asyncio.get_running_loop())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await super().shutdown()
        flushed = self.store.commit_log.mapped_file_queue.flushed_where
        for off, f, _deadline in self._requests:
            if not f.done():
                f.set_result(flushed >= off)
        self._requests = []


# A flush round with at least this many consume queue files (or new queue directories) to sync makes them
# durable with one syncfs of their filesystem, not an fdatasync each: with 1 000 topics x 4 queues a
# thorough round (every 60 s, every queue with anything unflushed) was 4 000 fdatasyncs, each its own
# journal commit: 0.7-0.8 s of CPU in a burst, against 35-70 ms for one syncfs.
SYNCFS_MIN_FILES = 64
# Consume queues a flush round looks at (or marks flushed) per loop turn: ~0.1-0.3 ms of the loop each.
FLUSH_SLICE_QUEUES = 256


class FlushConsumeQueueService:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._last_thorough = time.monotonic()
        self._round = asyncio.Lock()  # one round at a time: the service's, shutdown's, cleanup's

    def start(self) -> None:
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name="FlushConsumeQueueService")

    async def shutdown(self) -> None:
        self._stopped = True
        await cancel_and_wait(self._task)
        self._task = None
        await self.do_flush(0, write_checkpoint=True)

    async def _run(self) -> None:
        cfg = self.store.message_store_config
        while not self._stopped:
            await asyncio.sleep(cfg.flushIntervalConsumeQueue / 1000)
            least = cfg.flushConsumeQueueLeastPages
            thorough = False
            now = time.monotonic()
            if now >= self._last_thorough + cfg.flushConsumeQueueThoroughInterval / 1000:
                self._last_thorough = now
                least = 0
                thorough = True
            try:
                await self.do_flush(least, write_checkpoint=thorough)
            except OSError as e:
                log.error("consume_queue_flush_failed", error=str(e))

    async def do_flush(self, flush_least_pages: int, *, write_checkpoint: bool) -> None:
        async with self._round:
            await self._do_flush(flush_least_pages, write_checkpoint)

    async def _do_flush(self, flush_least_pages: int, write_checkpoint: bool) -> None:
        store = self.store
        cp = store.store_checkpoint
        logics_ts = cp.logics_msg_timestamp  # what is dispatched now is what this round makes durable
        dispatched = store.reput_message_service.reput_from_offset  # (likewise, as a commit log offset)
        cq_targets: list[tuple[MappedFileQueue, MappedFile, int]] = []
        # Queues with files created since their directory was last synced. Counted after logics_ts is
        # taken: a file holding a unit dispatched by then was counted before that unit was written.
        dir_targets: list[tuple[MappedFileQueue, int]] = []
        # Every queue is looked at, a slice per loop turn: with 2 000 topics x 4 queues one pass took
        # 9-36 ms of the loop every second, and sends and pulls waited behind it (e2e p99 8-11 ms).
        async for part in in_slices(store.all_consume_queues(), FLUSH_SLICE_QUEUES):
            for cq in part:
                mfq = cq.mapped_file_queue
                n = mfq.dir_creates
                if n != mfq.dir_synced:
                    dir_targets.append((mfq, n))
                tail = cq.tail_file
                if tail is not None and mfq.flushed_where == tail.file_from_offset + tail.wrote_position:
                    continue  # nothing written since its last flush (the common case: most queues idle)
                cq_targets.extend(_cq_flush_targets(cq, flush_least_pages))
        idx_targets: list[tuple[IndexFile, int, int]] = []
        if store.index_service is not None:
            idx_targets = store.index_service.flush_snapshot()
            if not write_checkpoint and idx_targets:
                # The live index file only in thorough rounds (and at shutdown); files it has rolled
                # past at once. Java fsyncs an index file only when it rolls: the slot table takes
                # random writes over ~20 MB, and fsyncing it every second write-protects every page,
                # so the next writes fault again (ext4 page_mkwrite, ~4 000 faults/s with 1 000 topics
                # at 10k msg/s, on the loop thread). The index is derived data: recovery redispatches
                # what a file's header does not cover.
                live = store.index_service.index_file_list[-1:]
                idx_targets = [t for t in idx_targets if [t[0]] != live]
        if cq_targets or idx_targets or dir_targets:

            cq_root = store.message_store_config.store_path_consume_queue()

            def work() -> None:
                if (
                    len(cq_targets) + len(dir_targets) < SYNCFS_MIN_FILES
                    or not _on_one_filesystem(cq_root, cq_targets, dir_targets)
                    or not syncfs_blocking(cq_root)
                ):
                    # Names first: the checkpoint written after this round must not claim a unit whose
                    # file could vanish in a crash.
                    for dmfq, _n in dir_targets:
                        dmfq.sync_dir_blocking()
                    for _mfq, mf, _wp in cq_targets:
                        mf.fsync_blocking()
                # (Each: after a syncfs of the same filesystem little or nothing is left to write.)
                for f, _count, _ts in idx_targets:
                    f.fsync_blocking()

            await asyncio.get_running_loop().run_in_executor(store.flush_executor, work)
            for dmfq, n in dir_targets:
                dmfq.dir_synced = n
            async for part in in_slices(cq_targets, FLUSH_SLICE_QUEUES):
                for mfq, mf, wp in part:
                    mfq.flush_done(mf, wp, 0)
            for f, count, ts in idx_targets:
                f.flushed_index_count = count
                f.flushed_end_timestamp = ts
            if idx_targets:
                last = idx_targets[-1]
                if store.index_service is not None and store.index_service.index_file_list[-1:] == [last[0]]:
                    cp.index_msg_timestamp = max(cp.index_msg_timestamp, last[2])
                    cp.index_file = last[0].number  # entries go on into it: after a power cut, rebuilt
        if write_checkpoint:
            await asyncio.get_running_loop().run_in_executor(
                store.flush_executor, cp.flush_blocking, logics_ts
            )
        if flush_least_pages == 0 and dispatched > store.durable_dispatch_offset:
            # Every queue's units for the records before `dispatched` are on disk now (a round with a
            # least-pages threshold leaves some queues' last pages unsynced): cleanup may delete those
            # records' CommitLog files.
            store.durable_dispatch_offset = dispatched


def _cq_flush_targets(
    cq: ConsumeQueue, flush_least_pages: int
) -> list[tuple[MappedFileQueue, MappedFile, int]]:
    # One file per round, the next round picks up the following one after a roll; a full round (no
    # least-pages threshold) takes every file written since, so that what it covers is all on disk
    # (durable_dispatch_offset; cleanup relies on it).
    mfq = cq.mapped_file_queue
    target = mfq.flush_target(flush_least_pages)
    if target is None:
        return []
    mf, wp = target
    out = [(mfq, mf, wp)]
    if flush_least_pages == 0 and mf is not mfq.mapped_files[-1]:
        files = mfq.mapped_files
        out += [(mfq, later, later.wrote_position) for later in files[files.index(mf) + 1 :] if later.wrote_position]
    return out


def _on_one_filesystem(
    root: str, cq_targets: list[tuple[MappedFileQueue, MappedFile, int]], dir_targets: list[tuple[MappedFileQueue, int]]
) -> bool:
    """Are all these files and directories on the filesystem of `root` (so one syncfs there covers them)?"""
    try:
        dev = os.stat(root).st_dev
        return all(mf.dev == dev for _mfq, mf, _wp in cq_targets) and all(
            os.stat(dmfq.store_path).st_dev == dev for dmfq, _n in dir_targets
        )
    except OSError:  # a file closed meanwhile, a directory gone: the file-by-file way
        return False
