"""JSON request/response bodies (RocketMQ's RemotingSerializable classes), as pydantic models.

Field names on the wire are RocketMQ's camelCase; Python attributes are snake_case. Used for
route, registration, heartbeat and admin bodies: never on the per-message hot path.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from . import jsonutil


class Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def encode(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str | None) -> Self:
        if data is None or len(data) == 0:
            raise ValueError(f"{cls.__name__}: empty body")
        return cls.model_validate(jsonutil.loads(data))


class DataVersion(Body):
    timestamp: int = Field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0

    def next_version(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def same(self, other: DataVersion | None) -> bool:
        return other is not None and self.timestamp == other.timestamp and self.counter == other.counter


class TopicConfig(Body):
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


class TopicConfigSerializeWrapper(Body):
    topic_config_table: dict[str, TopicConfig] = Field(default_factory=dict)
    data_version: DataVersion = Field(default_factory=DataVersion)


class RegisterBrokerBody(Body):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = Field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = Field(default_factory=list)


class QueueData(Body):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


class BrokerData(Body):
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = Field(default_factory=dict)

    def select_broker_addr(self) -> str | None:
        """The master's address if present, else any."""
        addr = self.broker_addrs.get(0)
        if addr is None and self.broker_addrs:
            addr = next(iter(self.broker_addrs.values()))
        return addr


class TopicRouteData(Body):
    order_topic_conf: str | None = None
    queue_datas: list[QueueData] = Field(default_factory=list)
    broker_datas: list[BrokerData] = Field(default_factory=list)
    filter_server_table: dict[str, list[str]] = Field(default_factory=dict)


class ClusterInfo(Body):
    broker_addr_table: dict[str, BrokerData] = Field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = Field(default_factory=dict)


class TopicList(Body):
    topic_list: list[str] = Field(default_factory=list)
    broker_addr: str | None = None


class KVTable(Body):
    table: dict[str, str] = Field(default_factory=dict)


class SubscriptionData(Body):
    class_filter_mode: bool = False
    topic: str
    sub_string: str = "*"
    tags_set: list[str] = Field(default_factory=list)
    code_set: list[int] = Field(default_factory=list)
    sub_version: int = Field(default_factory=lambda: int(time.time() * 1000))
    expression_type: str = "TAG"
    filter_class_source: str | None = None


class ConsumerData(Body):
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: list[SubscriptionData] = Field(default_factory=list)
    unit_mode: bool = False


class ProducerData(Body):
    group_name: str


class HeartbeatData(Body):
    client_id: str = Field(alias="clientID")
    producer_data_set: list[ProducerData] = Field(default_factory=list)
    consumer_data_set: list[ConsumerData] = Field(default_factory=list)


class CheckClientRequestBody(Body):
    """CHECK_CLIENT_CONFIG's body: a consumer asks whether the broker can filter by this subscription."""

    client_id: str
    group: str
    subscription_data: SubscriptionData


class GetConsumerListByGroupResponseBody(Body):
    consumer_id_list: list[str] = Field(default_factory=list)


