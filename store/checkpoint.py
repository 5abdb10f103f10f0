"""StoreCheckpoint: three int64 timestamps (physic, logics, index) at offsets 0/8/16 of a 4 KiB file, as
RocketMQ's, and at offset 64 (clear of what RocketMQ 5 adds at 24 and 32) the index file that the index
timestamp was made durable in, by its name as a number (0: not known)."""

from __future__ import annotations

import os
import struct

import structlog

log = structlog.get_logger(__name__)

_WITH_INDEX_FILE = struct.Struct(">qqq40xq")  # the index file at 64; one write, inside one disk sector
CHECKPOINT_FILE_SIZE = 4096


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.index_file = 0
        self._fd = -1

    def load_blocking(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        exists = os.path.exists(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size < CHECKPOINT_FILE_SIZE:
            os.ftruncate(self._fd, CHECKPOINT_FILE_SIZE)
        if exists:
            raw = os.pread(self._fd, _WITH_INDEX_FILE.size, 0)
            if len(raw) == _WITH_INDEX_FILE.size:
                self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp, self.index_file = (
                    _WITH_INDEX_FILE.unpack(raw)
                )
            log.info(
                "checkpoint_loaded",
                physic=self.physic_msg_timestamp,
                logics=self.logics_msg_timestamp,
                index=self.index_msg_timestamp,
                index_file=self.index_file,
            )

    def flush_blocking(self, logics_msg_timestamp: int | None = None) -> None:
        """Persist the timestamps. `logics_msg_timestamp` lets the consume-queue flusher write the value
        it captured before its fsync (the in-memory one already covers units not yet on disk)."""
        if self._fd < 0:
            return
        logics = self.logics_msg_timestamp if logics_msg_timestamp is None else logics_msg_timestamp
        data = _WITH_INDEX_FILE.pack(self.physic_msg_timestamp, logics, self.index_msg_timestamp, self.index_file)
        os.pwrite(self._fd, data, 0)
        os.fdatasync(self._fd)

    def shutdown_blocking(self) -> None:
        if self._fd < 0:
            return
        self.flush_blocking()
        os.close(self._fd)
        self._fd = -1

    def get_min_timestamp(self) -> int:
        # 3 s of slack, as Java: records stored just before the checkpoint may not be flushed yet.
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def get_min_timestamp_index(self) -> int:
        return min(self.get_min_timestamp(), self.index_msg_timestamp)
