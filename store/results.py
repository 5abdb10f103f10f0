"""Result types of the store API (names follow RocketMQ's store package)."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from enum import StrEnum


class PutMessageStatus(StrEnum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class AppendMessageStatus(StrEnum):
    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(StrEnum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


_U64 = (1 << 64) - 1


@functools.lru_cache(maxsize=64)
def _ids_struct(host_len: int, n: int) -> struct.Struct:
    return struct.Struct(">" + f"{host_len}sq" * n)


class AppendMessageResult:
    """Outcome of appending to the CommitLog. msg_id (offset msg id; comma-joined for a batch) is built
    lazily: most callers of a batch put never look at it."""

    __slots__ = (
        "status",
        "wrote_offset",
        "wrote_bytes",
        "store_timestamp",
        "logics_offset",
        "msg_num",
        "page_cache_rt",
        "phy_offsets",
        "_msg_id",
        "_store_host_bytes",
    )

    def __init__(
        self,
        status: AppendMessageStatus,
        wrote_offset: int = 0,
        wrote_bytes: int = 0,
        msg_id: str | None = None,
        store_timestamp: int = 0,
        logics_offset: int = 0,
        msg_num: int = 1,
        *,
        page_cache_rt: int = 0,
        phy_offsets: list[int] | None = None,
        store_host_bytes: bytes = b"",
    ) -> None:
        self.status = status
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.msg_num = msg_num
        self.page_cache_rt = page_cache_rt
        self.phy_offsets = phy_offsets
        self._msg_id = msg_id
        self._store_host_bytes = store_host_bytes

    @property
    def msg_id(self) -> str:
        if self._msg_id is None:
            offsets = self.phy_offsets if self.phy_offsets is not None else [self.wrote_offset]
            hb = self._store_host_bytes
            if len(offsets) == 1:
                self._msg_id = f"{hb.hex().upper()}{offsets[0] & _U64:016X}"
            else:
                # A batch: pack every (host, offset) record in one struct call and hex it with a comma
                # between records -- no per-message formatting.
                n = len(offsets)
                fields: list[object] = [hb] * (2 * n)
                fields[1::2] = offsets
                self._msg_id = _ids_struct(len(hb), n).pack(*fields).hex(",", len(hb) + 8).upper()
        return self._msg_id

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",") if self.msg_id else []

    @property
    def is_ok(self) -> bool:
        return self.status == AppendMessageStatus.PUT_OK

    def __repr__(self) -> str:
        return (
            f"AppendMessageResult(status={self.status.value}, wrote_offset={self.wrote_offset}, "
            f"wrote_bytes={self.wrote_bytes}, logics_offset={self.logics_offset}, msg_num={self.msg_num})"
        )


@dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append_result: AppendMessageResult | None = None
    remark: str = ""

    @property
    def is_ok(self) -> bool:
        return self.append_result is not None and self.append_result.is_ok

    def __repr__(self) -> str:
        return f"PutMessageResult(status={self.status.value}, append_result={self.append_result!r}, remark={self.remark!r})"


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus = GetMessageStatus.NO_MESSAGE_IN_QUEUE
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    message_buffers: list[memoryview | bytes] = field(default_factory=list)
    message_queue_offsets: list[int] = field(default_factory=list)
    message_count: int = 0
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False
    msg_count4_commercial: int = 0

    def body(self) -> bytes:
        return b"".join(self.message_buffers)

    def release(self) -> None:
        """Drop the mapping slices early (lets a deleted file's mapping go)."""
        for b in self.message_buffers:
            if isinstance(b, memoryview):
                b.release()
        self.message_buffers = []


@dataclass(slots=True)
class QueryMessageResult:
    message_buffers: list[memoryview | bytes] = field(default_factory=list)
    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
    buffer_total_size: int = 0

    def body(self) -> bytes:
        return b"".join(self.message_buffers)


@dataclass(slots=True)
class QueryOffsetResult:
    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int
