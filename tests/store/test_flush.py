"""Durability services: SYNC_FLUSH group commit and timeout, ASYNC flush, the loop never blocks on fsync."""

from __future__ import annotations

import asyncio
import errno
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from store.aio_fsync import AioFsync
from store.flush import GroupCommitService
from store.mapped_file import MappedFile
from store.message_store import DefaultMessageStore
from store.results import PutMessageStatus
from tests.support.loop_turns import counting_loop_turns

from .conftest import make_msg


async def test_sync_flush_group_commit(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(flushDiskType="SYNC_FLUSH")
    await store.start()
    calls: list[int] = []
    threads: set[str] = set()

    def counting_fsync(mf: MappedFile) -> None:
        calls.append(1)
        threads.add(threading.current_thread().name)
        time.sleep(0.02)  # a slowish disk so puts pile up behind one fsync
        MappedFile.fsync_blocking(mf)

    store.commit_log_fsync = counting_fsync
    results = await asyncio.gather(*(store.put_message(make_msg(body=f"s{i}".encode())) for i in range(60)))
    assert all(r.status == PutMessageStatus.PUT_OK for r in results)
    assert 1 <= len(calls) <= 10, len(calls)  # 60 puts shared a handful of fsyncs
    assert store.flushed_offset >= store.get_commit_log_max_offset()
    assert threading.current_thread().name not in threads  # fsync ran off the loop thread
    # A put returns only once its bytes are flushed.
    r = await store.put_message(make_msg(body=b"one more"))
    assert r.is_ok and store.flushed_offset >= r.append_result.wrote_offset + r.append_result.wrote_bytes  # type: ignore[union-attr]


async def test_sync_flush_timeout(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(flushDiskType="SYNC_FLUSH", syncFlushTimeout=200)
    await store.start()
    release = threading.Event()

    def stuck_fsync(mf: MappedFile) -> None:
        release.wait(5)
        MappedFile.fsync_blocking(mf)

    store.commit_log_fsync = stuck_fsync
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.create_task(ticker())
    try:
        t0 = time.monotonic()
        r = await store.put_message(make_msg(body=b"slow disk"))
        elapsed = time.monotonic() - t0
    finally:
        t.cancel()
        release.set()
    assert r.status == PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert "syncFlushTimeout" in r.remark
    assert r.append_result is not None and r.append_result.is_ok  # stored, just not confirmed on disk
    assert 0.15 < elapsed < 2.0
    assert ticks >= 5  # the event loop kept running while fsync hung
    store.commit_log_fsync = MappedFile.fsync_blocking
    r2 = await store.put_message(make_msg(body=b"disk is back"))
    assert r2.status == PutMessageStatus.PUT_OK


async def test_sync_flush_without_wait(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(flushDiskType="SYNC_FLUSH", syncFlushTimeout=200)
    await store.start()
    release = threading.Event()
    store.commit_log_fsync = lambda mf: release.wait(5)  # type: ignore[assignment,return-value]
    try:
        r = await store.put_message(make_msg(body=b"fire and forget", extra={"WAIT": "false"}))
        assert r.status == PutMessageStatus.PUT_OK
    finally:
        release.set()
    # It was only a wake-up, but the group commit service flushes it anyway.
    deadline = time.monotonic() + 5
    while store.flushed_offset < store.get_commit_log_max_offset() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert store.flushed_offset == store.get_commit_log_max_offset()


LINUX_AIO = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")


@pytest.mark.skipif(not LINUX_AIO, reason="Linux AIO syscall numbers are known for x86_64 and aarch64 only")
async def test_aio_fsync_reports_each_fdatasync_and_refuses_what_cannot_be_synced(tmp_path: Path) -> None:
    aio = AioFsync.open()
    assert aio is not None
    loop = asyncio.get_running_loop()
    fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * 100_000)
        done: asyncio.Future[list[tuple[int, int]]] = loop.create_future()
        loop.add_reader(aio.eventfd, lambda: done.done() or done.set_result(aio.reap()))
        try:
            aio.submit_fdatasync(fd, token=7)
            assert aio.in_flight == 1
            assert await asyncio.wait_for(done, 5) == [(7, 0)]
        finally:
            loop.remove_reader(aio.eventfd)
        assert aio.in_flight == 0
        r, w = os.pipe()
        os.close(w)
        with pytest.raises(OSError) as refused:
            aio.submit_fdatasync(r)  # a pipe has no fsync
        assert refused.value.errno == errno.EINVAL and "IOCB_CMD_FDSYNC" in str(refused.value)
        os.close(r)
        with pytest.raises(OSError) as bad:
            aio.submit_fdatasync(r)  # closed
        assert bad.value.errno == errno.EBADF
        assert aio.in_flight == 0  # nothing refused is counted as in flight
        # Shutting down with one in flight: abandon() closes the eventfd without waiting for the disk.
        aio.submit_fdatasync(fd)
        eventfd = aio.eventfd
        aio.abandon()
        with pytest.raises(OSError):
            os.fstat(eventfd)
        with pytest.raises(OSError, match="closed"):
            aio.submit_fdatasync(fd)
    finally:
        os.close(fd)
        aio.close()  # a no-op once abandoned


async def _started_and_flushed(store: DefaultMessageStore, n: int) -> GroupCommitService:
    """Start a SYNC_FLUSH store, put n messages at once; all are answered PUT_OK, so all are on disk."""
    await store.start()
    results = await asyncio.gather(*(store.put_message(make_msg(body=f"m{i}".encode())) for i in range(n)))
    assert all(r.status == PutMessageStatus.PUT_OK for r in results)
    assert store.flushed_offset >= store.get_commit_log_max_offset()
    svc = store.flush_commit_log_service
    assert isinstance(svc, GroupCommitService)
    return svc


@pytest.mark.skipif(not LINUX_AIO, reason="Linux AIO syscall numbers are known for x86_64 and aarch64 only")
async def test_sync_flush_fsyncs_through_kernel_aio(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(flushDiskType="SYNC_FLUSH")
    svc = await _started_and_flushed(store, 60)
    assert svc._aio is not None and svc._aio.in_flight == 0
    assert svc._thread is None  # no fsync went to a thread
    eventfd = svc._aio.eventfd
    await store.shutdown()
    assert svc._aio is None
    with pytest.raises(OSError):
        os.fstat(eventfd)  # closed with the context


async def test_sync_flush_falls_back_to_a_thread_when_the_kernel_refuses(
    make_store: Callable[..., DefaultMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: AioFsync, fd: int, token: int = 0) -> None:
        raise OSError(errno.EINVAL, "io_submit(IOCB_CMD_FDSYNC): Invalid argument")

    monkeypatch.setattr(AioFsync, "submit_fdatasync", refuse)
    store = make_store(flushDiskType="SYNC_FLUSH")
    svc = await _started_and_flushed(store, 20)
    assert svc._aio is None and svc._thread is not None  # gave up on aio for good, the thread took over
    r = await store.put_message(make_msg(body=b"after"))
    assert r.status == PutMessageStatus.PUT_OK


async def test_async_flush_catches_up(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(flushIntervalCommitLog=20, flushCommitLogThoroughInterval=100)
    await store.start()
    for i in range(20):
        assert (await store.put_message(make_msg(body=b"a" * 100 + bytes([i])))).is_ok
    assert store.runtime_info()["remainHowManyDataToFlush"] != "0"
    deadline = time.monotonic() + 5
    while store.flushed_offset < store.get_commit_log_max_offset() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert store.flushed_offset == store.get_commit_log_max_offset()
    assert store.runtime_info()["remainHowManyDataToFlush"] == "0"
    assert store.store_checkpoint.physic_msg_timestamp > 0


async def test_async_flush_respects_least_pages(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(
        flushIntervalCommitLog=20, flushCommitLogLeastPages=4, flushCommitLogThoroughInterval=60_000
    )
    await store.start()
    await store.put_message(make_msg(body=b"tiny"))
    await asyncio.sleep(0.2)
    assert store.flushed_offset == 0  # under 4 dirty pages: wait for more data or the thorough flush
    for _ in range(4):
        await store.put_message(make_msg(body=b"p" * 4096))
    deadline = time.monotonic() + 5
    while store.flushed_offset == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert store.flushed_offset > 4 * 4096


async def test_live_index_file_fsynced_only_in_thorough_rounds(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """Regular consume-queue flush rounds leave the live index file alone (each fsync would
    write-protect its randomly written slot pages); thorough rounds and shutdown fsync it, and a file
    the index has rolled past is fsynced in the next regular round."""
    store = make_store(flushIntervalConsumeQueue=60_000)  # rounds driven by hand below
    await store.start()
    try:
        idx = store.index_service
        assert idx is not None
        fsynced: list[str] = []
        for i in range(5):
            assert (await store.put_message(make_msg(body=b"x", uniq=f"U{i}"))).is_ok
        assert await store.wait_dispatched(5)
        live = idx.index_file_list[-1]
        orig = type(live).fsync_blocking

        def spy(f: Any) -> None:
            fsynced.append(f.file_name)
            orig(f)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(type(live), "fsync_blocking", spy)
            await store.flush_consume_queue_service.do_flush(2, write_checkpoint=False)
            assert fsynced == [] and live.flushed_index_count != live.index_count
            await store.flush_consume_queue_service.do_flush(0, write_checkpoint=True)
            assert fsynced == [live.file_name] and live.flushed_index_count == live.index_count
            assert store.store_checkpoint.index_msg_timestamp == live.end_timestamp
            fsynced.clear()
            assert (await store.put_message(make_msg(body=b"y", uniq="V1"))).is_ok
            assert await store.wait_dispatched(5)
            idx.commit_header()
            await asyncio.get_running_loop().run_in_executor(None, idx.roll_blocking)
            assert idx.index_file_list[-1] is not live
            await store.flush_consume_queue_service.do_flush(2, write_checkpoint=False)
            assert fsynced == [live.file_name]  # the rolled file, not the new live one
    finally:
        await store.shutdown()


async def test_sync_flush_timeouts_of_staggered_waiters(make_store: Callable[..., DefaultMessageStore]) -> None:
    """One timer serves every waiter: each times out syncFlushTimeout after its own put, not the first's."""
    store = make_store(flushDiskType="SYNC_FLUSH", syncFlushTimeout=300)
    await store.start()
    release = threading.Event()

    def stuck_fsync(mf: MappedFile) -> None:
        release.wait(5)
        MappedFile.fsync_blocking(mf)

    store.commit_log_fsync = stuck_fsync
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    done_at: dict[str, float] = {}

    async def put(tag: str, delay: float) -> PutMessageStatus:
        await asyncio.sleep(delay)
        r = await store.put_message(make_msg(body=tag.encode()))
        done_at[tag] = loop.time() - t0
        return r.status

    try:
        statuses = await asyncio.gather(put("a", 0.0), put("b", 0.15))
    finally:
        release.set()
    assert statuses == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 2
    assert 0.25 < done_at["a"] < 0.45 + 0.5
    assert done_at["b"] - done_at["a"] > 0.08  # b waited its own 300 ms, from its own put
    store.commit_log_fsync = MappedFile.fsync_blocking
    r = await store.put_message(make_msg(body=b"disk is back"))
    assert r.status == PutMessageStatus.PUT_OK


async def test_new_consume_queue_dirs_synced_by_the_flush_round_before_the_checkpoint(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """Creating a ConsumeQueue file does not fsync its directory on the dispatch path (~2.5 ms each, seconds
    for a burst of new queues); the next consume-queue flush round does, before it writes a checkpoint
    that could cover units in that file, and only once per new file."""
    import store.mapped_file as mapped_file_mod
    import store.mapped_file_queue as mfq_mod

    store = make_store(flushIntervalConsumeQueue=60_000)  # rounds driven by hand below
    events: list[str] = []
    real_fsync_dir = mapped_file_mod.fsync_dir
    real_cp_flush = type(store.store_checkpoint).flush_blocking

    def spy_dir(d: str) -> None:
        events.append(f"dir {d}")
        real_fsync_dir(d)

    def spy_cp(cp: Any, *a: Any) -> None:
        events.append("checkpoint")
        real_cp_flush(cp, *a)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mapped_file_mod, "fsync_dir", spy_dir)
        mp.setattr(mfq_mod, "fsync_dir", spy_dir, raising=False)
        mp.setattr(type(store.store_checkpoint), "flush_blocking", spy_cp)
        await store.start()
        try:
            for q in range(3):
                assert (await store.put_message(make_msg(body=b"x", queue_id=q))).is_ok
            assert await store.wait_dispatched(5)
            cq_dirs = [store.get_consume_queue("TopicTest", q).mapped_file_queue.store_path for q in range(3)]  # type: ignore[union-attr]
            assert all(os.listdir(d) for d in cq_dirs)  # the files exist ...
            assert not [e for e in events if any(e == f"dir {d}" for d in cq_dirs)]  # ... their names unsynced
            events.clear()
            await store.flush_consume_queue_service.do_flush(0, write_checkpoint=True)
            assert sorted(events[:3]) == sorted(f"dir {d}" for d in cq_dirs)
            assert events.index("checkpoint") > 2
            events.clear()
            await store.flush_consume_queue_service.do_flush(0, write_checkpoint=True)
            assert [e for e in events if e.startswith("dir")] == []  # once per new file
        finally:
            await store.shutdown()


@pytest.mark.parametrize("syncfs_works", [True, False])
async def test_a_round_with_many_queue_files_syncs_their_filesystem_once(
    make_store: Callable[..., DefaultMessageStore], monkeypatch: pytest.MonkeyPatch, syncfs_works: bool
) -> None:
    """1 000 topics x 4 queues made a thorough round 4 000 fdatasyncs (0.7-0.8 s of CPU in a burst): past
    SYNCFS_MIN_FILES one syncfs of the consume queue filesystem does instead; where it cannot, file by file."""
    import store.flush as flush_mod

    store = make_store(flushIntervalConsumeQueue=600_000)  # only the rounds this test runs
    await store.start()
    try:
        queues = flush_mod.SYNCFS_MIN_FILES // 4 + 1
        for t in range(queues):
            for q in range(4):
                assert (await store.put_message(make_msg(topic=f"T{t}", body=b"x", queue_id=q))).is_ok
        assert await store.wait_dispatched(10)
        syncs: list[str] = []
        fsyncs: list[str] = []
        real_syncfs, real_fsync = flush_mod.syncfs_blocking, MappedFile.fsync_blocking

        def spy_syncfs(path: str) -> bool:
            syncs.append(path)
            return real_syncfs(path) if syncfs_works else False

        def spy_fsync(mf: MappedFile) -> None:
            fsyncs.append(mf.file_name)
            real_fsync(mf)

        monkeypatch.setattr(flush_mod, "syncfs_blocking", spy_syncfs)
        monkeypatch.setattr(MappedFile, "fsync_blocking", spy_fsync)
        await store.flush_consume_queue_service.do_flush(0, write_checkpoint=True)
        cq_files = [f for f in fsyncs if os.sep + "consumequeue" + os.sep in f]
        assert syncs == [store.message_store_config.store_path_consume_queue()]
        assert len(cq_files) == (0 if syncfs_works else queues * 4)
        for t in range(queues):  # flushed either way: the next round has nothing to do for them
            for q in range(4):
                mfq = store.get_consume_queue(f"T{t}", q).mapped_file_queue  # type: ignore[union-attr]
                assert mfq.flushed_where == mfq.mapped_files[-1].wrote_position
        syncs.clear()
        fsyncs.clear()
        await store.flush_consume_queue_service.do_flush(0, write_checkpoint=True)
        assert syncs == [] and not [f for f in fsyncs if os.sep + "consumequeue" + os.sep in f]
    finally:
        await store.shutdown()


async def test_a_flush_round_over_many_queues_yields_to_the_loop_and_skips_idle_queues(
    make_store: Callable[..., DefaultMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 000 topics x 4 queues made one round's pass over the queues 9-36 ms of the loop every second (e2e
    p99 8-11 ms): the pass goes a slice of FLUSH_SLICE_QUEUES per loop turn, and looks no further into a
    queue with nothing written since its last flush."""
    import store.flush as flush_mod

    monkeypatch.setattr(flush_mod, "FLUSH_SLICE_QUEUES", 8)
    store = make_store(flushIntervalConsumeQueue=600_000)  # only the rounds this test runs
    await store.start()
    looked_at: list[tuple[str, int, int]] = []  # (topic, queue, loop turns when the round looked into it)
    real_targets = flush_mod._cq_flush_targets
    try:
        async with counting_loop_turns() as loop:

            def spy_targets(cq: Any, least: int) -> Any:
                looked_at.append((cq.topic, cq.queue_id, loop.turns))
                return real_targets(cq, least)

            monkeypatch.setattr(flush_mod, "_cq_flush_targets", spy_targets)
            for t in range(17):
                for q in range(4):
                    assert (await store.put_message(make_msg(topic=f"T{t}", body=b"x", queue_id=q))).is_ok
            assert await store.wait_dispatched(10)
            await store.flush_consume_queue_service.do_flush(0, write_checkpoint=False)
            assert len(looked_at) == 68
            assert len({tick for _t, _q, tick in looked_at}) >= 68 // 8  # other tasks ran between the slices
            for t in range(17):
                for q in range(4):
                    mfq = store.get_consume_queue(f"T{t}", q).mapped_file_queue  # type: ignore[union-attr]
                    assert mfq.flushed_where == mfq.mapped_files[-1].wrote_position == 20
            looked_at.clear()
            assert (await store.put_message(make_msg(topic="T5", body=b"y", queue_id=2))).is_ok
            assert await store.wait_dispatched(10)
            await store.flush_consume_queue_service.do_flush(0, write_checkpoint=False)
            assert [(t, q) for t, q, _tick in looked_at] == [("T5", 2)]  # the one queue written since
            assert store.get_consume_queue("T5", 2).mapped_file_queue.flushed_where == 40  # type: ignore[union-attr]
    finally:
        await store.shutdown()


async def test_a_full_queue_flush_takes_every_file_written_since(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """A consume queue flush round with no least-pages threshold syncs every file the queue wrote since
    its last flush, not only the first (the next round took the next file): cleanup deletes commit log
    files on the strength of such a round (durable_dispatch_offset), and a queue file left unsynced
    could lose units for records whose file was gone after a power cut."""
    store = make_store(mappedFileSizeConsumeQueue=10 * 20, flushIntervalConsumeQueue=60_000)
    await store.start()
    for i in range(25):
        assert (await store.put_message(make_msg(body=f"m{i}".encode(), queue_id=0))).is_ok
    assert await store.wait_dispatched(5)
    cq = store.get_consume_queue("TopicTest", 0)
    assert cq is not None and len(cq.mapped_file_queue.mapped_files) == 3
    assert cq.mapped_file_queue.flushed_where < 25 * 20
    await store.flush_consume_queue_service.do_flush(0, write_checkpoint=False)
    assert cq.mapped_file_queue.flushed_where == 25 * 20
    assert store.durable_dispatch_offset == store.reput_message_service.reput_from_offset