class MessageQueue(Body):
    """A queue as it appears in bodies. Hashable so it can key dicts and sets."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:  # Java's toString, also the key of MQ-keyed maps in JSON output
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def key_json(self) -> str:
        """fastjson writes a map keyed by MessageQueue with the object as the key."""
        return json.dumps(
            {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic},
            separators=(",", ":"),
            sort_keys=True,
        )


def _mq_from_key(key: Any) -> MessageQueue:
    if isinstance(key, MessageQueue):
        return key
    return MessageQueue.model_validate(json.loads(key) if isinstance(key, str) else key)


class LockBatchRequestBody(Body):
    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = Field(default_factory=list)


class UnlockBatchRequestBody(LockBatchRequestBody):
    pass


class LockBatchResponseBody(Body):
    lock_ok_mq_set: list[MessageQueue] = Field(default_factory=list, alias="lockOKMQSet")


class Connection(Body):
    client_id: str
    client_addr: str
    language: str = "JAVA"
    version: int = 0


class ConsumerConnection(Body):
    connection_set: list[Connection] = Field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = Field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


class ProducerConnection(Body):
    connection_set: list[Connection] = Field(default_factory=list)


class SubscriptionGroupConfig(Body):
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True


class SubscriptionGroupWrapper(Body):
    subscription_group_table: dict[str, SubscriptionGroupConfig] = Field(default_factory=dict)
    data_version: DataVersion = Field(default_factory=DataVersion)


class OffsetWrapper(Body):
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0


class TopicOffset(Body):
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


class _MQKeyed(Body):
    """Bodies with a map keyed by MessageQueue (the field MQ_FIELD), written the fastjson way."""

    MQ_FIELD: ClassVar[str] = "offset_table"

    def encode(self) -> bytes:
        field = self.MQ_FIELD
        data = self.model_dump(by_alias=True, exclude={field})
        items = ",".join(
            f"{mq.key_json()}:{v.model_dump_json(by_alias=True) if isinstance(v, BaseModel) else json.dumps(v)}"
            for mq, v in getattr(self, field).items()
        )
        rest = json.dumps(data, separators=(",", ":"))[1:-1]
        return ("{" + (rest + "," if rest else "") + f'"{to_camel(field)}":{{' + items + "}}").encode()

    @field_validator("offset_table", "mq_table", mode="before", check_fields=False)
    @classmethod
    def _keys(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {_mq_from_key(k): val for k, val in v.items()}
        return v


class ConsumeStats(_MQKeyed):
    offset_table: dict[MessageQueue, OffsetWrapper] = Field(default_factory=dict)
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        return sum(max(0, w.broker_offset - w.consumer_offset) for w in self.offset_table.values())


class ConsumeStatsList(Body):
    """GET_BROKER_CONSUME_STATS's body: per subscription group (a one-entry map each, as upstream's list of
    maps), its ConsumeStats per topic."""

    broker_addr: str = ""
    total_diff: int = 0
    total_inflight_diff: int = 0
    consume_stats_list: list[dict[str, list[ConsumeStats]]] = Field(default_factory=list)

    def encode(self) -> bytes:
        groups = ",".join(
            "{" + ",".join(
                json.dumps(g) + ":[" + ",".join(cs.encode().decode() for cs in stats) + "]" for g, stats in m.items()
            ) + "}"
            for m in self.consume_stats_list
        )
        head = json.dumps(
            {"brokerAddr": self.broker_addr, "totalDiff": self.total_diff, "totalInflightDiff": self.total_inflight_diff},
            separators=(",", ":"),
        )[1:-1]
        return ("{" + head + ',"consumeStatsList":[' + groups + "]}").encode()


class BrokerStatsItem(Body):
    """One window of a broker stats item: the count, a second on average, and per put or pull."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


class BrokerStatsData(Body):
    """VIEW_BROKER_STATS_DATA's body: the item's last minute, hour and day."""

    stats_minute: BrokerStatsItem = Field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = Field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = Field(default_factory=BrokerStatsItem)


class TopicStatsTable(_MQKeyed):
    offset_table: dict[MessageQueue, TopicOffset] = Field(default_factory=dict)


class ResetOffsetBody(_MQKeyed):
    offset_table: dict[MessageQueue, int] = Field(default_factory=dict)


