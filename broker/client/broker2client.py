"""Broker2Client: calls from the broker to its clients (notify, reset offsets, ask a consumer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from remoting.body import MessageQueue, ResetOffsetBody
from remoting.codes import LanguageCode, RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.errors import RemotingError
from remoting.headers import NotifyConsumerIdsChangedRequestHeader, ResetOffsetRequestHeader

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)


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
