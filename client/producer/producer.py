"""Producer: RocketMQ's DefaultMQProducer on asyncio.

    async with Producer("my-group", "127.0.0.1:9876") as p:
        r = await p.send(Message("TopicTest", b"hello", tags="TagA"))
        futs = [p.send_async(Message("TopicTest", b"x")) for _ in range(1000)]   # pipelined
        await asyncio.gather(*futs)

Send algorithm (DefaultMQProducerImpl.sendDefaultImpl): the topic's publish info comes from the
client instance's route cache (one NameServer lookup per topic, then refreshed in the
background); each attempt picks a queue with MQFaultStrategy (round robin skipping the broker
that just failed, or latency fault tolerance), and `send_msg_timeout` is ONE budget shared by all
attempts. Transport errors and the retryable response codes are retried (up to
`retry_times_when_send_failed` more times for send(), `retry_times_when_send_async_failed` for
send_async()); SYSTEM_BUSY is backed off briefly first. Oneway and orderly sends are never
retried.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import inspect
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgpack
import structlog

from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.command import RemotingCommand
from remoting.connection import ResponseEntry
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import CheckTransactionStateRequestHeader
from remoting.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    encode_properties,
)

from ..config import ClientConfig
from ..errors import (
    InvalidMessageError,
    MQBrokerError,
    MQClientError,
    NotStartedError,
    RequestTimeoutError,
    annotate,
)
from ..instance import MQClientInstance, get_client_manager
from ..message import REPLY_MESSAGE_FLAG, Message, MessageQueue, SendResult, SendStatus, encode_batch_with_ids
from ..msg_id import create_uniq_id, create_uniq_ids
from ..route import MASTER_ID, TopicPublishInfo
from ..trace import AsyncTraceDispatcher
from ..validators import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DEFAULT_PRODUCER_GROUP,
    RETRY_GROUP_TOPIC_PREFIX,
    check_group,
    check_message,
)
from .accumulator import MAX_BATCH_BYTES, MAX_BATCH_DELAY_MS, ProduceAccumulator, chain_send
from .fault import LATENCY_MAX, NOT_AVAILABLE_DURATION, MQFaultStrategy
from .selector import MessageQueueSelector, SelectorFunction, as_selector

log = structlog.get_logger(__name__)

__all__ = ["CommunicationMode", "DEFAULT_RETRY_RESPONSE_CODES", "Producer", "SendCallback"]

SendCallback = Callable[[SendResult | None, BaseException | None], Any]

# DefaultMQProducer.retryResponseCodes (4.9.x) plus SYSTEM_BUSY and GO_AWAY (as 5.x retries them).
DEFAULT_RETRY_RESPONSE_CODES: frozenset[int] = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.GO_AWAY,
    }
)

_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_TRAN = MessageConst.PROPERTY_TRANSACTION_PREPARED
_MSG_TYPE = MessageConst.PROPERTY_MESSAGE_TYPE
_RECONSUME = MessageConst.PROPERTY_RECONSUME_TIME
_MAX_RECONSUME = MessageConst.PROPERTY_MAX_RECONSUME_TIMES
_OFFLOAD_COMPRESS_OVER = 256 * 1024  # compress bigger bodies in a worker thread
_CHECKED_TOPICS_MAX = 10_000  # bound of Producer._checked_topics (beyond it, topics are checked per send)
_NAME_VALUE_JOIN = NAME_VALUE_SEPARATOR.join
_DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
# The properties header of a batch: only its waitStoreMsgOK.
_WAIT_TRUE = encode_properties({MessageConst.PROPERTY_WAIT_STORE_MSG_OK: "true"})
_WAIT_FALSE = encode_properties({MessageConst.PROPERTY_WAIT_STORE_MSG_OK: "false"})
_WAIT = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
# The properties of a message with nothing but waitStoreMsgOK, up to its new UNIQ_KEY's value.
_WAIT_TRUE_UNIQ = _WAIT_TRUE + PROPERTY_SEPARATOR + _UNIQ + NAME_VALUE_SEPARATOR


class CommunicationMode(enum.Enum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


class _State(enum.Enum):
    CREATE_JUST = 0
    RUNNING = 1
    SHUTDOWN = 2
    # shutdown() waits for what is in flight: no new sends, but the accepted ones still run (a send that
    # still had to look its route up or open its connection, a retry, an auto-batch flushed at shutdown).
    STOPPING = 3


# Enum members bound once for the per-send paths (an Enum class attribute lookup costs ~10x a global).
_RUNNING = _State.RUNNING
_STOPPING = _State.STOPPING
_SEND_OK = SendStatus.SEND_OK
_SYNC = CommunicationMode.SYNC
_get_running_loop = asyncio._get_running_loop  # None when no loop runs (a C call, no exception)


class _Prepared:
    """A validated message in wire form: what every attempt re-sends."""

    send_code = int(RequestCode.SEND_MESSAGE_V2)  # a single send's request code (a class attribute: no slot)

    __slots__ = (
        "topic",
        "body",
        "sys_flag",
        "flag",
        "properties",
        "uniq_id",
        "batch",
        "reconsume_times",
        "max_reconsume",
    )

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview,
        sys_flag: int,
        flag: int,
        properties: str,
        uniq_id: str,
        batch: bool = False,
        reconsume_times: int = 0,
        max_reconsume: int | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.sys_flag = sys_flag
        self.flag = flag
        self.properties = properties
        self.uniq_id = uniq_id
        self.batch = batch
        self.reconsume_times = reconsume_times
        self.max_reconsume = max_reconsume


class _PreparedReply(_Prepared):
    """A reply to a request (MSG_TYPE=reply, made by create_reply_message): sent with SEND_REPLY_MESSAGE_V2,
    which has the broker push it to the requester as well as store it."""

    __slots__ = ()
    send_code = int(RequestCode.SEND_REPLY_MESSAGE_V2)


_HEADER_CACHE_MAX = 16384  # bound of Producer._header_cache (cleared when full; 1 000 topics x 4 queues fit)
_PACK = msgpack.Packer(use_bin_type=True).pack
_PACKED_G = _PACK("g")
_PACKED_I = _PACK("i")
_MSGPACK = SerializeType.MSGPACK  # bound once: compared per send
_SEND_REPLY_V2 = int(RequestCode.SEND_REPLY_MESSAGE_V2)
_SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)


class _HeaderFixed:
    """The SEND_MESSAGE_V2 header fields shared by the sends of one (topic, queue, flags) key, as wire
    strings, and their msgpack map in two pieces: `head` (the map's header, then g's key) and `tail`
    (every entry but g (bornTimestamp) and i (properties)). A send's map is head, g's value, i's key,
    i's value, tail: the per-message entries first, so that the broker's frame decoder finds the
    constant tail as one byte string it has seen before (codec.SendFixed)."""

    __slots__ = ("a", "c", "d", "e", "f", "h", "j", "k", "m", "max_reconsume", "head", "tail")

    def __init__(self, fields: dict[str, str]) -> None:
        # fields: every short name but g and i ("l" only when maxReconsumeTimes is set).
        self.a, self.c, self.d = fields["a"], fields["c"], fields["d"]
        self.e, self.f, self.h = fields["e"], fields["f"], fields["h"]
        self.j, self.k, self.m = fields["j"], fields["k"], fields["m"]
        self.max_reconsume = fields.get("l")
        # The map's header with the full count (fixmap: 0x80 | n, n <= 15), then g's key; the entries.
        self.head = bytes((0x80 | (len(fields) + 2),)) + _PACKED_G
        self.tail = _PACK(fields)[1:]


def _now_ms() -> float:
    return time.monotonic() * 1000.0


# (epoch ms, that ms as the packed string of a send header's bornTimestamp): the last one packed, as
# one tuple so that threads (client/sync.py runs loops in threads) swap it atomically.
_born_last: tuple[int, bytes] = (-1, b"")


def _pack_born(now_ms: int) -> bytes:
    global _born_last
    packed = _PACK(str(now_ms))
    _born_last = (now_ms, packed)
    return packed


class _InflightLimiter:
    """At most `limit` holders; FIFO waiters; O(1) acquire/release (asyncio.Semaphore scans its waiters).

    A waiter is a coroutine's future (acquire()) or a backlogged fast send (_Backlogged), which is
    started right in release() with the freed slot: no Task and no wake-up per queued send."""

    __slots__ = ("limit", "active", "_waiters")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self._waiters: collections.deque[asyncio.Future[None] | _Backlogged] = collections.deque()

    async def acquire(self) -> None:
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed over just before the cancel: pass it on
            raise

    def submit(self, entry: _Backlogged) -> None:
        """Start a prepared send now if a permit is free (and no one waits for one), else queue it."""
        if self.active < self.limit and not self._waiters:
            self.active += 1
            if not entry.start():  # cancelled meanwhile, or failed at once: the permit is unused
                self.release()
        else:
            self._waiters.append(entry)

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            w = waiters.popleft()
            if w.__class__ is _Backlogged:
                if w.start():  # type: ignore[union-attr]  # it took the slot over
                    return
            elif not w.done():  # type: ignore[union-attr]
                w.set_result(None)  # type: ignore[union-attr]  # hand the slot over directly
                return
        self.active -= 1


class Producer:
    """Sends messages to a RocketMQ cluster. Defaults are DefaultMQProducer's.

    Args:
        group: producer group (brokers use it for transaction checks and connection listings).
        namesrv_addr: 'ip:port;ip:port'; $NAMESRV_ADDR when omitted.
        send_msg_timeout: ms, one budget for all attempts of a send.
        retry_times_when_send_failed: extra attempts of send() (so 3 attempts by default).
        retry_times_when_send_async_failed: extra attempts of send_async().
        retry_another_broker_when_not_store_ok: retry send() when the status is not SEND_OK.
        compress_msg_body_over_howmuch: bodies of at least this many bytes are zlib-compressed
            (sysFlag COMPRESSED); batches are never compressed.
        compress_level: zlib level (RocketMQ uses 5).
        max_message_size: client-side limit of a body (and of a whole batch body), bytes.
        send_latency_fault_enable: avoid slow/failed brokers for a while (MQFaultStrategy).
        latency_max / not_available_duration: the fault tolerance tables, ms.
        default_topic_queue_nums / create_topic_key: how a missing topic is auto-created.
        retry_response_codes: broker codes that are retried (see DEFAULT_RETRY_RESPONSE_CODES).
        system_busy_backoff: ms to wait before retrying after SYSTEM_BUSY (grows per attempt).
        send_smart_msg: use SEND_MESSAGE_V2 (short header names); False sends SEND_MESSAGE.
        max_async_inflight: at most this many send_async()/send_batch_async() calls of this
            producer are on the wire at once; later ones wait their turn (so a burst of futures
            does not overrun the broker's send queue into SYSTEM_BUSY). An auto-batch is one.
        auto_batch: gather plain send()/send_async() messages into SEND_BATCH_MESSAGE requests,
            each caller still getting its own SendResult (RocketMQ 5's setAutoBatch; see
            client.producer.accumulator for what is batched and when it goes out).
        batch_max_delay_ms: auto_batch: how long a batch waits for more; 0 (the default) sends at
            the end of the event loop's current iteration.
        batch_max_bytes: auto_batch: a batch goes out once its bodies reach this (at most 2 MiB).
        total_batch_max_bytes: auto_batch: bodies held in all batches being gathered; past it,
            messages are sent singly.
        client_config: shared client runtime settings (instance name, intervals, ...).
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        send_msg_timeout: int = 3000,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        compress_msg_body_over_howmuch: int = 4096,
        compress_level: int = 5,
        max_message_size: int = 4 * 1024 * 1024,
        send_latency_fault_enable: bool = False,
        latency_max: Sequence[int] = LATENCY_MAX,
        not_available_duration: Sequence[int] = NOT_AVAILABLE_DURATION,
        default_topic_queue_nums: int = 4,
        create_topic_key: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
        retry_response_codes: Iterable[int] = DEFAULT_RETRY_RESPONSE_CODES,
        system_busy_backoff: int = 100,
        send_smart_msg: bool = True,
        max_async_inflight: int = 1024,
        auto_batch: bool = False,
        batch_max_delay_ms: int = 0,
        batch_max_bytes: int = 32 * 1024,
        total_batch_max_bytes: int = 32 * 1024 * 1024,
        instance_name: str | None = None,
        client_config: ClientConfig | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
    ) -> None:
        self._group = group
        self.client_config = ClientConfig.derive(client_config, namesrv_addr, instance_name)
        # Message trace (RocketMQ's enableMsgTrace): the dispatcher is made at start; None = off, which
        # every send entry tests once.
        self.enable_msg_trace = enable_msg_trace
        self.customized_trace_topic = customized_trace_topic
        self._trace: AsyncTraceDispatcher | None = None
        if send_msg_timeout <= 0:
            raise MQClientError("send_msg_timeout must be > 0")
        if retry_times_when_send_failed < 0 or retry_times_when_send_async_failed < 0:
            raise MQClientError("retry times must be >= 0")
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.create_topic_key = create_topic_key
        self.retry_response_codes = frozenset(int(c) for c in retry_response_codes)
        self.system_busy_backoff = system_busy_backoff
        self.send_smart_msg = send_smart_msg
        if max_async_inflight <= 0:
            raise MQClientError("max_async_inflight must be > 0")
        self.max_async_inflight = max_async_inflight
        self._async_permits = _InflightLimiter(max_async_inflight)
        if not 0 <= batch_max_delay_ms <= MAX_BATCH_DELAY_MS:
            raise MQClientError(f"batch_max_delay_ms must be 0..{MAX_BATCH_DELAY_MS}, got {batch_max_delay_ms}")
        if not 0 < batch_max_bytes <= MAX_BATCH_BYTES:
            raise MQClientError(f"batch_max_bytes must be 1..{MAX_BATCH_BYTES}, got {batch_max_bytes}")
        if total_batch_max_bytes <= 0:
            raise MQClientError(f"total_batch_max_bytes must be > 0, got {total_batch_max_bytes}")
        self.accumulator: ProduceAccumulator | None = (
            ProduceAccumulator(self, batch_max_delay_ms, batch_max_bytes, total_batch_max_bytes) if auto_batch else None
        )
        self.fault_strategy = MQFaultStrategy(
            send_latency_fault_enable, tuple(latency_max), tuple(not_available_duration)
        )
        self._instance: MQClientInstance | None = None
        self._state = _State.CREATE_JUST
        self._start_lock: asyncio.Lock | None = None
        self._inflight: set[asyncio.Future[Any]] = set()
        self._header_base: dict[str, str] = {}
        # SEND header fields that only change with (topic, queue, flags...): strings and msgpack form.
        self._header_cache: dict[tuple[Any, ...], _HeaderFixed] = {}
        # Topics that passed check_topic (regex, forbidden names): checked once, not per message.
        self._checked_topics: set[str] = set()
        # Pipelined first attempts that could not be written yet (route unknown, no open connection),
        # by topic, in call order, and the one task per topic that gets them going (_park_until_routed).
        self._unrouted: dict[str, list[_Backlogged]] = {}
        self._route_tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lifecycle
    @property
    def group(self) -> str:
        return self._group

    @property
    def producer_group(self) -> str:
        return self._group

    @property
    def send_latency_fault_enable(self) -> bool:
        return self.fault_strategy.send_latency_fault_enable

    @send_latency_fault_enable.setter
    def send_latency_fault_enable(self, value: bool) -> None:
        self.fault_strategy.send_latency_fault_enable = value

    @property
    def instance(self) -> MQClientInstance:
        if self._instance is None or self._state is not _State.RUNNING:
            raise NotStartedError(f"producer {self._group} is not running: call start() first")
        return self._instance

    @property
    def running(self) -> bool:
        return self._state is _State.RUNNING

    async def start(self) -> None:
        """Join (or create) the process's client instance and register the group. Idempotent."""
        if self._state is _State.RUNNING:
            return
        if self._state is _State.SHUTDOWN:
            raise NotStartedError(f"producer {self._group} was shut down; create a new one")
        check_group(self._group, "producer group")
        if self._group == DEFAULT_PRODUCER_GROUP:
            raise MQClientError(
                f"producer group can not equal {DEFAULT_PRODUCER_GROUP}, please specify another one"
            )
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._state is _State.RUNNING:
                return
            inst = await get_client_manager().acquire(self.client_config)
            self._instance = inst
            self._header_base = {
                "a": self._group,
                "c": self.create_topic_key,
                "d": str(self.default_topic_queue_nums),
                "j": "0",
                "k": "true" if self.client_config.unit_mode else "false",
            }
            self._header_cache.clear()
            inst.register_producer(self._group, self)
            if self.enable_msg_trace and self._trace is None:
                trace = AsyncTraceDispatcher(self._group, self.client_config, self.customized_trace_topic)
                await trace.start()
                self._trace = trace
            self._state = _State.RUNNING
            log.info("producer_started", group=self._group, client_id=inst.client_id)

    async def shutdown(self) -> None:
        """Send what auto-batching has gathered, wait (bounded) for the sends in flight (new sends are refused
        meanwhile, with NotStartedError), unregister from brokers, release the client instance."""
        if self._state is not _State.RUNNING:
            if self._state is not _STOPPING:  # (a second call while the first waits leaves it to finish)
                self._state = _State.SHUTDOWN
            return
        if self.accumulator is not None:
            self.accumulator.flush()  # what was gathered goes out
        self._state = _State.STOPPING
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=self.send_msg_timeout / 1000.0 + 1.0)
        self._state = _State.SHUTDOWN
        if self._trace is not None:
            trace, self._trace = self._trace, None
            await trace.shutdown()  # (what was traced goes out first)
        inst = self._instance
        self._instance = None
        if inst is not None:
            try:
                await inst.unregister_producer(self._group, self)
            finally:
                await get_client_manager().release(inst)
        log.info("producer_shutdown", group=self._group)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _running_instance(self) -> MQClientInstance:
        """The client instance for work already accepted (also while shutdown() waits for it)."""
        inst = self._instance
        if inst is None or (self._state is not _RUNNING and self._state is not _STOPPING):
            raise NotStartedError(f"producer {self._group} is not running: call start() first")
        return inst

    def _not_accepting(self) -> NotStartedError:
        """The error for a new send when not running (checked where each public send starts)."""
        if self._state is _STOPPING:
            return NotStartedError(f"producer {self._group} is shutting down")
        return NotStartedError(f"producer {self._group} is not running: call start() first")

    def _failed_future(self, exc: BaseException) -> asyncio.Future[SendResult]:
        """A send's future failed before anything was sent (marked retrieved, as a tracked one would be: a
        caller may drop it; one that awaits it still gets the error)."""
        fut: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        fut.set_exception(exc)
        fut.exception()
        return fut

    # ------------------------------------------------------------------ MQProducerInner
    def check_transaction_state(
        self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> Any:
        """A plain producer has no transaction listener: TransactionProducer overrides this."""
        log.warning(
            "check_transaction_state_ignored",
            group=self._group,
            broker=broker_addr,
            msg_id=msg.uniq_key,
            reason="not a transaction producer",
        )
        return None

    # ------------------------------------------------------------------ public send API
    async def send(
        self, msg: Message, *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send and wait for the broker's answer. With `queue`, send to that queue (one attempt)."""
        if self._trace is not None:
            return await self._traced_send(msg, queue, timeout)
        fut = self._accept_send(msg, queue, timeout)
        if fut is not None:
            return await fut
        return await self._send_now(msg, queue, timeout)

    async def _traced_send(self, msg: Message, queue: MessageQueue | None, timeout: float | None) -> SendResult:
        """send() recording a Pub trace of the answer (SendMessageTraceHookImpl)."""
        begin = int(time.time() * 1000)
        fut = self._accept_send(msg, queue, timeout)
        result = await fut if fut is not None else await self._send_now(msg, queue, timeout)
        self._trace_pub(msg, result, begin)
        return result

    def _trace_when_done(self, fut: asyncio.Future[SendResult], msg: Message) -> asyncio.Future[SendResult]:
        """Record the Pub trace when the send's future is answered (no task or coroutine per send)."""
        begin = int(time.time() * 1000)

        def done(f: asyncio.Future[SendResult]) -> None:
            if not f.cancelled() and f.exception() is None:
                self._trace_pub(msg, f.result(), begin)

        fut.add_done_callback(done)
        return fut

    def _trace_pub(self, msg: Message, result: SendResult, begin_ms: int) -> None:
        trace = self._trace
        inst = self._instance
        if trace is not None and inst is not None:
            trace.pub(self._group, msg, result, inst.find_broker_address_in_publish(result.queue.broker_name), begin_ms)

    def _accept_send(
        self, msg: Message, queue: MessageQueue | None, timeout: float | None
    ) -> asyncio.Future[SendResult] | None:
        """send()'s entry: refused when not running; with auto-batching, the message's future in a batch
        (None: not batched, send it now)."""
        if self._state is not _RUNNING:
            raise self._not_accepting()
        acc = self.accumulator
        return acc.add(msg, queue, timeout, True) if acc is not None else None

    def send_future(
        self, msg: Message, *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> asyncio.Future[SendResult]:
        """send(), started now, as a future: on the callback path (route known, connection open) without a
        coroutine or Task, which a caller driving the loop from another thread (client.sync) would pay per
        message; otherwise send() in a Task. Raises what send() raises before anything is sent."""
        if self._trace is not None:
            return self._trace_when_done(self._send_future_untraced(msg, queue, timeout), msg)
        return self._send_future_untraced(msg, queue, timeout)

    def _send_future_untraced(
        self, msg: Message, queue: MessageQueue | None, timeout: float | None
    ) -> asyncio.Future[SendResult]:
        fut = self._accept_send(msg, queue, timeout)
        if fut is not None:
            return fut
        if queue is None and len(msg.body) <= _OFFLOAD_COMPRESS_OVER:
            info = self._instance.get_publish_info(msg.topic)  # type: ignore[union-attr]
            if info is not None:
                prepared = self._prepare_now(msg)
                out = self._start_sync_fast(prepared, timeout, info)
                if out is not None:
                    return out
                # (as prepared: preparing twice would pop a retry message's reconsume properties twice)
                return asyncio.ensure_future(self._send_prepared_sync(prepared, queue, timeout))
        return asyncio.ensure_future(self._send_now(msg, queue, timeout))

    async def _send_now(self, msg: Message, queue: MessageQueue | None, timeout: float | None) -> SendResult:
        """send() without auto-batching."""
        if queue is None and self._state is _RUNNING and len(msg.body) <= _OFFLOAD_COMPRESS_OVER:
            info = self._instance.get_publish_info(msg.topic)  # type: ignore[union-attr]
            if info is not None:
                prepared = self._prepare_now(msg)
                out = self._start_sync_fast(prepared, timeout, info)
                if out is not None:
                    return await out
            else:
                prepared = await self._prepare(msg)
        else:
            prepared = await self._prepare(msg)
        result = await self._send_default(prepared, CommunicationMode.SYNC, timeout, queue)
        assert result is not None
        return result

    def _start_sync_fast(
        self, prepared: _Prepared, timeout: float | None, info: TopicPublishInfo
    ) -> _SendFuture | None:
        """The first attempt of send()/send_batch() through the pipelined sends' callback path (cached
        header pieces, the connection's pending entry, no timer, no command and none of the coroutines
        of _send_default/_send_kernel, which a one-at-a-time sender paid per message); failures continue
        in _send_default with send()'s retry count. None: nothing sent, use the attempt loop."""
        out = _SendFuture(loop=self._instance.loop_if_current())  # (None: the running loop's)
        try:
            started = self._start_fast(out, prepared, timeout, info, _SYNC)
        except (RemotingError, MQClientError):  # nothing sent (too many in flight, ...)
            return None
        return out if started else None

    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """Start a send and return its future at once; many in flight share one connection per broker.

        `callback(result, exc)` runs on the event loop when it completes (exactly one of the two is
        None); errors raised by the callback are logged. Must be called with a running loop.
        """
        fut: asyncio.Future[SendResult] | None = None
        acc = self.accumulator
        if self._state is not _RUNNING:
            fut = self._failed_future(self._not_accepting())

        elif acc is not None:
            try:
                fut = acc.add(msg, queue, timeout, False)
            except Exception as e:  # an invalid message: its future fails, as the slow path's would
                fut = self._failed_future(e)
        if fut is None:
            fut = self._send_async_now(msg, queue, timeout)
        if self._trace is not None:
            self._trace_when_done(fut, msg)
        if callback is not None:
            fut.add_done_callback(lambda f: _run_callback(callback, f))
        return fut

    def _send_async_now(
        self, msg: Message, queue: MessageQueue | None, timeout: float | None
    ) -> asyncio.Future[SendResult]:
        """send_async() without auto-batching and callback; the future is tracked."""
        fut: asyncio.Future[SendResult] | None = None
        if queue is None and len(msg.body) <= _OFFLOAD_COMPRESS_OVER:
            fut = self._send_async_fast(msg.topic, self._prepare_now, msg, timeout)  # tracks itself
        if fut is None:
            fut = asyncio.ensure_future(self._send_async_impl(msg, queue, timeout))
            self._track(fut)
        return fut

    # ------------------------------------------------------------------ auto-batching (ProduceAccumulator)
    def _check_batch_member(self, m: Message) -> None:
        """The per-message checks of _prepare_batch, made when a message joins an auto-batch (the producer
        is running: send / send_async checked), so that an invalid one fails alone."""
        body = m.body
        if (
            m.__class__ is not Message
            or body.__class__ is not bytes
            or not 0 < len(body) <= self.max_message_size
            or m.topic not in self._checked_topics
        ):
            self._check_message(m)

    def _check_message(self, m: Message) -> None:
        """check_message's full checks (raising its precise error), for a message the per-send fast accept
        did not take; its topic is remembered as checked."""
        check_message(m, self.max_message_size)
        if len(self._checked_topics) < _CHECKED_TOPICS_MAX:
            self._checked_topics.add(m.topic)

    def _send_direct(
        self, msg: Message, queue: MessageQueue | None, timeout: float | None, sync: bool
    ) -> asyncio.Future[SendResult]:
        """One message of an auto-batch sent on its own (a batch of one, or a batch the checks refused),
        with the retries of its mode."""
        if not sync:
            return self._send_async_now(msg, queue, timeout)
        fut = asyncio.ensure_future(self._send_now(msg, queue, timeout))
        self._track(fut)
        return fut

    def _send_prepared_batch(
        self, prepared: _Prepared, queue: MessageQueue | None, timeout: float | None, sync: bool
    ) -> asyncio.Future[SendResult]:
        """A prepared batch (send_batch_async's, or an auto-batch) sent as send_batch_async (sync False) or
        send_batch would; tracked."""
        if not sync:
            if queue is None:
                fast = self._send_async_fast(prepared.topic, _as_is, prepared, timeout)
                if fast is not None:
                    return fast

            async def run_async() -> SendResult:
                permits = self._async_permits
                await permits.acquire()
                try:
                    result = await self._send_default(prepared, CommunicationMode.ASYNC, timeout, queue)
                finally:
                    permits.release()
                assert result is not None
                return result

            fut = asyncio.ensure_future(run_async())
        else:
            fut = asyncio.ensure_future(self._send_prepared_sync(prepared, queue, timeout))
        self._track(fut)
        return fut

    async def _send_prepared_sync(
        self, prepared: _Prepared, queue: MessageQueue | None, timeout: float | None
    ) -> SendResult:
        """send()'s attempts for a prepared message or batch: the callback path first, then the attempt loop."""
        if queue is None and self._state is _RUNNING:
            info = self._instance.get_publish_info(prepared.topic)  # type: ignore[union-attr]
            if info is not None:
                out = self._start_sync_fast(prepared, timeout, info)
                if out is not None:
                    return await out
        result = await self._send_default(prepared, CommunicationMode.SYNC, timeout, queue)
        assert result is not None
        return result

    def _track(self, fut: asyncio.Future[Any]) -> None:
        self._inflight.add(fut)
        fut.add_done_callback(self._untrack)

    def _untrack(self, f: asyncio.Future[Any]) -> None:
        self._inflight.discard(f)
        if not f.cancelled():
            f.exception()  # the caller may drop the future; the failure was logged per attempt

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Write the message and return without waiting for the broker (no result, no retry)."""
        if self._state is not _RUNNING:
            raise self._not_accepting()
        prepared = await self._prepare(msg)
        await self._send_default(prepared, CommunicationMode.ONEWAY, None, queue)

    async def send_batch(
        self, msgs: Iterable[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send several messages of one topic as ONE SEND_BATCH_MESSAGE (one queue, consecutive offsets).

        Rules (as RocketMQ): same topic, same wait-store flag, no delay level, no retry topic; the
        encoded batch must fit in max_message_size. `msg_id` of the result is the messages' ids
        joined with commas, `queue_offset` the offset of the first.
        """
        if self._state is not _RUNNING:
            raise self._not_accepting()
        return await self._send_prepared_sync(self._prepare_batch(list(msgs)), queue, timeout)

    def send_batch_async(
        self,
        msgs: Iterable[Message],
        callback: SendCallback | None = None,
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """send_batch without waiting; like send_async."""
        fut: asyncio.Future[SendResult]
        if self._state is not _RUNNING:
            fut = self._failed_future(self._not_accepting())
        else:
            try:
                prepared = self._prepare_batch(list(msgs))
            except Exception as e:  # an invalid batch: its future fails
                fut = self._failed_future(e)
            else:
                fut = self._send_prepared_batch(prepared, queue, timeout, False)
        if callback is not None:
            fut.add_done_callback(lambda f: _run_callback(callback, f))
        return fut

    async def send_orderly(
        self,
        msg: Message,
        sharding_key: Any,
        selector: MessageQueueSelector | SelectorFunction | None = None,
        *,
        timeout: float | None = None,
    ) -> SendResult:
        """Send to the queue the selector picks for `sharding_key` (Java-compatible hash by default).

        Messages with one key go to one queue, so they are stored and consumed in send order.
        Never retried (a retry to another queue would break the order).
        """
        if self._state is not _RUNNING:
            raise self._not_accepting()
        prepared = await self._prepare(msg)
        inst = self._running_instance()
        budget = float(timeout if timeout is not None else self.send_msg_timeout)
        begin = _now_ms()
        info = inst.get_publish_info(prepared.topic) or await self._find_publish_info(prepared.topic)
        sel = as_selector(selector)
        queues = list(info.message_queues)
        try:
            mq = sel.select(queues, msg, sharding_key)
        except Exception as e:
            raise MQClientError(f"select message queue threw exception: {type(e).__name__}: {e}") from e
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"select message queue returned {mq!r}, not a MessageQueue")
        cost = _now_ms() - begin
        if cost >= budget:
            raise _budget_timeout(prepared.topic, cost, budget)
        t0 = _now_ms()
        try:
            result = await self._send_kernel(prepared, mq, CommunicationMode.SYNC, budget - cost)
        except (RemotingError, MQBrokerError, MQClientError) as e:
            self.fault_strategy.update_fault_item(mq.broker_name, _now_ms() - t0, True)
            raise annotate(e, topic=prepared.topic, brokers=[mq.broker_name], attempts=1) from None
        self.fault_strategy.update_fault_item(mq.broker_name, _now_ms() - t0, False)
        assert result is not None
        if self._trace is not None:
            self._trace_pub(msg, result, int(time.time() * 1000 - (_now_ms() - begin)))  # (begin is monotonic)
        return result

    async def request(
        self, msg: Message, timeout: float = 3000, *, queue: MessageQueue | None = None
    ) -> MessageExt:
        """Send `msg` and wait for its reply (RocketMQ 4.6+'s request-reply, `DefaultMQProducer.request`):
        the consumer that gets it answers with `create_reply_message(msg, body)` sent by any producer,
        and the broker pushes that reply here. Returns the reply; RequestTimeoutError when none came
        within `timeout` milliseconds (the send included, as for send), or what the send raised.

        The message gets CORRELATION_ID, REPLY_TO_CLIENT (this client's id) and TTL properties. The reply
        comes through a broker of the requester's cluster that this client is connected to (one of the
        request topic's brokers, in practice)."""
        inst = self._running_instance()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000
        correlation_id = str(uuid.uuid4())
        props = msg.properties
        props[MessageConst.PROPERTY_CORRELATION_ID] = correlation_id
        props[MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT] = inst.client_id
        props[MessageConst.PROPERTY_MESSAGE_TTL] = str(int(timeout))
        if msg.topic not in inst.topic_route_table:
            # (as upstream: a new route means new brokers, which must know this producer to push the reply)
            await self._find_publish_info(msg.topic)
            await inst.send_heartbeat_to_all_brokers()
        fut: asyncio.Future[MessageExt] = loop.create_future()
        inst.request_futures[correlation_id] = fut
        try:
            await self.send(msg, queue=queue, timeout=max(deadline - loop.time(), 0.001) * 1000)
            return await asyncio.wait_for(fut, max(deadline - loop.time(), 0))
        except TimeoutError:
            raise RequestTimeoutError(
                f"no reply to request {correlation_id} (topic {msg.topic}) within {timeout:g} ms"
            ) from None
        finally:
            inst.request_futures.pop(correlation_id, None)

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to `topic` may use (looks the route up if needed)."""
        self._running_instance()
        info = await self._find_publish_info(topic)
        return list(info.message_queues)

    # ------------------------------------------------------------------ preparation
    async def _prepare(self, msg: Message) -> _Prepared:
        body = msg.body
        if len(body) > _OFFLOAD_COMPRESS_OVER and len(body) >= self.compress_msg_body_over_howmuch:
            self._running_instance()
            check_message(msg, self.max_message_size)
            data = await asyncio.to_thread(zlib.compress, body, self.compress_level)
            return self._prepare_now(msg, data)
        return self._prepare_now(msg)

    def _prepare_now(self, msg: Message, compressed: bytes | None = None) -> _Prepared:
        """_prepare without awaiting: `compressed` is the body already compressed (big bodies)."""
        if self._state is not _RUNNING:
            self._running_instance()  # raises NotStartedError
        if compressed is None:
            body = msg.body
            # Fast accept of the usual case; anything else gets check_message's full checks and errors.
            if (
                msg.__class__ is not Message
                or body.__class__ is not bytes
                or not 0 < len(body) <= self.max_message_size
                or msg.topic not in self._checked_topics
            ):
                self._check_message(msg)
            props = msg.properties
            if len(props) == 1 and props.get(_WAIT) == "true" and len(body) < self.compress_msg_body_over_howmuch:
                # The plain message (no id yet, no tags, keys, transaction or retry properties, not
                # compressed): what the steps below come to, without them.
                uniq = create_uniq_id()
                props[_UNIQ] = uniq
                return _Prepared(msg.topic, body, 0, msg.flag, _WAIT_TRUE_UNIQ + uniq, uniq)
        props = msg.properties
        uniq = props.get(_UNIQ)
        fresh = uniq is None
        if fresh:
            uniq = create_uniq_id()
            props[_UNIQ] = uniq
        body = msg.body
        sys_flag = 0
        if len(body) >= self.compress_msg_body_over_howmuch:
            data = compressed if compressed is not None else zlib.compress(body, self.compress_level)
            if len(data) < len(body):
                body = data
                sys_flag |= MessageSysFlag.COMPRESSED_FLAG
        if props.get(_TRAN) == "true":
            sys_flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
        reconsume, max_reconsume = 0, None
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            rt = props.pop(_RECONSUME, None)
            if rt is not None:
                reconsume = int(rt)
            mrt = props.pop(_MAX_RECONSUME, None)
            if mrt is not None:
                max_reconsume = int(mrt)
        if fresh and len(props) == 2 and props.get(_WAIT) == "true":
            # A message with no tags, keys or user properties: the encoding is a constant and the new id
            # (WAIT was there first, UNIQ_KEY was just appended), without the generic join.
            encoded = _WAIT_TRUE_UNIQ + uniq
        else:
            try:
                encoded = PROPERTY_SEPARATOR.join(map(_NAME_VALUE_JOIN, props.items()))
            except TypeError:  # a None value (properties edited by hand): encode_properties skips those
                encoded = encode_properties(props)
        return (_PreparedReply if props.get(_MSG_TYPE) == REPLY_MESSAGE_FLAG else _Prepared)(
            msg.topic,
            body,
            sys_flag,
            msg.flag,
            encoded,
            uniq,
            False,
            reconsume,
            max_reconsume,
        )

    def _prepare_batch(self, msgs: list[Message]) -> _Prepared:
        if self._state is not _RUNNING:
            self._running_instance()  # raises NotStartedError
        if not msgs:
            raise InvalidMessageError("a batch needs at least one message")
        first = msgs[0]
        topic = first.topic
        wait = first.wait_store_msg_ok
        checked = self._checked_topics
        limit = self.max_message_size
        retry_topic = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        # Every message is checked before any is changed (ids are set below).
        missing = 0  # messages without an id yet
        for m in msgs:
            body = m.body
            props = m.properties
            # Same fast accept as _prepare_now; check_message raises the precise error otherwise.
            if (
                m.__class__ is not Message
                or body.__class__ is not bytes
                or not 0 < len(body) <= limit
                or m.topic not in checked
            ):
                self._check_message(m)
            if _DELAY in props and m.delay_level > 0:
                raise InvalidMessageError("TimeDelayLevel is not supported for batching")
            if retry_topic or m.topic != topic:
                if m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    raise InvalidMessageError("Retry Group is not supported for batching")
                raise InvalidMessageError(
                    f"The topic of the messages in one batch should be the same: {topic!r} != {m.topic!r}"
                )
            # (m.wait_store_msg_ok, inlined: once per message)
            if (props.get(_WAIT, "true") != "false") is not wait:
                raise InvalidMessageError(
                    "The waitStoreMsgOK of the messages in one batch should be the same"
                )
            if _UNIQ not in props:
                missing += 1
        # The new ids with one clock read, handed out by a C-level iterator.
        body, ids = encode_batch_with_ids(msgs, iter(create_uniq_ids(missing)).__next__)
        if len(body) > self.max_message_size:
            raise InvalidMessageError(
                f"the batch of {len(msgs)} messages encodes to {len(body)} bytes, over maxMessageSize "
                f"{self.max_message_size}: split it into smaller batches (topic {topic})"
            )
        return _Prepared(topic, body, 0, 0, _WAIT_TRUE if wait else _WAIT_FALSE, ",".join(ids), batch=True)

    # ------------------------------------------------------------------ the send loop
    async def _find_publish_info(self, topic: str) -> TopicPublishInfo:
        return await self._running_instance().find_topic_publish_info(
            topic,
            create_topic_key=self.create_topic_key,
            default_topic_queue_nums=self.default_topic_queue_nums,
        )

    async def _send_async_impl(
        self, msg: Message, queue: MessageQueue | None, timeout: float | None
    ) -> SendResult:
        permits = self._async_permits
        await permits.acquire()
        try:
            prepared = await self._prepare(msg)
            result = await self._send_default(prepared, CommunicationMode.ASYNC, timeout, queue)
        finally:
            permits.release()
        assert result is not None
        return result

    async def _send_default(
        self,
        prepared: _Prepared,
        mode: CommunicationMode,
        timeout: float | None,
        queue: MessageQueue | None,
        resume: tuple[float, str, BaseException] | None = None,
    ) -> SendResult | None:
        """`resume` = (begin, broker, error) of a first attempt already made (by _send_async_fast)."""
        inst = self._running_instance()
        budget = float(timeout if timeout is not None else self.send_msg_timeout)
        begin = _now_ms() if resume is None else resume[0]
        topic = prepared.topic
        if queue is not None:
            if queue.topic != topic:
                raise InvalidMessageError(
                    f"message topic {topic!r} does not match the queue's topic {queue.topic!r}"
                )
            info = None
            times_total = 1
        else:
            info = inst.get_publish_info(topic) or await self._find_publish_info(topic)
            if mode is CommunicationMode.SYNC:
                times_total = 1 + self.retry_times_when_send_failed
            elif mode is CommunicationMode.ASYNC:
                times_total = 1 + self.retry_times_when_send_async_failed
            else:
                times_total = 1
        brokers_sent: list[str] = []
        last_exc: BaseException | None = None
        last_result: SendResult | None = None
        last_broker: str | None = None
        if resume is not None:
            brokers_sent.append(resume[1])
            last_broker, last_exc = resume[1], resume[2]
        for attempt in range(len(brokers_sent), times_total):
            if info is None:
                assert queue is not None
                mq = queue
            else:
                mq = self.fault_strategy.select_one_message_queue(info, last_broker)
            cost = _now_ms() - begin
            if cost >= budget:
                break
            brokers_sent.append(mq.broker_name)
            last_broker = mq.broker_name
            t0 = _now_ms()
            try:
                result = await self._send_kernel(prepared, mq, mode, budget - cost)
            except (RemotingError, MQClientError) as e:
                self.fault_strategy.update_fault_item(mq.broker_name, _now_ms() - t0, True)
                log.warning(
                    "send_attempt_failed",
                    topic=topic,
                    broker=mq.broker_name,
                    attempt=attempt + 1,
                    error=f"{type(e).__name__}: {e}",
                )
                last_exc = e
                if isinstance(e, InvalidMessageError):
                    break
                continue
            except MQBrokerError as e:
                self.fault_strategy.update_fault_item(mq.broker_name, _now_ms() - t0, True)
                last_exc = e
                if e.code not in self.retry_response_codes or attempt + 1 >= times_total:
                    break
                # Busy brokers are routine under load: keep them out of the warning log.
                (log.debug if e.code == ResponseCode.SYSTEM_BUSY else log.warning)(
                    "send_attempt_failed",
                    topic=topic,
                    broker=mq.broker_name,
                    attempt=attempt + 1,
                    code=e.code,
                    remark=e.remark,
                )
                if e.code == ResponseCode.SYSTEM_BUSY:
                    left = budget - (_now_ms() - begin)
                    pause = min(self.system_busy_backoff * (attempt + 1), left - 1.0)
                    if pause > 0:
                        await asyncio.sleep(pause / 1000.0)
                continue
            self.fault_strategy.update_fault_item(mq.broker_name, _now_ms() - t0, False)
            if result is None:  # oneway
                return None
            if result.status is not SendStatus.SEND_OK and self.retry_another_broker_when_not_store_ok:
                last_result = result
                continue
            return result
        if last_result is not None:
            return last_result
        attempts = len(brokers_sent)
        if last_exc is None:
            raise annotate(_budget_timeout(topic, _now_ms() - begin, budget), attempts=attempts)
        cost = _now_ms() - begin
        if cost >= budget and not isinstance(last_exc, RemotingTimeoutError | MQBrokerError):
            # The budget ran out between attempts: say so, keeping the last cause.
            raise annotate(
                _budget_timeout(topic, cost, budget), brokers=brokers_sent, attempts=attempts
            ) from last_exc
        raise annotate(last_exc, topic=topic, brokers=brokers_sent, attempts=attempts) from None

    async def _send_kernel(
        self, prepared: _Prepared, mq: MessageQueue, mode: CommunicationMode, timeout_ms: float
    ) -> SendResult | None:
        inst = self._running_instance()
        addr = inst.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self._find_publish_info(mq.topic)
            addr = inst.find_broker_address_in_publish(mq.broker_name)
            if addr is None:
                raise MQClientError(f"The broker[{mq.broker_name}] not exist (topic {mq.topic})")
        cmd = self._build_request(prepared, mq)
        if mode is CommunicationMode.ONEWAY:
            cmd.mark_oneway()
            await inst.api.send_message_oneway(addr, cmd)
            return None
        return await inst.api.send_message(addr, mq.broker_name, mq.topic, prepared.uniq_id, cmd, timeout_ms)

    def _build_request(self, prepared: _Prepared, mq: MessageQueue, packed: bool = False) -> RemotingCommand:
        """The SEND request of one attempt. `packed`: the request goes out as MSGPACK, so also give it
        its header map in msgpack form, spliced from cached pieces (only the born timestamp and the
        properties vary per message)."""
        batch = prepared.batch
        fixed = self._fixed_for(prepared, mq)
        born = str(time.time_ns() // 1_000_000)
        # One dict display instead of copy + item sets: this runs once per send attempt.
        ext = {
            "a": fixed.a,
            "b": prepared.topic,
            "c": fixed.c,
            "d": fixed.d,
            "e": fixed.e,
            "f": fixed.f,
            "g": born,
            "h": fixed.h,
            "i": prepared.properties,
            "j": fixed.j,
            "k": fixed.k,
            "m": fixed.m,
        }
        if fixed.max_reconsume is not None:
            ext["l"] = fixed.max_reconsume
        if batch:
            code = RequestCode.SEND_BATCH_MESSAGE
        elif self.send_smart_msg:
            code = prepared.send_code
        else:
            from ..mq_client_api import send_header_v1

            v1 = RequestCode.SEND_REPLY_MESSAGE if prepared.send_code == _SEND_REPLY_V2 else RequestCode.SEND_MESSAGE
            return RemotingCommand(code=v1, ext_fields=send_header_v1(ext), body=prepared.body)
        cmd = RemotingCommand(code, 0, 0, None, ext, prepared.body)
        if packed:
            cmd.packed_ext = b"".join((fixed.head, _PACK(born), _PACKED_I, _PACK(prepared.properties), fixed.tail))
        return cmd

    def _packed_request(self, prepared: _Prepared, mq: MessageQueue) -> tuple[int, tuple[bytes, ...]]:
        """_build_request(prepared, mq, True) as (code, extFields msgpack map as pieces to concatenate):
        what RemotingConnection.invoke_entry_packed takes, without the command and its dict."""
        return (_SEND_BATCH if prepared.batch else prepared.send_code), self._packed_ext(prepared, mq)

    def _packed_ext(self, prepared: _Prepared, mq: MessageQueue) -> tuple[bytes, ...]:
        """The extFields msgpack map of _packed_request, as pieces to concatenate."""
        key = (prepared.topic, mq.queue_id, prepared.sys_flag, prepared.flag, prepared.reconsume_times,
               prepared.max_reconsume, prepared.batch)
        fixed = self._header_cache.get(key)
        if fixed is None:
            fixed = self._header_fixed(key)
        # The born timestamp in msgpack form changes once per ms, not per send: packed once per ms.
        now_ms = time.time_ns() // 1_000_000
        born_ms, born = _born_last
        if now_ms != born_ms:
            born = _pack_born(now_ms)
        return fixed.head, born, _PACKED_I, _PACK(prepared.properties), fixed.tail

    def _fixed_for(self, prepared: _Prepared, mq: MessageQueue) -> _HeaderFixed:
        """The cached per-(topic, queue, flags) part of a send header."""
        key = (prepared.topic, mq.queue_id, prepared.sys_flag, prepared.flag, prepared.reconsume_times,
               prepared.max_reconsume, prepared.batch)
        fixed = self._header_cache.get(key)
        return fixed if fixed is not None else self._header_fixed(key)

    def _header_fixed(self, key: tuple[Any, ...]) -> _HeaderFixed:
        topic, queue_id, sys_flag, flag, reconsume_times, max_reconsume, batch = key
        base = self._header_base
        fields = {
            "a": base["a"],
            "b": topic,
            "c": base["c"],
            "d": base["d"],
            "e": str(queue_id),
            "f": str(sys_flag),
            "h": str(flag),
            "j": str(reconsume_times) if reconsume_times else "0",
            "k": base["k"],
            "m": "true" if batch else "false",
        }
        if max_reconsume is not None:
            fields["l"] = str(max_reconsume)
        fixed = _HeaderFixed(fields)
        cache = self._header_cache
        if len(cache) >= _HEADER_CACHE_MAX:
            cache.clear()
        cache[key] = fixed
        return fixed

    # ------------------------------------------------------------------ pipelined fast path
    def _send_async_fast(
        self, topic: str, prepare: Callable[[Any], _Prepared], arg: Any, timeout: float | None
    ) -> asyncio.Future[SendResult] | None:
        """The first attempt of an async send with no Task, no coroutine and no internal future
        callback: when the topic's route and an open connection are at hand, write the request now;
        the response callback (run from the connection's read path) completes the returned future.
        With all permits taken, the prepared send waits in the limiter's FIFO and starts when a
        permit frees (still no Task); with no route or connection yet, it waits for them with the topic's
        other such sends (_park_until_routed). A failed attempt continues in `_send_default` (retries as
        usual). None: not running, nothing was prepared. The returned future is already tracked."""
        inst = self._instance
        if inst is None or self._state is not _RUNNING:
            return None
        loop = inst.loop_if_current()
        if loop is None and _get_running_loop() is None:  # (raises, as create_future on a running loop would)
            asyncio.get_running_loop()
        out = _SendFuture(loop=loop)  # None: the running loop
        try:
            prepared = prepare(arg)
        except Exception as e:  # invalid message: fail the future, as the slow path would
            out.set_exception(e)
            self._track(out)
            return out
        info = inst.get_publish_info(topic)
        if info is None or topic in self._unrouted:  # (behind the topic's earlier first sends, in order)
            self._park_until_routed(out, prepared, timeout)
            return out
        permits = self._async_permits
        if permits.active >= permits.limit or permits._waiters:
            entry = _Backlogged(self, out, prepared, timeout)
            out._fast = entry
            permits._waiters.append(entry)
            self._inflight.add(out)
            return out
        if not self._start_fast(out, prepared, timeout, info):
            # No open writable connection yet (a first send to this broker, a reconnect): wait for it
            # with the message as prepared (preparing twice would pop a retry message's reconsume
            # properties twice).
            self._park_until_routed(out, prepared, timeout)
            return out
        permits.active += 1
        self._inflight.add(out)  # untracked by _FastSend.on_response / cancel
        return out

    def _park_until_routed(self, out: _SendFuture, prepared: _Prepared, timeout: float | None) -> None:
        """Park a pipelined first attempt that cannot be written yet: its topic's route is unknown, or
        no connection to the broker is open. One task per topic fetches the route and opens the
        connections, then hands the parked sends, in call order, to the permits (_InflightLimiter.submit),
        which start them on the callback path. A fresh producer's first burst used to cost a Task and
        a chain of coroutines per message instead."""
        entry = _Backlogged(self, out, prepared, timeout)
        out._fast = entry
        self._inflight.add(out)  # untracked by _FastSend.on_response / cancel / _untrack
        topic = prepared.topic
        parked = self._unrouted.get(topic)
        if parked is None:
            parked = self._unrouted[topic] = []
            task = asyncio.ensure_future(self._start_when_routed(topic, parked))
            self._route_tasks.add(task)
            task.add_done_callback(self._route_tasks.discard)
        parked.append(entry)

    async def _start_when_routed(self, topic: str, parked: list[_Backlogged]) -> None:
        try:
            info = await self._find_publish_info(topic)
            inst = self._running_instance()
            table = inst.broker_addr_table
            addrs = {
                addr
                for name in {mq.broker_name for mq in info.message_queues}
                if (addr := (table.get(name) or {}).get(MASTER_ID)) is not None
            }
            remoting = inst.api.remoting
            await asyncio.gather(*(remoting.get_connection(a) for a in addrs), return_exceptions=True)
        except asyncio.CancelledError:  # the loop is closing: so are the sends that waited
            self._unrouted.pop(topic, None)
            for entry in parked:
                entry.out.cancel()
            raise
        except Exception as e:  # no route, no NameServer, not running: what each send's attempt loop raises
            self._unrouted.pop(topic, None)
            for entry in parked:
                out = entry.out
                out._fast = None
                self._inflight.discard(out)
                if not out.done():
                    out.set_exception(e)
                    out.exception()  # retrieved, as _untrack marks it: a caller may have dropped its future
            return
        self._unrouted.pop(topic, None)  # later sends no longer queue behind these
        submit = self._async_permits.submit
        for entry in parked:
            submit(entry)

    def _start_fast(
        self, out: _SendFuture, prepared: _Prepared, timeout: float | None, info: TopicPublishInfo | None = None,
        mode: CommunicationMode = CommunicationMode.ASYNC,
    ) -> bool:
        """Write the first attempt of `prepared` through the connection's callback path; False when
        that is not possible right now (not running, no route, no open writable connection). `mode`
        SYNC: a send() (its retry count, no async permit held)."""
        inst = self._instance
        if inst is None or self._state is not _RUNNING:
            return False
        if info is None:
            info = inst.get_publish_info(prepared.topic)
            if info is None:
                return False
        begin = time.monotonic() * 1000.0  # (_now_ms, inlined: once per send)
        fs = self.fault_strategy
        if fs.send_latency_fault_enable:
            mq = fs.select_one_message_queue(info, None)
        else:  # (info.select_one_message_queue(None) and find_broker_address_in_publish, inlined: per send)
            queues = info.message_queues
            mq = queues[info.next_index() % len(queues)]
        table = inst.broker_addr_table.get(mq.broker_name)
        addr = table.get(MASTER_ID) if table else None
        if addr is None:
            return False
        budget = float(timeout if timeout is not None else self.send_msg_timeout)
        api = inst.api
        pending = _FastSend(self, out, prepared, mq, addr, api, begin, timeout, mode)
        remoting = api.remoting
        # (serialize_type_for, inlined)
        st = remoting.addr_serialize_types.get(addr, remoting.serialize_type)
        if st is _MSGPACK and (prepared.batch or self.send_smart_msg):
            # No RemotingCommand and no header dict: the frame head is spliced from cached pieces.
            sent = remoting.invoke_entry_packed_nowait(
                addr, pending, _SEND_BATCH if prepared.batch else prepared.send_code, self._packed_ext(prepared, mq),
                prepared.body, budget, mode is _SYNC,  # a sync send writes at once: nothing to coalesce
            )
        else:
            sent = remoting.invoke_callback_nowait(addr, self._build_request(prepared, mq), budget, pending.on_response)
        if not sent:
            return False
        out._fast = pending  # a cancelled send frees its slot at once (_SendFuture.cancel)
        return True

    async def _send_holding_permit(self, prepared: _Prepared, timeout: float | None) -> SendResult:
        """A backlogged send that could not take the callback path: the usual attempts, then the permit
        it was handed goes back."""
        try:
            result = await self._send_default(prepared, CommunicationMode.ASYNC, timeout, None)
        finally:
            self._async_permits.release()
        assert result is not None
        return result

    async def _send_async_continue(
        self,
        prepared: _Prepared,
        timeout: float | None,
        begin: float,
        broker: str,
        exc: BaseException | None,
        not_ok: SendResult | None = None,
        mode: CommunicationMode = CommunicationMode.ASYNC,
    ) -> SendResult:
        """The attempts after a failed first attempt of _send_async_fast (or of send()'s, `mode` SYNC:
        that one holds no async permit)."""
        budget = float(timeout if timeout is not None else self.send_msg_timeout)
        if isinstance(exc, MQBrokerError) and exc.code == ResponseCode.SYSTEM_BUSY:
            pause = min(self.system_busy_backoff, budget - (_now_ms() - begin) - 1.0)
            if pause > 0:
                await asyncio.sleep(pause / 1000.0)
        permits = self._async_permits if mode is not _SYNC else None
        if permits is not None:
            await permits.acquire()
        try:
            if exc is None:
                exc = MQClientError(f"send status {not_ok.status.value if not_ok else '?'}")
            try:
                result = await self._send_default(prepared, mode, timeout, None, resume=(begin, broker, exc))
            except BaseException:
                if not_ok is not None:
                    return not_ok
                raise
        finally:
            if permits is not None:
                permits.release()
        assert result is not None
        return result


def _as_is(prepared: _Prepared) -> _Prepared:
    """The `prepare` of _send_async_fast for what is already prepared."""
    return prepared


def _budget_timeout(topic: str, cost: float, budget: float) -> RemotingTimeoutError:
    return RemotingTimeoutError(f"topic {topic} (send budget)", RequestCode.SEND_MESSAGE_V2, cost, budget)


class _Backlogged:
    """A prepared async send waiting in the producer's _InflightLimiter for a permit, or for its topic's
    route or broker connection (Producer._park_until_routed)."""

    __slots__ = ("producer", "out", "prepared", "timeout")

    def __init__(
        self, producer: Producer, out: _SendFuture, prepared: _Prepared, timeout: float | None
    ) -> None:
        self.producer = producer
        self.out = out
        self.prepared = prepared
        self.timeout = timeout

    def free(self) -> None:
        """Cancelled while waiting: there is no permit to give back (release() skips done futures)."""

    def start(self) -> bool:
        """Called by _InflightLimiter.release with a freed permit: True if this send took it over."""
        out = self.out
        if out.done():  # cancelled while waiting: pass the permit on
            return False
        p = self.producer
        try:
            if p._start_fast(out, self.prepared, self.timeout):
                return True
        except Exception as e:  # e.g. too many requests in flight: this send fails, the permit moves on
            out._fast = None  # (out <-> this entry is a reference cycle: break it)
            p._inflight.discard(out)
            out.set_exception(e)
            out.exception()  # retrieved, as _untrack would
            return False
        # No route or open connection at this moment: the usual attempt loop, holding this permit.
        out._fast = None
        out.add_done_callback(p._untrack)
        chain_send(out, asyncio.ensure_future(p._send_holding_permit(self.prepared, self.timeout)))
        return True


class _SendFuture(asyncio.Future):  # type: ignore[type-arg]
    """The future of a fast-path send: cancel() frees its in-flight permit right away (a method
    override instead of one more done-callback per send)."""

    __slots__ = ("_fast",)

    _fast: _FastSend | _Backlogged | None

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg):
            return False
        fast = getattr(self, "_fast", None)
        if fast is not None:
            self._fast = None  # (a reference cycle: see _FastSend.on_response)
            fast.free()
            fast.producer._inflight.discard(self)
        return True


class _FastSend(ResponseEntry):
    """The state of one in-flight Producer._send_async_fast attempt. It is the connection's pending
    entry itself (ResponseEntry: no callback object per send), or, to a peer without MSGPACK headers,
    on_response is the response callback (one slotted object per send instead of a dozen closure cells)."""

    __slots__ = ("producer", "out", "prepared", "mq", "addr", "api", "begin", "timeout", "held", "mode")

    out: asyncio.Future[SendResult] | None
    prepared: _Prepared | None

    def __init__(
        self, producer: Producer, out: asyncio.Future[SendResult], prepared: _Prepared, mq: MessageQueue,
        addr: str, api: Any, begin: float, timeout: float | None, mode: CommunicationMode,
    ) -> None:
        self.producer = producer
        self.out = out
        self.prepared = prepared
        self.mq = mq
        self.addr = addr
        self.api = api
        self.begin = begin
        self.timeout = timeout
        self.mode = mode
        self.held = mode is not _SYNC  # send_async holds one of the producer's async permits; send() none

    def free(self) -> None:
        if self.held:
            self.held = False
            self.producer._async_permits.release()

    def on_response(self, response: RemotingCommand | None, exc: BaseException | None) -> None:
        """Called once, synchronously from the connection's read path (or its time-out scan)."""
        if self.held:  # (free(), inlined: once per send)
            self.held = False
            permits = self.producer._async_permits
            if permits._waiters:
                permits.release()
            else:  # (release() with nobody waiting)
                permits.active -= 1
        out = self.out
        prepared = self.prepared
        assert out is not None and prepared is not None
        # Answered once: hold no future and no body past it.
        self.out = self.prepared = None
        # out._fast <-> self is a reference cycle: break it now, so that the send's objects are freed by
        # reference counting when the caller drops the future instead of piling up for the cyclic gc
        # (measured: it was most of the client's gc time on pipelined sends).
        out._fast = None
        p = self.producer
        if out.done():  # cancelled by the caller
            return
        mq = self.mq
        broker = mq.broker_name
        try:
            if exc is not None:
                raise exc
            assert response is not None
            result = self.api.process_send_response(broker, mq.topic, prepared.uniq_id, response, self.addr, mq)
        except (RemotingError, MQClientError, MQBrokerError) as e:
            p.fault_strategy.update_fault_item(broker, _now_ms() - self.begin, True)
            retries = p.retry_times_when_send_failed if self.mode is _SYNC else p.retry_times_when_send_async_failed
            retry = retries > 0 and (
                not isinstance(e, MQBrokerError) or e.code in p.retry_response_codes
            )
            if not retry:
                p._inflight.discard(out)
                out.set_exception(annotate(e, topic=mq.topic, brokers=[broker], attempts=1))
                out.exception()  # retrieved: the caller may drop the future; the failure is logged per attempt
                return
            busy = isinstance(e, MQBrokerError) and e.code == ResponseCode.SYSTEM_BUSY
            (log.debug if busy else log.warning)(
                "send_attempt_failed", topic=mq.topic, broker=broker, attempt=1, error=f"{type(e).__name__}: {e}"
            )
            out.add_done_callback(p._untrack)
            chain_send(out, asyncio.ensure_future(
                p._send_async_continue(prepared, self.timeout, self.begin, broker, e, None, self.mode)
            ))
            return
        except Exception as e:  # a bug, not a broker answer: fail this send rather than the read loop
            p._inflight.discard(out)
            out.set_exception(e)
            return
        fs = p.fault_strategy
        if fs.send_latency_fault_enable:  # (update_fault_item is a no-op otherwise: skip the clock read)
            fs.update_fault_item(broker, _now_ms() - self.begin, False)
        if result.status is not _SEND_OK and p.retry_another_broker_when_not_store_ok:
            out.add_done_callback(p._untrack)
            chain_send(out, asyncio.ensure_future(
                p._send_async_continue(prepared, self.timeout, self.begin, mq.broker_name, None, result, self.mode)
            ))
            return
        p._inflight.discard(out)
        out.set_result(result)


def _run_callback(callback: SendCallback, fut: asyncio.Future[SendResult]) -> None:
    if fut.cancelled():
        result, exc = None, asyncio.CancelledError()
    else:
        exc = fut.exception()
        result = None if exc is not None else fut.result()
    try:
        ret = callback(result, exc)
        if inspect.isawaitable(ret):
            asyncio.ensure_future(ret)
    except Exception as e:
        log.warning("send_callback_failed", error=f"{type(e).__name__}: {e}")