class ProcessQueueInfo(Body):
    """One queue of a push consumer as it reports it (ConsumerRunningInfo.mqTable): commit offset, cache,
    orderly lock state. Java's getter names, "droped" included."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = Field(default=0, alias="cachedMsgSizeInMiB")
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0


class ConsumeStatus(Body):
    """A consumer's figures for one topic (ConsumerRunningInfo.statusTable): pull and consume round trips
    (ms) and rates (messages a second) over the last minute, failed messages over the last hour."""

    pull_rt: float = Field(default=0.0, alias="pullRT")
    pull_tps: float = Field(default=0.0, alias="pullTPS")
    consume_rt: float = Field(default=0.0, alias="consumeRT")
    consume_ok_tps: float = Field(default=0.0, alias="consumeOKTPS")
    consume_failed_tps: float = Field(default=0.0, alias="consumeFailedTPS")
    consume_failed_msgs: int = Field(default=0, alias="consumeFailedMsgs")


class ConsumerRunningInfo(_MQKeyed):
    """GET_CONSUMER_RUNNING_INFO's answer: what a consumer client reports of itself (mqadmin consumerStatus,
    the dashboard's client detail)."""

    MQ_FIELD: ClassVar[str] = "mq_table"
    properties: dict[str, str] = Field(default_factory=dict)
    subscription_set: list[SubscriptionData] = Field(default_factory=list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = Field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = Field(default_factory=dict)
    jstack: str | None = None


def _mq_offsets_json(table: dict[MessageQueue, int]) -> str:
    """A map MessageQueue -> offset as fastjson writes it: each key the queue's JSON object."""
    return "{" + ",".join(f"{mq.key_json()}:{int(off)}" for mq, off in table.items()) + "}"


class GetConsumerStatusBody(Body):
    """GET_CONSUMER_STATUS_FROM_CLIENT's answer (a client's offsets of one topic, messageQueueTable) and
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS's (each asked client's table, by client id: consumerTable).
    Both maps are keyed by MessageQueue objects, fastjson's way, so Java peers read and write them."""

    message_queue_table: dict[MessageQueue, int] = Field(default_factory=dict)
    consumer_table: dict[str, dict[MessageQueue, int]] = Field(default_factory=dict)

    def encode(self) -> bytes:
        clients = ",".join(
            f"{json.dumps(cid)}:{_mq_offsets_json(table)}" for cid, table in self.consumer_table.items()
        )
        own = _mq_offsets_json(self.message_queue_table)
        return ('{"consumerTable":{' + clients + '},"messageQueueTable":' + own + "}").encode()

    @field_validator("message_queue_table", mode="before")
    @classmethod
    def _mq_keys(cls, v: Any) -> Any:
        return {_mq_from_key(k): off for k, off in v.items()} if isinstance(v, dict) else v

    @field_validator("consumer_table", mode="before")
    @classmethod
    def _client_mq_keys(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        return {
            cid: {_mq_from_key(k): off for k, off in t.items()} if isinstance(t, dict) else t
            for cid, t in v.items()
        }


class ProducerInfo(Body):
    """One producer connection in GET_ALL_PRODUCER_INFO's answer (RocketMQ 4.9.4+'s ProducerInfo)."""

    client_id: str
    remote_ip: str = Field(default="", alias="remoteIP")  # Java's SocketAddress.toString(): "/ip:port"
    language: str = "JAVA"
    version: int = 0
    last_update_timestamp: int = 0


class ProducerTableInfo(Body):
    """GET_ALL_PRODUCER_INFO's answer: each producer group on a broker, with its connections."""

    data: dict[str, list[ProducerInfo]] = Field(default_factory=dict)


class ConsumeQueueData(Body):
    """One consume queue unit as QUERY_CONSUME_QUEUE reports it. The ext fields (extendDataJson, bitMap,
    eval, msg) describe RocketMQ's consume queue ext units, which this store does not write: they stay unset."""

    physic_offset: int = 0
    physic_size: int = 0
    tags_code: int = 0
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


class QueryConsumeQueueResponseBody(Body):
    """QUERY_CONSUME_QUEUE's answer: the queue's bounds (queue offsets), its units from the asked index
    and, when a group was named, the group's subscription of the topic and its filter data (a JSON text,
    or why there is none)."""

    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    queue_data: list[ConsumeQueueData] | None = None
    max_queue_index: int = 0
    min_queue_index: int = 0

    def encode(self) -> bytes:
        # fastjson leaves null fields out; RocketMQ's tool tests the fields it prints for null either way.
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class ConsumeMessageDirectlyResult(Body):
    order: bool = False
    auto_commit: bool = True
    consume_result: str | None = None
    remark: str | None = None
    spent_time_mills: int = 0


# ------------------------------------------------------------------ REGISTER_BROKER body codec

# Bound on the inflated size of a compressed register body (a zip bomb must not eat the heap).
MAX_REGISTER_BODY_INFLATED = 256 * 1024 * 1024


def _decode_compressed_register_body(data: bytes | bytearray | memoryview) -> RegisterBrokerBody:
    """RocketMQ 4.9.4's RegisterBrokerBody.encode(true) form, inflated.

    zlib stream of: int32 len + DataVersion JSON, int32 topic count, per topic int32 len +
    TopicConfig.encode() text (`name read write perm filterType`, space separated), then int32
    len + filterServerList JSON. Big-endian ints. topicSysFlag/order are not carried (as in Java).
    """
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(bytes(data), MAX_REGISTER_BODY_INFLATED + 1)
    except zlib.error as e:
        raise ValueError(f"compressed register body does not inflate: {e}") from None
    if len(raw) > MAX_REGISTER_BODY_INFLATED:
        raise ValueError(f"compressed register body inflates beyond {MAX_REGISTER_BODY_INFLATED} bytes")
    view = memoryview(raw)
    pos = 0

    def read_chunk(what: str) -> bytes:
        nonlocal pos
        if pos + 4 > len(view):
            raise ValueError(f"compressed register body truncated before the length of {what}")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise ValueError(f"compressed register body: bad length {n} for {what}")
        chunk = bytes(view[pos : pos + n])
        pos += n
        return chunk

    data_version = DataVersion.decode(read_chunk("dataVersion"))
    if pos + 4 > len(view):
        raise ValueError("compressed register body truncated before the topic count")
    (count,) = struct.unpack_from(">i", view, pos)
    pos += 4
    if count < 0:
        raise ValueError(f"compressed register body: bad topic count {count}")
    table: dict[str, TopicConfig] = {}
    for i in range(count):
        text = read_chunk(f"topic config #{i}").decode("utf-8")
        parts = text.split(" ")
        if len(parts) != 5:
            raise ValueError(f"compressed register body: bad topic config {text!r}")
        try:
            tc = TopicConfig(
                topic_name=parts[0],
                read_queue_nums=int(parts[1]),
                write_queue_nums=int(parts[2]),
                perm=int(parts[3]),
                topic_filter_type=parts[4],
            )
        except ValueError:
            raise ValueError(f"compressed register body: bad topic config {text!r}") from None
        table[tc.topic_name] = tc
    filter_servers = jsonutil.loads(read_chunk("filterServerList") or b"[]")
    if filter_servers is None:
        filter_servers = []
    if not isinstance(filter_servers, list):
        raise ValueError("compressed register body: filterServerList is not a list")
    return RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table=table, data_version=data_version
        ),
        filter_server_list=[str(s) for s in filter_servers],
    )


