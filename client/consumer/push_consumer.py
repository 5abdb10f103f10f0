"""PushConsumer: RocketMQ's DefaultMQPushConsumer on asyncio.

    from client import PushConsumer, ConsumeConcurrentlyStatus

    async def on_messages(msgs, context):
        for m in msgs:
            print(m.topic, m.queue_offset, m.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("my-group", "127.0.0.1:9876")
    consumer.subscribe("TopicTest", "TagA || TagB")
    consumer.register_listener(on_messages)
    async with consumer:
        await asyncio.sleep(60)

How it works (same pipeline as Java): the rebalance (every `rebalance_interval` seconds, and at
once when a broker says the group changed) assigns queues; each assigned queue gets a pull loop
(long polling: the broker holds a pull up to 15 s until a message arrives) that feeds its
ProcessQueue; the consume service runs the listener; finished messages advance the queue's
offset, which is committed to the broker every 5 s, with each pull, and at shutdown.

In CLUSTERING mode the consumer also subscribes `%RETRY%<group>`, where messages the listener
failed come back (after the broker's delay). In BROADCASTING mode every consumer gets every
message, failures are dropped (logged), and offsets live in a local file.

Listeners: `register_listener(fn)` (concurrent) or `register_orderly_listener(fn)` (one queue at a
time, in order, holding the queue's broker lock). `fn(msgs, context)` may be `async def` (runs on
the event loop; keep it non-blocking) or a plain function (runs in a pool of consume_thread_max
threads, so it may block).

Several consumers of one group in one process need distinct `instance_name`s (each is then its
own client to the brokers), as in Java.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from remoting.body import ConsumeMessageDirectlyResult, ConsumerData, SubscriptionData
from remoting.body import MessageQueue as BodyMessageQueue
from remoting.errors import RemotingError
from remoting.message import MessageConst, MessageExt

from ..config import DEFAULT_INSTANCE_NAME, ClientConfig
from ..errors import MQBrokerError, MQClientError, NotStartedError
from ..instance import MQClientInstance, get_client_manager
from ..message import Message, MessageQueue, PullResult, PullStatus
from ..trace import AsyncTraceDispatcher, traced_listener
from ..validators import CLIENT_INNER_PRODUCER_GROUP, RETRY_GROUP_TOPIC_PREFIX, check_group
from .allocate import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from .consume_service import (
    ConsumeMessageConcurrentlyService,
    ConsumeMessageOrderlyService,
    is_async_callable,
)
from .filter import SUB_ALL, MessageSelector, build_subscription_data
from .listener import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeType,
    MessageModel,
)
from .offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType, RemoteBrokerOffsetStore
from .process_queue import REBALANCE_LOCK_INTERVAL_MS, ProcessQueue
from .pull_api import PullAPIWrapper
from .pull_service import PULL_ASYNC, PULL_SENT, PullMessageService, PullRequest
from .rebalance import (
    RebalancePushImpl,
    SubscriptionInfoHooks,
    compute_pull_from_where,
    default_consume_timestamp,
    parse_consume_timestamp,
)
from .stats import MINUTE_SAMPLE_S, ConsumerStatsManager

log = structlog.get_logger(__name__)

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
BROKER_SUSPEND_MAX_TIME_MILLIS = 15_000
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND = 30_000
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND = 1000
OFFSET_MOVED_FIX_DELAY_MILLS = 10_000
JAVA_INT_MAX = 2**31 - 1

__all__ = ["PushConsumer", "retry_topic_of", "stable_client_id"]


def retry_topic_of(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def stable_client_id(config: ClientConfig) -> str:
    """'<ip>@<instanceName>' without the pid part a DEFAULT instance name gets: what a broadcasting
    consumer's local offset file is keyed by, so offsets survive a restart (Java keeps 'DEFAULT')."""
    name = config.instance_name or DEFAULT_INSTANCE_NAME
    cid = f"{config.resolved_client_ip()}@{name}"
    if config.unit_name:
        cid += f"@{config.unit_name}"
    return cid


class _State(enum.Enum):
    CREATE_JUST = "CREATE_JUST"
    RUNNING = "RUNNING"
    SHUTDOWN_ALREADY = "SHUTDOWN_ALREADY"


def _enum(cls: type[enum.Enum], value: Any, what: str) -> Any:
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).upper())
    except ValueError:
        raise MQClientError(f"bad {what} {value!r}: one of {', '.join(m.value for m in cls)}") from None


def _range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise MQClientError(f"{name} Out of range [{lo}, {hi}]: {value}")


