"""Admin: what `mqadmin` does, as coroutines (RocketMQ's DefaultMQAdminExt).

    async with Admin("127.0.0.1:9876") as admin:
        await admin.create_topic("TopicTest", cluster="DefaultCluster", write_queue_nums=4)
        for row in await admin.topic_status("TopicTest"):
            print(row.queue, row.min_offset, row.max_offset)

Results are small dataclasses (or the protocol's pydantic bodies) so callers and the CLI's
`--json` output share one shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from remoting.body import (
    BrokerStatsData,
    ClusterInfo,
    Connection,
    ConsumeMessageDirectlyResult,
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStatsList,
    ProducerConnection,
    ProducerTableInfo,
    QueryConsumeTimeSpanBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    TopicRouteData,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    PullMessageRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
)
from remoting.message import MessageExt, create_offset_msg_id, decode_offset_msg_id
from remoting.version import version_desc

from .config import ClientConfig
from .errors import (
    ConsumerNotOnlineError,
    MQBrokerError,
    MQClientError,
    NotStartedError,
    TopicNotExistError,
    error_for_code,
)
from .instance import MQClientInstance, get_client_manager
from .message import Message, MessageQueue, PullResult, PullStatus, SendResult
from .mq_client_api import MQClientAPIImpl, PullSysFlag, from_body_mq
from .route import MASTER_ID
from .trace import RMQ_SYS_TRACE_TOPIC, TraceContext, decode_trace_data
from .validators import TOOLS_CONSUMER_GROUP, check_topic

log = structlog.get_logger(__name__)

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

__all__ = [
    "Admin",
    "BrokerAddr",
    "ConsumeQueueUnit",
    "ConsumeQueueView",
    "ConsumerProgress",
    "GroupProgress",
    "QueueProgress",
    "QueueTimeSpan",
    "ResetOffsetResult",
    "TopicQueueStatus",
    "TopicTraffic",
]


@dataclass(slots=True)
class BrokerAddr:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str


@dataclass(slots=True)
class TopicQueueStatus:
    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(slots=True)
class QueueProgress:
    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(slots=True)
class ConsumerProgress:
    group: str
    queues: list[QueueProgress] = field(default_factory=list)
    consume_tps: float = 0.0

    @property
    def diff_total(self) -> int:
        return sum(q.diff for q in self.queues)


@dataclass(slots=True)
class TopicTraffic:
    """One row of `statsAll`: a topic's messages in (and, per consuming group, out) over the last minute
    (a second) and day, summed over the topic's masters, and the group's backlog. `group` None: no
    group consumes the topic."""

    topic: str
    group: str | None
    accumulation: int
    in_tps: float
    out_tps: float
    in_msg_24h: int
    out_msg_24h: int


@dataclass(slots=True)
class GroupProgress:
    """One row of `consumerProgress` without -g."""

    group: str
    count: int
    version: str
    consume_type: str
    message_model: str
    consume_tps: float
    diff_total: int


@dataclass(slots=True)
class QueueTimeSpan:
    """One queue of `query_consume_time_span` (RocketMQ's QueueTimeSpan): store timestamps (ms, -1 when
    there is no such message) of the queue's first and last message and of the group's last consumed
    one, and how long (ms) the first unconsumed message has waited (0 when all are consumed)."""

    queue: MessageQueue
    min_timestamp: int
    max_timestamp: int
    consume_timestamp: int
    delay_time: int


@dataclass(slots=True)
class ConsumeQueueUnit:
    """One unit of a consume queue (`queryCq`): where its message is in the commit log, its size and its
    tags code. The rest describe RocketMQ's consume queue ext units, which only a Java broker with them
    enabled reports."""

    index: int
    physic_offset: int
    physic_size: int
    tags_code: int
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


@dataclass(slots=True)
class ConsumeQueueView:
    """`query_consume_queue`'s answer: the queue's bounds (queue offsets), its units from the asked index,
    the group's subscription and filter data when a group was named (filter_data says why when it is not
    online), and the broker's remark (why there are no units)."""

    broker_addr: str
    topic: str
    queue_id: int
    min_queue_index: int
    max_queue_index: int
    units: list[ConsumeQueueUnit] = field(default_factory=list)
    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    remark: str | None = None


@dataclass(slots=True)
class ResetOffsetResult:
    queue: MessageQueue
    offset: int
    broker_offset: int | None = None
    consumer_offset: int | None = None


def to_jsonable(obj: Any) -> Any:
    """Admin results (dataclasses, pydantic bodies, MessageExt, MessageQueue) as plain JSON values."""
    if isinstance(obj, MessageQueue):
        return {"topic": obj.topic, "brokerName": obj.broker_name, "queueId": obj.queue_id}
    if isinstance(obj, MessageExt):
        d = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        body: bytes = d.pop("body")
        try:
            d["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            d["body_hex"] = body.hex()
        d["store_host"] = f"{obj.store_host[0]}:{obj.store_host[1]}"
        d["born_host"] = f"{obj.born_host[0]}:{obj.born_host[1]}"
        d["uniq_key"] = obj.uniq_key
        return d
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        for prop in ("diff", "diff_total"):
            if hasattr(type(obj), prop):
                out[prop] = getattr(obj, prop)
        return out
    if hasattr(obj, "model_dump"):
        return obj.model_dump(by_alias=True, mode="json")
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, MessageQueue) else str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "value") and hasattr(obj, "name"):  # enums
        return obj.value
    return obj


