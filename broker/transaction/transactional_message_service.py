"""TransactionalMessageService: half messages, commit/rollback, and the check-back scan.

How a transaction's state is kept (all of it in the store, so it survives restarts):

- A PREPARED send becomes a *half message* in queue 0 of RMQ_SYS_TRANS_HALF_TOPIC (`prepare_message`,
  a send-message transformer). Consumers never see that topic.
- Commit writes the message to its real topic and an *op record* (tag "d", body = the half message's
  queue offset) to RMQ_SYS_TRANS_OP_HALF_TOPIC, in ONE append, so a crash cannot keep one without the
  other. Rollback writes the op record only.
- The checker re-puts a half message it asks a producer about (with TRANSACTION_CHECK_TIMES + 1) at the
  end of the half queue, as RocketMQ does. Every copy carries TRAN_PREPARED_QUEUE_OFFSET = the queue
  offset of the transaction's first half message, its *root*; op records carry the root too. A
  transaction is decided once an op record names its root, whichever copy the decision named: so a
  second commit or rollback of any copy changes nothing (RocketMQ 4.x would commit twice when the
  producer's first END_TRANSACTION arrives after a check re-put the message).
- The checker's progress is the consumer offset of CID_RMQ_SYS_TRANS in the half queue (H: every half
  message below it was decided, discarded or re-put further on) and in the op queue (O: the op records
  the in-memory decided set must be rebuilt from after a restart).

In memory, bounded by the number of undecided transactions plus the half messages not yet passed:
`_resolved` holds the decided roots that can still be asked about (roots >= H, or roots with a copy at
or after H), `_copy_roots` the copies at or after H. A root below H with no copy at or after H is
decided for good (the checker only moves past a half message once it is decided or re-put).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

import structlog

from broker.processor.common import reply
from broker.processor.send_message_processor import SendMessageContext
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import EndTransactionRequestHeader
from remoting.message import MessageConst, MessageExt, MessageSysFlag
from store.config import BrokerRole
from store.message import MessageExtBrokerInner
from store.message_store import StoreNotAvailableError
from store.results import GetMessageStatus, PutMessageResult, PutMessageStatus

from .transactional_message_bridge import TransactionalMessageBridge
from .transactional_message_util import HALF_QUEUE_ID, HALF_TOPIC, OP_TOPIC, REMOVE_TAG

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

# A check round stops after this long (the rest waits for the next round).
MAX_PROCESS_TIME_LIMIT_MS = 60000
# Records read per store call while scanning.
READ_BATCH = 64
# Statuses after which a read should continue from next_begin_offset (files cleaned, offset out of range).
_JUMP_STATUSES = frozenset(
    {
        GetMessageStatus.OFFSET_TOO_SMALL,
        GetMessageStatus.OFFSET_OVERFLOW_BADLY,
        GetMessageStatus.OFFSET_FOUND_NULL,
        GetMessageStatus.MESSAGE_WAS_REMOVING,
        GetMessageStatus.NO_MATCHED_MESSAGE,
    }
)
_STORED_STATUSES = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)

_TRAN_MSG = MessageConst.PROPERTY_TRANSACTION_PREPARED
_PGROUP = MessageConst.PROPERTY_PRODUCER_GROUP
_ROOT = MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET
_CHECK_TIMES = MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES
_IMMUNITY = MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS
_DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX


class CheckListener(Protocol):
    """What the check round calls (TransactionalMessageCheckListener)."""

    def resolve_half_msg(self, msg: MessageExt) -> bool:
        """Ask a producer of the message's group about it (CHECK_TRANSACTION_STATE). True if one was asked."""
        ...

    def resolve_discard_msg(self, msg: MessageExt, reason: str) -> None:
        """The message was given up (checked too often / too old): log it."""
        ...


def _now_ms() -> int:
    return int(time.time() * 1000)


def _int(v: str | None, default: int) -> int:
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        return default


def root_of(queue_offset: int, msg: MessageExt) -> int:
    """The transaction's identity: the queue offset of its first half message."""
    return _int(msg.properties.get(_ROOT), queue_offset)


def check_times(msg: MessageExt) -> int:
    """How many times producers were already asked about this half message."""
    return max(0, _int(msg.properties.get(_CHECK_TIMES), 0))


