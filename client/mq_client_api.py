"""MQClientAPIImpl: one coroutine per RocketMQ request the client makes, over one RemotingClient.

Every method builds the request, awaits the answer and turns it into Python values or a typed
error (errors.error_for_code). Requests to "the NameServer" go through `invoke_namesrv`, which
tries each configured address in turn, starting from the last one that answered, and raises
NoNameServerError ("no available NameServer") when none does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from remoting.body import (
    BrokerStatsData,
    CheckClientRequestBody,
    ClusterInfo,
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStats,
    ConsumeStatsList,
    GetConsumerListByGroupResponseBody,
    GetConsumerStatusBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProducerConnection,
    ProducerTableInfo,
    QueryConsumeQueueResponseBody,
    ResetOffsetBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
    UnlockBatchRequestBody,
)
from remoting.body import MessageQueue as BodyMessageQueue
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.errors import (
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from remoting.headers import (
    SEND_V2_SHORT_NAMES,
    SERIALIZE_TYPES_EXT_FIELD,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerStatusRequestHeader,
    PullMessageRequestHeader,
    QueryConsumeQueueRequestHeader,
)
from remoting.message import MessageConst, MessageExt, decode_message, decode_messages
from remoting.properties import parse_properties

from .errors import MQBrokerError, NoNameServerError, error_for_code
from .message import MessageQueue, PullResult, PullStatus, SendResult, SendStatus

log = structlog.get_logger(__name__)

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
DEFAULT_TRACE_REGION_ID = "DefaultRegion"
_MSG_REGION = MessageConst.PROPERTY_MSG_REGION
_TRACE_SWITCH = MessageConst.PROPERTY_TRACE_SWITCH

# Keyed by plain ints: a response's code is an int, and an int key matching an IntEnum key costs a rich
# comparison per lookup (once per send).
_SEND_STATUS = {
    int(ResponseCode.SUCCESS): SendStatus.SEND_OK,
    int(ResponseCode.FLUSH_DISK_TIMEOUT): SendStatus.FLUSH_DISK_TIMEOUT,
    int(ResponseCode.FLUSH_SLAVE_TIMEOUT): SendStatus.FLUSH_SLAVE_TIMEOUT,
    int(ResponseCode.SLAVE_NOT_AVAILABLE): SendStatus.SLAVE_NOT_AVAILABLE,
}
_NO_FIELDS: dict[str, str] = {}
_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullSysFlag:
    FLAG_COMMIT_OFFSET = 0x1
    FLAG_SUSPEND = 0x1 << 1
    FLAG_SUBSCRIPTION = 0x1 << 2
    FLAG_CLASS_FILTER = 0x1 << 3
    FLAG_LITE_PULL_MESSAGE = 0x1 << 4

    @staticmethod
    def build(commit_offset: bool, suspend: bool, subscription: bool, class_filter: bool = False) -> int:
        flag = 0
        if commit_offset:
            flag |= PullSysFlag.FLAG_COMMIT_OFFSET
        if suspend:
            flag |= PullSysFlag.FLAG_SUSPEND
        if subscription:
            flag |= PullSysFlag.FLAG_SUBSCRIPTION
        if class_filter:
            flag |= PullSysFlag.FLAG_CLASS_FILTER
        return flag


def to_body_mq(mq: MessageQueue) -> BodyMessageQueue:
    return BodyMessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)


def from_body_mq(mq: BodyMessageQueue) -> MessageQueue:
    return MessageQueue(mq.topic, mq.broker_name, mq.queue_id)


def properties_to_string(props: Mapping[str, object]) -> str:
    """Java's MixAll.properties2String: key=value lines."""
    lines = []
    for k, v in props.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        lines.append(f"{k}={'' if v is None else v}")
    return "\n".join(lines) + ("\n" if lines else "")


def send_header_v2(
    *,
    producer_group: str,
    topic: str,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str,
    default_topic: str = "TBW102",
    default_topic_queue_nums: int = 4,
    reconsume_times: int = 0,
    unit_mode: bool = False,
    batch: bool = False,
    max_reconsume_times: int | None = None,
) -> dict[str, str]:
    """SendMessageRequestHeaderV2 ext fields (short names a..m), all values already strings."""
    ext = {
        "a": producer_group,
        "b": topic,
        "c": default_topic,
        "d": str(default_topic_queue_nums),
        "e": str(queue_id),
        "f": str(sys_flag),
        "g": str(born_timestamp),
        "h": str(flag),
        "i": properties,
        "j": str(reconsume_times),
        "k": "true" if unit_mode else "false",
        "m": "true" if batch else "false",
    }
    if max_reconsume_times is not None:
        ext["l"] = str(max_reconsume_times)
    return ext




