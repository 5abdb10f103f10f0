"""ReplyMessageProcessor: SEND_REPLY_MESSAGE(_V2), the answer half of RocketMQ's request-reply (4.6+).

A requester sends an ordinary message carrying CORRELATION_ID, REPLY_TO_CLIENT (its client id) and TTL;
the consumer that handles it sends a reply to `<cluster>_REPLY_TOPIC` with the same CORRELATION_ID and
REPLY_TO_CLIENT, which its producer sends with this request code. The broker pushes the reply at once
(PUSH_REPLY_MESSAGE_TO_CLIENT) on the connection of the client REPLY_TO_CLIENT names, found among the
producers that heartbeat it, and stores it too (`storeReplyMessageEnable`, on by default, as upstream).
The answer is SUCCESS once the requester took the push; SYSTEM_ERROR, saying why, when it could not be
pushed (the requester gone, or not connected to this broker), even if the reply was stored.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import structlog

from broker.processor.common import BadRequest, reply
from broker.processor.send_message_processor import send_header_of
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext
from remoting.errors import RemotingError
from remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from remoting.message import MessageConst, decode_properties, encode_properties

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from broker.processor.send_message_processor import SendMessageProcessor

log = structlog.get_logger(__name__)

REPLY_CODES = (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)
PUSH_TIMEOUT_MS = 10000  # upstream's callClient


class ReplyMessageProcessor:
    def __init__(self, controller: BrokerController, send: SendMessageProcessor) -> None:
        self.c = controller
        self.send = send  # its checks, message building and store path serve replies too

    async def process_request(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            header = send_header_of(cmd)
            self.send.msg_check(ctx, cmd, header)
        except BadRequest as e:
            return e.response
        pushed, remark = await self._push_reply(ctx, header, cmd.body or b"")
        stored: RemotingCommand | None = None
        if self.c.broker_config.storeReplyMessageEnable:
            stored = await self.send.send_message(ctx, cmd, header)
            if stored.code != ResponseCode.SUCCESS:
                log.warning("reply_not_stored", topic=header.topic, code=stored.code, remark=stored.remark)
        if not pushed:
            return reply(ResponseCode.SYSTEM_ERROR, remark)
        if stored is not None and stored.code == ResponseCode.SUCCESS:
            return stored  # with the stored reply's id and queue offset
        # Pushed, not stored (as upstream: the requester has it, so the sender is told it went)
        bc = self.c.broker_config
        return reply(ResponseCode.SUCCESS, None, {
            "msgId": "0", "queueId": str(max(header.queue_id, 0)), "queueOffset": "0",
            MessageConst.PROPERTY_MSG_REGION: bc.regionId, MessageConst.PROPERTY_TRACE_SWITCH: str(bc.traceOn).lower(),
        })

    async def _push_reply(
        self, ctx: RequestContext, header: SendMessageRequestHeader, body: bytes | bytearray | memoryview
    ) -> tuple[bool, str]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT to the client the reply names: (pushed, why not)."""
        props = decode_properties(header.properties)
        sender = props.get(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT)
        if not sender:
            log.warning("reply_without_reply_to_client", peer=ctx.remote_addr, topic=header.topic)
            return False, f"reply message properties[{MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT}] is null"
        conn = self.c.producer_manager.find_channel(sender)
        if conn is None:
            remark = f"push reply message fail, channel of <{sender}> not found."
            log.warning("reply_requester_not_connected", requester=sender, peer=ctx.remote_addr)
            return False, remark
        props[MessageConst.PROPERTY_PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        store_ip, store_port = self.c.store_host
        push = ReplyMessageRequestHeader(
            producer_group=header.producer_group,
            topic=header.topic,
            born_host=ctx.remote_addr,
            store_host=f"{store_ip}:{store_port}",
            default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums,
            queue_id=header.queue_id,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            flag=header.flag,
            properties=encode_properties(props),
            reconsume_times=header.reconsume_times,
            unit_mode=header.unit_mode,
            store_timestamp=int(time.time() * 1000),
        )
        request = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push.encode(), bytes(body))
        try:
            answer = await self.c.broker2client.call_client(conn, request, PUSH_TIMEOUT_MS)
        except RemotingError as e:
            log.warning("reply_push_failed", requester=sender, error=str(e))
            return False, f"push reply message to {sender} fail: {e}"
        if answer.code != ResponseCode.SUCCESS:
            log.warning("reply_push_refused", requester=sender, code=answer.code, remark=answer.remark)
            return False, f"push reply message to {sender} fail: {answer.remark}"
        return True, ""
