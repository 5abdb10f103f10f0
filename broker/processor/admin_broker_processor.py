"""AdminBrokerProcessor: topic/group administration, offsets, stats and broker config (mqadmin's calls)."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import structlog

from broker.processor.common import BadRequest, await_dispatch, decode_header, maybe_await, now_ms, reply
from broker.topic import topic_validator as tv
from remoting.body import (
    BrokerStatsData,
    BrokerStatsItem,
    Connection,
    ConsumeQueueData,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    GroupList,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    QueryConsumeQueueResponseBody,
    QueryConsumeTimeSpanBody,
    QueueTimeSpan,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicList,
    TopicOffset,
    TopicStatsTable,
    UnlockBatchRequestBody,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import DEFAULT_VERSION, RemotingCommand
from remoting.connection import RequestContext
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    OffsetResponseHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    ResumeCheckHalfMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from remoting.message import decode_offset_msg_id
from remoting.properties import ConfigError, parse_properties
from remoting.version import version_desc
from store.config import CQ_STORE_UNIT_SIZE
from store.consume_queue import CQ_UNIT
from store.results import PutMessageStatus

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

BROKER_VERSION = DEFAULT_VERSION  # MQVersion.Version.V4_9_4's ordinal
BROKER_VERSION_DESC = version_desc(DEFAULT_VERSION)
_TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


def _runtime(boot_s: float) -> str:
    secs = int(time.time() - boot_s)
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"[ {d} days, {h} hours, {m} minutes, {s} seconds ]"


def _human_bytes(n: int) -> str:
    unit = 1024
    if n < unit:
        return f"{n} B"
    exp = 0
    v = float(n)
    while v >= unit and exp < 6:
        v /= unit
        exp += 1
    return f"{v:.1f} {'KMGTPE'[exp - 1]}iB"


Handler = Callable[[RequestContext, RemotingCommand], RemotingCommand | Awaitable[RemotingCommand]]


class AdminBrokerProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        self._handlers: dict[int, Handler] = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_TOPIC_CONFIG_LIST: self.get_all_topic_config,
            RequestCode.GET_TOPIC_NAME_LIST: self.get_topic_name_list,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.get_system_topic_list,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_broker_stats_data,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch_mq,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_ALL_PRODUCER_INFO: self.get_all_producer_info,
            RequestCode.GET_BROKER_CONSUME_STATS: self.get_broker_consume_stats,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.get_consumer_status,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
            RequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
            RequestCode.QUERY_CONSUME_TIME_SPAN: self.query_consume_time_span,
            RequestCode.QUERY_CONSUME_QUEUE: self.query_consume_queue,
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: self.clean_expired_consume_queue,
            RequestCode.CLEAN_UNUSED_TOPIC: self.clean_unused_topic,
            RequestCode.DELETE_EXPIRED_COMMITLOG: self.delete_expired_commit_log,
            RequestCode.RESUME_CHECK_HALF_MESSAGE: self.resume_check_half_message,
        }

    @property
    def codes(self) -> list[int]:
        return list(self._handlers)

    def register_handler(self, code: int, handler: Handler) -> None:
        """Let a feature (schedule, transaction, ...) add an admin request code."""
        self._handlers[int(code)] = handler

    async def process_request(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        try:
            return await maybe_await(handler(ctx, cmd))
        except BadRequest as e:
            return e.response

    # ------------------------------------------------------------------ topics

    async def update_and_create_topic(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(CreateTopicRequestHeader, cmd)
        topic = h.topic
        bad = tv.validate_topic(topic)
        if bad is not None:
            return reply(ResponseCode.INVALID_PARAMETER, bad)
        if self.c.topic_config_manager.is_system_topic(topic):
            return reply(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        if not (0 < h.read_queue_nums <= 1024 and 0 < h.write_queue_nums <= 1024):
            return reply(ResponseCode.INVALID_PARAMETER,
                         f"readQueueNums {h.read_queue_nums} / writeQueueNums {h.write_queue_nums} must be 1..1024")
        if not 0 <= h.perm <= 15:
            return reply(ResponseCode.INVALID_PARAMETER, f"perm {h.perm} must be 0..15")
        filter_type = h.topic_filter_type or "SINGLE_TAG"
        if filter_type not in _TOPIC_FILTER_TYPES:
            return reply(ResponseCode.INVALID_PARAMETER, f"topicFilterType {filter_type!r} must be SINGLE_TAG or MULTI_TAG")
        log.info("update_and_create_topic", topic=topic, peer=ctx.remote_addr)
        self.c.topic_config_manager.update_topic_config(
            TopicConfig(
                topic_name=topic,
                read_queue_nums=h.read_queue_nums,
                write_queue_nums=h.write_queue_nums,
                perm=h.perm,
                topic_filter_type=filter_type,
                topic_sys_flag=h.topic_sys_flag or 0,
                order=h.order,
            )
        )
        await self.c.register_and_wait()  # answered once the NameServers know the topic (as Java)
        return reply(ResponseCode.SUCCESS)

    async def delete_topic(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(DeleteTopicRequestHeader, cmd)
        topic = h.topic
        bad = tv.validate_topic(topic)
        if bad is not None:
            return reply(ResponseCode.INVALID_PARAMETER, bad)
        if self.c.topic_config_manager.is_system_topic(topic):
            return reply(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        log.info("delete_topic", topic=topic, peer=ctx.remote_addr)
        await self.c.delete_topic(topic)
        return reply(ResponseCode.SUCCESS)

    def get_all_topic_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        wrapper = self.c.topic_config_manager.build_serialize_wrapper()
        return reply(ResponseCode.SUCCESS, None, None, wrapper.encode())

    def get_topic_name_list(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        body = TopicList(topic_list=self.c.topic_config_manager.topic_names(), broker_addr=self.c.broker_config.broker_addr)
        return reply(ResponseCode.SUCCESS, None, None, body.encode())

    def get_system_topic_list(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        topics = sorted(self.c.topic_config_manager.system_topics)
        return reply(ResponseCode.SUCCESS, None, None, TopicList(topic_list=topics).encode())

    # ------------------------------------------------------------------ broker config

    async def update_broker_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        if not cmd.body:
            return reply(ResponseCode.SUCCESS)
        try:
            values = parse_properties(cmd.body_bytes().decode("utf-8"))
        except UnicodeDecodeError as e:
            return reply(ResponseCode.INVALID_PARAMETER, f"config body is not UTF-8: {e}")
        log.info("update_broker_config", peer=ctx.remote_addr, keys=sorted(values))
        try:
            changed = await self.c.update_config(values)
        except ConfigError as e:
            return reply(ResponseCode.INVALID_PARAMETER, str(e))
        return reply(ResponseCode.SUCCESS, None if changed else "nothing changed")

    def get_broker_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        ext = GetBrokerConfigResponseHeader(version=self.c.config_data_version.encode().decode()).encode()
        return reply(ResponseCode.SUCCESS, None, ext, self.c.broker_config.to_properties().encode())

    # ------------------------------------------------------------------ offsets in the store

    async def search_offset_by_timestamp(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await await_dispatch(self.c.message_store)
        h = decode_header(SearchOffsetRequestHeader, cmd)
        off = self.c.message_store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return reply(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset=off).encode())

    async def get_max_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await await_dispatch(self.c.message_store)
        h = decode_header(TopicQueueRequestHeader, cmd)
        off = self.c.message_store.get_max_offset_in_queue(h.topic, h.queue_id)
        return reply(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset=off).encode())

    async def get_min_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await await_dispatch(self.c.message_store)
        h = decode_header(TopicQueueRequestHeader, cmd)
        # RocketMQ creates a missing consume queue on demand, so a never-used queue starts at 0.
        off = max(0, self.c.message_store.get_min_offset_in_queue(h.topic, h.queue_id))
        return reply(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset=off).encode())

    async def get_earliest_msg_storetime(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await await_dispatch(self.c.message_store)
        h = decode_header(TopicQueueRequestHeader, cmd)
        ts = self.c.message_store.get_earliest_message_time(h.topic, h.queue_id)
        return reply(ResponseCode.SUCCESS, None, GetEarliestMsgStoretimeResponseHeader(timestamp=ts).encode())

    async def query_consume_queue(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_CONSUME_QUEUE (mqadmin queryCq): a consume queue's units from `index`, at most `count` of
        them and, as upstream, none past the end of the file holding `index`; with the queue's bounds and,
        when a group is named, its subscription of the topic and its filter data."""
        await await_dispatch(self.c.message_store)
        h = decode_header(QueryConsumeQueueRequestHeader, cmd)
        cq = self.c.message_store.get_consume_queue(h.topic, h.queue_id)
        if cq is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        body = QueryConsumeQueueResponseBody(
            max_queue_index=cq.get_max_offset_in_queue(), min_queue_index=cq.get_min_offset_in_queue()
        )
        if h.consumer_group is not None:
            sd = self.c.consumer_manager.find_subscription_data(h.consumer_group, h.topic)
            body.subscription_data = sd
            if sd is None:
                body.filter_data = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                fd = self.c.consumer_filter_manager.get(h.topic, h.consumer_group)
                body.filter_data = "null" if fd is None else fd.to_json()  # (Java's JSON of a null)
        found = cq.get_index_buffer(h.index)
        if found is None:
            # Upstream answers this without a body, and its own client then fails decoding nothing (a
            # NullPointerException in mqadmin queryCq); the bounds are worth showing instead.
            return reply(ResponseCode.SUCCESS, f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!", None,
                         body.encode())
        mv, _mf = found
        try:
            n = max(0, min(h.count, len(mv) // CQ_STORE_UNIT_SIZE))
            body.queue_data = [
                ConsumeQueueData(physic_offset=off, physic_size=size, tags_code=tags)
                for off, size, tags in CQ_UNIT.iter_unpack(mv[: n * CQ_STORE_UNIT_SIZE])
            ]
        finally:
            mv.release()  # (a view held on would keep the file's mapping alive past its deletion)
        return reply(ResponseCode.SUCCESS, None, None, body.encode())

    # ------------------------------------------------------------------ store maintenance

    async def clean_expired_consume_queue(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """CLEAN_EXPIRED_CONSUMEQUEUE (mqadmin cleanExpiredCQ): drop the consume queues whose messages the
        commit log no longer holds, and topics left with none; answered when their files are gone."""
        n = await self.c.message_store.clean_expired_consume_queues()
        log.info("clean_expired_consume_queue", queues=n, peer=ctx.remote_addr)
        return reply(ResponseCode.SUCCESS)

    async def resume_check_half_message(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """RESUME_CHECK_HALF_MESSAGE: ask a transaction's producer again about a message whose checks were
        given up (transactionCheckMax) or are pending, by its offset msg id."""
        h = decode_header(ResumeCheckHalfMessageRequestHeader, cmd)
        try:
            _, _, offset = decode_offset_msg_id(h.msg_id)
        except ValueError as e:
            return reply(ResponseCode.SYSTEM_ERROR, f"msgId {h.msg_id!r}: {e}")
        msg = self.c.message_store.look_message_by_offset(offset)
        if msg is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"no message at commit log offset {offset} (msgId {h.msg_id})")
        result = await self.c.transactional_message_service.resume_check(msg)
        if result is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"message {h.msg_id} of topic {msg.topic} is not a transaction's")
        if result.status not in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT):
            return reply(ResponseCode.SYSTEM_ERROR, "Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.")
        return reply(ResponseCode.SUCCESS)

    def delete_expired_commit_log(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_EXPIRED_COMMITLOG (mqadmin deleteExpiredCommitLog): as RocketMQ, the store's next rounds of
        commit log cleaning (up to MAX_MANUAL_DELETE_FILE_TIMES, one each cleanResourceInterval) delete the
        files older than fileReservedTime without waiting for deleteWhen's hour or a full disk."""
        self.c.message_store.execute_delete_files_manually()
        log.info("delete_expired_commit_log", peer=ctx.remote_addr)
        return reply(ResponseCode.SUCCESS)

    async def clean_unused_topic(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """CLEAN_UNUSED_TOPIC (mqadmin cleanUnusedTopic): drop the consume queues of topics this broker has
        no config for (the schedule and transaction op topics excepted, as upstream); answered when their
        files are gone."""
        store = self.c.message_store
        n = store.clean_unused_topic(set(self.c.topic_config_manager.topic_config_table))
        await store.wait_background_io()
        log.info("clean_unused_topic", queues=n, peer=ctx.remote_addr)
        return reply(ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ runtime info and stats

    def prepare_runtime_info(self) -> dict[str, str]:
        c = self.c
        info: dict[str, str] = {}
        try:
            info.update({str(k): str(v) for k, v in c.message_store.runtime_info().items()})
        except Exception as e:  # stats must not fail the request
            log.warning("store_runtime_info_failed", error=str(e))
        info.update(c.broker_stats.runtime_info())
        info["brokerVersionDesc"] = BROKER_VERSION_DESC
        info["brokerVersion"] = str(BROKER_VERSION)
        info["bootTimestamp"] = str(int(c.boot_timestamp * 1000))
        info["runtime"] = _runtime(c.boot_timestamp)
        store = c.message_store
        info.setdefault("commitLogMinOffset", str(store.get_commit_log_min_offset()))
        info.setdefault("commitLogMaxOffset", str(store.get_commit_log_max_offset()))
        for name, cap in (
            ("send", c.broker_config.sendThreadPoolQueueCapacity),
            ("pull", c.broker_config.pullThreadPoolQueueCapacity),
            ("query", c.broker_config.queryThreadPoolQueueCapacity),
        ):
            info[f"{name}ThreadPoolQueueSize"] = str(c.pending_in_group(name))
            info[f"{name}ThreadPoolQueueCapacity"] = str(cap)
            # RocketMQ's mqadmin clusterList prints the send and pull figures as "(size,waitms)"
            info[f"{name}ThreadPoolQueueHeadWaitTimeMills"] = str(c.head_wait_in_group(name))
        info["EndTransactionQueueSize"] = str(c.pending_in_group("end_transaction"))
        info["EndTransactionThreadPoolQueueCapacity"] = str(c.broker_config.endTransactionPoolQueueCapacity)
        info["heldPullRequests"] = str(c.pull_request_hold_service.held)
        schedule = getattr(c, "schedule_message_service", None)
        if schedule is not None:
            info.update(schedule.runtime_info())  # scheduleMessageOffset_<level>, as Java reports
        info["startAcceptSendRequestTimeStamp"] = str(c.broker_config.startAcceptSendRequestTimeStamp)
        root = c.store_config.storePathRootDir
        if os.path.isdir(root):
            try:
                st = os.statvfs(root)  # Java's File.getTotalSpace / getFreeSpace: f_blocks / f_bfree
                total, free = st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize
                info["commitLogDirCapacity"] = f"Total : {_human_bytes(total)}, Free : {_human_bytes(free)}."
            except OSError:
                pass
        return info

    def get_broker_runtime_info(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return reply(ResponseCode.SUCCESS, None, None, KVTable(table=self.prepare_runtime_info()).encode())

    def view_broker_stats_data(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA (`mqadmin statsAll`): one stats item's last minute, hour and day, e.g.
        TOPIC_PUT_NUMS of a topic or GROUP_GET_NUMS of topic@group."""
        h = decode_header(ViewBrokerStatsDataRequestHeader, cmd)
        windows = self.c.broker_stats.view_stats(h.stats_name, h.stats_key)
        if windows is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        minute, hour, day = (BrokerStatsItem(sum=w.sum, tps=w.tps, avgpt=w.avgpt) for w in windows)
        body = BrokerStatsData(stats_minute=minute, stats_hour=hour, stats_day=day)
        return reply(ResponseCode.SUCCESS, None, None, body.encode())

    async def get_topic_stats_info(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await await_dispatch(self.c.message_store)
        h = decode_header(GetTopicStatsInfoRequestHeader, cmd)
        tc = self.c.topic_config_manager.select_topic_config(h.topic)
        if tc is None:
            return reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = self.c.message_store
        table = TopicStatsTable()
        for qid in range(tc.write_queue_nums):
            mq = MessageQueue(topic=h.topic, broker_name=self.c.broker_config.brokerName, queue_id=qid)
            mn = max(0, store.get_min_offset_in_queue(h.topic, qid))
            mx = max(0, store.get_max_offset_in_queue(h.topic, qid))
            ts = store.get_message_store_timestamp(h.topic, qid, mx - 1) if mx > 0 else 0
            table.offset_table[mq] = TopicOffset(min_offset=mn, max_offset=mx, last_update_timestamp=max(0, ts))
        return reply(ResponseCode.SUCCESS, None, None, table.encode())

    async def get_consume_stats(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await await_dispatch(self.c.message_store)
        h = decode_header(GetConsumeStatsRequestHeader, cmd)
        topics = {h.topic} if h.topic else self.c.consumer_offset_manager.which_topic_by_consumer(h.consumer_group)
        stats = ConsumeStats()
        for one in self._consume_stats(h.consumer_group, topics):
            stats.offset_table.update(one.offset_table)
        return reply(ResponseCode.SUCCESS, None, None, stats.encode())

    async def get_broker_consume_stats(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS (`mqadmin brokerConsumeStats`): every subscription group's ConsumeStats
        per topic it has offsets for here (`isOrder`: order topics only), and their total lag."""
        await await_dispatch(self.c.message_store)
        h = decode_header(GetConsumeStatsInBrokerHeader, cmd)
        c = self.c
        per_group: list[dict[str, list[ConsumeStats]]] = []
        total = 0
        for group in sorted(c.subscription_group_manager.subscription_group_table):
            topics = c.consumer_offset_manager.which_topic_by_consumer(group)
            stats = self._consume_stats(group, topics, order_only=h.is_order)
            total += sum(s.total_diff() for s in stats)
            per_group.append({group: stats})
        body = ConsumeStatsList(broker_addr=c.broker_addr, total_diff=total, consume_stats_list=per_group)
        return reply(ResponseCode.SUCCESS, None, None, body.encode())

    def _consume_stats(self, group: str, topics: Iterable[str], order_only: bool = False) -> list[ConsumeStats]:
        """One ConsumeStats per topic of `topics` the group may read here (a topic its online members do
        not subscribe is left out, as upstream does)."""
        c = self.c
        store = c.message_store
        out: list[ConsumeStats] = []
        for topic in sorted(topics):
            tc = c.topic_config_manager.select_topic_config(topic)
            if tc is None or (order_only and not tc.order):
                continue
            if (
                c.consumer_manager.find_subscription_data(group, topic) is None
                and c.consumer_manager.find_subscription_data_count(group) > 0
            ):
                continue
            stats = ConsumeStats()
            for qid in range(tc.read_queue_nums):
                mq = MessageQueue(topic=topic, broker_name=c.broker_config.brokerName, queue_id=qid)
                broker_off = max(0, store.get_max_offset_in_queue(topic, qid))
                consumer_off = max(0, c.consumer_offset_manager.query_offset(group, topic, qid))
                last_ts = 0
                if consumer_off > 0:
                    last_ts = max(0, store.get_message_store_timestamp(topic, qid, consumer_off - 1))
                stats.offset_table[mq] = OffsetWrapper(
                    broker_offset=broker_off, consumer_offset=consumer_off, last_timestamp=last_ts
                )
            out.append(stats)
        return out

    async def query_consume_time_span(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """Per write queue of the topic: store times of the first, last and last-consumed message of the
        group, and how long the first unconsumed message has waited (Java's queryConsumeTimeSpan)."""
        await await_dispatch(self.c.message_store)
        h = decode_header(QueryConsumeTimeSpanRequestHeader, cmd)
        tc = self.c.topic_config_manager.select_topic_config(h.topic)
        if tc is None:
            return reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = self.c.message_store
        offsets = self.c.consumer_offset_manager
        broker_name = self.c.broker_config.brokerName

        def store_time(qid: int, offset: int) -> int:
            # -1 when there is no message at that offset (Java's getMessageStoreTimeStamp).
            return store.get_message_store_timestamp(h.topic, qid, offset) if offset >= 0 else -1

        body = QueryConsumeTimeSpanBody()
        for qid in range(tc.write_queue_nums):
            min_time = store.get_earliest_message_time(h.topic, qid)
            max_offset = store.get_max_offset_in_queue(h.topic, qid)
            consumer_offset = offsets.query_offset(h.group, h.topic, qid)
            consume_time = store_time(qid, consumer_offset - 1) if consumer_offset > 0 else min_time
            delay = 0
            if consumer_offset < max_offset:
                # As Java: with no committed offset (-1) the lookup finds nothing (-1), so the delay
                # is now + 1; tools show it as "never consumed".
                delay = now_ms() - store_time(qid, consumer_offset)
            body.consume_time_span_set.append(
                QueueTimeSpan(
                    message_queue=MessageQueue(topic=h.topic, broker_name=broker_name, queue_id=qid),
                    min_time_stamp=min_time,
                    max_time_stamp=store_time(qid, max_offset - 1),
                    consume_time_stamp=consume_time,
                    delay_time=delay,
                )
            )
        return reply(ResponseCode.SUCCESS, None, None, body.encode())

    # ------------------------------------------------------------------ clients

    def get_consumer_connection_list(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(GetConsumerConnectionListRequestHeader, cmd)
        gi = self.c.consumer_manager.get_consumer_group_info(h.consumer_group)
        if gi is None or not gi.channel_info_table:
            return reply(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumer_group}] not online")
        body = ConsumerConnection(
            consume_type=gi.consume_type,
            message_model=gi.message_model,
            consume_from_where=gi.consume_from_where,
            subscription_table=dict(gi.subscription_table),
            connection_set=[
                Connection(client_id=i.client_id, client_addr=i.remote_addr, language=i.language.name, version=i.version)
                for i in gi.channel_info_table.values()
            ],
        )
        return reply(ResponseCode.SUCCESS, None, None, body.encode())

    def get_producer_connection_list(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(GetProducerConnectionListRequestHeader, cmd)
        table = self.c.producer_manager.get_group_channels(h.producer_group)
        if not table:
            return reply(ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist")
        body = ProducerConnection(
            connection_set=[
                Connection(client_id=i.client_id, client_addr=i.remote_addr, language=i.language.name, version=i.version)
                for i in table.values()
            ]
        )
        return reply(ResponseCode.SUCCESS, None, None, body.encode())

    def get_all_producer_info(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """Every producer group connected here and its clients (`mqadmin producer -b`); no header fields."""
        return reply(ResponseCode.SUCCESS, None, None, self.c.producer_manager.get_producer_table().encode())

    async def get_consumer_status(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """`mqadmin getConsumerStatus`: each client of the group (or the one named by clientAddr, a client
        id) reports its offsets of the topic, relayed by Broker2Client."""
        h = decode_header(GetConsumerStatusRequestHeader, cmd)
        client_id = (h.client_addr or "").strip() or None
        log.info("get_consumer_status", topic=h.topic, group=h.group, client_id=client_id, peer=ctx.remote_addr)
        return await self.c.broker2client.get_consume_status(h.topic, h.group, client_id)

    def query_topic_consume_by_who(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(QueryTopicConsumeByWhoRequestHeader, cmd)
        groups = self.c.consumer_manager.query_topic_consume_by_who(h.topic)
        groups |= self.c.consumer_offset_manager.which_group_by_topic(h.topic)
        return reply(ResponseCode.SUCCESS, None, None, GroupList(group_list=sorted(groups)).encode())

    async def get_consumer_running_info(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(GetConsumerRunningInfoRequestHeader, cmd)
        return await self._call_consumer(
            RequestCode.GET_CONSUMER_RUNNING_INFO, dict(cmd.ext_fields or {}), cmd.body, h.consumer_group, h.client_id
        )

    async def consume_message_directly(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """Hand the message named by msgId (an offsetMsgId of this broker) to one consumer client to consume
        now; answer with its ConsumeMessageDirectlyResult."""
        h = decode_header(ConsumeMessageDirectlyResultRequestHeader, cmd)
        if not h.msg_id:
            return reply(ResponseCode.INVALID_PARAMETER, "CONSUME_MESSAGE_DIRECTLY needs msgId (an offsetMsgId)")
        try:
            _host, _port, offset = decode_offset_msg_id(h.msg_id.strip())
        except ValueError as e:
            return reply(ResponseCode.INVALID_PARAMETER, str(e))
        if self.c.consumer_manager.find_channel(h.consumer_group, h.client_id or "") is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"The Consumer <{h.consumer_group}> <{h.client_id}> not online")
        data = await maybe_await(self.c.message_store.select_one_message_by_offset(offset))
        if data is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset} (msgId {h.msg_id})")
        ext = dict(cmd.ext_fields or {})
        ext["brokerName"] = self.c.broker_config.brokerName
        log.info("consume_message_directly", group=h.consumer_group, client_id=h.client_id, offset=offset,
                 peer=ctx.remote_addr)
        return await self._call_consumer(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, bytes(data), h.consumer_group, h.client_id or ""
        )

    async def _call_consumer(
        self, code: int, ext: dict[str, str], body: bytes | None, group: str, client_id: str
    ) -> RemotingCommand:
        """Forward a request to one consumer client of the group and relay its answer (Java's callConsumer;
        its check for clients older than V3_1_8 is left out: every client we meet answers these codes)."""
        info = self.c.consumer_manager.find_channel(group, client_id)
        if info is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        fwd = RemotingCommand.request(code, ext, body)
        try:
            resp = await self.c.broker2client.call_client(info.conn, fwd, 10000)
        except RemotingTimeoutError as e:
            return reply(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {e}")
        except RemotingError as e:
            return reply(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> failed: {e}")
        return reply(resp.code, resp.remark, resp.ext_fields, resp.body)

    # ------------------------------------------------------------------ orderly locks

    def lock_batch_mq(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            body = LockBatchRequestBody.decode(cmd.body)
        except ValueError as e:
            return reply(ResponseCode.INVALID_PARAMETER, f"bad LOCK_BATCH_MQ body: {str(e).splitlines()[0]}")
        locked = self.c.rebalance_lock_manager.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return reply(ResponseCode.SUCCESS, None, None, LockBatchResponseBody(lock_ok_mq_set=sorted(
            locked, key=lambda m: (m.topic, m.broker_name, m.queue_id))).encode())

    def unlock_batch_mq(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            body = UnlockBatchRequestBody.decode(cmd.body)
        except ValueError as e:
            return reply(ResponseCode.INVALID_PARAMETER, f"bad UNLOCK_BATCH_MQ body: {str(e).splitlines()[0]}")
        self.c.rebalance_lock_manager.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return reply(ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ subscription groups

    def update_and_create_subscription_group(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            cfg = SubscriptionGroupConfig.decode(cmd.body)
        except ValueError as e:
            return reply(ResponseCode.INVALID_PARAMETER, f"bad SubscriptionGroupConfig body: {str(e).splitlines()[0]}")
        if not cfg.group_name or tv.is_topic_or_group_illegal(cfg.group_name):
            return reply(ResponseCode.INVALID_PARAMETER,
                         f"the group name [{cfg.group_name}] is blank or contains illegal characters")
        log.info("update_and_create_subscription_group", group=cfg.group_name, peer=ctx.remote_addr)
        self.c.subscription_group_manager.update_subscription_group_config(cfg)
        return reply(ResponseCode.SUCCESS)

    def get_all_subscription_group(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return reply(ResponseCode.SUCCESS, None, None, self.c.subscription_group_manager.wrapper().encode())

    def delete_subscription_group(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(DeleteSubscriptionGroupRequestHeader, cmd)
        log.info("delete_subscription_group", group=h.group_name, clean_offset=h.clean_offset, peer=ctx.remote_addr)
        self.c.subscription_group_manager.delete_subscription_group_config(h.group_name)
        if h.clean_offset:
            self.c.consumer_offset_manager.remove_offset(h.group_name)
            self.c.consumer_offset_manager.request_persist()
        return reply(ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ consumer offsets

    def get_all_consumer_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return reply(ResponseCode.SUCCESS, None, None, self.c.consumer_offset_manager.encode_snapshot().encode())

    def get_all_delay_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        provider = self.c.delay_offset_provider
        text = provider() if provider is not None else '{"offsetTable":{}}'
        return reply(ResponseCode.SUCCESS, None, None, text.encode())

    def clone_group_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """Copy srcGroup's committed offsets to destGroup for a topic, or for every topic srcGroup has
        offsets of when the topic is blank. Unless `offline`, a topic the source group is online without
        subscribing to is skipped (Java's check)."""
        h = decode_header(CloneGroupOffsetRequestHeader, cmd)
        com = self.c.consumer_offset_manager
        src, dest = h.src_group, h.dest_group
        topic = (h.topic or "").strip()
        topics = {topic} if topic else com.which_topic_by_consumer(src)
        cloned = []
        for t in sorted(topics):
            if self.c.topic_config_manager.select_topic_config(t) is None:
                log.warning("clone_group_offset_topic_not_exist", topic=t)
                continue
            if (
                not h.offline
                and self.c.consumer_manager.find_subscription_data_count(src) > 0
                and self.c.consumer_manager.find_subscription_data(src, t) is None
            ):
                log.warning("clone_group_offset_not_subscribed", group=src, topic=t)
                continue
            # Java 4.9.4 passes the request's topic here, so with a blank topic its loop clones nothing;
            # we clone the loop's topic, which is what the loop is evidently for.
            if com.clone_offset(src, dest, t):
                cloned.append(t)
        if cloned:
            com.request_persist()
        log.info("clone_group_offset", src_group=src, dest_group=dest, topics=cloned, offline=h.offline,
                 peer=ctx.remote_addr)
        return reply(ResponseCode.SUCCESS)

    def reset_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(ResetOffsetRequestHeader, cmd)
        log.info("reset_offset", topic=h.topic, group=h.group, timestamp=h.timestamp, force=h.is_force,
                 peer=ctx.remote_addr)
        return self.c.broker2client.reset_offset(h.topic, h.group, h.timestamp, h.is_force)

