"""CommitLogWarmAhead: the pages ahead of the CommitLog writer are read into the page cache on a thread:
the window just ahead as the writer moves, the files ahead in whole only while the event loop is idle.

Residency is read with mincore(2) on a fresh read-only mapping, so these tests need Linux."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import mmap
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from store.mapped_file import MappedFile, offset_to_file_name
from store.message_store import DefaultMessageStore
from store.warm_ahead import CommitLogWarmAhead

from .conftest import make_msg

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore(2) via libc: Linux only")

PAGE = mmap.PAGESIZE
MiB = 1 << 20
# A fault reads around it (read_ahead_kb: 8 MiB on the benchmark host), so "not read" is asserted only of
# pages at least this far before any read.
FAR = 4 * MiB


def resident(path: str, start: int, end: int) -> list[bool]:
    """Per page of [start, end): is it in the page cache?"""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        length = end - start
        addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vec = ctypes.create_string_buffer((length + PAGE - 1) // PAGE)
            assert libc.mincore(addr, length, vec) == 0, ctypes.get_errno()
            return [bool(b & 1) for b in vec.raw]
        finally:
            libc.munmap(addr, length)
    finally:
        os.close(fd)


def drop(path: str, start: int, end: int) -> None:
    """POSIX_FADV_DONTNEED [start, end): drops the clean pages of the range that no process maps."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def mostly(pages: list[bool]) -> bool:
    """Most of the pages read are still cached. Not all: a host that reclaims proactively (the benchmark
    VM's DAMON scheme) drops 10-20% of freshly read, unmapped page cache within seconds, at random; a
    read of the wrong range or none leaves none of it cached."""
    return sum(pages) >= 0.75 * len(pages)


