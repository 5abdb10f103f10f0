"""ReputMessageService: builds the derived structures (ConsumeQueue, IndexFile) from the CommitLog.

It walks the CommitLog from `reput_from_offset`. Records written by this process arrive with a ready
dispatch tuple (the put path queues one per record, so nothing is re-parsed); anything else -- start-up
catch-up, or a mismatch -- is parsed from the mapped bytes. The put path wakes it with an asyncio.Event,
so a listener hears of a new message within one loop iteration of the put completing.

Dispatch tuple (see store.dispatch): (commit_log_offset, size, topic, queue_id, queue_offset,
tags_code, store_timestamp, keys, uniq_key, sys_flag, properties, consume_queue). A batch comes as one run
tuple (see store.dispatch): its ConsumeQueue units are written with one pack, its UNIQ_KEY index entries in
one go (IndexService.build_index_uniq_run), its listeners still hear of each record (one C-level map per
listener).
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice, repeat
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from remoting.message import MessageConst, MessageSysFlag

from .consume_queue import CQ_UNIT as _CQ_UNIT
from .dispatch import RUN_LEN, DispatchTuple

if TYPE_CHECKING:
    from .consume_queue import ConsumeQueue
    from .index_service import IndexFile, IndexService
    from .message_store import DefaultMessageStore

log = structlog.get_logger(__name__)

ArrivalListener = Callable[[str, int, int, int, int, "dict[str, str] | None"], None]
ArrivalRunFilter = Callable[[str, int], bool]


class InlineDispatchListener(Protocol):
    """Told of a put before the put is answered (DefaultMessageStore.put_many), so that what the put wakes
    can be answered first: the broker's held pulls. With a pull held on a queue a put wrote to, the store
    dispatches the put right away (ReputMessageService.dispatch_inline) and then calls dispatched_inline."""

    def any_waiting(self) -> bool:
        """Whether anything waits at all (checked first, once per put)."""
        ...

    def wants_inline(self, topic: str, queue_id: int) -> bool:
        """Whether something waits on this queue."""
        ...

    def dispatched_inline(self) -> None:
        """The put was dispatched: answer now what it woke."""
        ...



_TRAN_MASK = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_TRAN_NOT = MessageSysFlag.TRANSACTION_NOT_TYPE
_TRAN_COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE
_TRAN_ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_KEY_SEP = MessageConst.KEY_SEPARATOR
_PROP_KEYS = MessageConst.PROPERTY_KEYS
_PROP_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_MAX_PENDING = 500_000
_BATCH = 4096  # records per slice of loop time
_CREATE_AHEAD = 512  # pending records looked at for other queues needing a file in the same thread trip


_MAX_CQ_RUN = 1024  # units per one-pack write (the struct grows with the count)
_MAX_GATHER = 64  # single records' index entries written as one run (bounds the run structs cached)
_SAFETY_TICK_S = 1.0  # the idle dispatcher looks for unannounced records this often
SHUTDOWN_DISPATCH_TIMEOUT_S = 5.0  # Java: 50 x 100 ms before ReputMessageService stops


@functools.lru_cache(maxsize=16)
def _cq_units(n: int) -> struct.Struct:
    """n ConsumeQueue units in one struct: a batch's entries are written with one pack_into."""
    return struct.Struct(">" + "qiq" * n)