class TransactionalMessageService:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        self.bridge = TransactionalMessageBridge(controller)
        # Decided roots that can still be asked about -> a lower bound of their op record's queue offset.
        self._resolved: dict[int, int] = {}
        # Copies (re-put half messages) at or after the checker's half offset: queue offset -> root.
        self._copy_roots: dict[int, int] = {}
        self._pending_roots: Counter[int] = Counter()
        # H: the checker's offset in the half queue.
        self._half_offset = 0
        self._locks: dict[int, tuple[asyncio.Lock, list[int]]] = {}
        self._load_lock: asyncio.Lock | None = None
        self._loaded = False
        # Counters for logs and tests.
        self.stats: Counter[str] = Counter()

    # ------------------------------------------------------------------ state

    def is_resolved(self, root: int) -> bool:
        if root in self._resolved:
            return True
        return root < self._half_offset and not self._pending_roots.get(root)

    @property
    def half_offset(self) -> int:
        return self._half_offset

    @property
    def resolved_count(self) -> int:
        return len(self._resolved)

    def _add_copy(self, queue_offset: int, root: int) -> None:
        if queue_offset in self._copy_roots:
            return
        self._copy_roots[queue_offset] = root
        self._pending_roots[root] += 1

    def _mark_resolved(self, root: int, op_offset_lower_bound: int) -> None:
        self._resolved.setdefault(root, op_offset_lower_bound)

    def _note_op(self, op_queue_offset: int, op: MessageExt) -> None:
        if op.tags != REMOVE_TAG:
            log.error("transaction_op_bad_tag", op_offset=op_queue_offset, tags=op.tags)
            return
        root_s = op.properties.get(_ROOT)
        if root_s is None:
            root_s = op.body.decode("utf-8", "replace")
        try:
            root = int(root_s)
        except ValueError:
            log.error("transaction_op_bad_body", op_offset=op_queue_offset, body=op.body[:40])
            return
        self._mark_resolved(root, op_queue_offset)

    @contextlib.asynccontextmanager
    async def _root_lock(self, root: int) -> AsyncIterator[None]:
        """Decisions about one transaction are made one at a time."""
        entry = self._locks.get(root)
        if entry is None:
            entry = self._locks[root] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._locks.pop(root, None)

    async def load(self) -> None:
        """Rebuild the in-memory state from the op and half queues (once, at start)."""
        if self._loaded:
            return
        if self._load_lock is None:
            self._load_lock = asyncio.Lock()
        async with self._load_lock:
            if self._loaded:
                return
            t0 = time.monotonic()
            store = self.c.message_store
            with contextlib.suppress(Exception):
                await store.wait_dispatched(10.0)
            half_offset = self.bridge.fetch_consume_offset(HALF_TOPIC, HALF_QUEUE_ID)
            op_offset = self.bridge.fetch_consume_offset(OP_TOPIC, HALF_QUEUE_ID)
            ops = 0
            async for qoff, op in self._scan(OP_TOPIC, max(0, op_offset), read_body=True):
                self._note_op(qoff, op)
                ops += 1
            halves = 0
            async for qoff, half in self._scan(HALF_TOPIC, max(0, half_offset), read_body=False):
                root = root_of(qoff, half)
                if root != qoff:
                    self._add_copy(qoff, root)
                halves += 1
            self._half_offset = max(0, half_offset)
            self._loaded = True
            log.info(
                "transaction_state_loaded",
                half_offset=self._half_offset,
                op_offset=op_offset,
                op_records=ops,
                half_messages_after_offset=halves,
                decided=len(self._resolved),
                copies=len(self._copy_roots),
                ms=int((time.monotonic() - t0) * 1000),
            )

    async def _scan(self, topic: str, offset: int, *, read_body: bool) -> AsyncIterator[tuple[int, MessageExt]]:
        """Every record of queue 0 of `topic` from `offset` to its current end."""
        jumps = 0
        while True:
            r = self.bridge.get_messages(topic, HALF_QUEUE_ID, offset, READ_BATCH, read_body=read_body)
            if r.messages:
                for qoff, msg in r.messages:
                    yield qoff, msg
                offset = max(r.next_begin_offset, r.messages[-1][0] + 1)
                jumps = 0
            elif (r.status in _JUMP_STATUSES or r.status == GetMessageStatus.FOUND) and (
                r.next_begin_offset != offset and jumps < 2
            ):
                offset = r.next_begin_offset
                jumps += 1
            else:
                return
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ prepare (send path)

    def prepare_message(self, msg: MessageExtBrokerInner, sctx: SendMessageContext) -> RemotingCommand | None:
        """Send-message transformer: a TRAN_MSG=true send is stored as a half message."""
        if sctx.send_back:
            return None
        props = msg.properties
        tran = props.get(_TRAN_MSG)
        if tran is None or tran.lower() != "true":
            return None
        # A client re-sending a failed transactional message to %RETRY% keeps TRAN_MSG: that is no new transaction.
        if msg.reconsume_times > 0 and _int(props.get(_DELAY), 0) > 0:
            return None
        if not props.get(_PGROUP) and sctx.producer_group:
            props[_PGROUP] = sctx.producer_group
        props.pop(_DELAY, None)  # transactions ignore delay levels (the Java client clears it too)
        self.bridge.parse_half_message_inner(msg)
        self.stats["prepared"] += 1
        return None

    # ------------------------------------------------------------------ END_TRANSACTION

    async def end_transaction(
        self, h: EndTransactionRequestHeader, *, peer: str = "", remark: str | None = None
    ) -> RemotingCommand:
        """Commit or roll back the half message `h` names. Idempotent per transaction."""
        if self.c.store_config.brokerRole == BrokerRole.SLAVE:
            return reply(ResponseCode.SLAVE_NOT_AVAILABLE, "the broker is a slave: end transaction is forbidden")
        commit = h.commit_or_rollback == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        await self.load()
        try:
            half = self.bridge.look_message_by_offset(h.commit_log_offset)
        except StoreNotAvailableError as e:
            return reply(ResponseCode.SERVICE_NOT_AVAILABLE, str(e))
        if half is None or half.topic != HALF_TOPIC:
            return reply(
                ResponseCode.SYSTEM_ERROR,
                f"Find prepared transaction message failed: no half message at commit log offset {h.commit_log_offset}",
            )
        bad = self._check_prepare_message(half, h)
        if bad is not None:
            return bad
        root = root_of(half.queue_offset, half)
        async with self._root_lock(root):
            if self.is_resolved(root):
                self.stats["duplicate_end"] += 1
                log.info(
                    "transaction_already_decided",
                    action="commit" if commit else "rollback",
                    msg_id=h.msg_id,
                    transaction_id=h.transaction_id,
                    half_offset=half.queue_offset,
                    root=root,
                    producer=peer,
                )
                return reply(ResponseCode.SUCCESS, "the transaction was already committed or rolled back")
            op = self.bridge.make_op_message_inner(half.queue_offset, root)
            op_lb = self.bridge.max_offset(OP_TOPIC, HALF_QUEUE_ID)
            final: MessageExtBrokerInner | None = None
            if commit:
                final = self.bridge.end_message_transaction(half)
                if final is None:
                    return reply(ResponseCode.SYSTEM_ERROR, "the half message has no REAL_TOPIC / REAL_QID property")
                result = await self.bridge.put_messages([final, op])
            else:
                result = await self.bridge.put_messages([op])
            resp = self._put_response(result)
            if resp.code != ResponseCode.SUCCESS:
                log.error(
                    "transaction_end_store_failed",
                    action="commit" if commit else "rollback",
                    msg_id=h.msg_id,
                    status=result.status.value if result is not None else None,
                    remark=resp.remark,
                )
                return resp
            self._mark_resolved(root, op_lb)
        if final is not None:
            ar = result.append_result
            self.c.broker_stats.inc_put(final.topic, 1, ar.wrote_bytes if ar is not None else 0)
            self.stats["committed"] += 1
        else:
            self.stats["rolled_back"] += 1
        # Commits decided at once are the normal case (debug, as RocketMQ); rollbacks and check answers: info.
        (log.info if h.from_transaction_check or not commit else log.debug)(
            "transaction_committed" if commit else "transaction_rolled_back",
            msg_id=h.msg_id,
            transaction_id=h.transaction_id,
            topic=final.topic if final is not None else half.properties.get(MessageConst.PROPERTY_REAL_TOPIC),
            group=h.producer_group,
            from_check=h.from_transaction_check,
            half_offset=half.queue_offset,
            producer=peer,
            remark=remark,
        )
        return resp

    @staticmethod
    def _check_prepare_message(half: MessageExt, h: EndTransactionRequestHeader) -> RemotingCommand | None:
        if half.properties.get(_PGROUP) != h.producer_group:
            return reply(
                ResponseCode.SYSTEM_ERROR,
                f"The producer group wrong: the half message belongs to {half.properties.get(_PGROUP)!r}, "
                f"not {h.producer_group!r}",
            )
        if half.queue_offset != h.tran_state_table_offset:
            return reply(
                ResponseCode.SYSTEM_ERROR,
                f"The transaction state table offset wrong: {h.tran_state_table_offset} "
                f"(the half message is at {half.queue_offset})",
            )
        if half.commit_log_offset != h.commit_log_offset:
            return reply(ResponseCode.SYSTEM_ERROR, "The commit log offset wrong")
        return None

    def _put_response(self, result: PutMessageResult | None) -> RemotingCommand:
        if result is None:
            return reply(ResponseCode.SYSTEM_ERROR, "store putMessage return null")
        status = result.status
        if status in _STORED_STATUSES:
            return reply(ResponseCode.SUCCESS)
        if status == PutMessageStatus.CREATE_MAPEDFILE_FAILED:
            return reply(ResponseCode.SYSTEM_ERROR, "Create mapped file failed.")
        if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
            return reply(
                ResponseCode.MESSAGE_ILLEGAL,
                result.remark
                or "The message is illegal, maybe msg body or properties length not matched. msg body length limit "
                f"{self.c.store_config.maxMessageSize}B, msg properties length limit 32KB.",
            )
        if status == PutMessageStatus.SERVICE_NOT_AVAILABLE:
            return reply(ResponseCode.SERVICE_NOT_AVAILABLE, result.remark or "Service not available now.")
        if status == PutMessageStatus.OS_PAGECACHE_BUSY:
            return reply(ResponseCode.SYSTEM_ERROR, "OS page cache busy, please try another machine")
        return reply(ResponseCode.SYSTEM_ERROR, result.remark or "UNKNOWN_ERROR")

    # ------------------------------------------------------------------ check-back

    async def _put_back(self, half: MessageExt, root: int, times: int | None) -> MessageExt | None:
        """Re-put a half message at the end of the half queue (times: the new TRANSACTION_CHECK_TIMES, or None
        to keep it); returns the stored copy."""
        props = dict(half.properties)
        props[_ROOT] = str(root)
        if times is not None:
            props[_CHECK_TIMES] = str(times)
        inner = self.bridge.renew_half_message_inner(half, props)
        result = await self.bridge.put_messages([inner])
        ar = result.append_result if result is not None else None
        if result is None or result.status not in _STORED_STATUSES or ar is None:
            log.error(
                "transaction_put_back_failed",
                half_offset=half.queue_offset,
                status=result.status.value if result is not None else None,
            )
            return None
        self._add_copy(ar.logics_offset, root)
        copy = self.bridge.look_message_by_offset(ar.wrote_offset)
        if copy is None:
            log.error("transaction_put_back_unreadable", commit_log_offset=ar.wrote_offset)
        return copy

    async def resume_check(self, msg: MessageExt) -> PutMessageResult | None:
        """RESUME_CHECK_HALF_MESSAGE: put a transaction's message (a half message, or one given up in
        TRANS_CHECK_MAX_TIME_TOPIC) back at the end of the half queue with TRANSACTION_CHECK_TIMES 0, so its
        producer is asked again. Unlike RocketMQ's re-put, the copy starts a transaction of its own (no
        TRAN_PREPARED_QUEUE_OFFSET: its root is its own offset), since the one it came from may be decided
        (a given-up transaction counts as rolled back) and a copy of a decided root would never be asked
        about. None: not a transaction's message (no REAL_TOPIC)."""
        if not msg.properties.get(MessageConst.PROPERTY_REAL_TOPIC):
            return None
        props = dict(msg.properties)
        props.pop(_ROOT, None)
        props[_CHECK_TIMES] = "0"
        result = await self.bridge.put_messages([self.bridge.renew_half_message_inner(msg, props)])
        log.info("transaction_check_resumed", real_topic=props[MessageConst.PROPERTY_REAL_TOPIC],
                 from_offset=msg.commit_log_offset, status=result.status.value if result is not None else None)
        return result

    async def discard_message(self, half: MessageExt, root: int, reason: str, listener: CheckListener) -> bool:
        """Give a transaction up: keep the message in TRANS_CHECK_MAX_TIME_TOPIC (as RocketMQ does) and write its
        op record in the same append, so it counts as rolled back (a late commit is ignored)."""
        async with self._root_lock(root):
            if self.is_resolved(root):
                return True
            keep = self.bridge.to_check_max_time_inner(half)
            op = self.bridge.make_op_message_inner(half.queue_offset, root)
            op_lb = self.bridge.max_offset(OP_TOPIC, HALF_QUEUE_ID)
            result = await self.bridge.put_messages([keep, op])
            if result is None or result.status not in _STORED_STATUSES:
                log.error(
                    "transaction_discard_failed",
                    half_offset=half.queue_offset,
                    status=result.status.value if result is not None else None,
                )
                return False
            self._mark_resolved(root, op_lb)
        self.stats["discarded"] += 1
        listener.resolve_discard_msg(half, reason)
        return True

    async def check(self, transaction_timeout_ms: int, transaction_check_max: int, listener: CheckListener) -> int:
        """One check round over the half queue (TransactionalMessageServiceImpl.check). Returns how many
        producers were asked."""
        await self.load()
        start = _now_ms()
        reserved_ms = self.c.store_config.fileReservedTime * 3600 * 1000
        begin = self._half_offset
        # Anything at or past this queue offset was dispatched during this round (its own copies included).
        # Java compares store timestamps with the round's start, which misreads a message stored in the same
        # millisecond the round starts; the queue offset has no such tie.
        round_end = self.bridge.max_offset(HALF_TOPIC, HALF_QUEUE_ID)
        i = begin
        asked = 0
        jumps = 0
        done = False
        while not done:
            if _now_ms() - start > MAX_PROCESS_TIME_LIMIT_MS:
                log.info("transaction_check_time_limit", half_offset=i)
                break
            try:
                r = self.bridge.get_half_messages(i, READ_BATCH)
            except StoreNotAvailableError:
                break
            if not r.messages:
                if r.status in _JUMP_STATUSES | {GetMessageStatus.FOUND} and r.next_begin_offset != i and jumps < 2:
                    log.info("transaction_check_offset_moved", half_offset=i, to=r.next_begin_offset, status=r.status.value)
                    i = r.next_begin_offset
                    jumps += 1
                    continue
                break
            jumps = 0
            for qoff, half in r.messages:
                i = qoff
                root = root_of(qoff, half)
                if self.is_resolved(root):
                    i = qoff + 1
                    continue
                times = check_times(half)
                now = _now_ms()
                too_often = times > 0 and times >= transaction_check_max
                if too_often or now - half.born_timestamp > reserved_ms:
                    reason = "checked too many times" if too_often else "older than fileReservedTime"
                    if not await self.discard_message(half, root, reason, listener):
                        done = True
                        break
                    i = qoff + 1
                    continue
                if qoff >= round_end:
                    done = True  # stored during this round (e.g. a copy it made): next round
                    break
                age = now - half.born_timestamp
                immunity_s = half.properties.get(_IMMUNITY)
                if immunity_s is not None:
                    immunity = _int(immunity_s, -1)
                    immunity = transaction_timeout_ms if immunity == -1 else immunity * 1000
                    if age < immunity:
                        # Not to be checked yet, but must not block the queue: move it to the end.
                        if await self._put_back(half, root, None) is None:
                            done = True
                            break
                        i = qoff + 1
                        continue
                elif 0 <= age < transaction_timeout_ms:
                    done = True  # the rest is younger still
                    break
                copy = await self._put_back(half, root, times + 1)
                if copy is None:
                    done = True
                    break
                i = qoff + 1
                if not self.is_resolved(root) and listener.resolve_half_msg(copy):
                    asked += 1
            else:
                i = max(i, r.next_begin_offset)
            await asyncio.sleep(0)
        self._advance(i)
        if asked or i != begin:
            log.debug("transaction_check_round", half_offset=i, asked=asked, ms=_now_ms() - start)
        self.stats["checks"] += asked
        return asked

    def _advance(self, new_half_offset: int) -> None:
        """Move H, forget what is decided for good, persist the checker's offsets."""
        if new_half_offset < self._half_offset:
            new_half_offset = self._half_offset
        self._half_offset = new_half_offset
        for off in [o for o in self._copy_roots if o < new_half_offset]:
            root = self._copy_roots.pop(off)
            self._pending_roots[root] -= 1
            if self._pending_roots[root] <= 0:
                del self._pending_roots[root]
        pending = self._pending_roots
        for root in [r for r in self._resolved if r < new_half_offset and not pending.get(r)]:
            del self._resolved[root]
        op_offset = min(self._resolved.values(), default=self.bridge.max_offset(OP_TOPIC, HALF_QUEUE_ID))
        self.bridge.update_consume_offset(HALF_TOPIC, HALF_QUEUE_ID, new_half_offset)
        self.bridge.update_consume_offset(OP_TOPIC, HALF_QUEUE_ID, max(0, op_offset))


__all__ = ["CheckListener", "TransactionalMessageService", "check_times", "root_of"]