def cold_file(tmp_path: Path, offset: int, size: int) -> MappedFile:
    """A fallocated, unwarmed file: none of its pages cached (skip where the filesystem keeps them)."""
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(offset)), size)
    fd = os.open(mf.file_name, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if any(resident(mf.file_name, 0, size)):
        mf.close_blocking()
        pytest.skip("this filesystem keeps a new file's pages cached (tmpfs?): nothing to warm")
    return mf


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    ex = ThreadPoolExecutor(max_workers=1)
    yield ex
    ex.shutdown(wait=True)


async def passes(w: CommitLogWarmAhead, n: int) -> None:
    async with asyncio.timeout(5):
        while w.passes < n:
            await asyncio.sleep(0.01)


async def test_reads_the_window_ahead_of_the_writer_then_only_what_is_new(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mf = cold_file(tmp_path, 0, 24 * MiB)
    try:
        w = CommitLogWarmAhead(executor, lambda _: None, list, window=MiB, step=MiB // 2)
        mf.wrote_position = 16 * MiB
        w.note_written(mf)
        await passes(w, 1)
        assert w.bytes_read == MiB
        assert mostly(resident(mf.file_name, 16 * MiB, 17 * MiB))
        assert not any(resident(mf.file_name, 0, FAR))  # well behind the writer: not read

        mf.wrote_position = 16 * MiB + MiB // 4  # less than a step written: nothing to do yet
        w.note_written(mf)
        await asyncio.sleep(0.1)
        assert w.passes == 1

        mf.wrote_position = 16 * MiB + 3 * MiB // 5  # a step written: read on from where the last read stopped
        w.note_written(mf)
        await passes(w, 2)
        assert w.bytes_read == MiB + 3 * MiB // 5
        assert mostly(resident(mf.file_name, 17 * MiB, 17 * MiB + 3 * MiB // 5))
    finally:
        mf.close_blocking()


async def test_a_window_past_the_end_of_the_file_reads_the_start_of_the_next(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    size = 4 * MiB
    first, second = cold_file(tmp_path, 0, size), cold_file(tmp_path, size, size)
    try:
        nxt: dict[int, MappedFile] = {}
        w = CommitLogWarmAhead(executor, lambda mf: nxt.get(mf.file_end_offset), list, window=MiB)
        first.wrote_position = size - MiB // 2
        w.note_written(first)  # the next file does not exist yet: read to the end of this one
        await passes(w, 1)
        assert w.bytes_read == MiB // 2
        assert not resident(second.file_name, 0, PAGE)[0]

        nxt[size] = second  # made (preallocated) meanwhile; the refresh covers it
        w.warm(first, refresh=True)
        await passes(w, 2)
        assert w.bytes_read == MiB // 2 + MiB
        assert mostly(resident(second.file_name, 0, MiB // 2))
    finally:
        first.close_blocking()
        second.close_blocking()


def _sendfile_refuses(*_: object) -> int:
    raise OSError(errno.ENOTSOCK, "Socket operation on non-socket")  # BSD and macOS: a socket only


@pytest.mark.parametrize("sendfile", ["missing", "refuses /dev/null"])
async def test_where_sendfile_cannot_it_reads_with_preadv(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch, sendfile: str
) -> None:
    if sendfile == "missing":
        monkeypatch.delattr(os, "sendfile", raising=False)
    else:
        monkeypatch.setattr(os, "sendfile", _sendfile_refuses)
    mf = cold_file(tmp_path, 0, 4 * MiB)
    try:
        w = CommitLogWarmAhead(executor, lambda _: None, list, window=MiB)
        mf.wrote_position = MiB
        w.note_written(mf)
        await passes(w, 1)
        assert w.bytes_read == MiB
        assert mostly(resident(mf.file_name, MiB, 2 * MiB))
    finally:
        mf.close_blocking()


async def test_a_file_read_in_whole_moments_ago_is_not_read_again(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(0)), 4 * MiB)
    mf.warmed_at = time.monotonic()  # as the idle reading leaves it
    try:
        w = CommitLogWarmAhead(executor, lambda _: None, list, window=MiB)
        mf.wrote_position = MiB
        w.note_written(mf)
        w.warm(mf, refresh=True)
        await asyncio.sleep(0.1)
        assert w.passes == 0 and w.warm_to == 2 * MiB  # the window moved on, nothing was read
        w.fresh_s = 0.0  # long enough ago now
        w.warm(mf, refresh=True)
        await passes(w, 1)
        assert w.bytes_read == MiB
    finally:
        mf.close_blocking()


async def test_a_closed_file_is_skipped_not_an_error(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(0)), MiB)
    mf.close_blocking()
    w = CommitLogWarmAhead(executor, lambda _: None, list, window=MiB // 2)
    w.note_written(mf)
    await passes(w, 1)
    assert w.bytes_read == 0


async def test_the_store_keeps_the_writers_window_cached_and_refreshes_it(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    store = make_store(mappedFileSizeCommitLog=4 * MiB)
    await store.start()
    w = store.commit_log.warm_ahead
    assert w is not None
    w.populate = False  # reads into the page cache only (kernels before 5.14): pages reclaim can drop
    w.fresh_s = 0.0  # as if the file had been read in long ago
    await store.put_message(make_msg(body=b"x" * 1000))
    await passes(w, 1)
    mf = store.commit_log.mapped_file_queue.get_last_mapped_file()
    assert mf is not None and w.bytes_read > 0

    # Drop the (unmapped) pages ahead of the writer, as memory pressure or proactive reclaim does: the
    # periodic refresh reads them back before the writer gets there.
    page_after = (mf.wrote_position // PAGE + 1) * PAGE
    fd = os.open(mf.file_name, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, page_after, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if all(resident(mf.file_name, page_after, mf.file_size)):
        pytest.skip("this filesystem does not drop clean pages on POSIX_FADV_DONTNEED (tmpfs?)")
    w.refresh_s = 0.0
    async with asyncio.timeout(5):
        while not all(resident(mf.file_name, page_after, mf.file_size)):
            await asyncio.sleep(0.05)
    await store.shutdown()


async def test_no_warm_ahead_when_warming_is_off(make_store: Callable[..., DefaultMessageStore]) -> None:
    store = make_store(warmMapedFileEnable=False)
    assert store.commit_log.warm_ahead is None
    await store.start()
    await store.put_message(make_msg())
    await store.shutdown()


async def test_while_idle_it_reads_the_rest_of_the_writers_file_then_the_next_in_whole(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    size = 20 * MiB
    first, second = cold_file(tmp_path, 0, size), cold_file(tmp_path, size, 4 * MiB)
    try:
        w = CommitLogWarmAhead(executor, lambda _: None, lambda: [first, second], window=MiB, idle_chunk=MiB)
        first.wrote_position = 16 * MiB
        w.note_written(first)  # the window: [16, 17) MiB
        await passes(w, 1)
        chunks = 0
        async with asyncio.timeout(5):
            while True:
                await passes(w, 1 + chunks)
                if not w.read_idle_chunk():
                    break
                chunks += 1
        assert chunks == 3 + 4  # the rest of the writer's file past the window, then all of the next
        assert w.idle_bytes_read == 3 * MiB + 4 * MiB
        assert mostly(resident(first.file_name, 16 * MiB, size)) and mostly(resident(second.file_name, 0, 4 * MiB))
        assert not any(resident(first.file_name, 0, FAR))  # well behind the writer: not read
        assert first.warmed_at > 0 and second.warmed_at > 0  # so the window does not read them again
    finally:
        first.close_blocking()
        second.close_blocking()


async def test_nothing_is_read_in_whole_while_the_event_loop_is_busy(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mf = cold_file(tmp_path, 0, 4 * MiB)
    w = CommitLogWarmAhead(executor, lambda _: None, lambda: [mf], window=MiB, idle_chunk=MiB)
    # No writer's file for the window refresh: the kernel's read-ahead behind one fills a small file.
    w.start(lambda: None)
    try:
        # Keep the loop thread busy (as a burst of sends does) for longer than many idle ticks.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            sum(range(20_000))
            await asyncio.sleep(0)
        assert w.idle_bytes_read == 0 and not any(resident(mf.file_name, 0, 4 * MiB))
        async with asyncio.timeout(5):  # idle now: the file is read in whole
            while not mf.warmed_at:
                await asyncio.sleep(0.02)
        assert mostly(resident(mf.file_name, 0, 4 * MiB))
    finally:
        await w.stop()
        mf.close_blocking()


async def test_an_idle_store_reads_its_next_commit_log_file_in_whole_before_any_put(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    store = make_store(mappedFileSizeCommitLog=4 * MiB)
    await store.start()
    try:
        async with asyncio.timeout(5):
            while not (ahead := store.commit_log.files_ahead()):
                await asyncio.sleep(0.02)
            first = ahead[0]  # made at start, not yet written to
            while not first.warmed_at:
                await asyncio.sleep(0.02)
        assert mostly(resident(first.file_name, 0, first.file_size))
        assert store.commit_log.warm_ahead is not None and store.commit_log.warm_ahead.idle_bytes_read > 0
    finally:
        await store.shutdown()


async def test_pages_it_reads_are_mapped_so_reclaim_of_unmapped_page_cache_leaves_them(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mf = cold_file(tmp_path, 0, 24 * MiB)
    try:
        w = CommitLogWarmAhead(executor, lambda _: None, list, window=4 * MiB)
        mf.wrote_position = 16 * MiB
        w.note_written(mf)
        await passes(w, 1)
        assert w.populate, "MADV_POPULATE_READ (Linux 5.14+) refused"
        drop(mf.file_name, 0, mf.file_size)  # as reclaim drops page cache no process maps
        assert mostly(resident(mf.file_name, 16 * MiB, 20 * MiB))  # the window: still there

        w.populate = False  # into the page cache only: nothing maps those pages
        mf.wrote_position = 20 * MiB + PAGE  # a step on
        w.note_written(mf)
        await passes(w, 2)
        assert mostly(resident(mf.file_name, 20 * MiB + PAGE, 24 * MiB))
        drop(mf.file_name, 20 * MiB, mf.file_size)
        assert not any(resident(mf.file_name, 20 * MiB + PAGE, 24 * MiB))
    finally:
        mf.close_blocking()


def _mappings_of(path: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(path))


def test_populate_maps_the_file_a_second_time_until_it_is_closed(tmp_path: Path) -> None:
    """The pages go into a read-only mapping of their own (the writer's mapping gets no per-page entries
    to fault on), which closing the file unmaps with the other: nothing stays mapped."""
    mf = cold_file(tmp_path, 0, MiB)
    assert mf.populate_blocking(0, MiB) == MiB
    assert mostly(resident(mf.file_name, 0, MiB))
    assert _mappings_of(mf.file_name) == 2
    mf.close_blocking()
    assert _mappings_of(mf.file_name) == 0
    assert mf.populate_blocking(0, MiB) == 0  # closed meanwhile: no reason to stop populating the next file
