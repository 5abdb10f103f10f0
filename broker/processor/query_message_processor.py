"""QueryMessageProcessor: QUERY_MESSAGE (12, by key and time range) and VIEW_MESSAGE_BY_ID (33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker import mix_all
from broker.processor.common import BadRequest, await_dispatch, decode_header, maybe_await, reply
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext
from remoting.headers import QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader

if TYPE_CHECKING:
    from broker.controller import BrokerController


class QueryMessageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller

    async def process_request(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            if cmd.code == RequestCode.QUERY_MESSAGE:
                return await self.query_message(ctx, cmd)
            if cmd.code == RequestCode.VIEW_MESSAGE_BY_ID:
                return await self.view_message_by_id(ctx, cmd)
            return reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        except BadRequest as e:
            return e.response

    async def query_message(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(QueryMessageRequestHeader, cmd)
        await await_dispatch(self.c.message_store)  # the index is built by the dispatcher
        max_num = h.max_num
        if str(cmd.ext(mix_all.UNIQUE_MSG_QUERY_FLAG, "")).lower() == "true":
            max_num = self.c.store_config.defaultQueryMaxNum
        result = await maybe_await(
            self.c.message_store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        )
        ext = QueryMessageResponseHeader(
            index_last_update_timestamp=result.index_last_update_timestamp,
            index_last_update_phyoffset=result.index_last_update_phyoffset,
        ).encode()
        if result.buffer_total_size > 0 and result.message_buffers:
            return reply(ResponseCode.SUCCESS, None, ext, result.body())
        return reply(
            ResponseCode.QUERY_NOT_FOUND,
            f"can not find message by key [{h.key}] in topic [{h.topic}], maybe time range not correct",
            ext,
        )

    async def view_message_by_id(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(ViewMessageRequestHeader, cmd)
        if h.offset < 0:
            return reply(ResponseCode.INVALID_PARAMETER, f"commit log offset {h.offset} is negative")
        data = await maybe_await(self.c.message_store.select_one_message_by_offset(h.offset))
        if data is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return reply(ResponseCode.SUCCESS, None, None, bytes(data))