class ReputMessageService:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.reput_from_offset = 0
        self._pending: deque[DispatchTuple] = deque()
        # The dispatcher's one waiter while idle (a bare future: cheaper per put than an asyncio.Event,
        # whose wait() is a coroutine with a waiter list). Only the loop thread touches it.
        self._idle: asyncio.Future[None] | None = None
        # A do_reput is under way (this task's, or dispatch_inline's from a put): never two at once.
        self._busy = False
        # The task's wait for a put's dispatch_inline suspended on a file (resolved when that slice ends),
        # so that it does not spin a loop turn after another meanwhile.
        self._slice_end: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._tick: asyncio.TimerHandle | None = None
        self._stopped = False
        self._caught_up = asyncio.Event()
        self.dispatched_count = 0
        # Per consume queue, the arrival listeners whose run filter wants its single records: asked at the
        # queue's first record and kept until the store says a filter's answer may have changed
        # (forget_wanted). With many queues each record is most often its queue's only one in a stretch of
        # dispatching: asking (or calling every listener) per stretch cost ~0.6 us a record at 1 000 topics.
        # Kept on the queue itself (ConsumeQueue.wanted_listeners, valid while its wanted_epoch is this
        # epoch), as one shared tuple per distinct answer: a dict keyed by queue and a tuple per queue were
        # two more cold cache lines a record at 1 000 topics.
        self._wanted_epoch = object()
        self._wanted_sets: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.shutdown_dispatch_timeout = SHUTDOWN_DISPATCH_TIMEOUT_S
        # The next index file being made ahead (IndexService.prepare_next_blocking), on a thread of its own
        # so that queue files the dispatcher waits for do not queue behind it; a roll awaits it first.
        self._index_prepare: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------------------ feed

    def enqueue(self, records: Iterable[DispatchTuple]) -> None:
        pending = self._pending
        pending.extend(records)
        if len(pending) > _MAX_PENDING:
            pending.clear()  # far behind: parse from the commit log instead of holding all of it
        self.wakeup()

    async def dispatch_inline(self) -> None:
        """Dispatch what is written now, in the caller (a put about to be answered), unless a dispatch is
        already under way; awaits only to create a file, as do_reput does."""
        if not self._busy and self.is_commit_log_available():
            await self._dispatch_slice()

    async def _dispatch_slice(self) -> None:
        self._busy = True
        try:
            await self.do_reput(_BATCH, notify=True)
        finally:
            self._busy = False
            end = self._slice_end
            if end is not None:
                self._slice_end = None
                if not end.done():
                    end.set_result(None)

    def wakeup(self) -> None:
        idle = self._idle
        if idle is not None:
            self._idle = None
            if not idle.done():
                idle.set_result(None)

    def behind(self) -> int:
        return max(0, self.store.commit_log.get_max_offset() - self.reput_from_offset)

    def is_commit_log_available(self) -> bool:
        return self.reput_from_offset < self.store.commit_log.get_max_offset()

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._stopped = False
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="ReputMessageService")
        if self._tick is not None:
            self._tick.cancel()
        self._tick = loop.call_later(_SAFETY_TICK_S, self._on_tick)

    def _on_tick(self) -> None:
        """Once a second: wake the dispatcher if the commit log holds records nobody announced. The put
        path announces every record it publishes, so this is a safety net (what the old 1 s wait time-out
        was): one timer for the service instead of an asyncio.timeout armed and cancelled on every put."""
        if self.is_commit_log_available():
            self.wakeup()
        self._tick = asyncio.get_running_loop().call_later(_SAFETY_TICK_S, self._on_tick)

    async def shutdown(self) -> None:
        """Dispatch what is left for up to `shutdown_dispatch_timeout` seconds, then stop. As Java's
        service (which waits 50 x 100 ms), a deep backlog does not hold the broker's stop: what is still
        undispatched stays in the commit log, the store is closed as not clean, and the next start
        dispatches it (recovery resumes from the consume queues' and index's progress)."""
        self._stopped = True
        self.wakeup()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.shutdown_dispatch_timeout
        while self.is_commit_log_available():
            if loop.time() >= deadline:
                log.warning(
                    "reput_shutdown_undispatched",
                    reput_from=self.reput_from_offset,
                    commitlog_max=self.store.commit_log.get_max_offset(),
                    undispatched_bytes=self.behind(),
                    timeout_s=self.shutdown_dispatch_timeout,
                )
                break
            if await self.do_reput(_BATCH, notify=False) == 0:
                break
        # After the last dispatch (which can start one): a file being made ahead is done before the store
        # closes, and so dropped by its close.
        await self._index_prepared()

    async def wait_caught_up(self, timeout: float | None = None) -> bool:
        """Until every record written so far is dispatched (tests, bench)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.is_commit_log_available():
            if deadline is not None and loop.time() > deadline:
                return False
            self._caught_up.clear()
            self.wakeup()
            try:
                await asyncio.wait_for(self._caught_up.wait(), 0.05)
            except TimeoutError:
                pass
        return True

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        inflight = getattr(self.store.flush_commit_log_service, "flush_in_flight", None)
        while not self._stopped:
            try:
                if not self.is_commit_log_available():
                    self._caught_up.set()
                    # Resolved by enqueue / wakeup, and by the safety tick. Nothing runs between the check
                    # above and this await, so no put can slip by unannounced.
                    idle = self._idle = loop.create_future()
                    await idle
                    continue
                fut = inflight() if inflight is not None else None
                if fut is not None:
                    # SYNC_FLUSH: the producers waiting on this fsync answer first (their next sends overlap
                    # with this dispatch) -- a wait of one fsync at most. The future never holds an error
                    # (the service logs it), and a plain await costs no waiter future and callbacks.
                    await fut
                    await asyncio.sleep(0)
                if self._busy:  # a put's dispatch_inline, suspended on a file: it goes on first
                    end = self._slice_end = loop.create_future()
                    await end
                    continue
                await self._dispatch_slice()
                if self.is_commit_log_available():
                    await asyncio.sleep(0)  # let puts and pulls run between slices
                # else: caught up; the wait above yields (one loop turn per put saved)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep dispatching; Java's service thread logs and goes on
                log.exception("reput_failed", reput_from=self.reput_from_offset)
                await asyncio.sleep(0.1)

    # ------------------------------------------------------------------------------ reading records

    def _read_record(self, off: int, head_only: bool = False) -> DispatchTuple | None:
        """The dispatch tuple of the record at `off` when it is not the head of the pending queue (with
        `head_only`, CommitLog.check_record's head of it, read from the log: the start-up catch-up, before
        any put). Returns None after moving reput_from_offset (blank / deleted files / bad record) or when
        nothing is readable there yet (reput_from_offset unchanged)."""
        pending = self._pending
        while pending and pending[0][0] < off:
            pending.popleft()
        if pending and pending[0][0] == off:
            rec = pending.popleft()
            if len(rec) != RUN_LEN:
                return rec
            # A run is dispatched whole by do_reput; anywhere else (start-up catch-up) parse the log.
        cl = self.store.commit_log
        mf = cl.mapped_file_queue.find_mapped_file_by_offset(off)
        if mf is None:
            min_off = cl.get_min_offset()
            if 0 <= off < min_off:
                self.reput_from_offset = min_off  # files deleted under us
            return None
        if off - mf.file_from_offset >= mf.wrote_position:
            return None  # not written yet
        rec = cl.check_record(mf.mv, off - mf.file_from_offset, False, mf.file_from_offset, head_only=head_only)
        if rec.__class__ is tuple:
            return rec  # type: ignore[return-value]
        if rec == 0:
            self.reput_from_offset = cl.roll_next_file(off)  # blank: end of this file
            return None
        log.error("reput_bad_record_skipping_file", offset=off)
        self.reput_from_offset = cl.roll_next_file(off)
        return None

    # ------------------------------------------------------------------------------ dispatch

    def forget_wanted(self, topic: str | None = None, queue_id: int = 0) -> None:
        """Ask the listeners' run filters again for this queue's next record (all queues: topic None)."""
        if topic is None:
            self._wanted_epoch = object()
            self._wanted_sets.clear()
            return
        qmap = self.store.consume_queue_table.get(topic)
        cq = qmap.get(queue_id) if qmap is not None else None
        if cq is not None:
            cq.wanted_epoch = None

    async def do_reput(self, budget: int, *, notify: bool) -> int:
        """Dispatch up to `budget` records; awaits only to create a consume queue / index file.

        The UNIQ_KEY index entries of consecutive single records of one store time, of any topics (pipelined
        sends, stored by one put) are gathered and written as one run (IndexFile.put_key_hashes), in
        commit log order: the gathered ones go before any other index write and before every await."""
        store = self.store
        cl = store.commit_log
        pending = self._pending
        idx = store.index_service
        key_hash = idx.key_hasher.hash_unsigned if idx is not None else None
        listeners = store.arrival_listeners if notify else ()
        filters = store.arrival_run_filters
        wanted_sets = self._wanted_sets
        cq_table = store.consume_queue_table
        # Deleted topics' records not to build into a queue (store.deleted_topic_offsets): empty, so falsy,
        # but for the moments after a delete that found dispatch behind.
        deleted = store.deleted_topic_offsets
        max_off = cl.get_max_offset()
        done = 0
        last_topic: str | None = None
        last_qid = -1
        cq = None
        logics_ts = 0
        # The gathered index entries: one store time (any topics), UNIQ_KEY only, room for all in the file.
        g_phys: list[int] = []
        g_uniqs: list[str] = []
        g_topics: list[str] = []
        g_key_at: list[int] = []  # the places of KEYS entries in the lists above (the rest are UNIQ_KEYs)
        g_ts = 0
        try:
            while done < budget:
                off = self.reput_from_offset
                if off >= max_off:
                    break
                if pending and pending[0][0] == off:
                    rec = pending.popleft()
                    if len(rec) == RUN_LEN:
                        if done and done + len(rec[7]) > budget:
                            pending.appendleft(rec)  # runs go whole: the next slice takes it
                            break
                        if g_phys:
                            _index_gathered(idx, key_hash, g_topics, g_ts, g_phys, g_uniqs, g_key_at)  # type: ignore[arg-type]
                        n = self._dispatch_run_now(rec, listeners)
                        if not n:  # a file to create first: the general way, which awaits
                            n = await self._dispatch_run(rec, listeners)
                            max_off = cl.get_max_offset()
                            cq = None
                        done += n
                        tran = rec[6] & _TRAN_MASK
                        if tran == _TRAN_NOT or tran == _TRAN_COMMIT:
                            logics_ts = rec[5]
                        continue
                else:
                    rec = self._read_record(off)
                    if rec is None:
                        if self.reput_from_offset == off:
                            break
                        continue
                phy, size, topic, qid, qo, tags_code, store_ts, keys, uniq, sys_flag, props, hint = rec
                tran = sys_flag & _TRAN_MASK
                consumable = tran == _TRAN_NOT or tran == _TRAN_COMMIT
                if consumable and deleted and store.stored_before_delete(topic, phy):
                    consumable = False  # stored before its topic was deleted: indexed, never queued
                if consumable:
                    if hint is not None and not hint.removed:
                        # The put path's ConsumeQueue (see store.dispatch): no per-topic look-up.
                        cq = hint
                        last_topic = topic
                        last_qid = qid
                    elif qid != last_qid or topic != last_topic or cq is None:
                        qmap = cq_table.get(topic)
                        cq = qmap.get(qid) if qmap is not None else None
                        if cq is None:
                            cq = store.find_consume_queue(topic, qid)
                        last_topic = topic
                        last_qid = qid
                    cq_mf = cq.tail_file
                    if cq_mf is None or cq_mf.wrote_position >= cq_mf.file_size:
                        if g_phys:
                            _index_gathered(idx, key_hash, g_topics, g_ts, g_phys, g_uniqs, g_key_at)  # type: ignore[arg-type]
                        # Only this task moves reput_from_offset, so `rec` stays current across the await.
                        await self._create_queue_files(cq, qo)
                        max_off = cl.get_max_offset()
                        if deleted and store.stored_before_delete(topic, phy):
                            # The topic was deleted meanwhile: `cq` is out of the table, its files being
                            # destroyed. This record again (read from the log), now without a queue.
                            cq = None
                            continue
                        cq_mf = cq.tail_file
                    wp = cq_mf.wrote_position  # type: ignore[union-attr]
                    if cq.max_physic_offset <= phy and cq_mf.file_from_offset + wp == qo * 20 and qo:
                        # Fast path: the next unit in order (the general method handles replays, gaps
                        # and the first unit of a queue).
                        _CQ_UNIT.pack_into(cq_mf.mm, wp, phy, size, tags_code)
                        cq_mf.wrote_position = wp + 20
                        cq.max_physic_offset = phy + size
                    else:
                        cq.put_message_position_info(phy, size, tags_code, qo)
                    logics_ts = store_ts
                if idx is not None:
                    files = idx.index_file_list
                    f = files[-1] if files else None
                    if g_phys and (
                        store_ts != g_ts or len(g_phys) >= _MAX_GATHER
                        or f is None or f.index_num - f.index_count <= len(g_phys)
                    ):
                        _index_gathered(idx, key_hash, g_topics, g_ts, g_phys, g_uniqs, g_key_at)  # type: ignore[arg-type]
                    if (
                        uniq and not keys and f is not None and f.index_num - f.index_count > len(g_phys)
                        and phy > f.end_phy_offset and tran != _TRAN_ROLLBACK
                    ):
                        # The common record (UNIQ_KEY only, room left): gathered when the next record may
                        # join it, else written now.
                        if g_phys:
                            g_phys.append(phy)
                            g_uniqs.append(uniq)
                            g_topics.append(topic)
                        elif pending and len(nxt := pending[0]) != RUN_LEN and nxt[6] == store_ts:
                            g_ts = store_ts
                            g_phys.append(phy)
                            g_uniqs.append(uniq)
                            g_topics.append(topic)
                        else:
                            h = key_hash(topic, uniq)  # type: ignore[misc]
                            if h & 0x80000000:
                                h = 0 if h == 0x80000000 else 0x100000000 - h
                            f.put_key_hash(h, phy, store_ts)
                    elif (
                        uniq and keys and f is not None and phy > f.end_phy_offset and tran != _TRAN_ROLLBACK
                        and f.index_num - f.index_count > len(g_phys) + keys.count(_KEY_SEP) + 1
                        and (g_phys or (pending and len(nxt := pending[0]) != RUN_LEN and nxt[6] == store_ts))
                    ):
                        # With KEYS too, gathered the same way: its UNIQ_KEY entry, then one a key (build_index's
                        # order), their places in the lists marked as keys.
                        if not g_phys:
                            g_ts = store_ts
                        _append_keyed(g_phys, g_uniqs, g_key_at, phy, uniq, keys)
                        g_topics += repeat(topic, len(g_phys) - len(g_topics))
                    else:
                        if g_phys:
                            _index_gathered(idx, key_hash, g_topics, g_ts, g_phys, g_uniqs, g_key_at)  # type: ignore[arg-type]
                        f = _index_file_with_room(idx, keys, uniq)
                        if f is None:
                            await self._roll_index(idx)
                            max_off = cl.get_max_offset()
                            cq = None  # looked up again: a topic may have been deleted meanwhile
                            f = idx.index_file_list[-1]
                        _index_record(idx, f, key_hash, topic, phy, store_ts, sys_flag, keys, uniq, tran)  # type: ignore[arg-type]
                if consumable and listeners:
                    # (The epoch is read per record: forget_wanted may run while this awaits.)
                    if cq is not None and cq.wanted_epoch is self._wanted_epoch:
                        cbs = cq.wanted_listeners
                    else:
                        wants = []
                        for cb in listeners:
                            wanted = filters.get(cb)
                            if wanted is None or wanted(topic, qid):
                                wants.append(cb)
                        cbs = tuple(wants)
                        cbs = wanted_sets.setdefault(cbs, cbs)
                        if cq is not None:  # None after an index roll (looked up again next record)
                            cq.wanted_listeners = cbs
                            cq.wanted_epoch = self._wanted_epoch
                    for cb in cbs:
                        try:
                            cb(topic, qid, qo + 1, tags_code, store_ts, props)
                        except Exception:  # noqa: BLE001 - a listener bug must not stop dispatching
                            log.exception("arrival_listener_failed", topic=topic, queue_id=qid)
                self.reput_from_offset = off + size
                done += 1
        finally:
            if g_phys:
                _index_gathered(idx, key_hash, g_topics, g_ts, g_phys, g_uniqs, g_key_at)  # type: ignore[arg-type]
            if deleted:
                upto = self.reput_from_offset
                for t in [t for t, cut in deleted.items() if cut <= upto]:
                    del deleted[t]  # dispatch has passed the delete: nothing of the topic left to skip
            if logics_ts:
                store.store_checkpoint.logics_msg_timestamp = logics_ts
            if idx is not None:
                idx.commit_header()
                self._warm_index_ahead(idx)
            self.dispatched_count += done
        return done

    def _warm_index_ahead(self, idx: IndexService) -> None:
        """Fault in the live index file's next entries on the allocation thread when the writer nears the end
        of those already faulted in (IndexFile.warm_range): not on the loop, in the writer's first write."""
        files = idx.index_file_list
        rng = files[-1].warm_range() if files else None
        try:
            if rng is not None:
                asyncio.get_running_loop().run_in_executor(
                    self.store.alloc_executor, files[-1].populate_blocking, *rng
                )
            if idx.next_wanted():  # the next file made ahead, so that the roll does not wait for it
                self._index_prepare = asyncio.get_running_loop().run_in_executor(
                    self.store.index_alloc_executor, idx.prepare_next_blocking
                )
        except RuntimeError:  # the executor shut down: the store is closing
            pass

    def _dispatch_run_now(self, run: DispatchTuple, listeners: Any) -> int:
        """_dispatch_run without a coroutine for the common run: its ConsumeQueue units follow the queue's
        end in the current file, and (when indexing) the run's UNIQ_KEY column came with it (no KEYS) and
        the index file has room for it. Returns 0, having done nothing, for anything else."""
        store = self.store
        first, end, topic, qid, qo0, store_ts, sys_flag, phys, sizes, tags_codes, props_list, uniq_col, hint = run
        n = len(phys)
        idx = store.index_service
        if idx is not None:
            files = idx.index_file_list
            if uniq_col is None or not files or files[-1].index_num - files[-1].index_count < n:
                return 0
        tran = sys_flag & _TRAN_MASK
        consumable = tran == _TRAN_NOT or tran == _TRAN_COMMIT
        if consumable and store.stored_before_delete(topic, first):
            consumable = False  # stored before its topic was deleted (a run is one topic, contiguous)
        if consumable:
            if hint is not None and not hint.removed:
                cq = hint
            else:
                qmap = store.consume_queue_table.get(topic)
                cq = qmap.get(qid) if qmap is not None else None
            if cq is None or n > _MAX_CQ_RUN:
                return 0
            cq_mf = cq.tail_file
            if cq_mf is None:
                return 0
            wp = cq_mf.wrote_position
            if not (
                qo0
                and cq.max_physic_offset <= first
                and cq_mf.file_from_offset + wp == qo0 * 20
                and wp + 20 * n <= cq_mf.file_size
            ):
                return 0
            _append_cq_run(cq, cq_mf, wp, run)
        if idx is not None and not idx.build_index_uniq_column(topic, phys, store_ts, sys_flag, uniq_col):
            # Record by record (two keys of the run in one slot, a replay, a rollback, non-ASCII keys): the
            # file has room for every key (checked above), so no roll.
            key_hash = idx.key_hasher.hash_unsigned
            f = idx.index_file_list[-1]
            for phy, props in zip(phys, props_list, strict=True):
                _index_record(idx, f, key_hash, topic, phy, store_ts, sys_flag, None, props.get(_PROP_UNIQ), tran)
        if consumable and listeners:
            _notify_listeners_run(store.arrival_run_filters, listeners, run)
        self.reput_from_offset = end
        return n

    async def _dispatch_run(self, run: DispatchTuple, listeners: Any) -> int:
        """One batch's records (a run tuple, see store.dispatch): its ConsumeQueue units with one pack
        when they follow the queue's end in one file, its index keys, its listeners per record (held pulls
        match each record's tags/properties). Moves reput_from_offset past the run."""
        store = self.store
        loop = asyncio.get_running_loop()
        executor = store.alloc_executor
        first, end, topic, qid, qo0, store_ts, sys_flag, phys, sizes, tags_codes, props_list, uniq_col, hint = run
        n = len(phys)
        tran = sys_flag & _TRAN_MASK
        consumable = tran == _TRAN_NOT or tran == _TRAN_COMMIT
        if consumable and store.stored_before_delete(topic, first):
            consumable = False  # stored before its topic was deleted (a run is one topic, contiguous)
        if consumable:
            cq = hint if hint is not None and not hint.removed else store.find_consume_queue(topic, qid)
            cq_mf = cq.tail_file
            if cq_mf is None or cq_mf.wrote_position >= cq_mf.file_size:
                await self._create_queue_files(cq, qo0)
                cq_mf = cq.tail_file
                # Deleted meanwhile: `cq` is out of the table, its files being destroyed.
                consumable = not store.stored_before_delete(topic, first)
        if consumable:
            wp = cq_mf.wrote_position  # type: ignore[union-attr]
            if (
                qo0
                and cq.max_physic_offset <= first
                and cq_mf.file_from_offset + wp == qo0 * 20
                and wp + 20 * n <= cq_mf.file_size
                and n <= _MAX_CQ_RUN
            ):
                _append_cq_run(cq, cq_mf, wp, run)
            else:  # replays, gaps, a queue's first unit, a file boundary: unit by unit
                for k in range(n):
                    if cq.need_new_file():
                        await loop.run_in_executor(executor, cq.create_next_file_blocking, qo0 + k)
                        if store.stored_before_delete(topic, first):
                            consumable = False  # deleted meanwhile (as above): the rest goes with it
                            break
                    cq.put_message_position_info(phys[k], sizes[k], tags_codes[k], qo0 + k)
        idx = store.index_service
        if idx is not None and not (
            uniq_col is not None and idx.build_index_uniq_column(topic, phys, store_ts, sys_flag, uniq_col)
        ):
            uniqs = list(map(dict.get, props_list, repeat(_PROP_UNIQ)))
            keys_col = list(map(dict.get, props_list, repeat(_PROP_KEYS)))
            if not all(uniqs):
                bulk = False
            elif not any(keys_col):
                bulk = idx.build_index_uniq_run(topic, phys, store_ts, sys_flag, uniqs)
            elif tran != _TRAN_ROLLBACK:
                # Records with KEYS: as the dispatcher's gathered single records, each UNIQ_KEY then its keys.
                e_phys, e_keys, key_at = _keyed_entries(phys, uniqs, keys_col)  # type: ignore[arg-type]
                bulk = idx.build_index_keyed_records([topic] * len(e_keys), e_phys, store_ts, e_keys, key_at)
            else:
                bulk = False
            if not bulk:
                key_hash = idx.key_hasher.hash_unsigned
                for k in range(n):
                    keys = keys_col[k]
                    uniq = uniqs[k]
                    f = _index_file_with_room(idx, keys, uniq)
                    if f is None:
                        await self._roll_index(idx)
                        f = idx.index_file_list[-1]
                    _index_record(idx, f, key_hash, topic, phys[k], store_ts, sys_flag, keys, uniq, tran)
        if consumable and listeners:
            _notify_listeners_run(store.arrival_run_filters, listeners, run)
        self.reput_from_offset = end
        return n

    async def _create_queue_files(self, cq: ConsumeQueue, cq_offset: int) -> None:
        """Create `cq`'s next file off the loop and, in the same trip to the allocation thread, the files
        that queues of the next pending records lack too. A burst of new topics (1 000 topics x 4
        queues) otherwise costs one serialized thread round trip per queue: ~4 ms each behind a busy
        loop, so dispatch fell ~17 s behind the sends."""
        store = self.store
        deleted = store.deleted_topic_offsets
        jobs = [(cq, cq_offset)]
        seen = {id(cq)}
        for rec in islice(self._pending, _CREATE_AHEAD):
            sys_flag = rec[6] if len(rec) == RUN_LEN else rec[9]
            tran = sys_flag & _TRAN_MASK
            if tran != _TRAN_NOT and tran != _TRAN_COMMIT:
                continue
            if deleted and store.stored_before_delete(rec[2], rec[0]):
                continue  # never queued (store.deleted_topic_offsets): no queue, no file
            other = store.find_consume_queue(rec[2], rec[3])
            if id(other) not in seen:
                seen.add(id(other))
                if other.need_new_file():
                    jobs.append((other, rec[4]))

        def create() -> None:
            for q, offset in jobs:
                q.create_next_file_blocking(offset)

        await asyncio.get_running_loop().run_in_executor(store.alloc_executor, create)

    async def _roll_index(self, idx: IndexService) -> None:
        """Start a new index file (its creation off the loop); only this task appends to the list."""
        idx.commit_header()
        await self._index_prepared()  # (the file being made ahead is the one the roll takes)
        await asyncio.get_running_loop().run_in_executor(self.store.alloc_executor, idx.roll_blocking)

    async def _index_prepared(self) -> None:
        prep, self._index_prepare = self._index_prepare, None
        if prep is not None:
            try:
                await prep
            except Exception:  # noqa: BLE001 - the roll then makes the file itself
                log.exception("index_file_prepare_failed")

    def do_reput_blocking(self) -> int:
        """Start-up catch-up (start-up thread, before the loop uses the store): same as do_reput but
        creates files inline and notifies nobody."""
        store = self.store
        cl = store.commit_log
        idx = store.index_service
        done = 0
        logics_ts = 0
        index_behind = False
        while True:
            off = self.reput_from_offset
            if off >= cl.get_max_offset():
                break
            if not index_behind:
                head = self._read_record(off, head_only=True)
                if head is None:
                    if self.reput_from_offset == off:
                        break
                    continue
                # Records from here on may be dispatched already (after a crash the replay starts at the
                # first record some queue lacks, or at the index's end, whichever comes first): when the
                # consume queue holds the record and the index is past it (what the calls below test
                # first, and then do nothing), skip it without decoding its properties.
                phy, size, topic, qid, qo, store_ts, sys_flag = head
                if store.queue_holds(phy, size, topic, qid, sys_flag) and (idx is None or idx.indexed_past(phy)):
                    tran = sys_flag & _TRAN_MASK
                    if tran == _TRAN_NOT or tran == _TRAN_COMMIT:
                        logics_ts = store_ts
                    self.reput_from_offset = off + size
                    done += 1
                    continue
                # The index only moves forward: once it is behind, every later record is indexed, so it is
                # read whole at once (index files rebuilt after an OS crash, 300 000 records: start 2.69 -> 2.26 s).
                index_behind = idx is not None and not idx.indexed_past(phy)
            rec = self._read_record(off)
            if rec is None:
                if self.reput_from_offset == off:
                    break
                continue
            phy, size, topic, qid, qo, tags_code, store_ts, keys, uniq, sys_flag, _props, _cq = rec
            tran = sys_flag & _TRAN_MASK
            if tran == _TRAN_NOT or tran == _TRAN_COMMIT:
                cq = store.find_consume_queue(topic, qid)
                if cq.need_new_file():
                    cq.create_next_file_blocking(qo)
                cq.put_message_position_info(phy, size, tags_code, qo)
                logics_ts = store_ts
            if idx is not None:
                if not idx.has_room(idx.keys_needed(keys, uniq)):
                    idx.commit_header()
                    idx.roll_blocking()
                idx.build_index(topic, phy, store_ts, sys_flag, keys, uniq)
            self.reput_from_offset = off + size
            done += 1
        if logics_ts:
            store.store_checkpoint.logics_msg_timestamp = logics_ts
        if idx is not None:
            idx.commit_header()
        return done