class PushConsumer(SubscriptionInfoHooks):
    """A push consumer (see the module doc). Defaults are DefaultMQPushConsumer's.

    Args:
        group: consumer group.
        namesrv_addr: 'ip:port;ip:port'; $NAMESRV_ADDR when omitted.
        message_model: MessageModel.CLUSTERING (default) or BROADCASTING (or their names).
        consume_from_where: where a never-committed queue starts (ConsumeFromWhere).
        consume_timestamp: 'yyyyMMddHHmmss' for CONSUME_FROM_TIMESTAMP (default: 30 minutes ago).
        allocate_strategy: AllocateMessageQueueAveragely() by default (see allocate.py).
        consume_thread_min / consume_thread_max: listener concurrency (workers / threads).
        consume_concurrently_max_span: pause pulling a queue whose cached offsets span more (concurrent).
        pull_threshold_for_queue / pull_threshold_size_for_queue: pause pulling a queue caching
            more messages / MiB; pull_threshold_for_topic / _size_for_topic (-1 = off) divide a
            topic-wide budget among its queues.
        pull_interval: ms between pulls of a queue (0 = at once).
        pull_batch_size: messages per pull. consume_message_batch_max_size: messages per listener call.
        max_reconsume_times: -1 = 16 (concurrent) / unlimited (orderly); after that, the DLQ.
        suspend_current_queue_time_millis: orderly retry delay after SUSPEND_CURRENT_QUEUE_A_MOMENT.
        consume_timeout: minutes a listener may hold a message before it is sent back (concurrent).
        await_termination_millis_when_shutdown: how long shutdown waits for running listener calls.
        rebalance_interval: seconds between periodic rebalances (20).
        lock_interval_millis: orderly: how often the broker locks are renewed (20000).
        pull_time_delay_mills_when_exception: retry delay of a failed pull (3000).
        offset_store: a custom OffsetStore; offset_store_dir: base dir of the broadcasting file store.
        instance_name / client_config: the client runtime (distinct instance names = distinct clients).
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | None = None,
        allocate_strategy: AllocateMessageQueueStrategy | None = None,
        consume_thread_min: int = 20,
        consume_thread_max: int = 20,
        consume_concurrently_max_span: int = 2000,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_topic: int = -1,
        pull_threshold_size_for_topic: int = -1,
        pull_interval: int = 0,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        max_reconsume_times: int = -1,
        suspend_current_queue_time_millis: int = 1000,
        consume_timeout: float = 15,
        await_termination_millis_when_shutdown: int = 5000,
        rebalance_interval: float = 20.0,
        lock_interval_millis: int = REBALANCE_LOCK_INTERVAL_MS,
        pull_time_delay_mills_when_exception: int = 3000,
        offset_store: OffsetStore | None = None,
        offset_store_dir: str | None = None,
        instance_name: str | None = None,
        client_config: ClientConfig | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
    ) -> None:
        self._group = group
        self.client_config = ClientConfig.derive(client_config, namesrv_addr, instance_name)
        # Message trace (RocketMQ's enableMsgTrace): each listener call is recorded (SubBefore/SubAfter).
        self.enable_msg_trace = enable_msg_trace
        self.customized_trace_topic = customized_trace_topic
        self._trace: AsyncTraceDispatcher | None = None
        self._stats: ConsumerStatsManager | None = None  # while running
        self.message_model: MessageModel = _enum(MessageModel, message_model, "message_model")
        self.consume_from_where: ConsumeFromWhere = _enum(ConsumeFromWhere, consume_from_where, "consume_from_where")
        self.consume_timestamp = consume_timestamp or default_consume_timestamp()
        self.allocate_strategy: AllocateMessageQueueStrategy = allocate_strategy or AllocateMessageQueueAveragely()
        self.consume_thread_min = consume_thread_min
        self.consume_thread_max = consume_thread_max
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.pull_threshold_for_topic = pull_threshold_for_topic
        self.pull_threshold_size_for_topic = pull_threshold_size_for_topic
        self.pull_interval = pull_interval
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.consume_timeout = consume_timeout
        self.await_termination_millis_when_shutdown = await_termination_millis_when_shutdown
        self.rebalance_interval = rebalance_interval
        self.lock_interval_millis = lock_interval_millis
        self.pull_time_delay_mills_when_exception = pull_time_delay_mills_when_exception
        self.offset_store_dir = offset_store_dir
        self._custom_offset_store = offset_store
        self.offset_store: OffsetStore = offset_store  # type: ignore[assignment]  # set at start
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._listener: Callable[..., Any] | None = None
        self.consume_orderly = False
        self._state = _State.CREATE_JUST
        self._instance: MQClientInstance | None = None
        self.rebalance: RebalancePushImpl = None  # type: ignore[assignment]  # set at start
        self.pull_api: PullAPIWrapper = None  # type: ignore[assignment]
        self.pull_service: PullMessageService = None  # type: ignore[assignment]
        self.consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService = None  # type: ignore[assignment]
        self._paused = False
        self._inner_producer: Any = None
        self._start_lock = asyncio.Lock()
        self._bg: set[asyncio.Task[Any]] = set()
        self.consumer_start_timestamp = 0
        self.flow_control_times = 0

    # ------------------------------------------------------------------ identity
    @property
    def group(self) -> str:
        return self._group

    @property
    def consumer_group(self) -> str:
        return self._group

    @property
    def running(self) -> bool:
        return self._state is _State.RUNNING

    @property
    def instance(self) -> MQClientInstance:
        if self._instance is None:
            raise NotStartedError(f"consumer {self._group} is not running: call start() first")
        return self._instance

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: str | MessageSelector | None = SUB_ALL) -> None:
        """Subscribe a topic with a tag expression (`*`, `TagA || TagB`) or a MessageSelector
        (`MessageSelector.by_sql("a > 5")`); allowed after start too."""
        sd = build_subscription_data(topic, expression)
        self._subscriptions[topic] = sd
        if self.running:
            inst = self.instance
            self._spawn(self._after_subscribe(topic))
            inst.send_heartbeat_soon()

    async def _after_subscribe(self, topic: str) -> None:
        with contextlib.suppress(MQClientError, MQBrokerError, RemotingError):
            await self.instance.update_topic_route_info_from_name_server(topic)
        await self.instance.check_subscription_soft(self._group, self._subscriptions.get(topic))
        await self.do_rebalance()

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        if self.running:
            self.instance.send_heartbeat_soon()

    def subscriptions(self) -> dict[str, str]:
        return {t: sd.sub_string for t, sd in self._subscriptions.items()}

    def register_listener(self, fn: Callable[..., Any], orderly: bool = False) -> None:
        """The concurrent listener (or, with orderly=True, the orderly one). Set before start()."""
        if self.running:
            raise MQClientError("register the listener before start()")
        if not callable(fn):
            raise MQClientError("the listener must be callable: fn(msgs, context)")
        self._listener = fn
        self.consume_orderly = bool(orderly)

    def _consumed_ok(self, status: Any) -> bool:
        """Whether a listener's answer counts as consumed (a trace's success)."""
        v = getattr(status, "value", status)  # (an enum member, or its name as a string)
        if self.consume_orderly:
            return v in (ConsumeOrderlyStatus.SUCCESS.value, ConsumeOrderlyStatus.COMMIT.value)
        return v == ConsumeConcurrentlyStatus.CONSUME_SUCCESS.value

    def register_message_listener(self, fn: Callable[..., Any], orderly: bool = False) -> None:
        self.register_listener(fn, orderly)

    def register_orderly_listener(self, fn: Callable[..., Any]) -> None:
        self.register_listener(fn, orderly=True)

    def _check_config(self) -> None:
        check_group(self._group, "consumer group")
        if self._group == DEFAULT_CONSUMER_GROUP:
            raise MQClientError(f"consumerGroup can not equal {DEFAULT_CONSUMER_GROUP}, please specify another one.")
        if self._listener is None:
            raise MQClientError("messageListener is null: call register_listener() before start()")
        if not self._subscriptions:
            raise MQClientError("subscription is empty: call subscribe() before start()")
        parse_consume_timestamp(self.consume_timestamp)
        _range("consumeThreadMin", self.consume_thread_min, 1, 1000)
        _range("consumeThreadMax", self.consume_thread_max, 1, 1000)
        if self.consume_thread_min > self.consume_thread_max:
            raise MQClientError(
                f"consumeThreadMin ({self.consume_thread_min}) is larger than consumeThreadMax ({self.consume_thread_max})"
            )
        _range("consumeConcurrentlyMaxSpan", self.consume_concurrently_max_span, 1, 65535)
        _range("pullThresholdForQueue", self.pull_threshold_for_queue, 1, 65535)
        if self.pull_threshold_for_topic != -1:
            _range("pullThresholdForTopic", self.pull_threshold_for_topic, 1, 6553500)
        _range("pullThresholdSizeForQueue", self.pull_threshold_size_for_queue, 1, 1024)
        if self.pull_threshold_size_for_topic != -1:
            _range("pullThresholdSizeForTopic", self.pull_threshold_size_for_topic, 1, 102400)
        _range("pullInterval", self.pull_interval, 0, 65535)
        _range("consumeMessageBatchMaxSize", self.consume_message_batch_max_size, 1, 1024)
        _range("pullBatchSize", self.pull_batch_size, 1, 1024)
        if self.consume_timeout <= 0:
            raise MQClientError(f"consumeTimeout must be > 0 minutes: {self.consume_timeout}")
        if self.rebalance_interval <= 0:
            raise MQClientError(f"rebalance_interval must be > 0 seconds: {self.rebalance_interval}")

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Join the client runtime, register the group with the brokers and start consuming."""
        async with self._start_lock:
            if self._state is _State.RUNNING:
                return
            if self._state is _State.SHUTDOWN_ALREADY:
                raise NotStartedError(f"consumer {self._group} was shut down; create a new one")
            self._check_config()
            if self.message_model is MessageModel.CLUSTERING:
                rt = retry_topic_of(self._group)
                self._subscriptions[rt] = build_subscription_data(rt, SUB_ALL)
            inst = await get_client_manager().acquire(self.client_config)
            try:
                self._instance = inst
                self.pull_api = PullAPIWrapper(inst, self._group)
                self.rebalance = RebalancePushImpl(
                    self._group, self.message_model, self.allocate_strategy, inst, self
                )
                self.rebalance.subscription_inner = self._subscriptions
                if self._custom_offset_store is not None:
                    self.offset_store = self._custom_offset_store
                elif self.message_model is MessageModel.BROADCASTING:
                    self.offset_store = LocalFileOffsetStore(
                        stable_client_id(self.client_config), self._group, self.offset_store_dir
                    )
                else:
                    self.offset_store = RemoteBrokerOffsetStore(inst, self._group)
                await self.offset_store.load()
                assert self._listener is not None
                listener = self._listener
                if self.enable_msg_trace:
                    self._trace = AsyncTraceDispatcher(self._group, self.client_config,
                                                       self.customized_trace_topic)
                    await self._trace.start()
                    listener = traced_listener(listener, self._trace, self._group, self._consumed_ok,
                                               is_async_callable(listener))
                if self.consume_orderly:
                    self.consume_service = ConsumeMessageOrderlyService(self, listener)
                else:
                    self.consume_service = ConsumeMessageConcurrentlyService(self, listener)
                self.pull_service = PullMessageService(
                    self._pull_once, name=f"pull-{self._group}", start_pull=self._start_pull
                )
                inst.register_consumer(self._group, self)
                self.consume_service.start()
            except BaseException:
                self._instance = None
                if self.consume_service is not None:
                    await self.consume_service.shutdown(0)
                if self._trace is not None:
                    trace, self._trace = self._trace, None
                    await trace.shutdown()
                await get_client_manager().release(inst)
                raise
            inst.rebalance_interval_s = min(inst.rebalance_interval_s, self.rebalance_interval)
            self._state = _State.RUNNING
            self.consumer_start_timestamp = int(time.time() * 1000)
            self._stats = ConsumerStatsManager(self.process_queue_table)
            self._spawn(self._sample_stats())
            log.info(
                "push_consumer_started",
                group=self._group,
                client_id=inst.client_id,
                model=self.message_model.value,
                orderly=self.consume_orderly,
                topics=sorted(self._subscriptions),
            )
        for topic in list(self._subscriptions):
            try:
                await inst.update_topic_route_info_from_name_server(topic)
            except (MQClientError, MQBrokerError, RemotingError) as e:
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    log.warning("subscribe_route_not_found", group=self._group, topic=topic, error=str(e))
        try:
            await inst.check_client_in_broker(self._group, self._subscriptions.values())
        except MQClientError:
            await self.shutdown()
            raise
        await inst.send_heartbeat_to_all_brokers()
        await self.do_rebalance()

    async def shutdown(self) -> None:
        """Stop pulling, let running listener calls finish (bounded), commit offsets, leave the group."""
        async with self._start_lock:
            if self._state is not _State.RUNNING:
                self._state = _State.SHUTDOWN_ALREADY
                return
            self._state = _State.SHUTDOWN_ALREADY
            inst = self.instance
            for t in list(self._bg):
                t.cancel()
            await self.rebalance.stop()
            await self.pull_service.shutdown()
            await self.consume_service.shutdown(self.await_termination_millis_when_shutdown / 1000)
            await self._persist_offsets()
            if self.consume_orderly and self.message_model is MessageModel.CLUSTERING:
                with contextlib.suppress(Exception):
                    await self.rebalance.unlock_all(False)
            if self._trace is not None:
                trace, self._trace = self._trace, None
                with contextlib.suppress(Exception):
                    await trace.shutdown()  # (the listener calls' traces go out first)
            try:
                await inst.unregister_consumer(self._group)
            finally:
                self.rebalance.destroy()
                if self._inner_producer is not None:
                    with contextlib.suppress(Exception):
                        await self._inner_producer.shutdown()
                await get_client_manager().release(inst)
                self._instance = None
            log.info("push_consumer_shutdown", group=self._group)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def suspend(self) -> None:
        """Pause pulling every queue (Java's suspend()); rebalancing pauses too."""
        self._paused = True
        log.info("push_consumer_suspended", group=self._group)

    async def resume(self) -> None:
        self._paused = False
        log.info("push_consumer_resumed", group=self._group)
        await self.do_rebalance()

    @property
    def paused(self) -> bool:
        return self._paused

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._bg.add(t)

        def done(task: asyncio.Task[Any]) -> None:
            self._bg.discard(task)
            if not task.cancelled() and task.exception() is not None:
                e = task.exception()
                log.warning("consumer_task_failed", group=self._group, error=f"{type(e).__name__}: {e}")

        t.add_done_callback(done)

    # ------------------------------------------------------------------ MQConsumerInner (the instance calls these)
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self._group,
            consume_type=ConsumeType.CONSUME_PASSIVELY.value,
            message_model=self.message_model.value,
            consume_from_where=self.consume_from_where.value,
            subscription_data_set=list(self._subscriptions.values()),
            unit_mode=self.client_config.unit_mode,
        )

    async def do_rebalance(self) -> None:
        if self.running and not self._paused:
            await self.rebalance.do_rebalance(self.consume_orderly)

    async def persist_consumer_offset(self) -> None:
        if self.running:
            await self._persist_offsets()

    async def _persist_offsets(self) -> None:
        try:
            await self.offset_store.persist_all(list(self.rebalance.process_queue_table))
        except Exception as e:
            log.error("persist_consumer_offset_failed", group=self._group, error=f"{type(e).__name__}: {e}")

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]:
        return self.offset_store.clone_offset_table(topic) if self.offset_store is not None else {}

    async def reset_offset(self, topic: str, offset_table: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: restart the topic's queues at the given offsets."""
        if not self.running:
            return
        self._paused = True
        try:
            dropped = [(mq, pq) for mq, pq in self.rebalance.process_queue_table.items() if mq.topic == topic]
            # Orderly queues a rebalance dropped but has not released yet (a call still holds them) stay in
            # the table, so the rebalance's retries still unlock them at the broker when the call ends.
            releasing = {mq for mq, pq in dropped if pq.releasing}
            for mq, pq in dropped:
                pq.dropped = True
                pq.releasing = False  # (a call in flight must not commit over the reset)
                self.on_process_queue_dropped(mq, pq)
                pq.clear()
            for mq, off in offset_table.items():
                if mq.topic == topic:
                    self.offset_store.update_offset(mq, off, False)
                    try:
                        await self.offset_store.update_consume_offset_to_broker(mq, off)
                    except (MQClientError, MQBrokerError, RemotingError) as e:
                        log.warning("reset_offset_persist_failed", mq=str(mq), error=str(e))
            for mq, _pq in dropped:
                if mq not in releasing:
                    self.rebalance.process_queue_table.pop(mq, None)
        finally:
            self._paused = False
        log.info("reset_offset_done", group=self._group, topic=topic, queues=len(offset_table))
        await self.do_rebalance()

    async def _sample_stats(self) -> None:
        while True:
            await asyncio.sleep(MINUTE_SAMPLE_S)
            if self._stats is not None:
                self._stats.sample()

    async def consumer_running_info(self) -> dict[str, Any]:
        """What this consumer adds to its client's ConsumerRunningInfo: its settings, each assigned queue's
        state (mqTable) and each subscribed topic's figures (statusTable), as Java's consumerRunningInfo."""
        props = {
            "consumerGroup": self._group,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "consumeTimestamp": self.consume_timestamp,
            "consumeThreadMin": str(self.consume_thread_min),
            "consumeThreadMax": str(self.consume_thread_max),
            "pullBatchSize": str(self.pull_batch_size),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "consumeMessageBatchMaxSize": str(self.consume_message_batch_max_size),
            "PROP_CONSUMER_START_TIMESTAMP": str(self.consumer_start_timestamp),
        }
        mq_table = {}
        for mq, pq in sorted(self.process_queue_table().items()):
            commit = await self.offset_store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
            key = BodyMessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)
            mq_table[key] = pq.process_queue_info(commit)
        stats = self._stats
        status_table = {t: stats.consume_status(t) for t in sorted(self._subscriptions)} if stats else {}
        return {"properties": props, "mq_table": mq_table, "status_table": status_table}

    async def consume_message_directly(self, msg: MessageExt, broker_name: str | None) -> ConsumeMessageDirectlyResult:
        return await self.consume_service.consume_message_directly(msg, broker_name)

    # ------------------------------------------------------------------ used by rebalance / services
    def process_queue_table(self) -> dict[MessageQueue, ProcessQueue]:
        return dict(self.rebalance.process_queue_table) if self.rebalance is not None else {}

    def execute_pull_request_immediately(self, req: PullRequest) -> None:
        self.pull_service.execute_pull_request_immediately(req)

    def execute_task_later(self, fn: Callable[[], Any], delay_s: float) -> None:
        self.pull_service.execute_task_later(fn, delay_s)

    def on_process_queue_dropped(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        if self.pull_service is not None:
            self.pull_service.stop_queue(mq, pq)

    def adjust_thresholds_for_topic(self, queue_count: int) -> None:
        if queue_count <= 0:
            return
        if self.pull_threshold_for_topic != -1:
            self.pull_threshold_for_queue = max(1, self.pull_threshold_for_topic // queue_count)
        if self.pull_threshold_size_for_topic != -1:
            self.pull_threshold_size_for_queue = max(1, self.pull_threshold_size_for_topic // queue_count)

    def reset_retry_topic(self, msgs: Iterable[MessageExt]) -> None:
        """Messages of %RETRY%<group> are shown with the topic they were first sent to."""
        group_topic = retry_topic_of(self._group)
        for m in msgs:
            origin = m.properties.get(MessageConst.PROPERTY_RETRY_TOPIC)
            if origin is not None and m.topic == group_topic:
                m.topic = origin

    def max_reconsume_times_concurrent(self) -> int:
        return 16 if self.max_reconsume_times == -1 else self.max_reconsume_times

    def max_reconsume_times_orderly(self) -> int:
        return sys.maxsize if self.max_reconsume_times == -1 else self.max_reconsume_times

    # ------------------------------------------------------------------ sending back
    async def _get_inner_producer(self) -> Any:
        if self._inner_producer is None:
            from ..producer.producer import Producer

            p = Producer(CLIENT_INNER_PRODUCER_GROUP, client_config=self.client_config)
            await p.start()
            self._inner_producer = p
        return self._inner_producer

    def _retry_message(self, msg: MessageExt, reconsume_times: int, max_times: int) -> Message:
        props = dict(msg.properties)
        props.pop(MessageConst.PROPERTY_TRANSACTION_PREPARED, None)
        origin = props.get(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID)
        props[MessageConst.PROPERTY_ORIGIN_MESSAGE_ID] = origin or msg.uniq_key or msg.msg_id
        props[MessageConst.PROPERTY_RETRY_TOPIC] = msg.topic
        props[MessageConst.PROPERTY_RECONSUME_TIME] = str(reconsume_times)
        props[MessageConst.PROPERTY_MAX_RECONSUME_TIMES] = str(min(max_times, JAVA_INT_MAX))
        props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = str(3 + msg.reconsume_times)
        new = Message(retry_topic_of(self._group), msg.body, properties=props)
        new.flag = msg.flag
        return new

    async def _send_back_addr(self, msg: MessageExt, broker_name: str | None) -> str:
        inst = self.instance
        if broker_name:
            addr = inst.find_broker_address_in_publish(broker_name)
            if addr is None:
                with contextlib.suppress(MQClientError, MQBrokerError, RemotingError):
                    await inst.update_topic_route_info_from_name_server(msg.topic)
                addr = inst.find_broker_address_in_publish(broker_name)
            if addr is None:
                raise MQClientError(f"The broker[{broker_name}] not exist")
            return addr
        host, port = msg.store_host
        return f"{host}:{port}"

    async def send_message_back(
        self, msg: MessageExt, delay_level: int = 0, broker_name: str | None = None
    ) -> None:
        """Hand a message back for later redelivery (CONSUMER_SEND_MSG_BACK); when the broker
        cannot take it that way, send a copy to %RETRY%<group> instead (as Java does). Raises when
        both fail."""
        max_times = self.max_reconsume_times_concurrent()
        try:
            addr = await self._send_back_addr(msg, broker_name)
            await self.instance.api.consumer_send_message_back(
                addr, msg, self._group, delay_level, max_times, timeout_ms=5000
            )
            return
        except (RemotingError, MQBrokerError, MQClientError) as e:
            log.warning("send_message_back_failed", group=self._group, offset=msg.queue_offset, error=str(e))
        producer = await self._get_inner_producer()
        await producer.send(self._retry_message(msg, msg.reconsume_times + 1, max_times))

    async def send_message_back_safe(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool:
        try:
            await self.send_message_back(msg, delay_level, broker_name)
            return True
        except Exception as e:
            log.error("send_message_back_exception", group=self._group, offset=msg.queue_offset, error=f"{type(e).__name__}: {e}")
            return False

    async def send_message_back_to_dlq(self, msg: MessageExt, broker_name: str | None = None) -> bool:
        """Orderly: over max_reconsume_times -> %DLQ%<group> (send-back with delay level -1, or a
        copy to %RETRY% whose reconsume count the broker routes to the DLQ)."""
        max_times = min(self.max_reconsume_times_orderly(), JAVA_INT_MAX)
        try:
            addr = await self._send_back_addr(msg, broker_name or self._broker_name_of(msg))
            await self.instance.api.consumer_send_message_back(addr, msg, self._group, -1, max_times, timeout_ms=5000)
            log.info("message_sent_to_dlq", group=self._group, offset=msg.queue_offset, reconsume_times=msg.reconsume_times)
            return True
        except (RemotingError, MQBrokerError, MQClientError) as e:
            log.warning("send_message_back_dlq_failed", group=self._group, offset=msg.queue_offset, error=str(e))
        try:
            producer = await self._get_inner_producer()
            await producer.send(self._retry_message(msg, msg.reconsume_times, max_times))
            return True
        except Exception as e:
            log.error("send_message_back_dlq_exception", group=self._group, error=f"{type(e).__name__}: {e}")
            return False

    def _broker_name_of(self, msg: MessageExt) -> str | None:
        addr = f"{msg.store_host[0]}:{msg.store_host[1]}"
        return self.instance.find_broker_name_by_addr(addr)

    # ------------------------------------------------------------------ the pull loop body
    def _pre_pull(self, req: PullRequest) -> float | None | bool:
        """pullMessage's checks before a pull: a delay (or None = stop) when it must not go out now,
        else True."""
        pq = req.process_queue
        if pq.dropped or not self.running:
            return None
        pq.last_pull_timestamp = int(time.time() * 1000)
        if self._paused:
            return PULL_TIME_DELAY_MILLS_WHEN_SUSPEND / 1000
        fc = PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL / 1000
        if pq.msg_count > self.pull_threshold_for_queue:
            self._flow_control(req.message_queue, pq, "count")
            return fc
        if pq.msg_size // (1024 * 1024) > self.pull_threshold_size_for_queue:
            self._flow_control(req.message_queue, pq, "size")
            return fc
        if not self.consume_orderly and pq.max_span() > self.consume_concurrently_max_span:
            self._flow_control(req.message_queue, pq, "span")
            return fc
        return True

    def _start_pull(self, req: PullRequest) -> Any:
        """The pull loop's synchronous step (PullMessageService.start_pull): send the pull with a
        response callback (PULL_SENT), or say why not now (a delay / None), or PULL_ASYNC when this
        pull needs to await something (then _pull_once runs in a Task)."""
        if self.consume_orderly and not (req.process_queue.locked and req.previously_locked):
            return PULL_ASYNC  # first pull after locking (or not locked): the async path decides
        pre = self._pre_pull(req)
        if pre is not True:
            return pre
        mq = req.message_queue
        sd = self._subscriptions.get(mq.topic)
        read_in_memory = getattr(self.offset_store, "read_offset_in_memory", None)
        if sd is None or read_in_memory is None:
            return PULL_ASYNC  # logs the missing subscription / awaits a custom store's read_offset
        commit_value = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit_value = read_in_memory(mq)
        sent = self.pull_api.pull_kernel_nowait(
            mq,
            sd,
            req.next_offset,
            self.pull_batch_size,
            functools.partial(self._on_pull_response, req),
            commit_offset=max(commit_value, 0),
            commit_enable=commit_value > 0,
            suspend_timeout_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
            timeout_ms=CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND,
        )
        return PULL_SENT if sent else PULL_ASYNC

    def _on_pull_response(self, req: PullRequest, result: PullResult | None, exc: BaseException | None) -> None:
        """PullCallback: runs in the connection's read path; hands the delay to the pull loop."""
        service = self.pull_service
        if service is None or not service.is_current(req):
            return  # the loop was stopped or replaced while the pull was in flight
        later: list[Any] = []
        try:
            delay = self._on_pull_error(req, exc) if result is None else self._on_pull_result(req, result, later)
        except Exception as e:  # never leave the queue's loop without its next step
            log.exception("pull_result_failed", mq=str(req.message_queue), error=f"{type(e).__name__}: {e}")
            delay = self.pull_time_delay_mills_when_exception / 1000
        service.pull_done(req, delay)
        if later:
            # Hand the messages to the consume service only now: the next pull was queued for writing
            # first, so it goes out ahead of the listener calls this wakes (the broker holds it, ready
            # for the next message, while the listener runs).
            try:
                self.consume_service.submit_consume_request(*later)
            except Exception as e:
                log.exception("pull_result_failed", mq=str(req.message_queue), error=f"{type(e).__name__}: {e}")

    async def _pull_once(self, req: PullRequest) -> float | None:
        """DefaultMQPushConsumerImpl.pullMessage + its PullCallback: the delay before the next pull
        of this queue (None = stop). The awaiting twin of _start_pull."""
        pq = req.process_queue
        mq = req.message_queue
        if pq.dropped:
            return None
        exc_delay = self.pull_time_delay_mills_when_exception / 1000
        if self.consume_orderly and self.running and not self._paused:
            if pq.locked:
                if not req.previously_locked:
                    try:
                        offset = await compute_pull_from_where(
                            self.instance, self.offset_store, mq, self.consume_from_where, self.consume_timestamp
                        )
                    except (MQClientError, MQBrokerError, RemotingError) as e:
                        log.error("compute_pull_offset_failed", mq=str(mq), error=str(e))
                        return exc_delay
                    if offset < 0:
                        return exc_delay
                    log.info("orderly_first_pull_offset", mq=str(mq), offset=offset, requested=req.next_offset)
                    req.previously_locked = True
                    req.next_offset = offset
            else:
                log.debug("orderly_pull_later_not_locked", mq=str(mq))
                return exc_delay
        pre = self._pre_pull(req)
        if pre is not True:
            return pre  # type: ignore[return-value]
        sd = self._subscriptions.get(mq.topic)
        if sd is None:
            log.warning("pull_subscription_not_found", group=self._group, mq=str(mq))
            return exc_delay
        commit_value = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit_value = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
        try:
            result = await self.pull_api.pull_kernel(
                mq,
                sd,
                req.next_offset,
                self.pull_batch_size,
                commit_offset=max(commit_value, 0),
                commit_enable=commit_value > 0,
                suspend=True,
                suspend_timeout_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
                timeout_ms=CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND,
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            return self._on_pull_error(req, e)
        return self._on_pull_result(req, result)

    def _on_pull_error(self, req: PullRequest, e: BaseException | None) -> float:
        mq = req.message_queue
        if not mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            log.warning("pull_failed", mq=str(mq), offset=req.next_offset, error=f"{type(e).__name__}: {e}")
        return self.pull_time_delay_mills_when_exception / 1000

    def _on_pull_result(self, req: PullRequest, result: PullResult, later: list[Any] | None = None) -> float | None:
        """PullCallback.onSuccess: cache what was found and hand it to the consume service (or, with
        `later`, leave the hand-over's arguments there for the caller)."""
        pq = req.process_queue
        mq = req.message_queue
        if pq.dropped or not self.running:
            return None
        status = result.status
        if status is PullStatus.FOUND:
            prev = req.next_offset
            req.next_offset = result.next_begin_offset
            msgs = result.messages
            if not msgs:
                return 0.0
            if result.next_begin_offset < prev or msgs[0].queue_offset < prev:
                log.warning("pull_result_offsets_backwards", mq=str(mq), prev=prev, next=result.next_begin_offset)
            pq.pull_rt_ms += time.time() * 1000 - pq.last_pull_timestamp  # stamped as the pull went out
            pq.pull_found += 1
            pq.pulled_msgs += len(msgs)
            dispatch = pq.put_messages(msgs, result.max_offset)
            if later is None:
                self.consume_service.submit_consume_request(msgs, pq, mq, dispatch)
            else:
                later.extend((msgs, pq, mq, dispatch))
            return self.pull_interval / 1000
        if status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            if pq.msg_count == 0:  # correctTagsOffset
                self.offset_store.update_offset(mq, req.next_offset, True)
            return 0.0
        # OFFSET_ILLEGAL (PULL_OFFSET_MOVED): take the broker's offset, drop the queue, fix it later
        log.warning(
            "pull_offset_illegal",
            mq=str(mq),
            requested=req.next_offset,
            next_begin=result.next_begin_offset,
            min=result.min_offset,
            max=result.max_offset,
        )
        req.next_offset = result.next_begin_offset
        pq.dropped = True
        fixed = req.next_offset

        async def fix() -> None:
            self.offset_store.update_offset(mq, fixed, False)
            await self.offset_store.persist(mq)
            await self.rebalance.remove_process_queue(mq)
            log.warning("pull_offset_fixed", mq=str(mq), offset=fixed)
            await self.do_rebalance()

        self.execute_task_later(fix, OFFSET_MOVED_FIX_DELAY_MILLS / 1000)
        return None

    def _flow_control(self, mq: MessageQueue, pq: ProcessQueue, why: str) -> None:
        self.flow_control_times += 1
        if self.flow_control_times % 1000 == 1:
            log.warning(
                "pull_flow_control",
                group=self._group,
                mq=str(mq),
                why=why,
                count=pq.msg_count,
                size_mib=pq.msg_size // (1024 * 1024),
                span=pq.max_span(),
                times=self.flow_control_times,
            )

    # ------------------------------------------------------------------ queries
    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of a topic (from the NameServer)."""
        from ..route import topic_route_to_subscribe_info

        route = await self.instance.api.get_topic_route_info_from_name_server(topic)
        return sorted(topic_route_to_subscribe_info(topic, route))

    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this consumer currently pulls (its share after the last rebalance)."""
        if self.rebalance is None:
            return []
        return sorted(mq for mq, pq in self.rebalance.process_queue_table.items() if not pq.dropped)
