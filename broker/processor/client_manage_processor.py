"""ClientManageProcessor: HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from broker import mix_all
from broker.client.client_channel_info import ClientChannelInfo
from broker.filter import SubscriptionParseError, compile_expression, is_tag_type
from broker.mix_all import TopicSysFlag
from broker.processor.common import BadRequest, decode_header, reply
from remoting import jsonutil
from remoting.body import HeartbeatData
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext
from remoting.headers import SERIALIZE_TYPES_EXT_FIELD, UnregisterClientRequestHeader
from remoting.message import PermName

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)


# Java enum ordinals, which the C++ core sends instead of the names.
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
_CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def _enum_name(v: object, names: tuple[str, ...], key: str) -> object:
    if isinstance(v, int) and not isinstance(v, bool):
        if 0 <= v < len(names):
            return names[v]
        raise ValueError(f"{key} {v} is not a known value")
    return v


def decode_heartbeat(body: bytes | bytearray | memoryview | None) -> HeartbeatData:
    """HeartbeatData from JSON as any client writes it (the C++ core sends enums as ordinals)."""
    if not body:
        raise ValueError("empty body")
    raw = jsonutil.loads(body)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    for cd in raw.get("consumerDataSet") or ():
        if isinstance(cd, dict):
            cd["consumeType"] = _enum_name(cd.get("consumeType", 1), _CONSUME_TYPES, "consumeType")
            cd["messageModel"] = _enum_name(cd.get("messageModel", 1), _MESSAGE_MODELS, "messageModel")
            cd["consumeFromWhere"] = _enum_name(cd.get("consumeFromWhere", 0), _CONSUME_FROM_WHERE, "consumeFromWhere")
    return HeartbeatData.model_validate(raw)


class ClientManageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller

    def process_request(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            if cmd.code == RequestCode.HEART_BEAT:
                return self.heart_beat(ctx, cmd)
            if cmd.code == RequestCode.UNREGISTER_CLIENT:
                return self.unregister_client(ctx, cmd)
            if cmd.code == RequestCode.CHECK_CLIENT_CONFIG:
                return self.check_client_config(ctx, cmd)
            return reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        except BadRequest as e:
            return e.response

    def heart_beat(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        c = self.c
        bc = c.broker_config
        if bc.brokerFastFailureEnable and ctx.queued_ms() > bc.waitTimeMillsInHeartbeatQueue:
            return reply(ResponseCode.SYSTEM_BUSY,
                         f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                         f"{int(ctx.queued_ms())}ms, size of queue: {c.pending_in_group('heartbeat')}")
        try:
            data = decode_heartbeat(cmd.body)
        except ValueError as e:
            return reply(ResponseCode.INVALID_PARAMETER, f"bad heartbeat body: {str(e).splitlines()[0]}")
        info = ClientChannelInfo(ctx.conn, data.client_id, cmd.language, cmd.version)
        for cd in data.consumer_data_set:
            sgc = c.subscription_group_manager.find_subscription_group_config(cd.group_name)
            notify = True
            if sgc is not None:
                notify = sgc.notify_consumer_ids_changed_enable
                c.topic_config_manager.create_topic_in_send_message_back_method(
                    mix_all.get_retry_topic(cd.group_name),
                    sgc.retry_queue_nums,
                    PermName.PERM_WRITE | PermName.PERM_READ,
                    TopicSysFlag.build(False, True) if cd.unit_mode else 0,
                )
            changed = c.consumer_manager.register_consumer(
                cd.group_name,
                info,
                cd.consume_type,
                cd.message_model,
                cd.consume_from_where,
                cd.subscription_data_set,
                notify,
            )
            if changed:
                log.info("consumer_group_changed", group=cd.group_name, client_id=data.client_id,
                         peer=ctx.remote_addr, model=cd.message_model)
        for pd in data.producer_data_set:
            c.producer_manager.register_producer(pd.group_name, info)
        # Tell our own clients they may use MSGPACK headers here (real clients ignore the field).
        return reply(ResponseCode.SUCCESS, None, {SERIALIZE_TYPES_EXT_FIELD: "JSON,ROCKETMQ,MSGPACK"})

    def unregister_client(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        c = self.c
        h = decode_header(UnregisterClientRequestHeader, cmd)
        info = ClientChannelInfo(ctx.conn, h.client_id, cmd.language, cmd.version)
        if h.producer_group:
            c.producer_manager.unregister_producer(h.producer_group, info)
        if h.consumer_group:
            sgc = c.subscription_group_manager.find_subscription_group_config(h.consumer_group, create=False)
            notify = sgc.notify_consumer_ids_changed_enable if sgc is not None else True
            c.consumer_manager.unregister_consumer(h.consumer_group, info, notify)
        return reply(ResponseCode.SUCCESS)

    def check_client_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        if not cmd.body:
            return reply(ResponseCode.SUCCESS)
        try:
            body = jsonutil.loads(cmd.body)
        except ValueError as e:
            return reply(ResponseCode.INVALID_PARAMETER, f"bad CHECK_CLIENT_CONFIG body: {e}")
        sub = body.get("subscriptionData") if isinstance(body, dict) else None
        if isinstance(sub, dict):
            etype = sub.get("expressionType")
            if not is_tag_type(etype):
                if not self.c.broker_config.enablePropertyFilter:
                    return reply(ResponseCode.SYSTEM_ERROR,
                                 f"The broker does not support consumer to filter message by {etype} "
                                 "(set enablePropertyFilter=true to allow it)")
                try:
                    compile_expression(sub.get("subString"), etype)
                except SubscriptionParseError as e:
                    log.warning("check_client_config_parse_failed", client_id=body.get("clientId"),
                                group=body.get("group"), expression=sub.get("subString"), error=str(e))
                    return reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e))
        return reply(ResponseCode.SUCCESS)
