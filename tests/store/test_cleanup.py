"""Reclaiming disk: expired files, min offsets moving forward, refusing writes on a full disk."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from store import cleanup
from store.message_store import DefaultMessageStore
from store.results import GetMessageStatus, PutMessageStatus

from .conftest import make_msg


def age_files(directory: Path, hours: float) -> None:
    t = time.time() - hours * 3600
    for p in directory.rglob("*"):
        if p.is_file():
            os.utime(p, (t, t))


async def fill(store: DefaultMessageStore, n: int, size: int = 3000) -> None:
    for i in range(n):
        r = await store.put_message(make_msg(body=b"f" * size, queue_id=i % 2, uniq=f"U{i:05d}"))
        assert r.is_ok, r
    assert await store.wait_dispatched(5)


async def test_no_commit_log_file_goes_before_its_queue_units_are_on_disk(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """Cleanup deletes a CommitLog file only once the consume queue units of its records are on disk:
    after a power cut, a queue that lost them while the file's deletion stayed would have a hole the
    replay cannot fill, and consumers would skip messages. It flushes the queues first; a flush that
    does not happen (here: it does nothing) holds the files back (before: they were deleted anyway)."""
    store = make_store(
        deleteWhen=";".join(f"{h:02d}" for h in range(24)), fileReservedTime=0,
        deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0,
    )
    store.disk_usage_probe = lambda: 0.10
    await store.start()
    await fill(store, 60)
    assert len(store.commit_log.mapped_file_queue.mapped_files) >= 3
    flush = store.flush_consume_queue_service

    async def no_flush(flush_least_pages: int, *, write_checkpoint: bool) -> None:
        return None

    flush.do_flush = no_flush  # type: ignore[method-assign]
    assert await store.clean_expired_files_now() == 0
    assert store.get_commit_log_min_offset() == 0
    del flush.do_flush  # the real one again
    assert await store.clean_expired_files_now() >= 2
    assert store.get_commit_log_min_offset() > 0
    assert store.get_commit_log_min_offset() <= store.durable_dispatch_offset


async def test_expired_files_deleted_at_delete_when(make_store: Callable[..., DefaultMessageStore]) -> None:
    hour = time.localtime().tm_hour
    store = make_store(
        deleteWhen=f"{(hour + 5) % 24:02d}",
        fileReservedTime=1,
        mappedFileSizeConsumeQueue=10 * 20,
        maxIndexNum=40,
        deleteCommitLogFilesInterval=0,
        deleteConsumeQueueFilesInterval=0,
    )
    store.disk_usage_probe = lambda: 0.10
    await store.start()
    await fill(store, 100)
    cl_dir = Path(store.message_store_config.store_path_commit_log())
    n_files = len(store.commit_log.mapped_file_queue.mapped_files)
    assert n_files >= 4
    age_files(cl_dir, 2)
    # Not the configured hour and the disk is fine: nothing happens.
    assert await store.clean_expired_files_now() == 0
    store.message_store_config.deleteWhen = f"{(hour + 5) % 24:02d};{hour:02d}"
    # Files younger than fileReservedTime stay even at deleteWhen o'clock.
    age_files(cl_dir, 0)
    assert await store.clean_expired_files_now() == 0
    age_files(cl_dir, 2)
    deleted = await store.clean_expired_files_now()
    assert deleted >= n_files - 1
    files = store.commit_log.mapped_file_queue.mapped_files
    assert len(files) == 1  # the file being written is never deleted
    min_phy = store.get_commit_log_min_offset()
    # (the next file may already be preallocated)
    assert [n for n in os.listdir(cl_dir) if int(n) < min_phy] == []
    assert min_phy == files[0].file_from_offset > 0
    # Consume queues and the index followed; min offsets moved forward.
    for q in (0, 1):
        min_q = store.get_min_offset_in_queue("TopicTest", q)
        assert min_q > 0
        assert store.get_commit_log_offset_in_queue("TopicTest", q, min_q) >= min_phy
        assert store.get_commit_log_offset_in_queue("TopicTest", q, min_q - 1) < min_phy
        res = store.get_message("g", "TopicTest", q, 0, 32)
        assert res.status == GetMessageStatus.OFFSET_TOO_SMALL and res.next_begin_offset == min_q
        res = store.get_message("g", "TopicTest", q, min_q, 32)
        assert res.status == GetMessageStatus.FOUND
        cq = store.get_consume_queue("TopicTest", q)
        assert cq is not None and cq.mapped_file_queue.mapped_files[0].file_from_offset > 0
    idx = store.index_service
    assert idx is not None and all(f.end_phy_offset >= min_phy for f in idx.index_file_list[:-1])
    assert store.query_message("TopicTest", "U00000", 32, 0, 1 << 62).message_buffers == []
    assert len(store.query_message("TopicTest", "U00099", 32, 0, 1 << 62).message_buffers) == 1
    # Puts carry on after the cleanup.
    assert (await store.put_message(make_msg(body=b"after cleanup"))).is_ok


async def test_space_pressure_deletes_regardless_of_age(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    hour = time.localtime().tm_hour
    store = make_store(deleteWhen=f"{(hour + 5) % 24:02d}", deleteCommitLogFilesInterval=0)
    usage = {"ratio": 0.10}
    store.disk_usage_probe = lambda: usage["ratio"]
    await store.start()
    await fill(store, 80)
    n_files = len(store.commit_log.mapped_file_queue.mapped_files)
    usage["ratio"] = 0.80  # above diskMaxUsedSpaceRatio (75%): old files only -- and ours are new
    assert await store.clean_expired_files_now() == 0
    usage["ratio"] = 0.87  # above the clean-forcibly ratio (85%): age no longer matters
    assert await store.clean_expired_files_now() == n_files - 1
    assert store.running_flags.is_writeable()  # 87% < 90%: writes still allowed


async def test_disk_full_refuses_writes_and_resumes(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(cleanResourceInterval=30)
    usage = {"ratio": 0.10}
    store.disk_usage_probe = lambda: usage["ratio"]
    await store.start()
    await fill(store, 5)
    usage["ratio"] = 0.95
    deadline = time.monotonic() + 5
    while store.running_flags.is_writeable() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    r = await store.put_message(make_msg(body=b"no room"))
    assert r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "disk full" in r.remark
    assert store.runtime_info()["runningFlags"] != "0"
    # Reads still work.
    assert store.get_message("g", "TopicTest", 0, 0, 32).status == GetMessageStatus.FOUND
    usage["ratio"] = 0.50
    deadline = time.monotonic() + 5
    while not store.running_flags.is_writeable() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    r = await store.put_message(make_msg(body=b"room again"))
    assert r.status == PutMessageStatus.PUT_OK


async def test_check_disk_space_now(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    usage = {"ratio": 0.92}
    store.disk_usage_probe = lambda: usage["ratio"]
    await store.start()
    assert not await store.check_disk_space_now()
    usage["ratio"] = 0.86  # between the clean-forcibly and warning ratios: the flag is left as is
    assert not await store.check_disk_space_now()
    usage["ratio"] = 0.2
    assert await store.check_disk_space_now()


async def test_default_probe_reads_real_disk(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store()
    await store.start()
    ratio = store.disk_usage_probe()
    assert 0.0 <= ratio <= 1.0


def test_default_probe_uses_java_formula_not_root_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    """used / (used + available to users), rounded up to a hundredth (Java 4.9 / df Use%): a large
    root reserve must not make a mostly free disk look 75% full (shutil.disk_usage's free is f_bavail)."""

    class Vfs:
        f_frsize = 4096
        f_blocks = 1000  # total
        f_bfree = 840  # unallocated, including the root reserve
        f_bavail = 240  # available to users: 600 blocks reserved

    monkeypatch.setattr(cleanup.os, "statvfs", lambda path: Vfs())
    # used 160, entire 160 + 240 = 400: 40%; (total - available) / total would say 76%.
    assert cleanup.default_disk_usage_probe("/x") == 0.40
    Vfs.f_bavail = 239  # 160 / 399 = 40.1% -> rounded up, as Java does
    assert cleanup.default_disk_usage_probe("/x") == 0.41
    monkeypatch.setattr(cleanup.os, "statvfs", lambda path: (_ for _ in ()).throw(OSError("gone")))
    assert cleanup.default_disk_usage_probe("/x") == -1.0


async def test_clean_expired_consume_queues(make_store: Callable[..., DefaultMessageStore]) -> None:
    """Queues whose messages the commit log no longer holds go (CLEAN_EXPIRED_CONSUMEQUEUE), files and all;
    a queue with a record stored but not dispatched yet stays, though its dispatched units are all expired
    (removed, the dispatcher would rebuild it at the record's old offset while the next send got 0)."""
    store = make_store(
        deleteWhen=";".join(f"{h:02d}" for h in range(24)), fileReservedTime=0,
        deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0,
    )
    store.disk_usage_probe = lambda: 0.10
    await store.start()
    assert await store.clean_expired_consume_queues() == 0  # no commit log file deleted yet
    for topic, qid in (("Old", 0), ("Old", 0), ("Gone", 0), ("Gone", 1)):
        assert (await store.put_message(make_msg(topic, b"o" * 3000, queue_id=qid))).is_ok
    await fill(store, 60)
    for qid in (0, 1):  # (fill's queues: their last units stay in the commit log's last file)
        assert (await store.put_message(make_msg(body=b"t", queue_id=qid))).is_ok
    assert await store.clean_expired_files_now() >= 2
    assert store.get_commit_log_min_offset() > 0
    cq_root = Path(store.message_store_config.store_path_consume_queue())
    # The allocation thread held: the dispatcher waits at a new topic's first record for its queue file,
    # so the record put to Old/0 after it is stored but not dispatched.
    gate = threading.Event()
    store.alloc_executor.submit(gate.wait, 10)
    try:
        assert (await store.put_message(make_msg("Blocker", b"b"))).is_ok
        late = await store.put_message(make_msg("Old", b"late", queue_id=0))
        assert late.append_result is not None and late.append_result.logics_offset == 2
        assert store.get_max_offset_in_queue("Old", 0) == 2
        cleaning = asyncio.ensure_future(store.clean_expired_consume_queues())
        await asyncio.sleep(0.2)
        assert store.get_consume_queue("Old", 0) is not None
        assert "Gone" not in store.consume_queue_table  # (its files go once the thread is free)
    finally:
        gate.set()
    assert await asyncio.wait_for(cleaning, 5) == 2
    assert not (cq_root / "Gone").exists()
    assert await store.wait_dispatched(5)
    r = store.get_message("g", "Old", 0, 2, 32)
    assert r.status == GetMessageStatus.FOUND and r.message_queue_offsets == [2]
    assert [store.get_max_offset_in_queue("TopicTest", q) for q in (0, 1)] == [31, 31]