def send_header_v1(ext_v2: Mapping[str, str]) -> dict[str, str]:
    """The same header with SEND_MESSAGE's long field names (for old brokers, sendSmartMsg=false)."""
    return {SEND_V2_SHORT_NAMES[k]: v for k, v in ext_v2.items()}


class MQClientAPIImpl:
    """Typed request/response calls to brokers and NameServers."""

    def __init__(
        self,
        remoting_client: RemotingClient,
        namesrv_addrs: Iterable[str],
        *,
        default_timeout_ms: float = 3000,
    ) -> None:
        self.remoting = remoting_client
        self._namesrv_addrs = list(namesrv_addrs)
        self._namesrv_index = 0
        self.default_timeout_ms = default_timeout_ms

    # ------------------------------------------------------------------ NameServer plumbing
    @property
    def namesrv_addrs(self) -> list[str]:
        return list(self._namesrv_addrs)

    def update_namesrv_addrs(self, addrs: Iterable[str]) -> None:
        new = list(addrs)
        if new != self._namesrv_addrs:
            self._namesrv_addrs = new
            self._namesrv_index = 0

    @property
    def chosen_namesrv(self) -> str | None:
        if not self._namesrv_addrs:
            return None
        return self._namesrv_addrs[self._namesrv_index % len(self._namesrv_addrs)]

    async def invoke_namesrv(
        self, cmd: RemotingCommand, timeout_ms: float | None = None
    ) -> tuple[RemotingCommand, str]:
        """Send to the current NameServer, failing over to the next on connect/transport errors."""
        addrs = self._namesrv_addrs
        if not addrs:
            raise NoNameServerError("no NameServer address configured")
        timeout = timeout_ms or self.default_timeout_ms
        n = len(addrs)
        start = self._namesrv_index % n
        failures: list[str] = []
        last: RemotingError | None = None
        for i in range(n):
            idx = (start + i) % n
            addr = addrs[idx]
            try:
                resp = await self.remoting.invoke(addr, cmd, timeout)
            except (
                RemotingConnectError,
                RemotingConnectionClosedError,
                RemotingSendRequestError,
                RemotingTimeoutError,
            ) as e:
                last = e
                failures.append(f"{addr}: {e}")
                if isinstance(e, RemotingTimeoutError):
                    # Do not reuse a connection that stopped answering.
                    self.remoting.close_connection(addr)
                log.debug("namesrv_failover", addr=addr, error=str(e))
                continue
            if idx != self._namesrv_index:
                if failures:
                    log.info("namesrv_switched", to=addr, failed=len(failures))
                self._namesrv_index = idx
            return resp, addr
        raise NoNameServerError("no available NameServer: " + "; ".join(failures)) from last

    async def _namesrv_call(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout_ms: float | None = None,
    ) -> tuple[RemotingCommand, str]:
        resp, addr = await self.invoke_namesrv(RemotingCommand.request(code, ext, body), timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_code(resp.code, resp.remark, addr)
        return resp, addr

    async def _each_namesrv(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout_ms: float | None = None,
    ) -> dict[str, RemotingCommand]:
        """Send to every NameServer (KV and config writes); raises the last error response."""
        if not self._namesrv_addrs:
            raise NoNameServerError("no NameServer address configured")
        out: dict[str, RemotingCommand] = {}
        err: MQBrokerError | None = None
        for addr in self._namesrv_addrs:
            resp = await self.remoting.invoke(
                addr,
                RemotingCommand.request(code, dict(ext) if ext else None, body),
                timeout_ms or self.default_timeout_ms,
            )
            out[addr] = resp
            if resp.code != ResponseCode.SUCCESS:
                err = error_for_code(resp.code, resp.remark, addr)
        if err is not None:
            raise err
        return out

    # ------------------------------------------------------------------ broker plumbing
    async def _call(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes | bytearray | memoryview | None = None,
        timeout_ms: float | None = None,
    ) -> RemotingCommand:
        resp = await self.remoting.invoke(
            addr, RemotingCommand.request(code, ext, body), timeout_ms or self.default_timeout_ms
        )
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_code(resp.code, resp.remark, addr)
        return resp

    # ------------------------------------------------------------------ routes and cluster (NameServer)
    async def get_topic_route_info_from_name_server(
        self, topic: str, timeout_ms: float | None = None
    ) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; TopicNotExistError when the NameServer knows no such topic."""
        resp, addr = await self._namesrv_call(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout_ms=timeout_ms
        )
        if not resp.body:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST, f"empty route for topic {topic}", addr)
        return TopicRouteData.decode(resp.body)

    async def get_topic_list_from_name_server(self, timeout_ms: float | None = None) -> list[str]:
        resp, _ = await self._namesrv_call(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout_ms=timeout_ms
        )
        return TopicList.decode(resp.body).topic_list if resp.body else []

    async def get_topics_by_cluster(self, cluster: str, timeout_ms: float | None = None) -> list[str]:
        resp, _ = await self._namesrv_call(
            RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}, timeout_ms=timeout_ms
        )
        return TopicList.decode(resp.body).topic_list if resp.body else []

    async def get_system_topic_list_from_ns(self, timeout_ms: float | None = None) -> list[str]:
        resp, _ = await self._namesrv_call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, timeout_ms=timeout_ms)
        return TopicList.decode(resp.body).topic_list if resp.body else []

    async def get_broker_cluster_info(self, timeout_ms: float | None = None) -> ClusterInfo:
        resp, _ = await self._namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO, timeout_ms=timeout_ms)
        return ClusterInfo.decode(resp.body) if resp.body else ClusterInfo()

    async def delete_topic_in_name_server(
        self, topic: str, cluster_name: str | None = None, timeout_ms: float | None = None
    ) -> None:
        ext = {"topic": topic}
        if cluster_name:
            ext["clusterName"] = cluster_name
        await self._each_namesrv(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext, timeout_ms=timeout_ms)

    async def wipe_write_perm_of_broker(
        self, namesrv_addr: str, broker_name: str, timeout_ms: float | None = None
    ) -> int:
        resp = await self._call(
            namesrv_addr,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER,
            {"brokerName": broker_name},
            timeout_ms=timeout_ms,
        )
        return int((resp.ext_fields or {}).get("wipeTopicCount", 0))

    async def add_write_perm_of_broker(
        self, namesrv_addr: str, broker_name: str, timeout_ms: float | None = None
    ) -> int:
        resp = await self._call(
            namesrv_addr,
            RequestCode.ADD_WRITE_PERM_OF_BROKER,
            {"brokerName": broker_name},
            timeout_ms=timeout_ms,
        )
        return int((resp.ext_fields or {}).get("addTopicCount", 0))

    async def get_kv_config(self, namespace: str, key: str, timeout_ms: float | None = None) -> str | None:
        resp, _ = await self._namesrv_call(
            RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key}, timeout_ms=timeout_ms
        )
        v = (resp.ext_fields or {}).get("value")
        return None if v is None else str(v)

    async def put_kv_config(
        self, namespace: str, key: str, value: str, timeout_ms: float | None = None
    ) -> None:
        await self._each_namesrv(
            RequestCode.PUT_KV_CONFIG,
            {"namespace": namespace, "key": key, "value": value},
            timeout_ms=timeout_ms,
        )

    async def delete_kv_config(self, namespace: str, key: str, timeout_ms: float | None = None) -> None:
        await self._each_namesrv(
            RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key}, timeout_ms=timeout_ms
        )

    async def get_kv_list_by_namespace(
        self, namespace: str, timeout_ms: float | None = None
    ) -> dict[str, str]:
        resp, _ = await self._namesrv_call(
            RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": namespace}, timeout_ms=timeout_ms
        )
        return KVTable.decode(resp.body).table if resp.body else {}

    async def get_namesrv_config(
        self, addrs: Iterable[str] | None = None, timeout_ms: float | None = None
    ) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for addr in list(addrs or self._namesrv_addrs):
            resp = await self._call(addr, RequestCode.GET_NAMESRV_CONFIG, timeout_ms=timeout_ms)
            out[addr] = parse_properties(resp.body_bytes().decode("utf-8", "replace"))
        return out

    async def update_namesrv_config(
        self, props: Mapping[str, object], addrs: Iterable[str] | None = None, timeout_ms: float | None = None
    ) -> None:
        body = properties_to_string(props).encode()
        for addr in list(addrs or self._namesrv_addrs):
            await self._call(addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=body, timeout_ms=timeout_ms)

    # ------------------------------------------------------------------ send
    def process_send_response(
        self, broker_name: str, topic: str, uniq_id: str, response: RemotingCommand, addr: str,
        mq: MessageQueue | None = None,
    ) -> SendResult:
        """`mq`: the queue the request went to; reused as the result's queue when the broker kept it."""
        status = _SEND_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise error_for_code(response.code, response.remark, addr)
        ext = response.ext_fields or _NO_FIELDS
        try:
            queue_id = int(ext["queueId"])
            queue_offset = int(ext["queueOffset"])
        except (KeyError, ValueError) as e:
            raise error_for_code(
                ResponseCode.SYSTEM_ERROR, f"bad send response header from {addr}: {e!r}", addr
            ) from None
        # Header values are strings from every codec; str() only for anything else (once per send).
        offset_msg_id = ext.get("msgId", "")
        if offset_msg_id.__class__ is not str:
            offset_msg_id = str(offset_msg_id)
        tx = ext.get("transactionId")
        if tx is not None and tx.__class__ is not str:
            tx = str(tx)
        region = ext.get(_MSG_REGION) or DEFAULT_TRACE_REGION_ID
        if region.__class__ is not str:
            region = str(region)
        if mq is None or mq.queue_id != queue_id or mq.topic != topic or mq.broker_name != broker_name:
            mq = MessageQueue(topic, broker_name, queue_id)
        return SendResult(
            status, uniq_id, offset_msg_id, mq, queue_offset, tx, region, ext.get(_TRACE_SWITCH) != "false"
        )

    @staticmethod
    def build_send_request(
        ext_v2: dict[str, str],
        body: bytes | bytearray | memoryview,
        *,
        batch: bool = False,
        smart: bool = True,
    ) -> RemotingCommand:
        if batch:
            return RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=ext_v2, body=body)
        if smart:
            return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=ext_v2, body=body)
        return RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=send_header_v1(ext_v2), body=body)

    async def send_message(
        self,
        addr: str,
        broker_name: str,
        topic: str,
        uniq_id: str,
        request: RemotingCommand,
        timeout_ms: float,
    ) -> SendResult:
        """Send one SEND_MESSAGE(_V2)/SEND_BATCH_MESSAGE request and parse the SendResult."""
        resp = await self.remoting.invoke(addr, request, timeout_ms)
        return self.process_send_response(broker_name, topic, uniq_id, resp, addr)

    async def send_message_future(
        self, addr: str, request: RemotingCommand, timeout_ms: float
    ) -> asyncio.Future[RemotingCommand]:
        """Write the request now and return the response future (pipelining)."""
        return await self.remoting.invoke_future(addr, request, timeout_ms)

    async def send_message_oneway(self, addr: str, request: RemotingCommand) -> None:
        await self.remoting.invoke_oneway(addr, request)

    # ------------------------------------------------------------------ pull, offsets, queries (broker)
    def process_pull_response(
        self, response: RemotingCommand, addr: str, *, decode: bool = True
    ) -> PullResult:
        status = _PULL_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise error_for_code(response.code, response.remark, addr)
        ext = response.ext_fields or {}
        try:
            next_begin = int(ext["nextBeginOffset"])
            min_off = int(ext["minOffset"])
            max_off = int(ext["maxOffset"])
            suggest = int(ext.get("suggestWhichBrokerId", 0))
        except (KeyError, ValueError) as e:
            raise error_for_code(
                ResponseCode.SYSTEM_ERROR, f"bad pull response header from {addr}: {e!r}", addr
            ) from None
        msgs: list[MessageExt] = []
        if status is PullStatus.FOUND and decode and response.body:
            msgs = decode_messages(response.body, decompress_body=True)
        return PullResult(status, next_begin, min_off, max_off, msgs, suggest)

    async def pull_message(
        self, addr: str, header: PullMessageRequestHeader, timeout_ms: float, *, decode: bool = True
    ) -> PullResult:
        """PULL_MESSAGE (long polling when header.sys_flag has FLAG_SUSPEND: give a timeout above suspend time)."""
        resp = await self.remoting.invoke(
            addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header.encode()), timeout_ms
        )
        return self.process_pull_response(resp, addr, decode=decode)

    async def pull_message_ext(
        self, addr: str, ext_fields: dict[str, str], timeout_ms: float, *, decode: bool = True
    ) -> PullResult:
        """pull_message with the header already in wire form (PullAPIWrapper's per-queue
        template): no header object per pull."""
        resp = await self.remoting.invoke(
            addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext_fields), timeout_ms
        )
        return self.process_pull_response(resp, addr, decode=decode)

    def pull_message_callback_nowait(
        self,
        addr: str,
        ext_fields: dict[str, str],
        timeout_ms: float,
        callback: Callable[[RemotingCommand | None, BaseException | None], None],
    ) -> bool:
        """pull_message_ext without a coroutine, Future or timer per pull (Java's pullMessageAsync):
        sends now if a connection to addr is open and writable (else False: nothing sent), then calls
        callback(response, None) or callback(None, error) once, from the read path. The caller turns
        the response into a PullResult with process_pull_response."""
        return self.remoting.invoke_callback_nowait(
            addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext_fields), timeout_ms, callback
        )

    async def query_consumer_offset(
        self, addr: str, group: str, topic: str, queue_id: int, timeout_ms: float | None = None
    ) -> int:
        resp = await self._call(
            addr,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)},
            timeout_ms=timeout_ms,
        )
        return int((resp.ext_fields or {})["offset"])

    @staticmethod
    def _update_offset_ext(group: str, topic: str, queue_id: int, offset: int) -> dict[str, str]:
        return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}

    async def update_consumer_offset(
        self, addr: str, group: str, topic: str, queue_id: int, offset: int, timeout_ms: float | None = None
    ) -> None:
        await self._call(
            addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            self._update_offset_ext(group, topic, queue_id, offset),
            timeout_ms=timeout_ms,
        )

    async def update_consumer_offset_oneway(
        self, addr: str, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        await self.remoting.invoke_oneway(
            addr,
            RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                self._update_offset_ext(group, topic, queue_id, offset),
                oneway=True,
            ),
        )

    async def _offset_call(
        self, addr: str, code: int, ext: dict[str, str], key: str, timeout_ms: float | None
    ) -> int:
        resp = await self._call(addr, code, ext, timeout_ms=timeout_ms)
        return int((resp.ext_fields or {})[key])

    async def get_max_offset(
        self, addr: str, topic: str, queue_id: int, timeout_ms: float | None = None
    ) -> int:
        return await self._offset_call(
            addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}, "offset", timeout_ms
        )

    async def get_min_offset(
        self, addr: str, topic: str, queue_id: int, timeout_ms: float | None = None
    ) -> int:
        return await self._offset_call(
            addr, RequestCode.GET_MIN_OFFSET, {"topic": topic, "queueId": str(queue_id)}, "offset", timeout_ms
        )

    async def search_offset(
        self, addr: str, topic: str, queue_id: int, timestamp: int, timeout_ms: float | None = None
    ) -> int:
        return await self._offset_call(
            addr,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            {"topic": topic, "queueId": str(queue_id), "timestamp": str(timestamp)},
            "offset",
            timeout_ms,
        )

    async def get_earliest_msg_storetime(
        self, addr: str, topic: str, queue_id: int, timeout_ms: float | None = None
    ) -> int:
        return await self._offset_call(
            addr,
            RequestCode.GET_EARLIEST_MSG_STORETIME,
            {"topic": topic, "queueId": str(queue_id)},
            "timestamp",
            timeout_ms,
        )

    async def view_message(self, addr: str, phy_offset: int, timeout_ms: float | None = None) -> MessageExt:
        """VIEW_MESSAGE_BY_ID: the record at a CommitLog offset (body decompressed)."""
        resp = await self._call(
            addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phy_offset)}, timeout_ms=timeout_ms
        )
        if not resp.body:
            raise error_for_code(ResponseCode.QUERY_NOT_FOUND, f"no message at offset {phy_offset}", addr)
        msg, _ = decode_message(resp.body, decompress_body=True)
        return msg

    async def query_message(
        self,
        addr: str,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int = 2**63 - 1,
        unique_key: bool = False,
        timeout_ms: float | None = None,
    ) -> tuple[int, list[MessageExt]]:
        """QUERY_MESSAGE by key (or UNIQ_KEY): (index last update timestamp, candidate messages).

        Candidates may include hash collisions: callers filter on the key, as Java's MQAdminImpl does.
        A QUERY_NOT_FOUND answer is an empty list.
        """
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_num),
            "beginTimestamp": str(begin_timestamp),
            "endTimestamp": str(end_timestamp),
            UNIQUE_MSG_QUERY_FLAG: "true" if unique_key else "false",
        }
        resp = await self.remoting.invoke(
            addr,
            RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext),
            (timeout_ms or self.default_timeout_ms) * 3,
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return 0, []
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_code(resp.code, resp.remark, addr)
        ts = int((resp.ext_fields or {}).get("indexLastUpdateTimestamp", 0))
        msgs = decode_messages(resp.body, decompress_body=True) if resp.body else []
        return ts, msgs

    # ------------------------------------------------------------------ client lifecycle (broker)
    async def send_heartbeat(
        self, addr: str, heartbeat: HeartbeatData, timeout_ms: float | None = None,
        conn: RemotingConnection | None = None,
    ) -> int:
        """HEART_BEAT to addr (on `conn` when given: a connection not yet handed out, see RemotingClient.on_connect);
        the broker's version."""
        if conn is None:
            resp = await self._call(addr, RequestCode.HEART_BEAT, body=heartbeat.encode(), timeout_ms=timeout_ms)
        else:
            resp = await conn.invoke_future(
                RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat.encode()),
                timeout_ms or self.default_timeout_ms,
            )
            if resp.code != ResponseCode.SUCCESS:
                raise error_for_code(resp.code, resp.remark, addr)
        # A broker of this project says it reads MSGPACK headers: use them to it from now on (faster
        # to encode and decode than JSON). Anything else (real RocketMQ, NameServers) stays JSON.
        kinds = (resp.ext_fields or {}).get(SERIALIZE_TYPES_EXT_FIELD)
        if isinstance(kinds, str) and "MSGPACK" in kinds.split(","):
            self.remoting.addr_serialize_types[addr] = SerializeType.MSGPACK
        return resp.version

    async def check_client_in_broker(
        self, addr: str, group: str, client_id: str, subscription: SubscriptionData, timeout_ms: float | None = None
    ) -> None:
        """CHECK_CLIENT_CONFIG: raises MQBrokerError when the broker cannot filter by `subscription`
        (SUBSCRIPTION_PARSE_FAILED: the expression is not valid; SYSTEM_ERROR: property filtering is off)."""
        body = CheckClientRequestBody(client_id=client_id, group=group, subscription_data=subscription).encode()
        await self._call(addr, RequestCode.CHECK_CLIENT_CONFIG, body=body, timeout_ms=timeout_ms)

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        producer_group: str | None = None,
        consumer_group: str | None = None,
        timeout_ms: float | None = None,
    ) -> None:
        ext = {"clientID": client_id}
        if producer_group:
            ext["producerGroup"] = producer_group
        if consumer_group:
            ext["consumerGroup"] = consumer_group
        await self._call(addr, RequestCode.UNREGISTER_CLIENT, ext, timeout_ms=timeout_ms)

    async def get_consumer_id_list_by_group(
        self, addr: str, group: str, timeout_ms: float | None = None
    ) -> list[str]:
        resp = await self._call(
            addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}, timeout_ms=timeout_ms
        )
        if not resp.body:
            return []
        return GetConsumerListByGroupResponseBody.decode(resp.body).consumer_id_list

    async def consumer_send_message_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        timeout_ms: float | None = None,
    ) -> None:
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            max_reconsume_times=max_reconsume_times,
        )
        await self._call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header.encode(), timeout_ms=timeout_ms)

    async def end_transaction_oneway(
        self, addr: str, header: EndTransactionRequestHeader, remark: str | None = None
    ) -> None:
        cmd = RemotingCommand.request(
            RequestCode.END_TRANSACTION, header.encode(), oneway=True, remark=remark
        )
        await self.remoting.invoke_oneway(addr, cmd)

    async def lock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        timeout_ms: float | None = None,
    ) -> set[MessageQueue]:
        body = LockBatchRequestBody(
            consumer_group=group, client_id=client_id, mq_set=[to_body_mq(m) for m in mqs]
        )
        resp = await self._call(addr, RequestCode.LOCK_BATCH_MQ, body=body.encode(), timeout_ms=timeout_ms)
        if not resp.body:
            return set()
        return {from_body_mq(m) for m in LockBatchResponseBody.decode(resp.body).lock_ok_mq_set}

    async def unlock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        *,
        oneway: bool = False,
        timeout_ms: float | None = None,
    ) -> None:
        body = UnlockBatchRequestBody(
            consumer_group=group, client_id=client_id, mq_set=[to_body_mq(m) for m in mqs]
        )
        if oneway:
            await self.remoting.invoke_oneway(
                addr, RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body.encode(), oneway=True)
            )
            return
        await self._call(addr, RequestCode.UNLOCK_BATCH_MQ, body=body.encode(), timeout_ms=timeout_ms)

    # ------------------------------------------------------------------ admin (broker)
    async def create_topic(
        self,
        addr: str,
        topic: str,
        *,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = 6,
        order: bool = False,
        topic_sys_flag: int = 0,
        topic_filter_type: str = "SINGLE_TAG",
        default_topic: str = "TBW102",
        timeout_ms: float | None = None,
    ) -> None:
        ext = {
            "topic": topic,
            "defaultTopic": default_topic,
            "readQueueNums": str(read_queue_nums),
            "writeQueueNums": str(write_queue_nums),
            "perm": str(perm),
            "topicFilterType": topic_filter_type,
            "topicSysFlag": str(topic_sys_flag),
            "order": "true" if order else "false",
        }
        await self._call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, timeout_ms=timeout_ms)

    async def delete_topic_in_broker(self, addr: str, topic: str, timeout_ms: float | None = None) -> None:
        await self._call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}, timeout_ms=timeout_ms)

    async def get_broker_runtime_info(self, addr: str, timeout_ms: float | None = None) -> dict[str, str]:
        resp = await self._call(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout_ms=timeout_ms)
        return KVTable.decode(resp.body).table if resp.body else {}

    async def get_broker_config(self, addr: str, timeout_ms: float | None = None) -> dict[str, str]:
        resp = await self._call(addr, RequestCode.GET_BROKER_CONFIG, timeout_ms=timeout_ms)
        return parse_properties(resp.body_bytes().decode("utf-8", "replace"))

    async def update_broker_config(
        self, addr: str, props: Mapping[str, object], timeout_ms: float | None = None
    ) -> None:
        body = properties_to_string(props).encode()
        if body:
            await self._call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body, timeout_ms=timeout_ms)

    async def get_topic_stats_info(
        self, addr: str, topic: str, timeout_ms: float | None = None
    ) -> TopicStatsTable:
        resp = await self._call(
            addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}, timeout_ms=timeout_ms
        )
        return TopicStatsTable.decode(resp.body) if resp.body else TopicStatsTable()

    async def create_subscription_group(
        self, addr: str, config: SubscriptionGroupConfig, timeout_ms: float | None = None
    ) -> None:
        await self._call(
            addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode(), timeout_ms=timeout_ms
        )

    async def delete_subscription_group(
        self, addr: str, group: str, remove_offset: bool = False, timeout_ms: float | None = None
    ) -> None:
        flag = "true" if remove_offset else "false"
        # 4.x brokers read removeOffset, 5.x cleanOffset: send both.
        ext = {"groupName": group, "removeOffset": flag, "cleanOffset": flag}
        await self._call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext, timeout_ms=timeout_ms)

    async def get_all_subscription_group(
        self, addr: str, timeout_ms: float | None = None
    ) -> SubscriptionGroupWrapper:
        resp = await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, timeout_ms=timeout_ms)
        return SubscriptionGroupWrapper.decode(resp.body) if resp.body else SubscriptionGroupWrapper()

    async def get_all_topic_config(
        self, addr: str, timeout_ms: float | None = None
    ) -> TopicConfigSerializeWrapper:
        resp = await self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG, timeout_ms=timeout_ms)
        return TopicConfigSerializeWrapper.decode(resp.body) if resp.body else TopicConfigSerializeWrapper()

    async def get_consume_stats(
        self, addr: str, group: str, topic: str | None = None, timeout_ms: float | None = None
    ) -> ConsumeStats:
        ext = {"consumerGroup": group}
        if topic:
            ext["topic"] = topic
        resp = await self._call(addr, RequestCode.GET_CONSUME_STATS, ext, timeout_ms=timeout_ms)
        return ConsumeStats.decode(resp.body) if resp.body else ConsumeStats()

    async def get_consumer_running_info(
        self, addr: str, group: str, client_id: str, jstack: bool = False, timeout_ms: float | None = None
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO through a broker: what the client reports of itself."""
        ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "true" if jstack else "false"}
        resp = await self._call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, ext, timeout_ms=timeout_ms)
        return ConsumerRunningInfo.decode(resp.body) if resp.body else ConsumerRunningInfo()

    async def fetch_consume_stats_in_broker(
        self, addr: str, is_order: bool = False, timeout_ms: float | None = None
    ) -> ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS: every subscription group's consume stats on one broker."""
        ext = {"isOrder": "true" if is_order else "false"}
        resp = await self._call(addr, RequestCode.GET_BROKER_CONSUME_STATS, ext, timeout_ms=timeout_ms)
        return ConsumeStatsList.decode(resp.body) if resp.body else ConsumeStatsList(broker_addr=addr)

    async def query_consume_queue(
        self,
        addr: str,
        topic: str,
        queue_id: int,
        index: int,
        count: int,
        group: str | None = None,
        timeout_ms: float | None = None,
    ) -> tuple[QueryConsumeQueueResponseBody, str | None]:
        """QUERY_CONSUME_QUEUE: a consume queue's units from `index` (at most `count`) and bounds, with
        `group`'s subscription and filter data; and the broker's remark, which says why there are no units
        when `index` is not in the queue. (RocketMQ's broker answers that case without a body: an empty
        one stands for it.)"""
        header = QueryConsumeQueueRequestHeader(
            topic=topic, queue_id=queue_id, index=index, count=count, consumer_group=group
        )
        resp = await self._call(addr, RequestCode.QUERY_CONSUME_QUEUE, header.encode(), timeout_ms=timeout_ms)
        body = QueryConsumeQueueResponseBody.decode(resp.body) if resp.body else QueryConsumeQueueResponseBody()
        return body, resp.remark

    async def clean_expired_consume_queue(self, addr: str, timeout_ms: float | None = None) -> None:
        """CLEAN_EXPIRED_CONSUMEQUEUE: the broker drops the consume queues whose messages are all deleted."""
        await self._call(addr, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, timeout_ms=timeout_ms)

    async def resume_check_half_message(self, addr: str, msg_id: str, timeout_ms: float | None = None) -> None:
        """RESUME_CHECK_HALF_MESSAGE: the broker asks the transaction's producer about `msg_id` (an offset msg
        id) again."""
        await self._call(addr, RequestCode.RESUME_CHECK_HALF_MESSAGE, {"msgId": msg_id}, timeout_ms=timeout_ms)

    async def delete_expired_commit_log(self, addr: str, timeout_ms: float | None = None) -> None:
        """DELETE_EXPIRED_COMMITLOG: the broker's next cleaning rounds delete expired commit log files at once."""
        await self._call(addr, RequestCode.DELETE_EXPIRED_COMMITLOG, timeout_ms=timeout_ms)

    async def clean_unused_topic(self, addr: str, timeout_ms: float | None = None) -> None:
        """CLEAN_UNUSED_TOPIC: the broker drops the consume queues of topics it has no config for."""
        await self._call(addr, RequestCode.CLEAN_UNUSED_TOPIC, timeout_ms=timeout_ms)

    async def get_consumer_connection_list(
        self, addr: str, group: str, timeout_ms: float | None = None
    ) -> ConsumerConnection:
        resp = await self._call(
            addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}, timeout_ms=timeout_ms
        )
        return ConsumerConnection.decode(resp.body) if resp.body else ConsumerConnection()

    async def get_producer_connection_list(
        self, addr: str, group: str, timeout_ms: float | None = None
    ) -> ProducerConnection:
        resp = await self._call(
            addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}, timeout_ms=timeout_ms
        )
        return ProducerConnection.decode(resp.body) if resp.body else ProducerConnection()

    async def view_broker_stats_data(
        self, addr: str, stats_name: str, stats_key: str, timeout_ms: float | None = None
    ) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA: one stats item's last minute, hour and day (e.g. TOPIC_PUT_NUMS, topic)."""
        ext = {"statsName": stats_name, "statsKey": stats_key}
        resp = await self._call(addr, RequestCode.VIEW_BROKER_STATS_DATA, ext, timeout_ms=timeout_ms)
        return BrokerStatsData.decode(resp.body) if resp.body else BrokerStatsData()

    async def get_all_producer_info(self, addr: str, timeout_ms: float | None = None) -> ProducerTableInfo:
        """GET_ALL_PRODUCER_INFO: every producer group connected to one broker, with its clients."""
        resp = await self._call(addr, RequestCode.GET_ALL_PRODUCER_INFO, timeout_ms=timeout_ms)
        return ProducerTableInfo.decode(resp.body) if resp.body else ProducerTableInfo()

    async def invoke_broker_to_get_consumer_status(
        self, addr: str, topic: str, group: str, client_id: str | None = None, timeout_ms: float | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS: the broker asks the group's clients (or the one with
        `client_id`; the header calls it clientAddr) for their offsets of `topic`; client id -> offsets."""
        header = GetConsumerStatusRequestHeader(topic=topic, group=group, client_addr=client_id or None)
        resp = await self._call(
            addr, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, header.encode(), timeout_ms=timeout_ms
        )
        if not resp.body:
            return {}
        return {
            cid: {from_body_mq(mq): int(off) for mq, off in table.items()}
            for cid, table in GetConsumerStatusBody.decode(resp.body).consumer_table.items()
        }

    async def query_topic_consume_by_who(
        self, addr: str, topic: str, timeout_ms: float | None = None
    ) -> list[str]:
        resp = await self._call(
            addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}, timeout_ms=timeout_ms
        )
        if not resp.body:
            return []
        from remoting.jsonutil import loads

        data: Any = loads(resp.body)
        return list(data.get("groupList", [])) if isinstance(data, dict) else []

    async def invoke_broker_to_reset_offset(
        self,
        addr: str,
        topic: str,
        group: str,
        timestamp: int,
        *,
        force: bool = True,
        timeout_ms: float | None = None,
    ) -> dict[MessageQueue, int]:
        ext = {
            "topic": topic,
            "group": group,
            "timestamp": str(timestamp),
            "isForce": "true" if force else "false",
        }
        resp = await self._call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext, timeout_ms=timeout_ms)
        if not resp.body:
            return {}
        return {from_body_mq(mq): int(v) for mq, v in ResetOffsetBody.decode(resp.body).offset_table.items()}


def now_ms() -> int:
    return time.time_ns() // 1_000_000
