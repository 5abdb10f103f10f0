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


# Store host bytes (address + port) -> their upper-case hex, the lead of every offset msg id: a broker has
# one or two, so this stays tiny (cleared if it ever grows past its bound).
_HOST_HEX: dict[bytes, str] = {}
_HOST_HEX_MAX = 64


def _host_hex(hb: bytes) -> str:
    if len(_HOST_HEX) >= _HOST_HEX_MAX:
        _HOST_HEX.clear()
    hx = _HOST_HEX[hb] = hb.hex().upper()
    return hx


@functools.lru_cache(maxsize=64)
def _ids_struct(host_len: int, n: int) -> struct.Struct:
    return struct.Struct(">" + f"{host_len}sq" * n)


# Module constants for the put path: an enum member read as Enum.MEMBER costs ~65 ns on Python 3.11.
_APPEND_PUT_OK = AppendMessageStatus.PUT_OK


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
        store_host_bytes: bytes = b"",  # positional on the put path: a keyword argument costs ~90 ns a call
        phy_offsets: list[int] | None = None,
        page_cache_rt: int = 0,
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
            offsets = self.phy_offsets
            hb = self._store_host_bytes
            if offsets is None or len(offsets) == 1:  # one message (every single send): no list, cached host hex
                off = self.wrote_offset if offsets is None else offsets[0]
                hx = _HOST_HEX.get(hb)
                if hx is None:
                    hx = _host_hex(hb)
                self._msg_id = f"{hx}{off & _U64:016X}"
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
        return self.status is _APPEND_PUT_OK

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


class GetMessageResult:
    """What get_message read. `message_buffers` holds one read-only slice of the mapped CommitLog per
    record; when the records are back to back (a batch, or one writer per queue) the store hands one
    slice of the whole run instead (set_run), and the per-record slices are only cut if someone asks
    for them: a pull answers with the run's bytes in one copy."""

    __slots__ = (
        "status",
        "next_begin_offset",
        "min_offset",
        "max_offset",
        "_buffers",
        "_run",
        "_run_layout",
        "message_queue_offsets",
        "message_count",
        "buffer_total_size",
        "suggest_pulling_from_slave",
        "msg_count4_commercial",
    )

    def __init__(
        self,
        status: GetMessageStatus = GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        next_begin_offset: int = 0,
        min_offset: int = 0,
        max_offset: int = 0,
        message_buffers: list[memoryview | bytes] | None = None,
        message_queue_offsets: list[int] | None = None,
        message_count: int = 0,
        buffer_total_size: int = 0,
        suggest_pulling_from_slave: bool = False,
        msg_count4_commercial: int = 0,
    ) -> None:
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self._buffers: list[memoryview | bytes] | None = [] if message_buffers is None else message_buffers
        self._run: memoryview | None = None
        self._run_layout: tuple[int, list[int], list[int]] | None = None  # (run start, record offsets, sizes)
        self.message_queue_offsets = [] if message_queue_offsets is None else message_queue_offsets
        self.message_count = message_count
        self.buffer_total_size = buffer_total_size
        self.suggest_pulling_from_slave = suggest_pulling_from_slave
        self.msg_count4_commercial = msg_count4_commercial

    def set_run(self, run: memoryview, first: int, offsets: list[int], sizes: list[int]) -> None:
        """The records are `run` (one slice starting at CommitLog offset `first`): record i is at
        CommitLog offset offsets[i], sizes[i] bytes."""
        self._run = run
        self._run_layout = (first, offsets, sizes)
        self._buffers = None

    @property
    def message_buffers(self) -> list[memoryview | bytes]:
        buffers = self._buffers
        if buffers is None:
            run = self._run
            assert run is not None and self._run_layout is not None
            first, offsets, sizes = self._run_layout
            buffers = self._buffers = [run[p - first : p - first + z] for p, z in zip(offsets, sizes, strict=True)]
        return buffers

    @message_buffers.setter
    def message_buffers(self, value: list[memoryview | bytes]) -> None:
        self._release_run()
        self._buffers = value

    def body(self) -> bytes:
        run = self._run
        if run is not None:
            return bytes(run)
        return b"".join(self._buffers)  # type: ignore[arg-type]

    def release(self) -> None:
        """Drop the mapping slices early (lets a deleted file's mapping go)."""
        buffers = self._buffers
        if buffers:
            for b in buffers:
                if isinstance(b, memoryview):
                    b.release()
        self._release_run()
        self._buffers = []

    def _release_run(self) -> None:
        if self._run is not None:
            self._run.release()
            self._run = None
            self._run_layout = None

    def __repr__(self) -> str:
        return (
            f"GetMessageResult(status={self.status.value}, next_begin_offset={self.next_begin_offset}, "
            f"min_offset={self.min_offset}, max_offset={self.max_offset}, message_count={self.message_count}, "
            f"buffer_total_size={self.buffer_total_size})"
        )


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