def _append_cq_run(cq: ConsumeQueue, cq_mf: Any, wp: int, run: DispatchTuple) -> None:
    """A run's ConsumeQueue units (offset, size, tags code) written with one pack at the queue's end wp."""
    phys, sizes, tags_codes = run[7], run[8], run[9]
    n = len(phys)
    flat: list[int] = [0] * (3 * n)
    flat[0::3] = phys
    flat[1::3] = sizes
    flat[2::3] = tags_codes
    _cq_units(n).pack_into(cq_mf.mm, wp, *flat)
    cq_mf.wrote_position = wp + 20 * n
    cq.max_physic_offset = run[1]


def _notify_listeners_run(filters: dict[Any, Any], listeners: Any, run: DispatchTuple) -> None:
    """A dispatched run's records, to each listener whose run filter (asked once) wants its queue."""
    topic, qid = run[2], run[3]
    for cb in listeners:
        wanted = filters.get(cb)
        if wanted is None or wanted(topic, qid):
            _notify_run(cb, topic, qid, run[4] + 1, run[9], run[5], run[10])


def _notify_run(
    cb: ArrivalListener, topic: str, qid: int, first_after: int, tags_codes: list[int], store_ts: int,
    props_list: list[dict[str, str]],
) -> None:
    """cb for every record of a run, in order, by a C-level map; a failing call is logged and the rest of
    the run still notified."""
    n = len(tags_codes)
    k = 0
    while k < n:
        afters = iter(range(first_after + k, first_after + n))
        codes = tags_codes[k:] if k else tags_codes  # no copies on the common, failure-free pass
        props = props_list[k:] if k else props_list
        try:
            for _ in map(cb, repeat(topic), repeat(qid), afters, codes, repeat(store_ts), props):
                pass
            return
        except Exception:  # noqa: BLE001 - a listener bug must not stop dispatching
            log.exception("arrival_listener_failed", topic=topic, queue_id=qid)
        k = n - afters.__length_hint__()  # past the record whose call failed


