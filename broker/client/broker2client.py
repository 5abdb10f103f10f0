"""Broker2Client: calls from the broker to its clients (notify, reset offsets, ask a consumer)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from broker.client.client_channel_info import ClientChannelInfo
from remoting.body import GetConsumerStatusBody, MessageQueue, ResetOffsetBody
from remoting.codes import LanguageCode, RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import (
    GetConsumerStatusRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    ResetOffsetRequestHeader,
)
from remoting.version import V3_0_7_SNAPSHOT, version_desc

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

# How long the broker waits for each client's GET_CONSUMER_STATUS_FROM_CLIENT answer (the clients are asked
# at once). Below the Java mqadmin's default request timeout (5 s), so a client that does not answer is
# reported by name rather than the tool timing out first (RocketMQ waits 5 s per client, one after another).
CONSUMER_STATUS_TIMEOUT_MS = 3000

class Broker2Client:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def notify_consumer_ids_changed(self, conn: RemotingConnection, group: str) -> None:
        """Oneway NOTIFY_CONSUMER_IDS_CHANGED: the client rebalances at once."""
        req = RemotingCommand.request(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            NotifyConsumerIdsChangedRequestHeader(consumer_group=group).encode(),
        )
        req.language = LanguageCode.JAVA
        try:
            conn.invoke_oneway(req)
        except RemotingError as e:
            log.debug("notify_consumer_ids_changed_failed", group=group, peer=conn.remote_addr, error=str(e))

    async def call_client(self, conn: RemotingConnection, request: RemotingCommand, timeout_ms: float = 10000) -> RemotingCommand:
        request.language = LanguageCode.JAVA
        return await conn.invoke(request, timeout_ms)

    def reset_offset(self, topic: str, group: str, timestamp: int, is_force: bool) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: compute the offsets, commit them here, and push them to clients.

        timestamp -1 means "the end of each queue". Unlike RocketMQ (which leaves committing to the
        clients), the offsets are committed in the broker too, so a group with no client online is
        reset as well; it is answered SUCCESS with the offsets and a remark saying nobody was told.
        """
        c = self.controller
        tc = c.topic_config_manager.select_topic_config(topic)
        if tc is None:
            return RemotingCommand(
                code=ResponseCode.TOPIC_NOT_EXIST,
                remark=f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            )
        online = c.consumer_manager.get_consumer_group_info(group)
        committed = c.consumer_offset_manager.query_offsets(group, topic)
        if not committed and online is None and group not in c.subscription_group_manager.subscription_group_table:
            return RemotingCommand(
                code=ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                remark=f"[reset-offset] the consumer group <{group}> has never consumed topic {topic} and is not online",
            )
        store = c.message_store
        table: dict[MessageQueue, int] = {}
        for qid in range(tc.write_queue_nums):
            mq = MessageQueue(topic=topic, broker_name=c.broker_config.brokerName, queue_id=qid)
            if timestamp == -1:
                new = store.get_max_offset_in_queue(topic, qid)
            else:
                new = store.get_offset_in_queue_by_time(topic, qid, timestamp)
            new = max(0, new)
            current = c.consumer_offset_manager.query_offset(group, topic, qid)
            if is_force or current < 0 or new < current:
                table[mq] = new
            else:
                table[mq] = current
        for mq, off in table.items():
            c.consumer_offset_manager.commit_offset("reset-offset", group, topic, mq.queue_id, off)
        c.consumer_offset_manager.request_persist()

        body = ResetOffsetBody(offset_table=table).encode()
        told = 0
        if online is not None:
            header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp, is_force=is_force)
            for conn in online.all_channels():
                req = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header.encode(), body)
                req.language = LanguageCode.JAVA
                try:
                    conn.invoke_oneway(req)
                    told += 1
                except RemotingError as e:
                    log.warning("reset_offset_notify_failed", group=group, peer=conn.remote_addr, error=str(e))
        log.info("consumer_offsets_reset", topic=topic, group=group, timestamp=timestamp, force=is_force,
                 clients_told=told, offsets={mq.queue_id: o for mq, o in table.items()})
        remark = None if told else f"consumer group {group} is not online; offsets were reset in the broker only"
        return RemotingCommand(code=ResponseCode.SUCCESS, remark=remark, body=body)

    async def get_consume_status(self, topic: str, group: str, client_id: str | None) -> RemotingCommand:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS: ask the group's clients (only `client_id` when given) for
        their offsets of `topic` (GET_CONSUMER_STATUS_FROM_CLIENT) and answer them by client id.

        As RocketMQ: a client that answers with an error code is left out (a client kind that does not
        implement the request must not hide the others). Unlike RocketMQ, which leaves a silent client out
        too, a client that does not answer within CONSUMER_STATUS_TIMEOUT_MS (or whose connection fails)
        makes the answer a SYSTEM_ERROR naming it: an empty table would read as "consumes nothing"."""
        gi = self.controller.consumer_manager.get_consumer_group_info(group)
        if gi is None or not gi.channel_info_table:
            return RemotingCommand(
                code=ResponseCode.SYSTEM_ERROR, remark=f"No Any Consumer online in the consumer group: [{group}]"
            )
        targets = list(gi.channel_info_table.values())
        if client_id:
            # The first connection with that id only, as RocketMQ. With none, RocketMQ answers an empty
            # table; naming the absent client says more.
            targets = [i for i in targets if i.client_id == client_id][:1]
            if not targets:
                return RemotingCommand(
                    code=ResponseCode.SYSTEM_ERROR, remark=f"The Consumer <{group}> <{client_id}> not online"
                )
        # RocketMQ refuses when any member is that old, asked or not; only the clients asked matter here.
        for info in targets:
            if info.version < V3_0_7_SNAPSHOT:  # (it cannot answer GET_CONSUMER_STATUS_FROM_CLIENT)
                log.warning("consumer_status_client_too_old", group=group, client_id=info.client_id,
                            peer=info.remote_addr, version=info.version)
                return RemotingCommand(
                    code=ResponseCode.SYSTEM_ERROR,
                    remark=f"the client does not support this feature. version={version_desc(info.version)}",
                )
        header = GetConsumerStatusRequestHeader(topic=topic, group=group).encode()
        answers = await asyncio.gather(*(self._ask_consumer_status(info, header) for info in targets))
        table: dict[str, dict[MessageQueue, int]] = {}
        silent: list[str] = []
        for info, (offsets, failure) in zip(targets, answers, strict=True):
            if failure is not None:
                silent.append(failure)
            elif offsets is not None:
                table[info.client_id] = offsets
        if silent:
            return RemotingCommand(code=ResponseCode.SYSTEM_ERROR, remark="; ".join(silent))
        log.info("consumer_status_collected", topic=topic, group=group, clients=sorted(table))
        return RemotingCommand(code=ResponseCode.SUCCESS, body=GetConsumerStatusBody(consumer_table=table).encode())

    async def _ask_consumer_status(
        self, info: ClientChannelInfo, header: dict[str, str]
    ) -> tuple[dict[MessageQueue, int] | None, str | None]:
        """One client's offsets table, or (None, why it gave none): (None, None) when it declined with an
        error code or sent no body, (None, text naming it) when it did not answer."""
        req = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, dict(header))
        group = header.get("group")
        try:
            resp = await self.call_client(info.conn, req, CONSUMER_STATUS_TIMEOUT_MS)
        except RemotingTimeoutError:
            log.warning("consumer_status_timeout", group=group, client_id=info.client_id, peer=info.remote_addr)
            return None, (f"consumer <{group}> <{info.client_id}> did not answer GET_CONSUMER_STATUS_FROM_CLIENT "
                          f"within {CONSUMER_STATUS_TIMEOUT_MS} ms")
        except RemotingError as e:
            log.warning("consumer_status_failed", group=group, client_id=info.client_id, peer=info.remote_addr,
                        error=str(e))
            return None, f"invoke consumer <{group}> <{info.client_id}> failed: {e}"
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            log.warning("consumer_status_declined", group=group, client_id=info.client_id, peer=info.remote_addr,
                        code=resp.code, remark=resp.remark)
            return None, None
        try:
            return GetConsumerStatusBody.decode(resp.body).message_queue_table, None
        except ValueError as e:
            # (an unreadable answer is the client's fault, not a reason to hide the others': left out, logged)
            log.warning("consumer_status_bad_body", group=group, client_id=info.client_id, peer=info.remote_addr,
                        error=str(e).splitlines()[0])
            return None, None
