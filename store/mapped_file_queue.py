"""MappedFileQueue: an ordered run of equally sized MappedFiles forming one logical byte space.

Blocking file work is done by callers on worker threads through the `*_blocking` methods. The list
is appended to on the loop, or on the store's single allocation thread for the files it creates
(ConsumeQueue and index files: create_next_file_blocking, IndexService.roll_blocking); every other
change happens on the loop or on the start-up thread before the loop uses the store. Removals while
the store runs therefore edit the list in place (remove_in_place), never swap in a rebuilt copy: an
append landing between building the copy and the swap would be lost.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import structlog

from .mapped_file import MappedFile, fsync_dir, offset_to_file_name

log = structlog.get_logger(__name__)


class MappedFileQueue:
    def __init__(
        self, store_path: str, mapped_file_size: int, *, preallocate: bool = True,
        random_access: bool = False, defer_dir_sync: bool = False, keep_fd: bool = True,
        on_last_file: Callable[[MappedFile | None], None] | None = None,
    ) -> None:
        self.store_path = store_path
        # Told the last file (None: no file) whenever it changes, for an owner that keeps it at hand.
        self.on_last_file = on_last_file
        # defer_dir_sync: a created file's directory entry is made durable by the next flush round
        # (sync_dir_blocking, before the checkpoint claims any unit in it) instead of at creation. The
        # allocation thread counts creations, the flusher records what it synced: one writer each.
        self.defer_dir_sync = defer_dir_sync
        self.dir_creates = 0
        self.dir_synced = 0
        self.random_access = random_access  # mapped_file.no_read_around on every file (ConsumeQueues)
        self.keep_fd = keep_fd  # see MappedFile's keep_fd
        self.mapped_file_size = mapped_file_size
        self.preallocate = preallocate
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.store_timestamp = 0  # store time of the last flushed record

    # ------------------------------------------------------------------------------ load / create

    def load_blocking(self) -> None:
        """Map every existing file (sorted by name). Leftover temp files from a crash are removed."""
        if not os.path.isdir(self.store_path):
            return
        names = []
        for name in os.listdir(self.store_path):
            path = os.path.join(self.store_path, name)
            if name.endswith(".tmp"):
                os.unlink(path)
                continue
            if name.isdigit() and os.path.isfile(path):
                names.append(name)
        names.sort()
        for name in names:
            mf = MappedFile.open_blocking(
                os.path.join(self.store_path, name), self.mapped_file_size, random_access=self.random_access,
                keep_fd=self.keep_fd,
            )
            mf.wrote_position = self.mapped_file_size
            mf.flushed_position = self.mapped_file_size
            self.mapped_files.append(mf)
            log.debug("mapped_file_loaded", file=mf.file_name)
        self._last_file_changed()

    def create_file_blocking(self, start_offset: int) -> MappedFile:
        path = os.path.join(self.store_path, offset_to_file_name(start_offset))
        mf = MappedFile.create_blocking(
            path, self.mapped_file_size, preallocate=self.preallocate,
            random_access=self.random_access, sync_dir=not self.defer_dir_sync, keep_fd=self.keep_fd,
        )
        if self.defer_dir_sync:
            self.dir_creates += 1  # before the file is added to the list, i.e. before any unit is in it
        return mf

    def sync_dir_blocking(self) -> None:
        """Make the names of the files created so far durable (flush thread; see defer_dir_sync)."""
        fsync_dir(self.store_path)

    def next_file_offset(self) -> int:
        last = self.get_last_mapped_file()
        return 0 if last is None else last.file_from_offset + self.mapped_file_size

    def add_mapped_file(self, mf: MappedFile) -> None:
        """Append a file created by create_file_blocking (loop thread)."""
        last = self.get_last_mapped_file()
        if last is not None and mf.file_from_offset != last.file_from_offset + self.mapped_file_size:
            raise ValueError(f"mapped file {mf.file_name} does not follow {last.file_name}")
        if not self.mapped_files:
            mf.first_create_in_queue = True
        self.mapped_files.append(mf)
        self._last_file_changed()

    def _last_file_changed(self) -> None:
        if self.on_last_file is not None:
            self.on_last_file(self.mapped_files[-1] if self.mapped_files else None)

    def get_last_mapped_file_blocking(
        self, start_offset: int = 0, need_create: bool = True
    ) -> MappedFile | None:
        """Java getLastMappedFile(startOffset): the tail file, creating one when there is none or it is full.
        Blocking -- start-up thread / worker threads only."""
        last = self.get_last_mapped_file()
        if last is not None and not last.is_full():
            return last
        if not need_create:
            return last
        if last is None:
            create_offset = start_offset - (start_offset % self.mapped_file_size)
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        mf = self.create_file_blocking(create_offset)
        self.add_mapped_file(mf)
        return mf

    # ------------------------------------------------------------------------------ lookups

    def get_first_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[0] if self.mapped_files else None

    def get_last_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[-1] if self.mapped_files else None

    def find_mapped_file_by_offset(
        self, offset: int, return_first_on_not_found: bool = False
    ) -> MappedFile | None:
        files = self.mapped_files
        if not files:
            return None
        first = files[0]
        idx = (offset - first.file_from_offset) // self.mapped_file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        for mf in files:  # only if the list has a gap (should not happen)
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    def get_min_offset(self) -> int:
        first = self.get_first_mapped_file()
        return first.file_from_offset if first is not None else -1

    def get_max_offset(self) -> int:
        last = self.get_last_mapped_file()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def remain_how_many_data_to_flush(self) -> int:
        return max(0, self.get_max_offset() - self.flushed_where)

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    # ------------------------------------------------------------------------------ flush

    def flush_target(self, flush_least_pages: int) -> tuple[MappedFile, int] | None:
        """Which file to fsync next and up to which position (loop thread); None if nothing to do."""
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None or mf.is_closed:
            return None
        wp = mf.wrote_position
        if not mf.is_able_to_flush(flush_least_pages, wp):
            return None
        return mf, wp

    def flush_done(self, mf: MappedFile, wrote_position: int, store_timestamp: int) -> None:
        mf.flushed_position = max(mf.flushed_position, wrote_position)
        where = mf.file_from_offset + mf.flushed_position
        if where > self.flushed_where:
            self.flushed_where = where
        if store_timestamp > 0:
            self.store_timestamp = store_timestamp

    def flush_blocking(self, flush_least_pages: int) -> bool:
        """Synchronous flush of one file step (start-up/shutdown thread). True if nothing was left."""
        target = self.flush_target(flush_least_pages)
        if target is None:
            return True
        mf, wp = target
        ts = mf.store_timestamp
        mf.fsync_blocking()
        self.flush_done(mf, wp, ts)
        return False

    def flush_all_blocking(self) -> None:
        for _ in range(len(self.mapped_files) + 2):
            if self.flush_blocking(0):
                break

    # ------------------------------------------------------------------------------ truncate / delete

    def truncate_dirty_files_blocking(self, offset: int) -> None:
        """Drop everything at or after `offset` (recovery): later files are deleted, the file holding
        `offset` gets its tail zeroed and its positions set."""
        keep: list[MappedFile] = []
        for mf in self.mapped_files:
            file_tail = mf.file_from_offset + self.mapped_file_size
            if file_tail > offset:
                if offset >= mf.file_from_offset:
                    pos = offset % self.mapped_file_size
                    mf.wrote_position = pos
                    mf.flushed_position = pos
                    mf.zero_tail_blocking(pos, allocate=self.preallocate)
                    keep.append(mf)
                else:
                    mf.destroy_blocking()
            else:
                keep.append(mf)
        self.mapped_files = keep
        self._last_file_changed()

    def delete_last_mapped_file_blocking(self) -> None:
        if self.mapped_files:
            mf = self.mapped_files.pop()
            self._last_file_changed()
            mf.destroy_blocking()

    def reset_offset_positions(self, offset: int) -> None:
        self.flushed_where = offset

    def destroy_blocking(self) -> None:
        files = self.mapped_files
        self.mapped_files = []
        self._last_file_changed()  # before any file is gone: an owner never holds a destroyed one
        for mf in files:
            mf.destroy_blocking()
        self.flushed_where = 0
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass

    def close_blocking(self) -> None:
        for mf in self.mapped_files:
            mf.close_blocking()

    def remove_first_files(self, files: list[MappedFile]) -> None:
        """Drop files (already chosen for deletion) from the head of the list (loop thread)."""
        remove_in_place(self.mapped_files, files)
        self._last_file_changed()


def remove_in_place(files: list[Any], victims: list[Any]) -> None:
    """Remove `victims` (by identity) from `files` without replacing the list object, so that an append
    made meanwhile by the allocation thread stays. Victims are normally a run at the head: one slice
    deletion; any others are deleted by index from the back (appends only ever add at the end)."""
    ids = {id(f) for f in victims}
    k = 0
    while k < len(files) and id(files[k]) in ids:
        k += 1
    del files[:k]
    if k < len(ids):
        for i in range(len(files) - 1, -1, -1):
            if id(files[i]) in ids:
                del files[i]