def _index_gathered(
    idx: IndexService, key_hash: Callable[[str, str], int], topics: list[str], store_ts: int, phys: list[int],
    keys: list[str], key_at: list[int],
) -> None:
    """Write the gathered index entries (do_reput: one store time, room for all in the last file, after
    its end; one topic, or pipelined sends spread over many): each record's UNIQ_KEY, then its KEYS (the
    entries at `key_at`), as one run, or record by record when the run does not go in bulk; empties the
    lists."""
    if len(phys) == 1 or not (
        idx.build_index_keyed_records(topics, phys, store_ts, keys, key_at) if key_at
        else idx.build_index_uniq_records(topics, phys, store_ts, keys)
    ):
        f = idx.index_file_list[-1]
        if key_at:
            # Each record: its UNIQ_KEY entry, then the KEYS entries that follow it.
            marked = set(key_at)
            records: list[tuple[str, int, str, list[str]]] = []
            for i, (phy, key, t) in enumerate(zip(phys, keys, topics, strict=True)):
                if i in marked:
                    records[-1][3].append(key)
                else:
                    records.append((t, phy, key, []))
            for t, phy, uniq, ks in records:
                idx.build_index(t, phy, store_ts, 0, _KEY_SEP.join(ks) or None, uniq)
        else:
            for phy, uniq, t in zip(phys, keys, topics, strict=True):
                _index_record(idx, f, key_hash, t, phy, store_ts, 0, None, uniq, _TRAN_NOT)
    phys.clear()
    keys.clear()
    topics.clear()
    key_at.clear()


