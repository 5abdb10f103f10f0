"""EndTransactionProcessor: END_TRANSACTION (37), the producer's commit or rollback of a half message.

Header: producerGroup, tranStateTableOffset (the half message's queue offset), commitLogOffset,
commitOrRollback (8 commit, 12 rollback, 0 = still unknown: ignored), fromTransactionCheck, msgId,
transactionId. Producers send it oneway: nobody reads the answer, so failures are logged here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from broker.processor.common import BadRequest, decode_header, reply
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext
from remoting.headers import EndTransactionRequestHeader
from remoting.message import MessageSysFlag

from .transactional_message_service import TransactionalMessageService

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

_COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE
_ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_UNKNOWN = MessageSysFlag.TRANSACTION_NOT_TYPE


class EndTransactionProcessor:
    def __init__(self, controller: BrokerController, service: TransactionalMessageService) -> None:
        self.c = controller
        self.service = service

    async def process_request(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            h = decode_header(EndTransactionRequestHeader, cmd)
        except BadRequest as e:
            if cmd.is_oneway:
                log.warning("end_transaction_bad_request", producer=ctx.remote_addr, error=e.response.remark)
            return e.response
        t = h.commit_or_rollback
        if t == _UNKNOWN:
            log.info(
                "end_transaction_unknown_state",
                producer=ctx.remote_addr,
                group=h.producer_group,
                msg_id=h.msg_id,
                from_check=h.from_transaction_check,
                remark=cmd.remark,
            )
            return reply(ResponseCode.SUCCESS, "unknown local transaction state: the broker will check back later")
        if t not in (_COMMIT, _ROLLBACK):
            resp = reply(
                ResponseCode.INVALID_PARAMETER,
                f"commitOrRollback {t} is not one of 8 (commit), 12 (rollback), 0 (unknown)",
            )
        else:
            resp = await self.service.end_transaction(h, peer=ctx.remote_addr, remark=cmd.remark)
        if resp.code != ResponseCode.SUCCESS:
            log.warning(
                "end_transaction_failed",
                producer=ctx.remote_addr,
                group=h.producer_group,
                msg_id=h.msg_id,
                commit_or_rollback=t,
                from_check=h.from_transaction_check,
                code=resp.code,
                remark=resp.remark,
            )
        return resp
