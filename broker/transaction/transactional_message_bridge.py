"""TransactionalMessageBridge: how the transaction parts read and write the store.

Half messages live in queue 0 of RMQ_SYS_TRANS_HALF_TOPIC with their real topic and queue in the
REAL_TOPIC / REAL_QID properties; op records ("this half message is done") live in queue 0 of
RMQ_SYS_TRANS_OP_HALF_TOPIC, tag "d", body = the half message's queue offset as text. The checker's
progress in both queues is kept as consumer offsets of the system group CID_RMQ_SYS_TRANS.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from remoting.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    PermName,
    decode_message,
    encode_properties,
)
from store.message import MessageExtBrokerInner
from store.results import GetMessageStatus, PutMessageResult

from .transactional_message_util import (
    CHECK_MAX_TIME_TOPIC,
    CID_SYS_RMQ_TRANS,
    HALF_QUEUE_ID,
    HALF_TOPIC,
    OP_TOPIC,
    REMOVE_TAG,
    TCMT_QUEUE_NUMS,
    UniqIdGenerator,
)

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

_WAIT = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
_REAL_TOPIC = MessageConst.PROPERTY_REAL_TOPIC
_REAL_QID = MessageConst.PROPERTY_REAL_QUEUE_ID
# Properties that only make sense while a message is half: dropped when it is committed.
HALF_ONLY_PROPERTIES = (
    MessageConst.PROPERTY_REAL_TOPIC,
    MessageConst.PROPERTY_REAL_QUEUE_ID,
    MessageConst.PROPERTY_TRANSACTION_PREPARED,
    MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
)


@dataclass(slots=True)
class QueueRead:
    """Messages read from one queue: (queue offset, message) pairs in offset order."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[tuple[int, MessageExt]] = field(default_factory=list)


def _set_properties(msg: MessageExtBrokerInner, props: Mapping[str, str], *, wait_store_msg_ok: bool) -> None:
    """Store `props` without WAIT (the broker's own business), then tell the store whether to wait."""
    clean = {k: v for k, v in props.items() if k != _WAIT}
    msg.properties_string = encode_properties(clean)
    clean[_WAIT] = "true" if wait_store_msg_ok else "false"
    msg.properties = clean