def _append_keyed(phys: list[int], keys: list[str], key_at: list[int], phy: int, uniq: str, record_keys: str) -> None:
    """A record's index entries as IndexService.build_index_keyed_records takes them: its UNIQ_KEY, then
    its keys (build_index's order), each with the record's offset, the keys' places noted in `key_at`."""
    phys.append(phy)
    keys.append(uniq)
    for k in record_keys.split(_KEY_SEP):
        if k:
            key_at.append(len(keys))
            phys.append(phy)
            keys.append(k)


def _keyed_entries(
    phys: list[int], uniqs: list[str], keys_col: list[str | None]
) -> tuple[list[int], list[str], list[int]]:
    """A run's index entries, as _append_keyed makes them for each of its records."""
    e_phys: list[int] = []
    e_keys: list[str] = []
    key_at: list[int] = []
    for phy, uniq, keys in zip(phys, uniqs, keys_col, strict=True):
        _append_keyed(e_phys, e_keys, key_at, phy, uniq, keys or "")
    return e_phys, e_keys, key_at


def _index_file_with_room(idx: IndexService, keys: str | None, uniq: str | None) -> IndexFile | None:
    """The index file a record's keys go into, or None when the service must roll to a new one first."""
    needed = (1 if uniq else 0) + (sum(1 for k in keys.split(_KEY_SEP) if k) if keys else 0)
    files = idx.index_file_list
    if files and (files[-1].index_num - files[-1].index_count >= needed or idx.has_room(needed)):
        return files[-1]
    return None


def _index_record(
    idx: IndexService,
    f: IndexFile,
    key_hash: Callable[[str, str], int],
    topic: str,
    phy: int,
    store_ts: int,
    sys_flag: int,
    keys: str | None,
    uniq: str | None,
    tran: int,
) -> None:
    if uniq and not keys and phy > f.end_phy_offset and tran != _TRAN_ROLLBACK:
        # Fast path for the common record (UNIQ_KEY only, not a replay).
        h = key_hash(topic, uniq)
        if h & 0x80000000:
            h = 0 if h == 0x80000000 else 0x100000000 - h
        f.put_key_hash(h, phy, store_ts)
    else:
        idx.build_index(topic, phy, store_ts, sys_flag, keys, uniq)
