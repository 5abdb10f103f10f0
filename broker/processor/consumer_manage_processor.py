"""ConsumerManageProcessor: GET_CONSUMER_LIST_BY_GROUP (38), UPDATE_CONSUMER_OFFSET (15),
QUERY_CONSUMER_OFFSET (14)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.processor.common import BadRequest, decode_header, reply
from remoting.body import GetConsumerListByGroupResponseBody
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext
from remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)

if TYPE_CHECKING:
    from broker.controller import BrokerController


class ConsumerManageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller

    def process_request(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            if cmd.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
                return self.get_consumer_list_by_group(ctx, cmd)
            if cmd.code == RequestCode.UPDATE_CONSUMER_OFFSET:
                return self.update_consumer_offset(ctx, cmd)
            if cmd.code == RequestCode.QUERY_CONSUMER_OFFSET:
                return self.query_consumer_offset(ctx, cmd)
            return reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        except BadRequest as e:
            return e.response

    def get_consumer_list_by_group(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(GetConsumerListByGroupRequestHeader, cmd)
        gi = self.c.consumer_manager.get_consumer_group_info(h.consumer_group)
        if gi is not None:
            ids = gi.all_client_ids()
            if ids:
                return reply(ResponseCode.SUCCESS, None, None,
                             GetConsumerListByGroupResponseBody(consumer_id_list=ids).encode())
        return reply(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")

    def update_consumer_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(UpdateConsumerOffsetRequestHeader, cmd)
        if h.commit_offset < 0:
            return reply(ResponseCode.INVALID_PARAMETER, f"commitOffset {h.commit_offset} is negative")
        self.c.consumer_offset_manager.commit_offset(
            ctx.remote_addr, h.consumer_group, h.topic, h.queue_id, h.commit_offset
        )
        return reply(ResponseCode.SUCCESS)

    def query_consumer_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(QueryConsumerOffsetRequestHeader, cmd)
        offset = self.c.consumer_offset_manager.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return reply(ResponseCode.SUCCESS, None, QueryConsumerOffsetResponseHeader(offset=offset).encode())
        # Never committed: RocketMQ answers 0 when the queue still starts at 0 and that message is not
        # yet only on disk (a new queue: consume it from the start), else QUERY_NOT_FOUND.
        store = self.c.message_store
        min_offset = store.get_min_offset_in_queue(h.topic, h.queue_id)
        in_disk = getattr(store, "check_in_disk_by_consume_offset", None)
        if min_offset <= 0 and not (in_disk is not None and in_disk(h.topic, h.queue_id, 0)):
            return reply(ResponseCode.SUCCESS, None, QueryConsumerOffsetResponseHeader(offset=0).encode())
        return reply(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