class TransactionalMessageBridge:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        self.uniq_ids = UniqIdGenerator(controller.broker_config.brokerIP1)

    # ------------------------------------------------------------------ offsets (checker progress)

    def fetch_consume_offset(self, topic: str, queue_id: int) -> int:
        offset = self.c.consumer_offset_manager.query_offset(CID_SYS_RMQ_TRANS, topic, queue_id)
        if offset < 0:
            offset = self.c.message_store.get_min_offset_in_queue(topic, queue_id)
        return offset

    def update_consume_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.c.consumer_offset_manager.commit_offset(self.c.broker_addr, CID_SYS_RMQ_TRANS, topic, queue_id, offset)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.c.message_store.get_max_offset_in_queue(topic, queue_id)

    # ------------------------------------------------------------------ reads

    def get_messages(self, topic: str, queue_id: int, offset: int, nums: int, *, read_body: bool = True) -> QueueRead:
        """Up to `nums` records of a system queue from `offset` (raises StoreNotAvailableError when stopped)."""
        result = self.c.message_store.get_message(CID_SYS_RMQ_TRANS, topic, queue_id, offset, nums)
        out = QueueRead(result.status, result.next_begin_offset, result.min_offset, result.max_offset)
        try:
            for buf, qoff in zip(result.message_buffers, result.message_queue_offsets, strict=False):
                try:
                    msg, _ = decode_message(buf, read_body=read_body)
                except ValueError as e:
                    log.error("transaction_record_corrupt", topic=topic, queue_offset=qoff, error=str(e))
                    continue
                out.messages.append((qoff, msg))
        finally:
            result.release()
        return out

    def get_half_messages(self, offset: int, nums: int, *, read_body: bool = True) -> QueueRead:
        return self.get_messages(HALF_TOPIC, HALF_QUEUE_ID, offset, nums, read_body=read_body)

    def get_op_messages(self, offset: int, nums: int) -> QueueRead:
        return self.get_messages(OP_TOPIC, HALF_QUEUE_ID, offset, nums)

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        return self.c.message_store.look_message_by_offset(commit_log_offset)

    # ------------------------------------------------------------------ writes

    async def put_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> PutMessageResult:
        """One append for all of `msgs` (so e.g. a commit and its op record are stored together or not at all)."""
        return await self.c.message_store.put_messages(msgs)

    @staticmethod
    def parse_half_message_inner(msg: MessageExtBrokerInner) -> None:
        """Turn a PREPARED send into a half message (in place): keep the real topic/queue in properties,
        store it as a plain message of the half topic's queue 0 (so it gets a consume-queue slot)."""
        props = dict(msg.properties)
        props[_REAL_TOPIC] = msg.topic
        props[_REAL_QID] = str(msg.queue_id)
        wait = props.get(_WAIT) != "false"
        msg.sys_flag = MessageSysFlag.reset_transaction_value(msg.sys_flag, MessageSysFlag.TRANSACTION_NOT_TYPE)
        msg.topic = HALF_TOPIC
        msg.queue_id = HALF_QUEUE_ID
        _set_properties(msg, props, wait_store_msg_ok=wait)

    def renew_half_message_inner(self, ext: MessageExt, props: Mapping[str, str]) -> MessageExtBrokerInner:
        """A copy of a half message (same body, hosts, born time) with `props`, for the end of the half queue."""
        msg = MessageExtBrokerInner(
            topic=HALF_TOPIC,
            body=ext.body,
            queue_id=HALF_QUEUE_ID,
            flag=ext.flag,
            sys_flag=ext.sys_flag,
            born_timestamp=ext.born_timestamp,
            born_host=ext.born_host,
            store_host=ext.store_host,
            reconsume_times=ext.reconsume_times,
            body_crc=ext.body_crc,
        )
        _set_properties(msg, props, wait_store_msg_ok=False)
        return msg

    def make_op_message_inner(self, half_queue_offset: int, root: int) -> MessageExtBrokerInner:
        """The op record of a half message: tag "d", body = its queue offset; TRAN_PREPARED_QUEUE_OFFSET names
        the offset of the first copy of that half message (the transaction's identity across re-puts)."""
        host = self.c.store_host
        msg = MessageExtBrokerInner(
            topic=OP_TOPIC,
            body=str(half_queue_offset).encode(),
            queue_id=HALF_QUEUE_ID,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            born_host=host,
            store_host=host,
        )
        props = {
            MessageConst.PROPERTY_TAGS: REMOVE_TAG,
            MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: self.uniq_ids.next(),
            MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: str(root),
        }
        _set_properties(msg, props, wait_store_msg_ok=False)
        return msg

    @staticmethod
    def real_queue(ext: MessageExt) -> tuple[str, int] | None:
        topic = ext.properties.get(_REAL_TOPIC)
        qid = ext.properties.get(_REAL_QID)
        if not topic or qid is None:
            return None
        try:
            return topic, int(qid)
        except ValueError:
            return None

    def end_message_transaction(self, ext: MessageExt) -> MessageExtBrokerInner | None:
        """The committed message: the half message back in its real topic/queue, transaction markers removed,
        sysFlag transaction type COMMIT (like EndTransactionProcessor.endMessageTransaction). None if the half
        message does not say where it belongs."""
        real = self.real_queue(ext)
        if real is None:
            return None
        props = {k: v for k, v in ext.properties.items() if k not in HALF_ONLY_PROPERTIES}
        msg = MessageExtBrokerInner(
            topic=real[0],
            body=ext.body,
            queue_id=real[1],
            flag=ext.flag,
            sys_flag=MessageSysFlag.reset_transaction_value(ext.sys_flag, MessageSysFlag.TRANSACTION_COMMIT_TYPE),
            born_timestamp=ext.born_timestamp,
            born_host=ext.born_host,
            store_host=ext.store_host,
            reconsume_times=ext.reconsume_times,
            prepared_transaction_offset=ext.commit_log_offset,
            body_crc=ext.body_crc,
        )
        _set_properties(msg, props, wait_store_msg_ok=False)
        return msg

    def to_check_max_time_inner(self, ext: MessageExt) -> MessageExtBrokerInner:
        """A half message checked too often, as stored in TRANS_CHECK_MAX_TIME_TOPIC (for operators to look at)."""
        tc = self.c.topic_config_manager.create_topic_of_tran_check_max_time(
            TCMT_QUEUE_NUMS, PermName.PERM_READ | PermName.PERM_WRITE
        )
        msg = MessageExtBrokerInner(
            topic=tc.topic_name,
            body=ext.body,
            queue_id=0,
            flag=ext.flag,
            sys_flag=ext.sys_flag,
            born_timestamp=ext.born_timestamp,
            born_host=ext.born_host,
            store_host=ext.store_host,
            reconsume_times=ext.reconsume_times,
            body_crc=ext.body_crc,
        )
        _set_properties(msg, ext.properties, wait_store_msg_ok=False)
        return msg


__all__ = [
    "CHECK_MAX_TIME_TOPIC",
    "HALF_ONLY_PROPERTIES",
    "QueueRead",
    "TransactionalMessageBridge",
]
