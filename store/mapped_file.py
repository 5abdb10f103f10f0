"""MappedFile: one fixed-size, memory-mapped store file named by its 20-digit start offset.

Writes are plain memory copies into the mapping (event-loop thread). Everything that can block on the
disk -- creating, preallocating, fsyncing, zeroing, deleting -- is a `*_blocking` method meant to run on
a worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import mmap
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import structlog

log = structlog.get_logger(__name__)

OS_PAGE_SIZE = 4096


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFile:
    # What an append reads first, right after the object header: with 4 000 consume queues each file
    # object is cold when dispatch writes to it, and these share its first cache line.
    __slots__ = (
        "wrote_position",
        "file_size",
        "file_from_offset",
        "mm",
        "file_name",
        "flushed_position",
        "store_timestamp",
        "first_create_in_queue",
        "mv",
        "warmed_at",
        "_fd",
        "dev",
        "_closed",
        "_warm_addr",
        "_warm_lock",
    )

    def __init__(self, file_name: str, file_size: int, fd: int, mm: mmap.mmap, *, keep_fd: bool = True) -> None:
        self.file_name = file_name
        self.file_from_offset = int(os.path.basename(file_name))
        self.file_size = file_size
        self.wrote_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last record appended (for the checkpoint)
        self.first_create_in_queue = False
        self.mm = mm
        # Read-only base view: slices handed to readers can't scribble on the mapping.
        self.mv = memoryview(mm).toreadonly()
        self.warmed_at = 0.0  # time.monotonic() when the CommitLog warm-ahead had read it all in, else 0
        self.dev = os.fstat(fd).st_dev  # the filesystem it is on (one syncfs covers a set: flush.py)
        # keep_fd=False: the descriptor is closed now and what needs one (fsync, pwrite, truncation)
        # opens the file for that call. Python's mmap keeps a duplicate of the descriptor it was made
        # from, so keeping ours too is two open files per mapped file (Java's MappedFile holds one).
        if not keep_fd:
            os.close(fd)
            fd = -1
        self._fd = fd
        self._closed = False
        self._warm_addr = 0  # a second, read-only mapping of the file for populate_blocking (0: none yet)
        self._warm_lock = threading.Lock()  # its creation (warm thread) against close_blocking

    # ------------------------------------------------------------------------------ lifecycle

    @classmethod
    def create_blocking(
        cls, file_name: str, file_size: int, *, preallocate: bool = True,
        random_access: bool = False, sync_dir: bool = True, keep_fd: bool = True,
    ) -> MappedFile:
        """Create (atomically: temp name + rename) and map a new zero-filled file.

        random_access: see no_read_around.

        sync_dir: fsync the directory so the new name is durable at once (~2.5 ms here: a journal
        commit). False leaves that to the caller (ConsumeQueue files: see MappedFileQueue.defer_dir_sync)."""
        d = os.path.dirname(file_name)
        os.makedirs(d, exist_ok=True)
        tmp = file_name + ".tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if preallocate:
                try:
                    os.posix_fallocate(fd, 0, file_size)
                except OSError as e:
                    if e.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                        os.ftruncate(fd, file_size)
                    else:
                        raise
            else:
                os.ftruncate(fd, file_size)  # sparse
            os.rename(tmp, file_name)
            if sync_dir:
                fsync_dir(d)
            mm = mmap.mmap(fd, file_size)
            if random_access:
                no_read_around(mm)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        mf = cls(file_name, file_size, fd, mm, keep_fd=keep_fd)
        log.debug("mapped_file_created", file=file_name, size=file_size)
        return mf

    @classmethod
    def open_blocking(
        cls, file_name: str, file_size: int, *, random_access: bool = False, keep_fd: bool = True
    ) -> MappedFile:
        fd = os.open(file_name, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != file_size:
                raise ValueError(
                    f"{file_name}: length {actual} does not match the configured mapped file size {file_size}"
                )
            mm = mmap.mmap(fd, file_size)
            if random_access:
                no_read_around(mm)
        except BaseException:
            os.close(fd)
            raise
        return cls(file_name, file_size, fd, mm, keep_fd=keep_fd)

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def fd(self) -> int:
        return self._fd

    def close_blocking(self) -> None:
        """Unmap and close. If readers still hold slices the mapping lives on until they drop them."""
        if self._closed:
            return
        self._closed = True
        with self._warm_lock:
            warm_addr, self._warm_addr = self._warm_addr, 0
        if warm_addr:
            lib = _libc()
            if lib is not None:
                lib.munmap(warm_addr, self.file_size)
        self.mv.release()
        try:
            self.mm.close()
        except BufferError:
            pass  # exported slices keep the mapping alive; it is unmapped when they are collected
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass

    def populate_blocking(self, start: int, end: int) -> int | None:
        """Fault [start, end) of the file into a read-only mapping of its own, on the calling thread,
        without holding the GIL (ctypes): the bytes covered, or None where that cannot be done (not Linux
        5.14+). Nothing is dirtied, so no disk writes.

        Why a mapping: page cache that no process maps is what proactive reclaim drops first (on our
        benchmark VM 10-20% of it every 5 s), mapped pages it leaves alone. Why a second one: populating
        the writer's own mapping leaves a read-only entry per page there, and every first write to a page
        then takes a write-protect fault: 4 096 per 16 MiB written, 7-9 ms. With the pages mapped only
        here, the writer's fault maps a whole large folio: 12-160 faults, ~4.4 ms. Pages already mapped
        cost ~4 us per MiB."""
        lib = _libc()
        if lib is None:
            return None
        with self._warm_lock:
            if self._closed:
                return 0
            if self._fd < 0:
                return None  # (a file kept without its descriptor: ConsumeQueues, never warmed)
            addr = self._warm_addr
            if not addr:
                addr = lib.mmap(None, self.file_size, mmap.PROT_READ, mmap.MAP_SHARED, self._fd, 0)
                if addr is None or addr == _MAP_FAILED:
                    return None
                self._warm_addr = addr
        start -= start % OS_PAGE_SIZE
        end = min(end, self.file_size)
        if end <= start:
            return 0
        if lib.madvise(addr + start, end - start, _MADV_POPULATE_READ) != 0:
            err = ctypes.get_errno()
            if err == errno.EINVAL:
                return None  # an older kernel (or an unaligned range, which this is not)
            if err in (errno.ENOMEM, errno.EFAULT):
                return 0  # unmapped meanwhile (the file closed)
            raise OSError(err, os.strerror(err))
        return end - start

    def destroy_blocking(self) -> None:
        self.close_blocking()
        try:
            os.unlink(self.file_name)
        except FileNotFoundError:
            pass
        log.info("mapped_file_destroyed", file=self.file_name)

    # ------------------------------------------------------------------------------ writes

    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def append(self, data: bytes | bytearray | memoryview) -> bool:
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            return False
        self.mm[pos : pos + n] = data
        self.wrote_position = pos + n
        return True

    # ------------------------------------------------------------------------------ reads

    def select(self, pos: int, size: int) -> memoryview | None:
        """A read-only slice of [pos, pos+size) if it is entirely written."""
        if pos < 0 or size < 0 or pos + size > self.wrote_position or self._closed:
            return None
        return self.mv[pos : pos + size]

    def select_to_end(self, pos: int) -> memoryview | None:
        wp = self.wrote_position
        if pos < 0 or pos >= wp or self._closed:
            return None
        return self.mv[pos:wp]

    # ------------------------------------------------------------------------------ disk

    def dirty_pages(self, wrote_position: int | None = None) -> int:
        wp = self.wrote_position if wrote_position is None else wrote_position
        return wp // OS_PAGE_SIZE - self.flushed_position // OS_PAGE_SIZE

    def is_able_to_flush(self, flush_least_pages: int, wrote_position: int) -> bool:
        if self.flushed_position >= wrote_position:
            return False
        if wrote_position >= self.file_size:
            return True  # a full file is always flushed completely
        if flush_least_pages > 0:
            return self.dirty_pages(wrote_position) >= flush_least_pages
        return True

    def fsync_blocking(self) -> None:
        """fdatasync on the file: on Linux it also writes back pages dirtied through the shared mapping,
        and unlike mmap.flush it releases the GIL while it waits."""
        if self._closed:
            return
        try:
            with self._descriptor(os.O_RDONLY) as fd:
                os.fdatasync(fd)
        except FileNotFoundError:
            return  # destroyed meanwhile: nothing of it to make durable

    @contextlib.contextmanager
    def _descriptor(self, flags: int) -> Iterator[int]:
        """The descriptor it keeps, or (keep_fd=False) the file opened with `flags` for the block."""
        if self._fd >= 0:
            yield self._fd
            return
        fd = os.open(self.file_name, flags)
        try:
            yield fd
        finally:
            os.close(fd)

    def allocate_page_blocking(self, pos: int) -> None:
        """Give the (still all-zero) page holding `pos` a disk block and a page-cache page by writing its
        zeros through the file (worker thread). The first write into a hole of a new sparse file through
        the mapping does that inside the page fault, on the writing thread: ~4 ms per new consume queue
        file on ext4 under load, with the loop (and the GIL) waiting."""
        start = pos - pos % OS_PAGE_SIZE
        if 0 <= start < self.file_size and not self._closed:
            with self._descriptor(os.O_RDWR) as fd:
                os.pwrite(fd, bytes(min(OS_PAGE_SIZE, self.file_size - start)), start)

    def zero_tail_blocking(self, from_pos: int, *, allocate: bool = True) -> None:
        """Zero [from_pos, end): shrink then regrow (a hole reads as zeros), so stale records past a
        truncation point can never be rediscovered by a later recovery. allocate: give the hole disk
        blocks again (a preallocated file); False leaves a sparse file sparse (ConsumeQueues: each
        restart allocated every queue's whole file, 24 GB for 1 000 topics x 4 queues)."""
        if from_pos >= self.file_size:
            return
        with self._descriptor(os.O_RDWR) as fd:
            os.ftruncate(fd, from_pos)
            os.ftruncate(fd, self.file_size)
            if allocate:
                try:
                    os.posix_fallocate(fd, from_pos, self.file_size - from_pos)
                except OSError:
                    pass  # sparse is fine

    def last_modified_timestamp_blocking(self) -> int:
        try:
            return int(os.stat(self.file_name).st_mtime * 1000)
        except FileNotFoundError:
            return int(time.time() * 1000)

    def __repr__(self) -> str:
        return f"MappedFile({self.file_name}, wrote={self.wrote_position}, flushed={self.flushed_position})"


_MADV_POPULATE_READ = 22  # Linux 5.14+ (not in Python 3.11's mmap module)
_MADV_POPULATE_WRITE = 23


_MAP_FAILED = ctypes.c_void_p(-1).value


@functools.cache
def _libc() -> SimpleNamespace | None:
    """libc mmap / munmap / madvise through ctypes, which releases the GIL for each call (mmap.madvise
    holds it: populating 128 MiB of fresh memory stalled every other thread ~0.35 s); None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        madvise, mmap_, munmap = libc.madvise, libc.mmap, libc.munmap
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    mmap_.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    mmap_.restype = ctypes.c_void_p
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    munmap.restype = ctypes.c_int
    syncfs = getattr(libc, "syncfs", None)  # glibc 2.14+
    if syncfs is not None:
        syncfs.argtypes = [ctypes.c_int]
        syncfs.restype = ctypes.c_int
    return SimpleNamespace(madvise=madvise, mmap=mmap_, munmap=munmap, syncfs=syncfs)


def syncfs_blocking(path: str) -> bool:
    """syncfs(2) on the filesystem holding `path`: every file's dirty data and metadata there made durable
    with one journal commit. False where it cannot be done, or failed (the caller then syncs file by file,
    which also names the file that failed); Linux 5.8+ reports writeback errors through it."""
    lib = _libc()
    if lib is None or lib.syncfs is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        return bool(lib.syncfs(fd) == 0)
    finally:
        os.close(fd)


def populate_mapping_blocking(mm: mmap.mmap, start: int, end: int, *, write: bool = True) -> bool:
    """Fault [start, end) of `mm` in as if written (MADV_POPULATE_WRITE), or with write=False as if read
    (MADV_POPULATE_READ), on the calling thread without holding the GIL: the page cache is allocated and
    zero-filled (holes) or read, and the pages mapped, writable or read-only (a first write then takes a
    write-protect fault, one per 2 MiB in huge pages, with nothing to read or zero-fill).

    For a range the event loop is about to write at random, such as a new IndexFile's hash slot table:
    each of its first writes into a 2 MiB stretch zero-filled it in a fault on the loop, 0.4 ms each on a
    quiet host and ~3 ms where the host has taken the memory back (a fresh broker's first sends stalled
    ~30 ms). Written, the pages become dirty: the range goes to disk once, as it would anyway once used
    (write=False dirties nothing). False where it cannot be done (not Linux 5.14+, the mapping closed or
    read-only)."""
    lib = _libc()
    if lib is None:
        return False
    start -= start % OS_PAGE_SIZE
    try:
        end = min(end, len(mm))
        if end <= start:
            return True
        anchor = ctypes.c_char.from_buffer(mm)  # the mapping's address (an export: mm cannot close meanwhile)
    except (TypeError, ValueError, BufferError):
        return False  # closed, or not writable
    try:
        advice = _MADV_POPULATE_WRITE if write else _MADV_POPULATE_READ
        ok = lib.madvise(ctypes.addressof(anchor) + start, end - start, advice) == 0
    finally:
        del anchor
    return ok


def no_read_around(mm: mmap.mmap) -> None:
    """MADV_RANDOM: a fault on this mapping reads in its one page, not the device's read-ahead window
    around it. A ConsumeQueue writes 20 bytes per message into its own file, so with many queues each new
    page is a fault; with read-ahead (8 MiB on this host's disk) each such fault paged in the whole 6 MB
    file, and 1 000 topics x 4 queues crossing a page together cost ~5 ms of kernel time per queue on
    the event loop (bench: 40 000 sends took 20 s). Where madvise is missing this is a no-op."""
    _advise(mm, "MADV_RANDOM")


def map_in_huge_pages(mm: mmap.mmap, huge: bool = True) -> None:
    """MADV_HUGEPAGE: where the filesystem caches the file in large folios (ext4 and xfs on Linux 6.16+),
    the kernel maps each 2 MiB-aligned stretch with one page-table entry, so random access over it stops
    missing the TLB. For the live IndexFile: its 20 MB hash slot table is read and written at random, and
    with 4 KiB entries nearly every slot access also walked the page tables (1 000 topics: ~0.4 us a
    record). The price is page cache in 2 MiB units, and a fault reading 2 MiB: fine for the live index
    file, whose slot table is all touched under load anyway; not for an old one, where a key query's few
    slots would each read 2 MiB from disk once evicted, nor for 4 000 ConsumeQueue tails.
    huge=False (MADV_NOHUGEPAGE) takes it back for faults to come. A no-op where the kernel cannot."""
    _advise(mm, "MADV_HUGEPAGE" if huge else "MADV_NOHUGEPAGE")


def _advise(mm: mmap.mmap, name: str) -> None:
    advice = getattr(mmap, name, None)  # missing off Linux
    if advice is not None:
        try:
            mm.madvise(advice)
        except (OSError, ValueError):  # an advisory hint (ValueError: closed meanwhile): never a failure
            pass


def fsync_dir(d: str) -> None:
    try:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
