"""CommitLogWarmAhead: the pages ahead of the CommitLog writer are read into the page cache on a thread.

Residency is read with mincore(2) on a fresh read-only mapping, so these tests need Linux."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import mmap
import os
import sys
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


def cold_file(tmp_path: Path, offset: int, size: int) -> MappedFile:
    """A fallocated, unwarmed file: none of its pages cached (skip where the filesystem keeps them)."""
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(offset)), size, warm=False)
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
    mf = cold_file(tmp_path, 0, 8 * MiB)
    try:
        w = CommitLogWarmAhead(executor, lambda _: None, window=MiB, step=MiB // 2)
        mf.wrote_position = 2 * MiB
        w.note_written(mf)
        await passes(w, 1)
        assert w.bytes_read == MiB
        assert all(resident(mf.file_name, 2 * MiB, 3 * MiB))
        assert not any(resident(mf.file_name, 0, MiB))  # behind the writer: not read

        mf.wrote_position = 2 * MiB + MiB // 4  # less than a step written: nothing to do yet
        w.note_written(mf)
        await asyncio.sleep(0.1)
        assert w.passes == 1

        mf.wrote_position = 2 * MiB + 3 * MiB // 5  # a step written: read on from where the last read stopped
        w.note_written(mf)
        await passes(w, 2)
        assert w.bytes_read == MiB + 3 * MiB // 5
        assert all(resident(mf.file_name, 3 * MiB, 3 * MiB + 3 * MiB // 5))
    finally:
        mf.close_blocking()


async def test_a_window_past_the_end_of_the_file_reads_the_start_of_the_next(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    size = 4 * MiB
    first, second = cold_file(tmp_path, 0, size), cold_file(tmp_path, size, size)
    try:
        nxt: dict[int, MappedFile] = {}
        w = CommitLogWarmAhead(executor, lambda mf: nxt.get(mf.file_end_offset), window=MiB)
        first.wrote_position = size - MiB // 2
        w.note_written(first)  # the next file does not exist yet: read to the end of this one
        await passes(w, 1)
        assert w.bytes_read == MiB // 2
        assert not resident(second.file_name, 0, PAGE)[0]

        nxt[size] = second  # made (preallocated) meanwhile; the refresh covers it
        w.warm(first, refresh=True)
        await passes(w, 2)
        assert w.bytes_read == MiB // 2 + MiB
        assert all(resident(second.file_name, 0, MiB // 2))
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
        w = CommitLogWarmAhead(executor, lambda _: None, window=MiB)
        mf.wrote_position = MiB
        w.note_written(mf)
        await passes(w, 1)
        assert w.bytes_read == MiB
        assert all(resident(mf.file_name, MiB, 2 * MiB))
    finally:
        mf.close_blocking()


async def test_a_file_read_in_whole_moments_ago_is_not_read_again(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(0)), 4 * MiB, warm=True)
    try:
        w = CommitLogWarmAhead(executor, lambda _: None, window=MiB)
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
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(0)), MiB, warm=False)
    mf.close_blocking()
    w = CommitLogWarmAhead(executor, lambda _: None, window=MiB // 2)
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