def encode_register_broker_body(body: RegisterBrokerBody, compressed: bool = False) -> bytes:
    """Encode a REGISTER_BROKER body: JSON, or Java's compressed binary form when compressed."""
    if not compressed:
        return body.encode()
    wrapper = body.topic_config_serialize_wrapper
    out = bytearray()

    def chunk(b: bytes) -> None:
        out.extend(struct.pack(">i", len(b)))
        out.extend(b)

    chunk(wrapper.data_version.encode())
    out.extend(struct.pack(">i", len(wrapper.topic_config_table)))
    for tc in wrapper.topic_config_table.values():
        chunk(
            f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type}".encode()
        )
    chunk(jsonutil.dumps(list(body.filter_server_list)))
    return zlib.compress(bytes(out), 9)


def decode_register_broker_body(
    data: bytes | bytearray | memoryview | None, compressed: bool = False
) -> RegisterBrokerBody:
    """Decode a REGISTER_BROKER body in any shape a broker sends.

    - empty: no topics, data version {timestamp 0, counter 0} (what Java's namesrv assumes);
    - compressed=True: Java's deflated binary form (RegisterBrokerBody.encode(true));
    - JSON RegisterBrokerBody `{"topicConfigSerializeWrapper":{...},"filterServerList":[...]}`;
    - JSON TopicConfigSerializeWrapper `{"topicConfigTable":{...},"dataVersion":{...}}` (brokers
      before V3_0_11 send the wrapper alone).
    Raises ValueError naming what is wrong.
    """
    if data is None or len(data) == 0:
        return RegisterBrokerBody(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
                data_version=DataVersion(timestamp=0, counter=0)
            )
        )
    if compressed:
        return _decode_compressed_register_body(data)
    try:
        obj = jsonutil.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"register body is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError("register body is not a JSON object")
    if "topicConfigSerializeWrapper" in obj or "filterServerList" in obj:
        return RegisterBrokerBody.model_validate(obj)
    if "topicConfigTable" in obj or "dataVersion" in obj:
        return RegisterBrokerBody(topic_config_serialize_wrapper=TopicConfigSerializeWrapper.model_validate(obj))
    raise ValueError(
        "register body has neither topicConfigSerializeWrapper (RegisterBrokerBody) "
        "nor topicConfigTable (TopicConfigSerializeWrapper)"
    )


class GroupList(Body):
    """QUERY_TOPIC_CONSUME_BY_WHO answer: the consumer groups of a topic."""

    group_list: list[str] = Field(default_factory=list)


class QueueTimeSpan(Body):
    """One queue of a QUERY_CONSUME_TIME_SPAN answer (store timestamps in ms; -1 when unknown)."""

    message_queue: MessageQueue
    min_time_stamp: int = 0
    max_time_stamp: int = 0
    consume_time_stamp: int = 0
    delay_time: int = 0


class QueryConsumeTimeSpanBody(Body):
    consume_time_span_set: list[QueueTimeSpan] = Field(default_factory=list)