class Admin:
    """Cluster administration over the NameServer and brokers.

    Args:
        namesrv_addr: 'ip:port;ip:port', else $NAMESRV_ADDR.
        timeout: per-request timeout in ms (mqClientApiTimeout).
    """

    def __init__(
        self,
        namesrv_addr: str | None = None,
        *,
        timeout: int = 3000,
        instance_name: str | None = None,
        client_config: ClientConfig | None = None,
    ) -> None:
        cfg = client_config.model_copy() if client_config is not None else ClientConfig()
        if namesrv_addr is not None:
            cfg.namesrv_addr = namesrv_addr
        if instance_name is not None:
            cfg.instance_name = instance_name
        cfg.mq_client_api_timeout = timeout
        self.client_config = cfg
        self.timeout = timeout
        self._instance: MQClientInstance | None = None
        self._producer: Any = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._instance is None:
            self._instance = await get_client_manager().acquire(self.client_config)

    async def shutdown(self) -> None:
        if self._producer is not None:
            p, self._producer = self._producer, None
            await p.shutdown()
        if self._instance is not None:
            inst, self._instance = self._instance, None
            await get_client_manager().release(inst)

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def instance(self) -> MQClientInstance:
        if self._instance is None:
            raise NotStartedError("admin is not started: call start() first")
        return self._instance

    @property
    def api(self) -> MQClientAPIImpl:
        return self.instance.api

    # ------------------------------------------------------------------ cluster
    async def cluster_info(self) -> ClusterInfo:
        return await self.api.get_broker_cluster_info(self.timeout)

    async def cluster_list(self) -> list[BrokerAddr]:
        """Every broker of every cluster: (cluster, broker name, broker id, address), sorted."""
        info = await self.cluster_info()
        rows = []
        for cluster, names in sorted(info.cluster_addr_table.items()):
            for name in sorted(names):
                bd = info.broker_addr_table.get(name)
                if bd is None:
                    continue
                for bid, addr in sorted(bd.broker_addrs.items()):
                    rows.append(BrokerAddr(cluster, name, bid, addr))
        return rows

    async def master_addrs(self, cluster: str) -> dict[str, str]:
        """broker name -> master address of a cluster; MQClientError if the cluster is unknown."""
        info = await self.cluster_info()
        names = info.cluster_addr_table.get(cluster)
        if names is None:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise MQClientError(f"cluster {cluster!r} not found (known clusters: {known})")
        out = {}
        for name in sorted(names):
            bd = info.broker_addr_table.get(name)
            if bd is not None and MASTER_ID in bd.broker_addrs:
                out[name] = bd.broker_addrs[MASTER_ID]
        return out

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        return await self.api.get_broker_runtime_info(broker_addr, self.timeout)

    async def get_broker_config(self, broker_addr: str) -> dict[str, str]:
        return await self.api.get_broker_config(broker_addr, self.timeout)

    async def update_broker_config(
        self, key: str, value: str, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        addrs = await self._target_addrs(broker_addr, cluster)
        for addr in addrs:
            await self.api.update_broker_config(addr, {key: value}, self.timeout)
        return addrs

    async def _broker_call(
        self, addr: str, code: int, ext: dict[str, str], timeout_ms: float | None = None
    ) -> RemotingCommand:
        """One request to a broker; an error answer raises its typed MQBrokerError."""
        resp = await self.api.remoting.invoke(
            addr, RemotingCommand.request(code, ext), timeout_ms or self.timeout
        )
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_code(resp.code, resp.remark, addr)
        return resp

    async def _target_addrs(self, broker_addr: str | None, cluster: str | None) -> list[str]:
        if broker_addr:
            return [broker_addr]
        if cluster:
            addrs = list((await self.master_addrs(cluster)).values())
            if not addrs:
                raise MQClientError(f"cluster {cluster!r} has no master broker")
            return addrs
        raise MQClientError("give a broker address (-b) or a cluster name (-c)")

    async def _cluster_broker_addrs(self, cluster: str | None) -> list[str]:
        """Every broker (masters and slaves) of `cluster`, or of every cluster when None: whom RocketMQ's
        cleanExpiredCQ / cleanUnusedTopic ask without -b."""
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise MQClientError(f"cluster {cluster!r} not found (known clusters: {known})")
        clusters = [cluster] if cluster is not None else sorted(info.cluster_addr_table)
        addrs: list[str] = []
        for c in clusters:
            for name in sorted(info.cluster_addr_table[c]):
                bd = info.broker_addr_table.get(name)
                if bd is not None:
                    addrs.extend(addr for _bid, addr in sorted(bd.broker_addrs.items()) if addr not in addrs)
        return addrs

    # ------------------------------------------------------------------ store maintenance
    async def _each_broker(
        self, call: Callable[[str], Awaitable[None]], broker_addr: str | None, cluster: str | None
    ) -> list[str]:
        """`call` on `broker_addr`, else on every broker of `cluster`, else of every cluster (as RocketMQ's
        tools without -b); returns the brokers asked."""
        addrs = [broker_addr] if broker_addr else await self._cluster_broker_addrs(cluster)
        for addr in addrs:
            await call(addr)
        return addrs

    async def clean_expired_consume_queue(
        self, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        """`cleanExpiredCQ`: have brokers drop the consume queues whose messages are all deleted (and topics
        left with none): `broker_addr`, else every broker of `cluster`, else of every cluster. Returns the
        brokers asked."""
        # A broker answers once the files are deleted: with thousands of queues that is not quick.
        return await self._each_broker(
            lambda addr: self.api.clean_expired_consume_queue(addr, self.timeout * 10), broker_addr, cluster
        )

    async def resume_check_half_message(self, msg_id: str) -> str:
        """`resumeCheckHalfMessage`: have the broker ask a transaction's producer again about a message whose
        checks were given up (after transactionCheckMax; it is kept in TRANS_CHECK_MAX_TIME_TOPIC). `msg_id` is
        that message's offset msg id, which names its broker. Returns the broker's address."""
        try:
            host, port, _ = decode_offset_msg_id(msg_id.strip())
        except ValueError as e:
            raise MQClientError(f"msgId {msg_id!r} is not an offset msg id: {e}") from None
        addr = f"{host}:{port}"
        await self.api.resume_check_half_message(addr, msg_id.strip(), self.timeout)
        return addr

    async def delete_expired_commit_log(
        self, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        """`deleteExpiredCommitLog`: have brokers delete their commit log files older than fileReservedTime in
        their next cleaning rounds, not only at deleteWhen's hour: as clean_expired_consume_queue for whom.
        Returns the brokers asked."""
        return await self._each_broker(
            lambda addr: self.api.delete_expired_commit_log(addr, self.timeout), broker_addr, cluster
        )

    async def clean_unused_topic(self, *, broker_addr: str | None = None, cluster: str | None = None) -> list[str]:
        """`cleanUnusedTopic`: have brokers drop the consume queues of topics they have no config for: as
        clean_expired_consume_queue for whom. Returns the brokers asked."""
        return await self._each_broker(
            lambda addr: self.api.clean_unused_topic(addr, self.timeout * 10), broker_addr, cluster
        )

    async def query_consume_queue(
        self,
        topic: str,
        queue_id: int,
        index: int,
        count: int = 10,
        *,
        group: str | None = None,
        broker_addr: str | None = None,
    ) -> ConsumeQueueView:
        """`queryCq`: up to `count` units of a consume queue from queue offset `index` (a broker gives none
        past the end of the file holding `index`), on `broker_addr`, else on the topic's first broker (by
        name; RocketMQ's tool takes the route's first). With `group`: its subscription and filter data."""
        if not broker_addr:
            route = await self.topic_route(topic)
            by_name = sorted(route.broker_datas, key=lambda b: b.broker_name)
            addrs = [a for bd in by_name if (a := bd.select_broker_addr())]
            if not addrs:
                raise MQClientError(f"No topic route data of {topic}: no broker serves it")
            broker_addr = addrs[0]
        body, remark = await self.api.query_consume_queue(
            broker_addr, topic, queue_id, index, count, group, self.timeout
        )
        units = [
            ConsumeQueueUnit(
                index + i, d.physic_offset, d.physic_size, d.tags_code, d.extend_data_json, d.bit_map, d.eval, d.msg
            )
            for i, d in enumerate(body.queue_data or [])
        ]
        return ConsumeQueueView(
            broker_addr, topic, queue_id, body.min_queue_index, body.max_queue_index, units,
            body.subscription_data, body.filter_data, remark,
        )

    # ------------------------------------------------------------------ topics
    async def create_topic(
        self,
        topic: str,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = 6,
        order: bool = False,
    ) -> list[str]:
        """Create or update a topic on one broker or on every master of a cluster; returns the addresses."""
        check_topic(topic)
        addrs = await self._target_addrs(broker_addr, cluster)
        for addr in addrs:
            await self.api.create_topic(
                addr,
                topic,
                read_queue_nums=read_queue_nums,
                write_queue_nums=write_queue_nums,
                perm=perm,
                order=order,
                timeout_ms=self.timeout,
            )
        if order:
            await self._update_order_conf(
                topic, addrs, write_queue_nums, replace=cluster is not None and not broker_addr
            )
        return addrs

    async def _update_order_conf(self, topic: str, addrs: list[str], nums: int, *, replace: bool) -> None:
        info = await self.cluster_info()
        by_addr = {a: name for name, bd in info.broker_addr_table.items() for a in bd.broker_addrs.values()}
        conf: dict[str, int] = {}
        if not replace:
            try:
                old = await self.api.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic, self.timeout)
            except MQBrokerError:
                old = None
            for item in (old or "").split(";"):
                name, sep, n = item.partition(":")
                if sep and n.isdigit():
                    conf[name] = int(n)
        for a in addrs:
            name = by_addr.get(a)
            if name:
                conf[name] = nums
        value = ";".join(f"{k}:{v}" for k, v in conf.items())
        if value:
            await self.api.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic, value, self.timeout)

    async def delete_topic(self, topic: str, cluster: str) -> list[str]:
        """Delete a topic from every master of the cluster and from every NameServer."""
        addrs = list((await self.master_addrs(cluster)).values())
        for addr in addrs:
            await self.api.delete_topic_in_broker(addr, topic, self.timeout)
        await self.api.delete_topic_in_name_server(topic, cluster, self.timeout)
        return addrs

    async def topic_list(self) -> list[str]:
        return sorted(await self.api.get_topic_list_from_name_server(self.timeout))

    async def topic_cluster_list(self) -> list[tuple[str, str, list[str]]]:
        """`topicList -c`: (cluster, topic, consumer groups) for every non-system topic."""
        info = await self.cluster_info()
        topics = await self.topic_list()
        rows = []
        for topic in topics:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                continue
            try:
                route = await self.topic_route(topic)
            except (MQBrokerError, MQClientError):
                continue
            clusters = _clusters_of(info, route)
            groups: set[str] = set()
            for bd in route.broker_datas:
                addr = bd.select_broker_addr()
                if addr is None:
                    continue
                try:
                    groups.update(await self.api.query_topic_consume_by_who(addr, topic, self.timeout))
                except (MQBrokerError, RemotingError):
                    pass
            rows.append((",".join(clusters) or "-", topic, sorted(groups)))
        return rows

    async def topic_clusters(self, topic: str) -> list[str]:
        """`topicClusterList`: the clusters of the brokers that hold `topic`."""
        route = await self.topic_route(topic)
        return _clusters_of(await self.cluster_info(), route)

    async def topic_route(self, topic: str) -> TopicRouteData:
        """The NameServer's route; TopicNotExistError for an unknown topic."""
        return await self.api.get_topic_route_info_from_name_server(topic, self.timeout)

    async def topic_status(self, topic: str) -> list[TopicQueueStatus]:
        """Min/max offset and last update time of every queue of the topic, on every broker."""
        route = await self.topic_route(topic)
        rows: list[TopicQueueStatus] = []
        for bd in route.broker_datas:
            addr = bd.select_broker_addr()
            if addr is None:
                continue
            table = await self.api.get_topic_stats_info(addr, topic, self.timeout)
            for mq, off in table.offset_table.items():
                rows.append(
                    TopicQueueStatus(
                        from_body_mq(mq), off.min_offset, off.max_offset, off.last_update_timestamp
                    )
                )
        if not rows:
            raise MQClientError(f"Not found the topic stats info of {topic}")
        rows.sort(key=lambda r: r.queue)
        return rows

    async def _broker_addr_of(self, topic: str, broker_name: str) -> str:
        route = await self.topic_route(topic)
        for bd in route.broker_datas:
            if bd.broker_name == broker_name:
                addr = bd.select_broker_addr()
                if addr:
                    return addr
        raise MQClientError(f"broker {broker_name!r} is not in the route of topic {topic}")

    async def topic_queues(self, topic: str, *, readable: bool = True) -> list[MessageQueue]:
        route = await self.topic_route(topic)
        out = []
        for qd in route.queue_datas:
            n = qd.read_queue_nums if readable else qd.write_queue_nums
            out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(n))
        return sorted(out)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.api.get_max_offset(
            await self._broker_addr_of(mq.topic, mq.broker_name), mq.topic, mq.queue_id
        )

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.api.get_min_offset(
            await self._broker_addr_of(mq.topic, mq.broker_name), mq.topic, mq.queue_id
        )

    async def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        addr = await self._broker_addr_of(mq.topic, mq.broker_name)
        return await self.api.search_offset(addr, mq.topic, mq.queue_id, timestamp, self.timeout)

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        addr = await self._broker_addr_of(mq.topic, mq.broker_name)
        return await self.api.get_earliest_msg_storetime(addr, mq.topic, mq.queue_id, self.timeout)

    # ------------------------------------------------------------------ subscription groups and consumers
    async def create_subscription_group(
        self,
        group: str,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
        consume_enable: bool = True,
        consume_from_min_enable: bool = False,
        consume_broadcast_enable: bool = False,
        retry_queue_nums: int = 1,
        retry_max_times: int = 16,
        broker_id: int = 0,
        which_broker_when_consume_slowly: int = 1,
        notify_consumer_ids_changed_enable: bool = True,
    ) -> list[str]:
        config = SubscriptionGroupConfig(
            group_name=group,
            consume_enable=consume_enable,
            consume_from_min_enable=consume_from_min_enable,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_queue_nums=retry_queue_nums,
            retry_max_times=retry_max_times,
            broker_id=broker_id,
            which_broker_when_consume_slowly=which_broker_when_consume_slowly,
            notify_consumer_ids_changed_enable=notify_consumer_ids_changed_enable,
        )
        addrs = await self._target_addrs(broker_addr, cluster)
        for addr in addrs:
            await self.api.create_subscription_group(addr, config, self.timeout)
        return addrs

    async def delete_subscription_group(
        self,
        group: str,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
        remove_offset: bool = False,
    ) -> list[str]:
        addrs = await self._target_addrs(broker_addr, cluster)
        for addr in addrs:
            await self.api.delete_subscription_group(addr, group, remove_offset, self.timeout)
        return addrs

    async def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Per queue: broker offset, consumer offset, lag; with the group's consume TPS (examineConsumeStats)."""
        addrs = await self._group_broker_addrs(group)
        progress = ConsumerProgress(group)
        for addr in addrs:
            try:
                stats = await self.api.get_consume_stats(addr, group, topic, self.timeout * 3)
            except (MQBrokerError, RemotingError) as e:
                log.debug("consume_stats_failed", broker=addr, group=group, error=str(e))
                continue
            progress.consume_tps += stats.consume_tps
            for mq, w in stats.offset_table.items():
                progress.queues.append(
                    QueueProgress(from_body_mq(mq), w.broker_offset, w.consumer_offset, w.last_timestamp)
                )
        if not progress.queues:
            raise MQClientError(
                f"Not found the consumer group {group} consume stats, because return offset table is empty, "
                "maybe the consumer not consume any message"
            )
        progress.queues.sort(key=lambda q: q.queue)
        return progress

    async def _group_broker_addrs(self, group: str) -> list[str]:
        """Masters that may hold the group's offsets: its retry topic's brokers, else every master."""
        try:
            route = await self.topic_route(RETRY_GROUP_TOPIC_PREFIX + group)
            addrs = [a for bd in route.broker_datas if (a := bd.select_broker_addr())]
            if addrs:
                return addrs
        except TopicNotExistError:
            pass
        info = await self.cluster_info()
        return [
            bd.broker_addrs[MASTER_ID]
            for bd in info.broker_addr_table.values()
            if MASTER_ID in bd.broker_addrs
        ]

    async def view_broker_stats_data(self, broker_addr: str, stats_name: str, stats_key: str) -> BrokerStatsData:
        """One of a broker's stats items (RocketMQ's names: TOPIC_PUT_NUMS / TOPIC_PUT_SIZE keyed by topic,
        GROUP_GET_NUMS / GROUP_GET_SIZE by topic@group, BROKER_PUT_NUMS / BROKER_GET_NUMS by cluster)."""
        return await self.api.view_broker_stats_data(broker_addr, stats_name, stats_key, self.timeout)

    async def stats_all(self, topic: str | None = None, *, active_only: bool = False) -> list[TopicTraffic]:
        """`statsAll`: every topic's (or one's) traffic in and, per consuming group, out; retry and DLQ
        topics left out. `active_only`: only rows with messages in or out over the last day."""
        topics = [topic] if topic else sorted(
            t for t in await self.topic_list()
            if not t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
        )
        rows: list[TopicTraffic] = []
        for t in topics:
            try:
                route = await self.topic_route(t)
            except (MQBrokerError, MQClientError, RemotingError):
                continue
            masters = [bd.broker_addrs[MASTER_ID] for bd in route.broker_datas if MASTER_ID in bd.broker_addrs]
            in_tps, in_day = await self._traffic(masters, "TOPIC_PUT_NUMS", t)
            groups: set[str] = set()
            for addr in masters:
                with contextlib.suppress(MQBrokerError, RemotingError):
                    groups.update(await self.api.query_topic_consume_by_who(addr, t, self.timeout))
            if not groups:
                if not active_only or in_day > 0:
                    rows.append(TopicTraffic(t, None, 0, in_tps, 0.0, in_day, 0))
                continue
            for group in sorted(groups):
                out_tps, out_day = await self._traffic(masters, "GROUP_GET_NUMS", f"{t}@{group}")
                try:
                    backlog = max(0, (await self.consumer_progress(group, t)).diff_total)
                except (MQBrokerError, MQClientError, RemotingError):
                    backlog = 0
                if not active_only or in_day > 0 or out_day > 0:
                    rows.append(TopicTraffic(t, group, backlog, in_tps, out_tps, in_day, out_day))
        return rows

    async def _traffic(self, masters: list[str], stats_name: str, stats_key: str) -> tuple[float, int]:
        """The item's last minute's rate and last day's count over `masters` (a broker without the item adds
        nothing); the day's count falls back to the hour's, then the minute's, as RocketMQ's statsAll does."""
        tps, day = 0.0, 0
        for addr in masters:
            try:
                data = await self.api.view_broker_stats_data(addr, stats_name, stats_key, self.timeout)
            except (MQBrokerError, RemotingError):
                continue
            tps += data.stats_minute.tps
            day += data.stats_day.sum or data.stats_hour.sum or data.stats_minute.sum
        return tps, day

    async def consumer_groups(self) -> list[str]:
        """Groups known from their retry topics (as `consumerProgress` without -g does)."""
        return sorted(
            t[len(RETRY_GROUP_TOPIC_PREFIX) :]
            for t in await self.topic_list()
            if t.startswith(RETRY_GROUP_TOPIC_PREFIX)
        )

    async def all_consumer_progress(self) -> list[GroupProgress]:
        rows = []
        for group in await self.consumer_groups():
            try:
                p = await self.consumer_progress(group)
                tps, diff = p.consume_tps, p.diff_total
            except MQClientError:
                tps, diff = 0.0, 0
            conn: ConsumerConnection | None
            try:
                conn = await self.consumer_connection(group)
            except (MQBrokerError, MQClientError, RemotingError):
                conn = None
            if conn is not None and conn.connection_set:
                versions = {version_desc(c.version) for c in conn.connection_set}  # (names, as Java's tool)
                rows.append(
                    GroupProgress(
                        group,
                        len(conn.connection_set),
                        ",".join(sorted(versions)),
                        conn.consume_type or "",
                        conn.message_model or "",
                        tps,
                        diff,
                    )
                )
            else:
                rows.append(GroupProgress(group, 0, "OFFLINE", "", "", tps, diff))
        return rows

    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """Who is connected for the group (asks a broker of the group's retry topic, else each master)."""
        last: BaseException | None = None
        for addr in await self._group_broker_addrs(group):
            try:
                conn = await self.api.get_consumer_connection_list(addr, group, self.timeout)
            except (MQBrokerError, RemotingError) as e:
                last = e
                continue
            if conn.connection_set:
                return conn
        if isinstance(last, MQBrokerError):
            raise last
        raise ConsumerNotOnlineError(206, f"the consumer group[{group}] not online")

    async def producer_connection(self, group: str, topic: str) -> ProducerConnection:
        """`producerConnection`: the producers of `group` connected to the brokers of `topic` (every master
        asked, where RocketMQ's examineProducerConnectionInfo asks one at random); MQClientError when none."""
        route = await self.topic_route(topic)
        found: dict[str, Connection] = {}
        for bd in route.broker_datas:
            addr = bd.select_broker_addr()
            if addr is None:
                continue
            try:
                pc = await self.api.get_producer_connection_list(addr, group, self.timeout)
            except (MQBrokerError, RemotingError):
                continue  # (SYSTEM_ERROR "not exist": no producer of the group on that broker)
            for c in pc.connection_set:
                found.setdefault(c.client_id, c)
        if not found:
            raise MQClientError(f"Not found the producer group connection: no producer of group {group} is "
                                f"connected to the brokers of topic {topic}")
        return ProducerConnection(connection_set=[found[k] for k in sorted(found)])

    async def broker_consume_stats(
        self, broker_addr: str, *, is_order: bool = False, timeout_ms: float | None = None
    ) -> ConsumeStatsList:
        """`brokerConsumeStats`: every subscription group's progress on one broker (order topics only with
        `is_order`), with the broker's total lag."""
        return await self.api.fetch_consume_stats_in_broker(broker_addr, is_order, timeout_ms or self.timeout)

    async def consumer_running_info(self, group: str, client_id: str, *, jstack: bool = False) -> ConsumerRunningInfo:
        """`consumerStatus -i`: what one consumer client reports of itself (ConsumerRunningInfo: properties,
        subscriptions, each assigned queue's state and each topic's pull and consume figures, a thread dump
        with `jstack`), asked through a broker it is connected to."""
        last: BaseException | None = None
        for addr in await self._group_broker_addrs(group):
            try:
                return await self.api.get_consumer_running_info(addr, group, client_id, jstack, self.timeout)
            except (MQBrokerError, RemotingError) as e:
                last = e
        if last is not None:
            raise last
        raise ConsumerNotOnlineError(206, f"the consumer group[{group}] not online")

    async def consume_status(
        self, topic: str, group: str, client_id: str | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        """`getConsumerStatus`: client id -> the offsets of `topic` that each online client of `group` (only
        `client_id` when given) holds in its offset store (consumed up to there; the brokers get them at its
        next offset persist), asked through a broker of the topic (INVOKE_BROKER_TO_GET_CONSUMER_STATUS).
        RocketMQ's getConsumeStatus asks the route's first broker only; here a broker that fails (the group
        not online there yet, say) is followed by the next."""
        route = await self.topic_route(topic)
        last: BaseException | None = None
        for bd in route.broker_datas:
            addr = bd.select_broker_addr()
            if addr is None:
                continue
            try:
                # The broker waits up to 3 s for its clients: give it that on top of the request's own time.
                return await self.api.invoke_broker_to_get_consumer_status(
                    addr, topic, group, client_id, self.timeout + 5000
                )
            except (MQBrokerError, RemotingError) as e:
                log.debug("consume_status_failed", broker=addr, group=group, topic=topic, error=str(e))
                last = e
        if last is not None:
            raise last
        raise MQClientError(f"topic {topic} has no broker to ask for the consumer status of group {group}")

    async def all_producer_info(self, broker_addr: str) -> ProducerTableInfo:
        """`producer -b`: every producer group connected to one broker and, per connection, the client id,
        its address, language, version and last heartbeat time (GET_ALL_PRODUCER_INFO, RocketMQ 4.9.4+)."""
        return await self.api.get_all_producer_info(broker_addr, self.timeout)

    async def consumer_ids(self, group: str) -> list[str]:
        conn = await self.consumer_connection(group)
        return sorted(c.client_id for c in conn.connection_set)

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp: int, *, force: bool = True
    ) -> list[ResetOffsetResult]:
        """Move the group's offsets of `topic` to the first message stored at/after `timestamp` (ms).

        Online consumers are told by the brokers (INVOKE_BROKER_TO_RESET_OFFSET); when the group is
        offline, the offsets are computed here and committed with UPDATE_CONSUMER_OFFSET (Java's
        resetOffsetByTimestampOld). Without `force`, an offset only moves backwards.
        """
        route = await self.topic_route(topic)
        results: list[ResetOffsetResult] = []
        offline: list[tuple[str, str, int]] = []
        for bd in route.broker_datas:
            addr = bd.select_broker_addr()
            if addr is None:
                continue
            try:
                table = await self.api.invoke_broker_to_reset_offset(
                    addr, topic, group, timestamp, force=force, timeout_ms=self.timeout
                )
                results.extend(ResetOffsetResult(mq, off) for mq, off in table.items())
            except ConsumerNotOnlineError:
                nums = next(
                    (q.read_queue_nums for q in route.queue_datas if q.broker_name == bd.broker_name), 0
                )
                offline.append((addr, bd.broker_name, nums))
        for addr, name, nums in offline:
            for qid in range(nums):
                mq = MessageQueue(topic, name, qid)
                ts_offset = (
                    await self.api.get_max_offset(addr, topic, qid, self.timeout)
                    if timestamp == -1
                    else await self.api.search_offset(addr, topic, qid, timestamp, self.timeout)
                )
                try:
                    current = await self.api.query_consumer_offset(addr, group, topic, qid, self.timeout)
                except MQBrokerError:
                    current = None
                broker_max = await self.api.get_max_offset(addr, topic, qid, self.timeout)
                if force or current is None or ts_offset <= current:
                    await self.api.update_consumer_offset(addr, group, topic, qid, ts_offset, self.timeout)
                    new = ts_offset
                else:
                    new = current
                results.append(ResetOffsetResult(mq, new, broker_max, current))
        results.sort(key=lambda r: r.queue)
        return results

    async def update_consume_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        addr = await self._broker_addr_of(mq.topic, mq.broker_name)
        await self.api.update_consumer_offset(addr, group, mq.topic, mq.queue_id, offset, self.timeout)

    async def clone_group_offset(
        self, src_group: str, dest_group: str, topic: str | None = None, offline: bool = False
    ) -> list[str]:
        """Copy src_group's committed offsets to dest_group on every broker of src_group (CLONE_GROUP_OFFSET):
        for `topic`, or for every topic src_group has offsets of when topic is None/blank. Unless
        `offline`, a broker skips a topic src_group is online without subscribing to. Returns the brokers
        asked."""
        header = CloneGroupOffsetRequestHeader(
            src_group=src_group, dest_group=dest_group, topic=(topic or "").strip() or None, offline=offline
        )
        addrs = await self._group_broker_addrs(src_group)
        for addr in addrs:
            await self._broker_call(addr, RequestCode.CLONE_GROUP_OFFSET, header.encode(), self.timeout * 3)
        return addrs

    async def query_consume_time_span(self, topic: str, group: str) -> list[QueueTimeSpan]:
        """Per queue of the topic (every broker): the store-time span of its messages, the store time of
        the group's last consumed message and its delay (QUERY_CONSUME_TIME_SPAN)."""
        route = await self.topic_route(topic)
        header = QueryConsumeTimeSpanRequestHeader(topic=topic, group=group).encode()
        rows: list[QueueTimeSpan] = []
        for bd in route.broker_datas:
            addr = bd.select_broker_addr()
            if addr is None:
                continue
            resp = await self._broker_call(addr, RequestCode.QUERY_CONSUME_TIME_SPAN, header)
            if not resp.body:
                continue
            for span in QueryConsumeTimeSpanBody.decode(resp.body).consume_time_span_set:
                rows.append(
                    QueueTimeSpan(
                        from_body_mq(span.message_queue),
                        span.min_time_stamp,
                        span.max_time_stamp,
                        span.consume_time_stamp,
                        span.delay_time,
                    )
                )
        rows.sort(key=lambda r: r.queue)
        return rows

    async def consume_message_directly(
        self, group: str, client_id: str, msg_id: str, topic: str | None = None
    ) -> ConsumeMessageDirectlyResult:
        """Have one online consumer client (`client_id` of `group`) consume a stored message now, through
        the broker that stores it (CONSUME_MESSAGE_DIRECTLY); returns the client's result. `msg_id` as for
        view_message: an offsetMsgId, or a UNIQ_KEY id with its topic."""
        msg = await self.view_message(msg_id, topic)
        host, port = msg.store_host
        header = ConsumeMessageDirectlyResultRequestHeader(
            consumer_group=group,
            client_id=client_id,
            msg_id=create_offset_msg_id(host, port, msg.commit_log_offset),
        )
        addr = f"{host}:{port}"
        resp = await self._broker_call(
            addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, header.encode(), self.timeout * 3
        )
        if not resp.body:
            raise MQClientError(f"consumer <{group}> <{client_id}> answered CONSUME_MESSAGE_DIRECTLY without a result")
        return ConsumeMessageDirectlyResult.decode(resp.body)

    # ------------------------------------------------------------------ messages
    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """Find a message by id: an offsetMsgId goes to the broker it names (VIEW_MESSAGE_BY_ID); a
        UNIQ_KEY id is looked up by key on every broker of `topic` (the topic is needed then)."""
        msg_id = msg_id.strip()
        known = await self._known_broker_addrs()
        try:
            host, port, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            host, port, offset = "", 0, -1
        addr = f"{host}:{port}"
        last: BaseException | None = None
        # Try the broker the id names only if it is a known broker (a UNIQ_KEY id also decodes, as junk);
        # if the cluster could not be listed, try it anyway.
        if offset >= 0 and 0 < port < 65536 and (addr in known or not known):
            try:
                return await self.api.view_message(addr, offset, self.timeout)
            except (MQBrokerError, RemotingError) as e:
                last = e
        if topic:
            found = await self.query_message_by_unique_key(topic, msg_id)
            if found is not None:
                return found
            raise MQClientError(f"no message with id {msg_id} in topic {topic}")
        if last is not None:
            raise MQClientError(f"message {msg_id} not found at {addr}: {last}") from last
        raise MQClientError(
            f"{msg_id} is not the offsetMsgId of a known broker; give its topic (-t) to look it up as a UNIQ_KEY id"
        )

    async def _known_broker_addrs(self) -> set[str]:
        try:
            info = await self.cluster_info()
        except (MQBrokerError, RemotingError):
            return set()
        return {a for bd in info.broker_addr_table.values() for a in bd.broker_addrs.values()}

    async def query_message_by_unique_key(self, topic: str, uniq_id: str) -> MessageExt | None:
        """The (earliest stored) message whose UNIQ_KEY is `uniq_id`, or None."""
        msgs = await self._query(topic, uniq_id, 32, 0, 2**63 - 1, unique=True)
        hits = [m for m in msgs if m.uniq_key == uniq_id]
        if not hits:
            return None
        return min(hits, key=lambda m: m.store_timestamp)

    async def query_message_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 64,
        begin_timestamp: int = 0,
        end_timestamp: int = 2**63 - 1,
    ) -> list[MessageExt]:
        """Messages of `topic` whose KEYS contain `key` (from the brokers' indexes)."""
        msgs = await self._query(topic, key, max_num, begin_timestamp, end_timestamp, unique=False)
        out = [m for m in msgs if m.topic == topic and key in (m.keys or "").split(" ")]
        out.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
        return out

    async def query_msg_trace(self, msg_id: str, trace_topic: str | None = None) -> list[TraceContext]:
        """`queryMsgTraceById`: the trace records of a message (its Pub, and each consumer group's SubBefore and
        SubAfter), read from the trace topic by the message id, oldest first."""
        topic = trace_topic or RMQ_SYS_TRACE_TOPIC
        out: list[TraceContext] = []
        try:
            msgs = await self.query_message_by_key(topic, msg_id, max_num=512)
        except TopicNotExistError:
            return out  # (nothing was ever traced to that topic)
        for m in msgs:
            for ctx in decode_trace_data(m.body.decode("utf-8", "replace")):
                if any(b.msg_id == msg_id for b in ctx.trace_beans):
                    out.append(ctx)
        out.sort(key=lambda c: c.time_stamp)
        return out

    async def _query(
        self, topic: str, key: str, max_num: int, begin: int, end: int, *, unique: bool
    ) -> list[MessageExt]:
        route = await self.topic_route(topic)
        addrs = [a for bd in route.broker_datas if (a := bd.select_broker_addr())]

        async def one(addr: str) -> list[MessageExt]:
            try:
                _ts, msgs = await self.api.query_message(
                    addr,
                    topic,
                    key,
                    max_num=max_num,
                    begin_timestamp=begin,
                    end_timestamp=end,
                    unique_key=unique,
                    timeout_ms=self.timeout,
                )
                return msgs
            except (MQBrokerError, RemotingError) as e:
                log.warning("query_message_failed", broker=addr, topic=topic, key=key, error=str(e))
                return []

        found = await asyncio.gather(*(one(a) for a in addrs))
        return [m for msgs in found for m in msgs]

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        group: str = TOOLS_CONSUMER_GROUP,
        subscription: str = "*",
    ) -> PullResult:
        """One PULL_MESSAGE without group membership (no commit, no suspend)."""
        addr = await self._broker_addr_of(mq.topic, mq.broker_name)
        header = PullMessageRequestHeader(
            consumer_group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=PullSysFlag.build(False, False, True),
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription=subscription,
            sub_version=0,
            expression_type="TAG",
        )
        return await self.api.pull_message(addr, header, self.timeout)

    async def query_message_by_offset(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> MessageExt:
        mq = MessageQueue(topic, broker_name, queue_id)
        result = await self.pull(mq, offset, 1)
        if result.status is not PullStatus.FOUND or not result.messages:
            raise MQClientError(
                f"no message at offset {offset} of {topic}/{broker_name}/{queue_id} "
                f"({result.status.value}; queue offsets {result.min_offset}..{result.max_offset})"
            )
        return result.messages[0]

    async def consume_messages(
        self,
        topic: str,
        *,
        broker_name: str | None = None,
        queue_id: int | None = None,
        offset: int | None = None,
        count: int = 128,
        begin_timestamp: int | None = None,
        end_timestamp: int | None = None,
        group: str = TOOLS_CONSUMER_GROUP,
        subscription: str = "*",
    ) -> list[MessageExt]:
        """Pull up to `count` messages (per the whole call) without joining the group.

        Queues: the one given (broker_name + queue_id) or all of the topic. Start: `offset`, else the
        offset of `begin_timestamp`, else the queue's min offset; stop at `end_timestamp` if given.
        """
        if (broker_name is None) != (queue_id is None):
            raise MQClientError("give both the broker name (-b) and the queue id (-i), or neither")
        queues = (
            [MessageQueue(topic, broker_name, queue_id)]
            if broker_name is not None and queue_id is not None
            else None
        )
        if queues is None:
            queues = await self.topic_queues(topic)
        out: list[MessageExt] = []
        for mq in queues:
            if len(out) >= count:
                break
            addr = await self._broker_addr_of(topic, mq.broker_name)
            if offset is not None:
                pos = offset
            elif begin_timestamp is not None:
                pos = await self.api.search_offset(addr, topic, mq.queue_id, begin_timestamp, self.timeout)
            else:
                pos = await self.api.get_min_offset(addr, topic, mq.queue_id, self.timeout)
            end_offset = await self.api.get_max_offset(addr, topic, mq.queue_id, self.timeout)
            if end_timestamp is not None:
                end_offset = min(
                    end_offset,
                    await self.api.search_offset(addr, topic, mq.queue_id, end_timestamp, self.timeout),
                )
            while pos < end_offset and len(out) < count:
                res = await self.pull(
                    mq, pos, min(32, count - len(out)), group=group, subscription=subscription
                )
                if res.status is PullStatus.FOUND:
                    for m in res.messages:
                        if end_timestamp is not None and m.store_timestamp > end_timestamp:
                            pos = end_offset
                            break
                        out.append(m)
                if res.status is PullStatus.OFFSET_ILLEGAL or res.next_begin_offset <= pos:
                    break
                pos = res.next_begin_offset
        return out[:count]

    async def send_message(
        self,
        topic: str,
        body: bytes | str,
        *,
        keys: str | list[str] | None = None,
        tags: str | None = None,
        broker_name: str | None = None,
        queue_id: int | None = None,
    ) -> SendResult:
        """Send one message (to a given queue when broker_name and queue_id are given)."""
        producer = await self._tool_producer()
        msg = Message(topic, body, tags=tags, keys=keys)
        if broker_name is not None or queue_id is not None:
            if broker_name is None or queue_id is None:
                raise MQClientError("give both the broker name (-b) and the queue id (-i), or neither")
            return await producer.send(msg, queue=MessageQueue(topic, broker_name, queue_id))
        return await producer.send(msg)

    async def send_and_consume_test_message(
        self, topic: str, body: bytes | str | None = None, *, timeout_s: float = 10.0
    ) -> tuple[SendResult, MessageExt]:
        """Send a message and pull it back by its queue offset; checks the body round-trips."""
        payload = body if body is not None else f"admin test message {time.time_ns()}"
        data = payload.encode() if isinstance(payload, str) else payload
        result = await self.send_message(topic, data)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = await self.query_message_by_offset(
                    topic, result.queue.broker_name, result.queue.queue_id, result.queue_offset
                )
                break
            except MQClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        if msg.body != data:
            raise MQClientError(
                f"test message read back differs from what was sent (offset {result.queue_offset})"
            )
        return result, msg

    async def _tool_producer(self) -> Any:
        if self._producer is None:
            from .producer.producer import Producer

            p = Producer(f"PID_SMSC_{int(time.time() * 1000)}", client_config=self.client_config)
            await p.start()
            self._producer = p
        return self._producer

    # ------------------------------------------------------------------ NameServer config and KV
    async def get_namesrv_config(self, addrs: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
        return await self.api.get_namesrv_config(addrs, self.timeout)

    async def update_namesrv_config(self, key: str, value: str, addrs: Iterable[str] | None = None) -> None:
        await self.api.update_namesrv_config({key: value}, addrs, self.timeout)

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        return await self.api.get_kv_config(namespace, key, self.timeout)

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        await self.api.put_kv_config(namespace, key, value, self.timeout)

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        await self.api.delete_kv_config(namespace, key, self.timeout)

    async def get_kv_list(self, namespace: str) -> dict[str, str]:
        return await self.api.get_kv_list_by_namespace(namespace, self.timeout)

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        return {
            a: await self.api.wipe_write_perm_of_broker(a, broker_name, self.timeout)
            for a in self.api.namesrv_addrs
        }

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        return {
            a: await self.api.add_write_perm_of_broker(a, broker_name, self.timeout)
            for a in self.api.namesrv_addrs
        }


def _clusters_of(info: ClusterInfo, route: TopicRouteData) -> list[str]:
    names = {bd.broker_name for bd in route.broker_datas}
    return sorted(c for c, brokers in info.cluster_addr_table.items() if names & set(brokers))
