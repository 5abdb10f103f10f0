"""DelayOffsetCheckpoint: crash-safe delivery progress of the ScheduleMessageService.

delayOffset.json (RocketMQ's file) is rewritten every 10 s and at shutdown; on its own a SIGKILL
would make the broker deliver again whatever it delivered since the last write. This small
memory-mapped file (`<storePathRootDir>/config/delayOffset.ckpt`) is updated in place around every
delivery, so a killed process leaves it current in the page cache:

    header: magic "RDOC" | version (int32) | slot count (int32) | 4 spare bytes
    slot per level (index level - 1): offset (int64) | pending offset (int64) |
                                      pending commit-log offset (int64) | pending wall time ms (int64)

`offset` is the next SCHEDULE_TOPIC_XXXX queue offset to deliver (every entry below it was re-put
successfully). `pending` names the entry whose re-put is in flight and the commit-log end offset
before it started, so that at start-up the service can look for the re-put record and tell
"written before the crash" from "never written". pending offset -1 = nothing in flight.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Final

import structlog

log = structlog.get_logger(__name__)

_MAGIC: Final = b"RDOC"
_VERSION: Final = 1
_HEADER = struct.Struct(">4sii4x")
_SLOT = struct.Struct(">qqqq")
_OFFSET = struct.Struct(">q")
MAX_SLOTS: Final = 255
FILE_SIZE: Final = 8192  # header + 255 slots of 32 bytes fit
NO_PENDING: Final = -1


class DelayOffsetCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        self._mm: mmap.mmap | None = None
        self._fd = -1

    # ------------------------------------------------------------------ lifecycle (worker thread)

    def open_blocking(self) -> dict[int, tuple[int, int, int, int]]:
        """Map the file (created if missing) and return {level: (offset, pending, pending_cl, pending_ms)}
        for the levels it knows; an unreadable file is reset."""
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != FILE_SIZE:
                os.ftruncate(fd, FILE_SIZE)
            mm = mmap.mmap(fd, FILE_SIZE)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._mm = fd, mm
        magic, version, _count = _HEADER.unpack_from(mm, 0)
        slots: dict[int, tuple[int, int, int, int]] = {}
        if magic == _MAGIC and version == _VERSION:
            for i in range(MAX_SLOTS):
                offset, pending, pending_cl, pending_ms = _SLOT.unpack_from(mm, _HEADER.size + i * _SLOT.size)
                if offset > 0 or pending >= 0:
                    slots[i + 1] = (offset, pending, pending_cl, pending_ms)
        else:
            if magic != b"\0\0\0\0":
                log.warning("delay_offset_checkpoint_reset", path=self.path, reason="unknown format")
            mm[:] = bytes(FILE_SIZE)
            for i in range(MAX_SLOTS):
                _SLOT.pack_into(mm, _HEADER.size + i * _SLOT.size, 0, NO_PENDING, 0, 0)
            _HEADER.pack_into(mm, 0, _MAGIC, _VERSION, MAX_SLOTS)
        return slots

    def flush_blocking(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close_blocking(self) -> None:
        mm, self._mm = self._mm, None
        if mm is not None:
            mm.flush()
            mm.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ------------------------------------------------------------------ updates (loop thread, no syscalls)

    def _pos(self, level: int) -> int:
        return _HEADER.size + (level - 1) * _SLOT.size

    def set_offset(self, level: int, offset: int) -> None:
        """Record progress and clear the in-flight marker (offset first: a crash in between leaves
        pending < offset, which start-up ignores)."""
        mm = self._mm
        if mm is None or not 1 <= level <= MAX_SLOTS:
            return
        pos = self._pos(level)
        _OFFSET.pack_into(mm, pos, offset)
        _OFFSET.pack_into(mm, pos + 8, NO_PENDING)

    def set_pending(self, level: int, offset: int, commit_log_offset: int, now_ms: int) -> None:
        mm = self._mm
        if mm is None or not 1 <= level <= MAX_SLOTS:
            return
        pos = self._pos(level)
        # Details first, then the marker that makes them count.
        _OFFSET.pack_into(mm, pos + 16, commit_log_offset)
        _OFFSET.pack_into(mm, pos + 24, now_ms)
        _OFFSET.pack_into(mm, pos + 8, offset)

    def clear_pending(self, level: int) -> None:
        mm = self._mm
        if mm is None or not 1 <= level <= MAX_SLOTS:
            return
        _OFFSET.pack_into(mm, self._pos(level) + 8, NO_PENDING)
