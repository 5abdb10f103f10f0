"""CommitLogWarmAhead: keep the pages ahead of the CommitLog writer in the page cache.

The put path writes records straight into the mapping on the event loop. A write to a page that is not
in the page cache is a fault the loop waits out, and the kernel answers it with a synchronous read-around
of the device's read-ahead window (`read_ahead_kb`: 8 MiB on some hosts): for a fallocated file, zero-
filling 2 048 pages, 20-30 ms on a VM whose host takes the memory back. Warming the whole next file when
it is created (warmMapedFileEnable) does not guarantee those pages are still there when the writer gets
to them: page cache that no process has mapped and nobody has read for a while is what the kernel drops
first (under memory pressure, or earlier with proactive reclaim: a DAMON `pageout` scheme for unmapped
pages idle 30 s dropped a warmed file within a minute on our benchmark host, and every 8 MiB the writer
then stalled the loop ~20 ms, end-to-end p99 went from 2.3 to 14-18 ms).

So a thread re-reads the window [write position, + WINDOW) whenever the writer has used half of it, and
at least every REFRESH_S seconds (a slow writer, or none), reading into the next file when the window
crosses the end of the current one -- except in a file read in whole less than FRESH_S ago, which is
still cached (a fast writer: extra reads there only took CPU and the GIL from the loop).

Reading files in whole (the rest of the writer's file, then the next one) happens only while the event
loop is idle, IDLE_CHUNK at a time. Where memory the host took back costs a first touch (9-22 us a page
on our benchmark VM, 2.5-6 s of CPU per GiB, and it slows the other vCPU too), reading a whole new file at
every roll took that CPU from whatever ran then: a 1 000-topic send run that crossed a roll went from
44-50k to 28-31k msgs/s. Done while idle, a burst of sends finds its pages already paid for, and a roll in
the middle of one costs only the window.

A read is one madvise(MADV_POPULATE_READ) of the range in a read-only mapping of the file kept for this
(MappedFile.populate_blocking), on the thread, GIL released. It faults the pages in, so they are mapped,
and mapped pages are what that proactive reclaim leaves alone: unmapped page cache read in went at
10-20% every 5 s there, so a read only into the page cache was mostly gone again by the time a writer
at 10 MB/s got to it. Pages
already mapped cost ~4 us per MiB. Where the kernel cannot (not Linux 5.14+), sendfile to /dev/null reads
the pages into the page cache instead (~0.2 ms per cached 16 MiB), or preadv where sendfile cannot.
Nothing is dirtied, so no extra disk writes (unlike Java's warmMappedFile, which writes zeros and mlocks
the file); the pages count in the broker's RSS as file mappings."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial

import structlog

from remoting.loop import cancel_and_wait

from .mapped_file import MappedFile

log = structlog.get_logger(__name__)

WINDOW = 32 * 1024 * 1024  # four 8 MiB read-around windows
STEP = 16 * 1024 * 1024  # read on after this much writing (half the window)
REFRESH_S = 10.0  # well inside the 30 s idle age that dropped pages on the benchmark host
FRESH_S = 20.0  # a file read in whole less than this ago is still cached: no need to read it again
IDLE_TICK_S = 0.02  # how often the loop's idleness is looked at
IDLE_BUSY = 0.1  # the loop counts as idle below this share of a CPU over a tick
IDLE_LATE = 1.25  # ... and when the tick's sleep ends within this many ticks (not waiting for the CPU)
IDLE_CHUNK = 8 * 1024 * 1024  # read in whole per idle tick: a burst starting meanwhile waits out <= ~50 ms
_CHUNK = 1 << 20
# sendfile cannot write to /dev/null here (BSD and macOS want a socket; old kernels a non-file): copy instead.
_NO_SENDFILE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK, errno.ENOTSUP})


class CommitLogWarmAhead:
    def __init__(
        self, executor: Executor, next_file: Callable[[MappedFile], MappedFile | None],
        files_ahead: Callable[[], list[MappedFile]], *,
        window: int = WINDOW, step: int = STEP, refresh_s: float = REFRESH_S, fresh_s: float = FRESH_S,
        idle_chunk: int = IDLE_CHUNK, populate: bool = True,
    ) -> None:
        self._executor = executor
        self._next_file = next_file  # the file after this one, if it exists yet
        self._files_ahead = files_ahead  # the writer's file unless full, then the next one once made
        self.window = window
        self.idle_chunk = idle_chunk
        self.step = min(step, window)
        self.refresh_s = refresh_s
        self.fresh_s = fresh_s
        # Absolute CommitLog offsets: the window was read up to `warm_to`; a write past `trigger` reads on.
        self.warm_to = -1
        self.trigger = -1
        self._last_pass_at = 0.0
        # Files being read in whole while idle: file_from_offset -> how far (in-file offset).
        self._whole_read_to: dict[int, int] = {}
        self._stopped = False
        self._inflight: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_file: Callable[[], MappedFile | None] | None = None  # the writer's file (once started)
        self._buf = bytearray(_CHUNK)  # only the one executor thread uses it (where sendfile cannot)
        self._null_fd: int | None = None
        # Map the pages (populate_blocking) until the kernel says it cannot; False reads them into the page
        # cache only.
        self.populate = populate
        self.passes = 0
        self.bytes_read = 0
        self.idle_bytes_read = 0

    # ------------------------------------------------------------------ loop side

    def note_written(self, mf: MappedFile) -> None:
        """After a put: read on when the writer has used half of the window (one compare when not)."""
        if mf.file_from_offset + mf.wrote_position > self.trigger:
            self.warm(mf, refresh=False)

    def warm(self, mf: MappedFile, *, refresh: bool) -> None:
        """Submit one read of the window ahead of `mf`'s write position: the part not yet read, or with
        `refresh` all of it (pages read long ago may have been dropped since)."""
        if self._stopped or (self._inflight is not None and not self._inflight.done()):
            return
        pos = mf.file_from_offset + mf.wrote_position
        end = pos + self.window
        start = pos if refresh else max(pos, self.warm_to)
        ranges: list[tuple[MappedFile, int, int]] = []
        now = time.monotonic()
        file_end = mf.file_from_offset + mf.file_size
        # A file read in whole moments ago (the writer fills a 1 GiB file in 5 s at batch rates) needs no
        # second read: that would only cost the loop's CPU and GIL a few per cent of batch throughput.
        if start < file_end and now - mf.warmed_at >= self.fresh_s:
            ranges.append((mf, start - mf.file_from_offset, min(end, file_end) - mf.file_from_offset))
        self.trigger = end - self.window + self.step
        if end > file_end:
            nxt = self._next_file(mf)
            if nxt is None:
                # Read the next file's part once it exists: look again a little further on, not at every put.
                end = file_end
                self.trigger = pos + self.step // 4
            elif now - nxt.warmed_at >= self.fresh_s:
                ranges.append((nxt, max(start - file_end, 0), end - file_end))
        self.warm_to = end
        self._last_pass_at = now
        if not ranges:
            return
        try:
            fut = asyncio.get_running_loop().run_in_executor(self._executor, self._read_blocking, ranges)
        except RuntimeError:  # executor shut down: the store is closing
            return
        fut.add_done_callback(self._done)
        self._inflight = fut

    def read_idle_chunk(self) -> bool:
        """Submit the next IDLE_CHUNK of the files ahead not yet read in whole: the writer's file from
        past the window, then the next file. False when there is nothing left to read."""
        if self._stopped:
            return False
        if self._inflight is not None and not self._inflight.done():
            return True  # next tick
        files = self._files_ahead()
        if files:  # files behind the writer's are done with
            first = files[0].file_from_offset
            for off in [o for o in self._whole_read_to if o < first]:
                del self._whole_read_to[off]
        for mf in files:
            if mf.warmed_at or mf.is_closed:
                continue
            start = max(self._whole_read_to.get(mf.file_from_offset, 0), mf.wrote_position,
                        self.warm_to - mf.file_from_offset)
            if start >= mf.file_size:
                self._read_whole(mf, mf.file_size)
                continue
            end = min(start + self.idle_chunk, mf.file_size)
            try:
                fut = asyncio.get_running_loop().run_in_executor(
                    self._executor, self._read_blocking, [(mf, start, end)]
                )
            except RuntimeError:  # executor shut down: the store is closing
                return False
            fut.add_done_callback(partial(self._idle_done, mf, end, time.thread_time(), time.monotonic(),
                                          self._writer_position()))
            self._inflight = fut
            return True
        return False

    def _idle_done(self, mf: MappedFile, end: int, cpu: float, at: float, pos: int, fut: asyncio.Future[int]) -> None:
        self._done(fut)
        if not fut.cancelled() and fut.exception() is None:
            self.idle_bytes_read += fut.result()
            self._read_whole(mf, end)
            # Still idle (nothing written, the loop mostly waiting meanwhile): the next chunk at once, not
            # at the next tick. Waiting for ticks halved the pace: 2 GiB at start-up took ~10 s.
            if (
                self._last_file is not None and self._writer_position() == pos
                and time.thread_time() - cpu < (time.monotonic() - at) * IDLE_BUSY
            ):
                self.read_idle_chunk()

    def _writer_file(self) -> MappedFile | None:
        return self._last_file() if self._last_file is not None else None

    def _writer_position(self, mf: MappedFile | None = None) -> int:
        """The writer's commit log offset (of `mf`, the writer's file, when the caller has it); -1: none."""
        if mf is None:
            mf = self._writer_file()
        return -1 if mf is None else mf.file_from_offset + mf.wrote_position

    def _read_whole(self, mf: MappedFile, to: int) -> None:
        if to < mf.file_size:
            self._whole_read_to[mf.file_from_offset] = to
        else:
            self._whole_read_to.pop(mf.file_from_offset, None)
            mf.warmed_at = time.monotonic()

    def _done(self, fut: asyncio.Future[int]) -> None:
        if fut.cancelled():
            return
        e = fut.exception()
        if e is not None:  # a hint only: the writer faults the pages in itself
            log.warning("commitlog_warm_ahead_failed", error=str(e))
            return
        self.passes += 1
        self.bytes_read += fut.result()

    def start(self, last_file: Callable[[], MappedFile | None]) -> None:
        self._last_file = last_file
        self._task = asyncio.get_running_loop().create_task(self._refresh_loop(), name="WarmAhead")

    async def stop(self) -> None:
        """Stop refreshing and let a read in flight finish: the store closes the files next."""
        await cancel_and_wait(self._task)
        self._task = None
        self._stopped = True  # no new reads
        if self._inflight is not None and not self._inflight.done():
            await asyncio.wait([self._inflight])
        if self._null_fd is not None and self._null_fd >= 0:
            os.close(self._null_fd)
        self._null_fd = None

    async def _refresh_loop(self) -> None:
        # Also what warms the window of an idle writer before its next put, not only after it.
        was_cpu, was = time.thread_time(), time.monotonic()  # this runs on the loop: its thread's CPU
        was_pos = -1
        tick = IDLE_TICK_S
        while True:
            await asyncio.sleep(tick)
            cpu, now = time.thread_time(), time.monotonic()
            mf = self._writer_file()
            pos = self._writer_position(mf)
            # Idle: nothing written, little CPU used, and woken on time. A loop starved of the CPU (say by
            # a client on a 2-core host) also uses little, but wakes late: reading then would starve it more.
            idle = pos == was_pos and cpu - was_cpu < (now - was) * IDLE_BUSY and now - was < tick * IDLE_LATE
            was_cpu, was, was_pos = cpu, now, pos
            if now - self._last_pass_at >= self.refresh_s and mf is not None and not mf.is_full():
                self.warm(mf, refresh=True)
                tick = IDLE_TICK_S
            else:
                # Idle with nothing left to read in whole: look once a second (the ticks cost ~1% of a CPU).
                tick = IDLE_TICK_S if not idle or self.read_idle_chunk() else 1.0

    # ------------------------------------------------------------------ thread side

    def _read_blocking(self, ranges: list[tuple[MappedFile, int, int]]) -> int:
        total = 0
        for mf, pos, end in ranges:
            if mf.is_closed:
                continue  # destroyed meanwhile, or the store is shutting down
            if self.populate:
                n = mf.populate_blocking(pos, end)
                if n is not None:
                    total += n
                    continue
                self.populate = False  # this kernel cannot: read into the page cache from now on
            total += self._read_range(mf.fd, pos, end)
        return total

    def _read_range(self, fd: int, pos: int, end: int) -> int:
        """Bring [pos, end) of the file into the page cache: sendfile to /dev/null reads the pages in (and
        marks them used) without copying them anywhere, in one call: 0.22 ms per cached 16 MiB against
        0.85 ms for preadv into a buffer. preadv where sendfile cannot do it."""
        start = pos
        if self._null_fd is None:
            try:
                self._null_fd = os.open(os.devnull, os.O_WRONLY) if hasattr(os, "sendfile") else -1
            except OSError:
                self._null_fd = -1
        if self._null_fd >= 0:
            try:
                while pos < end:
                    n = os.sendfile(self._null_fd, fd, pos, end - pos)
                    if n <= 0:
                        return pos - start
                    pos += n
                return pos - start
            except OSError as e:
                if e.errno not in _NO_SENDFILE:
                    raise
                os.close(self._null_fd)
                self._null_fd = -1  # this platform cannot: copy from now on
        buf = self._buf
        while pos < end:
            n = os.preadv(fd, [memoryview(buf)[: min(_CHUNK, end - pos)]], pos)
            if n <= 0:
                break
            pos += n
        return pos - start
