"""TransactionalMessageCheckListener: asks a producer about an undecided half message, logs give-ups.

CHECK_TRANSACTION_STATE (39) goes oneway to one live connection of the message's producer group
(ProducerManager.get_available_channel). Header: tranStateTableOffset / commitLogOffset / offsetMsgId of
the half message (the copy the checker just stored), msgId and transactionId = its UNIQ_KEY. Body: the
message record as Java's MessageDecoder.encode writes it, with the real topic and queue id, which is what
RocketMQ clients decode and hand to checkLocalTransaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from remoting.codes import LanguageCode, RequestCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import CheckTransactionStateRequestHeader
from remoting.message import MessageConst, MessageExt, encode_message_record, encode_properties

from .transactional_message_bridge import TransactionalMessageBridge
from .transactional_message_service import check_times

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_PGROUP = MessageConst.PROPERTY_PRODUCER_GROUP


def build_check_request(msg: MessageExt) -> RemotingCommand | None:
    """The CHECK_TRANSACTION_STATE request for a stored half message (None if it has no real topic)."""
    real = TransactionalMessageBridge.real_queue(msg)
    if real is None:
        return None
    uniq = msg.properties.get(_UNIQ)
    header = CheckTransactionStateRequestHeader(
        tran_state_table_offset=msg.queue_offset,
        commit_log_offset=msg.commit_log_offset,
        msg_id=uniq,
        transaction_id=uniq,
        offset_msg_id=msg.msg_id,
    )
    body = encode_message_record(
        topic=real[0],
        queue_id=real[1],
        flag=msg.flag,
        body=msg.body,
        properties=encode_properties(msg.properties),
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=msg.store_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        queue_offset=msg.queue_offset,
        physical_offset=msg.commit_log_offset,
        store_timestamp=msg.store_timestamp,
        body_crc=msg.body_crc,
    )
    req = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.encode(), bytes(body))
    req.language = LanguageCode.JAVA
    return req


class TransactionalMessageCheckListener:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller

    def resolve_half_msg(self, msg: MessageExt) -> bool:
        group = msg.properties.get(_PGROUP)
        uniq = msg.properties.get(_UNIQ)
        req = build_check_request(msg)
        if req is None:
            log.error("transaction_check_bad_half_message", half_offset=msg.queue_offset, msg_id=uniq)
            return False
        conn = self.c.producer_manager.get_available_channel(group) if group else None
        if conn is None:
            log.warning(
                "transaction_check_no_producer",
                group=group,
                msg_id=uniq,
                check_times=check_times(msg),
                reason="no live producer of the group is connected",
            )
            return False
        try:
            conn.invoke_oneway(req)
        except (RemotingError, OSError) as e:
            log.warning("transaction_check_send_failed", group=group, msg_id=uniq, producer=conn.remote_addr, error=str(e))
            return False
        log.info(
            "transaction_check_sent",
            group=group,
            msg_id=uniq,
            topic=msg.properties.get(MessageConst.PROPERTY_REAL_TOPIC),
            check_times=check_times(msg),
            producer=conn.remote_addr,
        )
        return True

    def resolve_discard_msg(self, msg: MessageExt, reason: str) -> None:
        log.warning(
            "transaction_discarded",
            reason=reason,
            msg_id=msg.properties.get(_UNIQ),
            group=msg.properties.get(_PGROUP),
            topic=msg.properties.get(MessageConst.PROPERTY_REAL_TOPIC),
            check_times=check_times(msg),
            moved_to="TRANS_CHECK_MAX_TIME_TOPIC",
            outcome="rolled back",
        )
