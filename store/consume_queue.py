"""ConsumeQueue: per topic/queue index of 20-byte units [commitlog offset i64][size i32][tags code i64].

Files live in consumequeue/<topic>/<queueId>/, named by their start byte offset; a unit's queue offset
is its byte position / 20.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from sys import intern

import structlog

from .config import CQ_STORE_UNIT_SIZE
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .message import record_topic_part

log = structlog.get_logger(__name__)

CQ_UNIT = struct.Struct(">qiq")
_I64 = struct.Struct(">q")
_INT_MAX = 0x7FFFFFFF


class ConsumeQueue:
    def __init__(
        self, topic: str, queue_id: int, store_path: str, mapped_file_size: int, *, preallocate: bool = True
    ):
        # Set first, so that they lead the instance's value array: what a put and dispatch read of a queue
        # (with 1 000 topics every send finds the queue's object cold).
        # Out of the store's table (its topic deleted, the store destroyed): a put or dispatch that holds
        # this object from before (MessageExtBrokerInner.consume_queue) looks the queue up again.
        self.removed = False
        self.owner: object | None = None  # the store whose table holds it (set by the store)
        self.topic = intern(topic)  # (a put matches its message's topic to it by identity)
        self.queue_id = queue_id
        # What a CommitLog put reads of the queue when the broker hands it this object with the message:
        # the queue's key in CommitLog.topic_queue_table and the topic as a record stores it (length byte
        # + UTF-8). With 1 000 topics each was a look-up in a per-topic dict, a cold cache line a send.
        self.queue_key = intern(f"{topic}-{queue_id}")
        self.record_topic_part = record_topic_part(topic)
        # The queue's last file (the one dispatch appends to), kept by the MappedFileQueue: the dispatcher
        # reads it here instead of through the queue object and its list, two cold cache lines a record
        # when records go round 4 000 queues.
        self.tail_file: MappedFile | None = None
        self.max_physic_offset = -1  # commitlog offset + size of the last unit written
        # ReputMessageService's memo of the arrival listeners that want this queue's records, valid while
        # wanted_epoch is the service's current epoch (see ReputMessageService.forget_wanted).
        self.wanted_epoch: object | None = None
        self.wanted_listeners: tuple[Callable[..., None], ...] = ()
        self.mapped_file_size = mapped_file_size
        self.mapped_file_queue = MappedFileQueue(
            os.path.join(store_path, topic, str(queue_id)), mapped_file_size, preallocate=preallocate,
            random_access=True,  # see mapped_file.no_read_around
            # A new queue's file is on the dispatch path: its directory fsync (~2.5 ms, a journal commit)
            # made a burst of 4 000 new queues stall dispatch for seconds. The flush round that first
            # covers its units syncs it instead (FlushConsumeQueueService.do_flush).
            defer_dir_sync=True,
            # No descriptor kept per file (the mapping holds one already): 4 000 queues were 8 000 open
            # files, and a broker runs out of them at half the topics. Its rare fsyncs open the file.
            keep_fd=False,
            on_last_file=self._set_tail_file,
        )
        self.min_logic_offset = 0  # byte offset of the first live unit

    def _set_tail_file(self, mf: MappedFile | None) -> None:
        self.tail_file = mf

    # ------------------------------------------------------------------------------ load / recover

    def load_blocking(self) -> None:
        self.mapped_file_queue.load_blocking()

    def recover_blocking(self) -> None:
        """Find the last valid unit scanning the last 3 files; drop everything after it."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        index = max(0, len(files) - 3)
        size = self.mapped_file_size
        mf = files[index]
        process_offset = mf.file_from_offset
        mapped_offset = 0
        while True:
            mv = mf.mv
            mapped_offset = 0
            for i in range(0, size, CQ_STORE_UNIT_SIZE):
                offset, sz, _tags = CQ_UNIT.unpack_from(mv, i)
                if offset >= 0 and sz > 0:
                    mapped_offset = i + CQ_STORE_UNIT_SIZE
                    if sz != _INT_MAX:  # (not a blank before a queue's first unit: see _fill_pre_blank)
                        self.max_physic_offset = offset + sz
                else:
                    break
            if mapped_offset == size:
                index += 1
                if index >= len(files):
                    break
                mf = files[index]
                process_offset = mf.file_from_offset
            else:
                break
        process_offset += mapped_offset
        self.mapped_file_queue.flushed_where = process_offset
        self.mapped_file_queue.truncate_dirty_files_blocking(process_offset)
        log.debug(
            "consume_queue_recovered", topic=self.topic, queue_id=self.queue_id, max_offset=process_offset
        )

    def truncate_dirty_logic_files_blocking(self, phy_offset: int) -> None:
        """Drop units that point at or past `phy_offset` (the commit log was cut there)."""
        self.max_physic_offset = -1
        size = self.mapped_file_size
        mfq = self.mapped_file_queue
        while True:
            mf = mfq.get_last_mapped_file()
            if mf is None:
                break
            mv = mf.mv
            keep = 0
            for i in range(0, size, CQ_STORE_UNIT_SIZE):
                offset, sz, _tags = CQ_UNIT.unpack_from(mv, i)
                if offset >= 0 and sz > 0 and offset < phy_offset:
                    keep = i + CQ_STORE_UNIT_SIZE
                    if sz != _INT_MAX:  # a blank's (0, INT_MAX) would claim every record as dispatched
                        self.max_physic_offset = offset + sz
                else:
                    break
            if keep == 0:
                mfq.delete_last_mapped_file_blocking()
                continue
            mf.wrote_position = keep
            mf.flushed_position = min(mf.flushed_position, keep)
            mf.zero_tail_blocking(keep, allocate=mfq.preallocate)
            break
        if self.max_physic_offset < 0:
            last = mfq.get_last_mapped_file()
            if last is not None:
                self.max_physic_offset = self._max_phy_of_file(last)
        mfq.flushed_where = min(mfq.flushed_where, mfq.get_max_offset())

    def _max_phy_of_file(self, mf: MappedFile) -> int:
        if mf.wrote_position < CQ_STORE_UNIT_SIZE:
            return -1
        offset, sz, _tags = CQ_UNIT.unpack_from(mf.mv, mf.wrote_position - CQ_STORE_UNIT_SIZE)
        return -1 if sz == _INT_MAX else offset + sz  # (a file of blanks holds no record)

    # ------------------------------------------------------------------------------ offsets

    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_message_total_in_queue(self) -> int:
        return self.get_max_offset_in_queue() - self.get_min_offset_in_queue()

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the min logic offset to the first unit whose message is still in the commit log."""
        mf = self.mapped_file_queue.get_first_mapped_file()
        if mf is None:
            return
        mv = mf.mv
        wp = mf.wrote_position
        lo, hi = 0, wp // CQ_STORE_UNIT_SIZE
        # Units are in commit-log order, so a binary search finds the first live one.
        while lo < hi:
            mid = (lo + hi) // 2
            if _I64.unpack_from(mv, mid * CQ_STORE_UNIT_SIZE)[0] >= phy_min_offset:
                hi = mid
            else:
                lo = mid + 1
        new_min = mf.file_from_offset + lo * CQ_STORE_UNIT_SIZE
        if new_min > self.min_logic_offset or self.min_logic_offset < mf.file_from_offset:
            self.min_logic_offset = new_min

    def roll_next_file(self, index: int) -> int:
        units = self.mapped_file_size // CQ_STORE_UNIT_SIZE
        return index + units - index % units

    # ------------------------------------------------------------------------------ write path

    def need_new_file(self) -> bool:
        mf = self.mapped_file_queue.get_last_mapped_file()
        return mf is None or mf.is_full()

    def create_next_file_blocking(self, cq_offset: int) -> None:
        """Create the file the unit for `cq_offset` goes into (worker thread; only appends to the list)."""
        mfq = self.mapped_file_queue
        last = mfq.get_last_mapped_file()
        if last is not None and not last.is_full():
            return
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        start = expect - expect % self.mapped_file_size if last is None else last.file_end_offset
        mf = mfq.create_file_blocking(start)
        # The page the first units go to, here off the loop (see MappedFile.allocate_page_blocking).
        mf.allocate_page_blocking(expect - start if last is None else 0)
        mfq.add_mapped_file(mf)

    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Append one unit. Repeated builds (reput replays after a restart) are skipped. The caller has
        made sure a writable file exists (need_new_file/create_next_file_blocking)."""
        if offset + size <= self.max_physic_offset:
            return True
        mf = self.mapped_file_queue.get_last_mapped_file()
        if mf is None or mf.is_full():
            return False
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        if mf.first_create_in_queue and cq_offset != 0 and mf.wrote_position == 0:
            self.min_logic_offset = expect
            self.mapped_file_queue.flushed_where = expect
            self._fill_pre_blank(mf, expect)
        if cq_offset != 0:
            current = mf.wrote_position + mf.file_from_offset
            if expect < current:
                return True  # built already
            if expect != current:
                log.warning(
                    "consume_queue_order_mismatch",
                    topic=self.topic,
                    queue_id=self.queue_id,
                    expect=expect,
                    current=current,
                )
        wp = mf.wrote_position
        CQ_UNIT.pack_into(mf.mm, wp, offset, size, tags_code)
        mf.wrote_position = wp + CQ_STORE_UNIT_SIZE
        self.max_physic_offset = offset + size
        return True

    def _fill_pre_blank(self, mf: MappedFile, until_where: int) -> None:
        until = until_where % self.mapped_file_size
        blank = CQ_UNIT.pack(0, _INT_MAX, 0)
        for _ in range(0, until, CQ_STORE_UNIT_SIZE):
            mf.append(blank)

    # ------------------------------------------------------------------------------ read path

    def get_index_buffer(self, start_index: int) -> tuple[memoryview, MappedFile] | None:
        """Units from `start_index` to the end of the written part of its file."""
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        mv = mf.select_to_end(offset % self.mapped_file_size)
        if mv is None:
            return None
        return mv, mf

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        offset = index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset % self.mapped_file_size
        if pos + CQ_STORE_UNIT_SIZE > mf.wrote_position:
            return None
        return CQ_UNIT.unpack_from(mf.mv, pos)

    def get_offset_in_queue_by_time(
        self, timestamp: int, pickup_store_timestamp: Callable[[int, int], int], min_phy_offset: int
    ) -> int:
        """First queue offset whose message was stored at or after `timestamp` (max offset if none).

        Units are in store-time order, so this binary-searches over [min, max); units whose message
        was already deleted from the commit log count as older than any timestamp."""
        lo = self.get_min_offset_in_queue()
        hi = self.get_max_offset_in_queue()
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.get_unit(mid)
            if unit is None:
                lo = mid + 1
                continue
            phy, size, _tags = unit
            ts = pickup_store_timestamp(phy, size) if phy >= min_phy_offset else -1
            if ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def get_last_offset(self) -> int:
        mf = self.mapped_file_queue.get_last_mapped_file()
        if mf is None:
            return -1
        return self._max_phy_of_file(mf)

    # ------------------------------------------------------------------------------ cleanup

    def files_expired_by_offset(self, phy_min_offset: int) -> list[MappedFile]:
        """Files (never the last) whose last unit points before the commit log's min offset."""
        out: list[MappedFile] = []
        files = self.mapped_file_queue.mapped_files
        for mf in files[:-1]:
            if mf.wrote_position < CQ_STORE_UNIT_SIZE:
                break
            last_phy = _I64.unpack_from(mf.mv, self.mapped_file_size - CQ_STORE_UNIT_SIZE)[0]
            if last_phy < phy_min_offset:
                out.append(mf)
            else:
                break
        return out

    def destroy_blocking(self) -> None:
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.mapped_file_queue.destroy_blocking()
        try:
            os.rmdir(os.path.dirname(self.mapped_file_queue.store_path))
        except OSError:
            pass

    def close_blocking(self) -> None:
        self.mapped_file_queue.close_blocking()
