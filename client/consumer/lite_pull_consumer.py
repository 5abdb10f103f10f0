"""LitePullConsumer: RocketMQ's DefaultLitePullConsumer on asyncio (Kafka-style poll loop).

    consumer = LitePullConsumer("my-group", "127.0.0.1:9876")
    consumer.subscribe("TopicTest", "*")          # group rebalance, or:
    # consumer.assign(await consumer.fetch_message_queues("TopicTest"))
    async with consumer:
        while True:
            for m in await consumer.poll(timeout=1.0):
                ...
            # auto-commit (every auto_commit_interval_millis) commits what earlier polls returned;
            # or auto_commit=False and `await consumer.commit()`

- Background prefetch: one pull loop per queue fills a per-queue cache, paused above
  pull_threshold_for_queue messages / pull_threshold_size_for_queue MiB / consume_max_span
  offsets, and all queues together above pull_threshold_for_all messages.
- `poll` hands out one cached batch (at most pull_batch_size messages: 32 here, Java's default
  is 10), skipping paused queues; the queue's consumed offset moves past it.
- `seek(mq, offset)` restarts a queue at an offset (within [min, max]); `seek_to_begin/end`.
- `commit()` stores the consumed offsets and pushes them to the broker now; `committed(mq)`.
- `pause(queues)` / `resume(queues)`: no pulls and no polls for those queues meanwhile.
- `poll_blocking` (after `enable_blocking_poll`, as the blocking twin in client.sync does): poll from
  another thread, taking a batch set aside for it there, with no round trip to the loop.

Reading a range with no group membership at all (batch jobs, the Spark source):
`read_range(mq, start, end)` yields the messages of [start, end) in order, one list per pull,
through client.reader.QueueReader on this consumer's client runtime (works before start() too).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import functools
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from remoting.body import ConsumerData, SubscriptionData
from remoting.errors import RemotingError
from remoting.message import MessageExt

from ..config import ClientConfig
from ..errors import MQBrokerError, MQClientError, NotStartedError
from ..instance import MQClientInstance, get_client_manager
from ..loop_inbox import LoopInbox
from ..message import MessageQueue, PullResult, PullStatus
from ..reader import QueueReader
from ..route import topic_route_to_subscribe_info
from ..trace import AsyncTraceDispatcher, ConsumeReturnType
from ..validators import check_group
from .allocate import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from .filter import SUB_ALL, MessageSelector, build_subscription_data
from .listener import ConsumeFromWhere, ConsumeType, MessageModel
from .offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType, RemoteBrokerOffsetStore
from .process_queue import ProcessQueue
from .pull_api import PullAPIWrapper
from .pull_service import PULL_ASYNC, PULL_SENT, PullMessageService, PullRequest
from .push_consumer import _enum, stable_client_id
from .rebalance import (
    RebalanceLitePullImpl,
    SubscriptionInfoHooks,
    compute_pull_from_where,
    default_consume_timestamp,
    max_offset,
    min_offset,
    parse_consume_timestamp,
)

log = structlog.get_logger(__name__)

BROKER_SUSPEND_MAX_TIME_MILLIS = 20_000
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND = 30_000
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_PAUSE = 1000
# Batches reserved for pollers on other threads (poll_blocking): taken there without a round trip to the loop.
HANDOFF_BATCHES = 4
_CLOSED = object()  # in the hand-off once the consumer shut down: wakes every blocked poller

__all__ = ["LitePullConsumer"]


class _Mode(enum.Enum):
    NONE = "NONE"
    SUBSCRIBE = "SUBSCRIBE"
    ASSIGN = "ASSIGN"


@dataclass(eq=False, slots=True)
class _QueueState:
    """AssignedMessageQueue's per-queue record."""

    mq: MessageQueue
    pq: ProcessQueue
    pull_offset: int  # next offset to pull (-1 = not known yet)
    consume_offset: int = -1  # offset after the last message poll() returned
    handed_before: int = -1  # consume_offset before the last batch poll() returned (maybe still in use)
    paused: bool = False
    generation: int = 0
    # Found by a pull, body not decoded yet (_defer_found): at most this many messages / bytes, from
    # deferred_first on.
    deferred_count: int = 0
    deferred_bytes: int = 0
    deferred_first: int = -1


class LitePullConsumer(SubscriptionInfoHooks):
    """See the module doc. Defaults are DefaultLitePullConsumer's except pull_batch_size (32)."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | None = None,
        allocate_strategy: AllocateMessageQueueStrategy | None = None,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_all: int = 10_000,
        consume_max_span: int = 2000,
        auto_commit: bool = True,
        auto_commit_interval_millis: int = 5000,
        poll_timeout_millis: int = 5000,
        pull_time_delay_mills_when_exception: int = 1000,
        rebalance_interval: float = 20.0,
        offset_store: OffsetStore | None = None,
        offset_store_dir: str | None = None,
        instance_name: str | None = None,
        client_config: ClientConfig | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
    ) -> None:
        self._group = group
        # Message trace (RocketMQ's enableMsgTrace): each batch poll() returns is recorded as consumed.
        self.enable_msg_trace = enable_msg_trace
        self.customized_trace_topic = customized_trace_topic
        self._trace: AsyncTraceDispatcher | None = None
        self.client_config = ClientConfig.derive(client_config, namesrv_addr, instance_name)
        self.message_model: MessageModel = _enum(MessageModel, message_model, "message_model")
        self.consume_from_where: ConsumeFromWhere = _enum(ConsumeFromWhere, consume_from_where, "consume_from_where")
        self.consume_timestamp = consume_timestamp or default_consume_timestamp()
        self.allocate_strategy = allocate_strategy or AllocateMessageQueueAveragely()
        if not 1 <= pull_batch_size <= 1024:
            raise MQClientError(f"pullBatchSize Out of range [1, 1024]: {pull_batch_size}")
        if auto_commit_interval_millis < 1000:
            raise MQClientError("auto_commit_interval_millis must be >= 1000")
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.pull_threshold_for_all = pull_threshold_for_all
        self.consume_max_span = consume_max_span
        self.auto_commit = auto_commit
        self.auto_commit_interval_millis = auto_commit_interval_millis
        self.poll_timeout_millis = poll_timeout_millis
        self.pull_time_delay_mills_when_exception = pull_time_delay_mills_when_exception
        self.rebalance_interval = rebalance_interval
        self.offset_store_dir = offset_store_dir
        self._custom_offset_store = offset_store
        self.offset_store: OffsetStore = offset_store  # type: ignore[assignment]
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._mode = _Mode.NONE
        self._assigned_request: list[MessageQueue] = []
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._ready: collections.deque[tuple[_QueueState, int, list[MessageExt]]] = collections.deque()
        self._ready_event: asyncio.Event | None = None
        self._cached_total = 0
        self._deferred_total = 0  # messages found by pulls, not decoded yet (upper bound)
        # Queues whose pull loop waits out a flow-control delay (_pre_pull), by queue: woken early by _wake_held.
        self._held: dict[MessageQueue, PullRequest] = {}
        self._state = "CREATE_JUST"
        self._instance: MQClientInstance | None = None
        self._owns_instance = False
        self.rebalance: RebalanceLitePullImpl = None  # type: ignore[assignment]
        self.pull_api: PullAPIWrapper = None  # type: ignore[assignment]
        self.pull_service: PullMessageService = None  # type: ignore[assignment]
        self._next_auto_commit = 0.0
        self._persist_task: asyncio.Task[None] | None = None
        self._reader: QueueReader | None = None
        self._forgetting: set[asyncio.Task[None]] = set()  # assign()'s persists of dropped queues' offsets
        # poll_blocking's hand-off (made by enable_blocking_poll): batches taken off _ready for pollers on
        # other threads, how many are in it, and what those threads took (True) or gave back (False), for
        # the loop to account for in one callback (_settle_handoff) per wake-up.
        self._handoff: queue.SimpleQueue[Any] | None = None
        self._handoff_n = 0
        self._handoff_out: LoopInbox[tuple[tuple[_QueueState, int, list[MessageExt]] | None, bool]] = (
            LoopInbox(self._settle_handoff)
        )
        self._loop_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ identity
    @property
    def group(self) -> str:
        return self._group

    @property
    def consumer_group(self) -> str:
        return self._group

    @property
    def running(self) -> bool:
        return self._state == "RUNNING"

    @property
    def instance(self) -> MQClientInstance:
        if self._instance is None:
            raise NotStartedError(f"consumer {self._group} is not running: call start() first")
        return self._instance

    # ------------------------------------------------------------------ subscribe / assign
    def _set_mode(self, mode: _Mode) -> None:
        if self._mode is _Mode.NONE:
            self._mode = mode
        elif self._mode is not mode:
            raise MQClientError("Subscribe and assign are mutually exclusive.")

    def subscribe(self, topic: str, expression: str | MessageSelector | None = SUB_ALL) -> None:
        """Join the group's rebalance for `topic` with a tag expression or a MessageSelector (SQL92 too)."""
        self._set_mode(_Mode.SUBSCRIBE)
        self._subscriptions[topic] = build_subscription_data(topic, expression)
        if self.running:
            self.instance.send_heartbeat_soon()
            asyncio.get_running_loop().create_task(self._after_subscribe(topic))

    async def _after_subscribe(self, topic: str) -> None:
        with contextlib.suppress(MQClientError, MQBrokerError, RemotingError):
            await self.instance.update_topic_route_info_from_name_server(topic)
        await self.instance.check_subscription_soft(self._group, self._subscriptions.get(topic))
        await self.do_rebalance()

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        if self.running and self._mode is _Mode.SUBSCRIBE:
            for mq, st in list(self._queues.items()):
                if mq.topic == topic:
                    self._drop_queue(mq, st)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalance). Replaces a previous assignment. On a running
        consumer it takes effect at once, as Java's does: a seek, pause or commit right after it finds the
        queues (RocketMQ's LitePullConsumerAssign example seeks on the next line)."""
        self._set_mode(_Mode.ASSIGN)
        new = sorted(set(queues))
        self._assigned_request = new
        if self.running:
            dropped = self._assign_now()
            if dropped:
                task = asyncio.get_running_loop().create_task(self._forget_dropped(dropped))
                self._forgetting.add(task)
                task.add_done_callback(self._forgetting.discard)

    def assignment(self) -> list[MessageQueue]:
        return sorted(self._queues)

    def _assign_now(self) -> list[MessageQueue]:
        """Make the requested assignment the current one: drop the queues it leaves out and start the new
        ones. Returns the dropped queues, whose offsets are still to be persisted and forgotten."""
        wanted = set(self._assigned_request)
        dropped = []
        for mq, st in list(self._queues.items()):
            if mq not in wanted:
                self._keep_polled(st)
                self._drop_queue(mq, st)
                dropped.append(mq)
        for mq in sorted(wanted - set(self._queues)):
            if mq.topic not in self._subscriptions:
                self._subscriptions[mq.topic] = build_subscription_data(mq.topic, SUB_ALL)
            self.start_queue(PullRequest(self._group, mq, ProcessQueue(), -1))
        return dropped

    async def _forget_dropped(self, dropped: list[MessageQueue]) -> None:
        for mq in dropped:
            await self.offset_store.persist(mq)
            if mq not in self._queues:  # (not assigned again meanwhile)
                self.offset_store.remove_offset(mq)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.running:
            return
        if self._state == "SHUTDOWN":
            raise NotStartedError(f"consumer {self._group} was shut down; create a new one")
        check_group(self._group, "consumer group")
        parse_consume_timestamp(self.consume_timestamp)
        self._ready_event = asyncio.Event()
        self._handoff_out.loop = asyncio.get_running_loop()
        self._loop_thread = threading.current_thread()
        inst = await get_client_manager().acquire(self.client_config)
        try:
            self._instance = inst
            self.pull_api = PullAPIWrapper(inst, self._group)
            self.rebalance = RebalanceLitePullImpl(self._group, self.message_model, self.allocate_strategy, inst, self)
            self.rebalance.subscription_inner = self._subscriptions
            if self._custom_offset_store is not None:
                self.offset_store = self._custom_offset_store
            elif self.message_model is MessageModel.BROADCASTING:
                self.offset_store = LocalFileOffsetStore(stable_client_id(self.client_config), self._group, self.offset_store_dir)
            else:
                self.offset_store = RemoteBrokerOffsetStore(inst, self._group)
            await self.offset_store.load()
            self.pull_service = PullMessageService(
                self._pull_once, name=f"litepull-{self._group}", start_pull=self._start_pull
            )
            inst.register_consumer(self._group, self)
            if self.enable_msg_trace and self._trace is None:
                trace = AsyncTraceDispatcher(self._group, self.client_config, self.customized_trace_topic)
                await trace.start()
                self._trace = trace
        except BaseException:
            self._instance = None
            await get_client_manager().release(inst)
            raise
        inst.rebalance_interval_s = min(inst.rebalance_interval_s, self.rebalance_interval)
        self._state = "RUNNING"
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_millis / 1000
        log.info("lite_pull_consumer_started", group=self._group, client_id=inst.client_id, mode=self._mode.value)
        if self._mode is _Mode.SUBSCRIBE:
            for topic in list(self._subscriptions):
                try:
                    await inst.update_topic_route_info_from_name_server(topic)
                except (MQClientError, MQBrokerError, RemotingError) as e:
                    log.warning("subscribe_route_not_found", group=self._group, topic=topic, error=str(e))
            try:
                await inst.check_client_in_broker(self._group, self._subscriptions.values())
            except MQClientError:
                await self.shutdown()
                raise
            await inst.send_heartbeat_to_all_brokers()
            await self.do_rebalance()
        elif self._mode is _Mode.ASSIGN:
            self._assign_now()  # (nothing to drop: no queue is ours before start)

    async def shutdown(self) -> None:
        if not self.running:
            self._state = "SHUTDOWN"
            await self.close_reader()
            return
        self._state = "SHUTDOWN"
        await self.close_reader()
        inst = self.instance
        if self.rebalance is not None:  # (a rebalance under way finishes before its queues are dropped)
            await self.rebalance.stop()
        await self.pull_service.shutdown()
        if self._persist_task is not None:
            self._persist_task.cancel()
        if self.auto_commit:
            self._commit_all_to_store()
        if self._forgetting:  # dropped queues' offsets, persisted before the client goes
            await asyncio.gather(*self._forgetting, return_exceptions=True)
        await self._persist_all()
        if self._trace is not None:
            trace, self._trace = self._trace, None
            with contextlib.suppress(Exception):
                await trace.shutdown()  # (the polls' traces go out first)
        try:
            await inst.unregister_consumer(self._group)
        finally:
            for mq, st in list(self._queues.items()):
                self._drop_queue(mq, st)
            if self.rebalance is not None:
                self.rebalance.destroy()
            await get_client_manager().release(inst)
            self._instance = None
            if self._ready_event is not None:
                self._ready_event.set()  # wake a poll() waiting in another task
            if self._handoff is not None:
                self._handoff.put(_CLOSED)  # wake the pollers blocked in poll_blocking
        log.info("lite_pull_consumer_shutdown", group=self._group)

    async def __aenter__(self) -> LitePullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # ------------------------------------------------------------------ MQConsumerInner
    def consumer_data(self) -> ConsumerData:
        subs = list(self._subscriptions.values()) if self._mode is _Mode.SUBSCRIBE else []
        return ConsumerData(
            group_name=self._group,
            consume_type=ConsumeType.CONSUME_ACTIVELY.value,
            message_model=self.message_model.value,
            consume_from_where=self.consume_from_where.value,
            subscription_data_set=subs,
            unit_mode=self.client_config.unit_mode,
        )

    async def do_rebalance(self) -> None:
        if self.running and self._mode is _Mode.SUBSCRIBE:
            await self.rebalance.do_rebalance(False)

    async def persist_consumer_offset(self) -> None:
        if self.running:
            await self._persist_all()

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]:
        return self.offset_store.clone_offset_table(topic) if self.offset_store is not None else {}

    async def reset_offset(self, topic: str, offset_table: dict[MessageQueue, int]) -> None:
        for mq, off in offset_table.items():
            if mq.topic == topic and mq in self._queues:
                with contextlib.suppress(MQClientError):
                    await self._seek_unchecked(mq, off)
                self.offset_store.update_offset(mq, off, False)

    # ------------------------------------------------------------------ queues (rebalance hooks)
    def start_queue(self, req: PullRequest) -> None:
        """A queue became ours (rebalance or assign): start prefetching it."""
        old = self._queues.get(req.message_queue)
        if old is not None:
            self._drop_queue(req.message_queue, old)
        st = _QueueState(req.message_queue, req.process_queue, req.next_offset)
        self._queues[req.message_queue] = st
        self.pull_service.execute_pull_request_immediately(req)

    def on_process_queue_dropped(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        st = self._queues.get(mq)
        if st is not None and st.pq is pq:
            self._keep_polled(st)  # (the rebalance persists the queue's offset next)
            self._drop_queue(mq, st)

    def _drop_queue(self, mq: MessageQueue, st: _QueueState) -> None:
        st.pq.dropped = True
        if self._queues.get(mq) is st:
            del self._queues[mq]
        if self.pull_service is not None:
            self.pull_service.stop_queue(mq)
        self._purge_ready(st)

    def _purge_ready(self, st: _QueueState) -> None:
        kept: collections.deque[tuple[_QueueState, int, list[MessageExt]]] = collections.deque()
        for item in self._ready:
            if item[0] is st:
                self._cached_total -= len(item[2])
            else:
                kept.append(item)
        self._ready = kept
        st.pq.clear()

    # ------------------------------------------------------------------ prefetch
    def _pre_pull(self, req: PullRequest) -> tuple[_QueueState, float | None | bool]:
        """The checks before a pull: (state, True) when it may go out now, else (state, delay / None)."""
        st = self._queues.get(req.message_queue)
        pq = req.process_queue
        if st is None or st.pq is not pq or pq.dropped or not self.running:
            return st, None  # type: ignore[return-value]
        if st.paused:
            return st, PULL_TIME_DELAY_MILLS_WHEN_PAUSE / 1000
        if self._held:
            self._held.pop(st.mq, None)  # (its delay is over: an early wake must not cut a later one short)
        fc = PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL / 1000
        if (
            self._cached_total + self._deferred_total > self.pull_threshold_for_all
            or pq.msg_count + st.deferred_count > self.pull_threshold_for_queue
            or (pq.msg_size + st.deferred_bytes) // (1024 * 1024) > self.pull_threshold_size_for_queue
        ):
            # Held for the delay, or until poll() has taken the cache down to half of what stopped it
            # (_wake_held): a fast poller would otherwise empty the cache and wait out the rest of it.
            self._held[st.mq] = req
            return st, fc
        span = pq.max_span()
        if st.deferred_count:
            first = pq.first_offset()
            span = max(span, st.pull_offset - 1 - (st.deferred_first if first is None else first))
        if span > self.consume_max_span:
            self._held[st.mq] = req  # (woken as above; this check then decides again)
            return st, fc
        return st, True

    def _start_pull(self, req: PullRequest) -> Any:
        """The pull loop's synchronous step (see PullMessageService): send the pull with a response
        callback (PULL_SENT), a delay / None, or PULL_ASYNC (first pull: the start offset is looked up)."""
        st, pre = self._pre_pull(req)
        if pre is not True:
            return pre
        if st.pull_offset < 0:
            return PULL_ASYNC
        mq = req.message_queue
        sd = self._subscriptions.get(mq.topic) or build_subscription_data(mq.topic, SUB_ALL)
        offset = st.pull_offset
        sent = self.pull_api.pull_kernel_nowait_raw(
            mq,
            sd,
            offset,
            self.pull_batch_size,
            functools.partial(self._on_pull_response, req, st, st.generation, offset),
            suspend_timeout_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
            timeout_ms=CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND,
        )
        return PULL_SENT if sent else PULL_ASYNC

    def _on_pull_response(
        self, req: PullRequest, st: _QueueState, gen: int, offset: int, result: PullResult | None,
        body: bytes | None, exc: BaseException | None,
    ) -> None:
        """The pull's callback, from the connection's read path: hands the delay to the pull loop."""
        service = self.pull_service
        if service is None or not service.is_current(req):
            return
        exc_delay = self.pull_time_delay_mills_when_exception / 1000
        deferred = 0
        try:
            if result is None:
                log.warning("lite_pull_failed", mq=str(req.message_queue), offset=offset, error=f"{type(exc).__name__}: {exc}")
                delay: float | None = exc_delay
            elif result.status is PullStatus.FOUND and body:
                delay, deferred = self._defer_found(req, st, gen, offset, result, body)
            else:
                delay = self._on_pull_result(req, st, gen, offset, result)
        except Exception as e:  # never leave the queue's loop without its next step
            log.exception("lite_pull_result_failed", mq=str(req.message_queue), error=f"{type(e).__name__}: {e}")
            delay = exc_delay
        service.pull_done(req, delay)
        if deferred:
            # Queued after the next pull's write (pull_done sent it): see _defer_found.
            asyncio.get_running_loop().call_soon(
                self._finish_deferred, req, st, gen, offset, result, body, deferred
            )

    def _defer_found(
        self, req: PullRequest, st: _QueueState, gen: int, offset: int, result: PullResult, body: bytes
    ) -> tuple[float | None, int]:
        """A pull found messages: move the queue's pull offset now, so the next pull goes out in this
        loop turn (with every other pull answered by the same read), and leave decoding the body to a
        callback queued after that write. Decoding in the read path kept the next pulls unsent until
        every answer of the read was decoded, so broker and client worked in turns; now the broker
        reads the next pulls while we decode. Until decoded, the batch counts for flow control at its
        upper bound (its offset range, its bytes). Returns (delay, that bound; 0 = nothing deferred)."""
        pq = req.process_queue
        if pq.dropped or st.generation != gen or self._queues.get(req.message_queue) is not st:
            return (0.0 if not pq.dropped else None), 0
        n = max(1, result.next_begin_offset - offset)
        if not st.deferred_count:
            st.deferred_first = offset
        st.deferred_count += n
        st.deferred_bytes += len(body)
        self._deferred_total += n
        st.pull_offset = result.next_begin_offset
        return 0.0, n

    def _finish_deferred(
        self, req: PullRequest, st: _QueueState, gen: int, offset: int, result: PullResult, body: bytes, n: int
    ) -> None:
        """_defer_found's second half: decode and cache the batch for poll() (in pull order: callbacks run
        in the order they were scheduled)."""
        self._deferred_total -= n
        if st.generation != gen:
            return  # re-seeked or dropped meanwhile: the counters were reset with the generation
        st.deferred_count -= n
        st.deferred_bytes -= len(body)
        mq = req.message_queue
        if req.process_queue.dropped or self._queues.get(mq) is not st or not self.running:
            return
        sd = self._subscriptions.get(mq.topic) or build_subscription_data(mq.topic, SUB_ALL)
        try:
            result = self.pull_api.decode_raw(result, body, sd)
        except Exception as e:  # a corrupt answer: pull it again, after the usual pause
            log.warning("lite_pull_failed", mq=str(mq), offset=offset, error=f"{type(e).__name__}: {e}")
            # From what poll() handed out last: the restart drops the cached batches before this one too.
            at = offset if st.consume_offset < 0 else min(offset, st.consume_offset)
            self._restart_queue(st, at, self.pull_time_delay_mills_when_exception / 1000)
            return
        self._on_pull_result(req, st, gen, offset, result, moved=True)

    def _restart_queue(self, st: _QueueState, offset: int, delay_s: float = 0.0) -> None:
        """Start the queue over at `offset`: batches cached, decoded or in flight from before are dropped."""
        st.generation += 1
        st.deferred_count = st.deferred_bytes = 0
        st.deferred_first = -1
        self.pull_service.stop_queue(st.mq)
        self._purge_ready(st)
        st.pull_offset = offset
        st.consume_offset = offset
        st.handed_before = -1  # (what polls returned before a seek is not what the queue resumes after)
        req = PullRequest(self._group, st.mq, st.pq, offset)
        if delay_s > 0:
            self.pull_service.execute_pull_request_later(req, delay_s)
        else:
            self.pull_service.execute_pull_request_immediately(req)

    async def _pull_once(self, req: PullRequest) -> float | None:
        mq = req.message_queue
        st, pre = self._pre_pull(req)
        if pre is not True:
            return pre  # type: ignore[return-value]
        exc_delay = self.pull_time_delay_mills_when_exception / 1000
        gen = st.generation
        if st.pull_offset < 0:
            try:
                off = await compute_pull_from_where(
                    self.instance, self.offset_store, mq, self.consume_from_where, self.consume_timestamp
                )
            except (MQClientError, MQBrokerError, RemotingError) as e:
                log.warning("lite_pull_compute_offset_failed", mq=str(mq), error=str(e))
                return exc_delay
            if off < 0:
                return exc_delay
            if st.generation != gen:
                return 0.0
            st.pull_offset = off
            if st.consume_offset < 0:
                st.consume_offset = off
        sd = self._subscriptions.get(mq.topic) or build_subscription_data(mq.topic, SUB_ALL)
        offset = st.pull_offset
        try:
            result = await self.pull_api.pull_kernel(
                mq,
                sd,
                offset,
                self.pull_batch_size,
                suspend=True,
                suspend_timeout_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
                timeout_ms=CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND,
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("lite_pull_failed", mq=str(mq), offset=offset, error=f"{type(e).__name__}: {e}")
            return exc_delay
        return self._on_pull_result(req, st, gen, offset, result)

    def _on_pull_result(
        self, req: PullRequest, st: _QueueState, gen: int, offset: int, result: PullResult, *, moved: bool = False
    ) -> float | None:
        """Cache a pull's messages for poll(); `moved`: the pull offset was already moved past them."""
        mq = req.message_queue
        pq = req.process_queue
        if pq.dropped or st.generation != gen or self._queues.get(mq) is not st:
            return 0.0 if not pq.dropped else None
        if result.status is PullStatus.FOUND:
            if not moved:
                st.pull_offset = result.next_begin_offset
            msgs = result.messages
            if msgs:
                pq.put_messages(msgs, result.max_offset)
                self._ready.append((st, gen, msgs))
                self._cached_total += len(msgs)
                assert self._ready_event is not None
                self._ready_event.set()
                if self._handoff is not None:
                    self._fill_handoff()
            return 0.0
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("lite_pull_offset_illegal", mq=str(mq), requested=offset, next_begin=result.next_begin_offset)
        st.pull_offset = result.next_begin_offset
        return 0.0

    # ------------------------------------------------------------------ poll / commit
    def _take_ready(self) -> list[MessageExt] | None:
        item = self._pop_ready()
        if item is None:
            return None
        st, _gen, msgs = item
        self._cached_total -= len(msgs)
        self._polled(st, msgs)
        if self._held:
            self._wake_held()
        return msgs

    def _pop_ready(self) -> tuple[_QueueState, int, list[MessageExt]] | None:
        """The first cached batch poll() may hand out (its queue current and not paused), off _ready."""
        for i, item in enumerate(self._ready):
            st, gen, _msgs = item
            if st.paused or not self._current(st, gen):
                continue
            del self._ready[i]
            return item
        # Drop stale entries (dropped or reseeked queues) so they do not pile up.
        if self._ready:
            stale = [it for it in self._ready if it[0].pq.dropped or it[0].generation != it[1]]
            if stale:
                self._ready = collections.deque(it for it in self._ready if it not in stale)
                self._cached_total -= sum(len(it[2]) for it in stale)
        return None

    def _current(self, st: _QueueState, gen: int) -> bool:
        """Whether a batch cached for queue state `st` at generation `gen` may still be handed out: the queue
        is still this consumer's, not dropped, and not reseeked since."""
        return not st.pq.dropped and st.generation == gen and self._queues.get(st.mq) is st

    def _poll_timeout(self, timeout: float | None) -> float:
        """poll()'s checks of a call: the consumer running, and the timeout (default poll_timeout_millis)."""
        if not self.running:
            raise NotStartedError("The consumer not running, please start it first.")
        if timeout is None:
            timeout = self.poll_timeout_millis / 1000
        if timeout < 0:
            raise ValueError("Timeout must not be negative")
        return timeout

    @staticmethod
    def _polled(st: _QueueState, msgs: list[MessageExt]) -> None:
        """A batch was handed out: the queue's consumed offset moves past it."""
        offset = st.pq.remove_messages(msgs)
        if offset >= 0:
            st.handed_before = st.consume_offset
            st.consume_offset = offset

    def _keep_polled(self, st: _QueueState) -> None:
        """Auto-commit, a queue leaving this consumer: commit what earlier polls returned from it (not its
        last batch, which the application may still hold), so its next owner does not read again up to
        auto_commit_interval_millis of it. Persisted with the queue's other offsets as it goes."""
        if self.auto_commit and st.handed_before >= 0:
            self.offset_store.update_offset(st.mq, st.handed_before, True)

    # ------------------------------------------------------------------ poll from other threads
    def enable_blocking_poll(self) -> None:
        """Let threads other than the loop's poll with poll_blocking (the blocking facade's poll): up to
        HANDOFF_BATCHES cached batches wait for them in a thread-safe queue, as Java's consumeRequestCache
        holds them for poll(), so a poll with a batch waiting takes it without a round trip to the loop.
        Call before start()."""
        if self._handoff is None:
            self._handoff = queue.SimpleQueue()

    def poll_blocking(self, timeout: float | None = None) -> list[MessageExt]:
        """poll() for a thread other than the consumer's loop (after enable_blocking_poll): blocks the
        calling thread up to `timeout` seconds. The batch's accounting (consumed offset, cache counts, the
        auto-commit of what earlier polls returned) is done by the loop, queued ahead of any call the
        thread makes next (commit, seek, ...)."""
        handoff = self._handoff
        if handoff is None:
            raise MQClientError("poll_blocking needs enable_blocking_poll() before start()")
        timeout = self._poll_timeout(timeout)
        if threading.current_thread() is self._loop_thread:
            raise MQClientError("poll_blocking would block the consumer's own loop: await poll() there")
        if self.auto_commit and time.monotonic() >= self._next_auto_commit:
            self._to_loop(None, False)  # (an idle poller's auto-commit, as poll() makes it)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                item = handoff.get(timeout=left) if left > 0 else handoff.get_nowait()
            except queue.Empty:
                return []
            if item is _CLOSED:
                handoff.put(item)  # for the next blocked poller
                return []
            st, gen, msgs = item
            if not self.running:
                return []
            if st.paused or not self._current(st, gen):
                self._to_loop(item, False)  # stale, or its queue paused since: back to the loop
                continue
            self._to_loop(item, True)
            if self._trace is not None:
                self._trace_polled(msgs)  # type: ignore[arg-type]
            return msgs  # type: ignore[no-any-return]

    def _to_loop(self, item: Any, taken: bool) -> None:
        """(From a polling thread) have the loop account for a hand-off batch taken or given back (None:
        only the auto-commit check), in one callback for all that arrive before it runs."""
        try:
            self._handoff_out.put((item, taken))
        except RuntimeError:  # the loop is closed: nothing left to account for
            pass

    def _fill_handoff(self) -> None:
        handoff = self._handoff
        if handoff is None or not self.running:
            return
        while self._handoff_n < HANDOFF_BATCHES and self._ready:
            item = self._pop_ready()
            if item is None:
                return
            self._handoff_n += 1
            handoff.put(item)

    def _settle_handoff(self) -> None:
        """On the loop: what polling threads took from the hand-off, or gave back, since the last call."""
        out = self._handoff_out.items
        if self.auto_commit and self.running and time.monotonic() >= self._next_auto_commit:
            self._maybe_auto_commit()  # what earlier polls returned, before the batches below count
        while out:
            item, taken = out.popleft()
            if item is None:
                continue
            self._handoff_n -= 1
            st, gen, msgs = item
            current = self._current(st, gen)
            if current and not taken:
                self._put_back(item)  # its queue was paused: cached again, in offset order
                continue
            self._cached_total -= len(msgs)
            if taken and current:
                self._polled(st, msgs)
        if self._held:
            self._wake_held()
        self._fill_handoff()

    def _put_back(self, item: tuple[_QueueState, int, list[MessageExt]]) -> None:
        """A batch back into _ready ahead of its queue's later batches (those given back may arrive in
        any order)."""
        st, _gen, msgs = item
        first = msgs[0].queue_offset
        for i, (other, _g, later) in enumerate(self._ready):
            if other is st and later[0].queue_offset > first:
                self._ready.insert(i, item)
                return
        self._ready.append(item)

    def _wake_held(self) -> None:
        """Resume the pulls flow control holds whose caches are down to half of the count and size thresholds
        (_pre_pull then checks everything again, the span included)."""
        if (self._cached_total + self._deferred_total) * 2 > self.pull_threshold_for_all:
            return
        for mq, req in list(self._held.items()):
            st = self._queues.get(mq)
            if st is not None and st.pq is req.process_queue:
                pq = st.pq
                if (pq.msg_count + st.deferred_count) * 2 > self.pull_threshold_for_queue or (
                    (pq.msg_size + st.deferred_bytes) * 2 // (1024 * 1024) > self.pull_threshold_size_for_queue
                ):
                    continue
                self.pull_service.wake(req)
            del self._held[mq]

    def _trace_polled(self, msgs: list[MessageExt]) -> None:
        """As upstream's lite pull consumer: a batch handed to the application is traced as consumed (callers
        test that tracing is on)."""
        trace = self._trace
        assert trace is not None
        trace.sub_after(trace.sub_before(self._group, msgs), len(msgs), True, ConsumeReturnType.SUCCESS)

    async def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """The next batch of messages (one queue's, in offset order), or [] after `timeout`
        seconds (default poll_timeout_millis). Auto-commit happens here, for earlier polls."""
        timeout = self._poll_timeout(timeout)
        if self.auto_commit and time.monotonic() >= self._next_auto_commit:
            self._maybe_auto_commit()
        assert self._ready_event is not None
        deadline = time.monotonic() + timeout
        while True:
            msgs = self._take_ready()
            if msgs is not None:
                if self._trace is not None:
                    self._trace_polled(msgs)
                return msgs
            left = deadline - time.monotonic()
            if left <= 0 or not self.running:
                return []
            self._ready_event.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._ready_event.wait()

    def _maybe_auto_commit(self) -> None:
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_millis / 1000
        self._commit_all_to_store()
        if self._persist_task is None or self._persist_task.done():
            self._persist_task = asyncio.get_running_loop().create_task(self._persist_all())

    def _commit_all_to_store(self) -> dict[MessageQueue, int]:
        out = {}
        for mq, st in self._queues.items():
            if st.consume_offset >= 0 and not st.pq.dropped:
                self.offset_store.update_offset(mq, st.consume_offset, False)
                out[mq] = st.consume_offset
        return out

    async def _persist_all(self) -> None:
        try:
            await self.offset_store.persist_all(list(self._queues))
        except Exception as e:
            log.error("persist_consumer_offset_failed", group=self._group, error=f"{type(e).__name__}: {e}")

    async def commit(self, offsets: dict[MessageQueue, int] | None = None, *, persist: bool = True) -> dict[MessageQueue, int]:
        """Commit the offsets after what poll() returned (or the given ones) and, with `persist`,
        push them to the broker (or the local file) now. Returns what was committed."""
        if not self.running:
            raise NotStartedError("The consumer not running, please start it first.")
        if offsets is None:
            done = self._commit_all_to_store()
        else:
            done = {}
            for mq, off in offsets.items():
                self.offset_store.update_offset(mq, int(off), False)
                done[mq] = int(off)
        if persist and done:
            await asyncio.gather(*(self.offset_store.persist(mq) for mq in done))
        return done

    async def commit_sync(self, offsets: dict[MessageQueue, int] | None = None) -> dict[MessageQueue, int]:
        return await self.commit(offsets, persist=True)

    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of the queue (this client's, else the store's); None if none."""
        if not self.running:
            raise NotStartedError("The consumer not running, please start it first.")
        off = await self.offset_store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
        if off == -2:
            raise MQClientError(f"could not read the committed offset of {mq}")
        return None if off < 0 else off

    def position(self, mq: MessageQueue) -> int | None:
        """The offset after the last message poll() returned for the queue (None if unknown)."""
        st = self._queues.get(mq)
        return None if st is None or st.consume_offset < 0 else st.consume_offset

    # ------------------------------------------------------------------ seek / pause
    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Restart `mq` at `offset` (must be within the queue's [min, max] offsets)."""
        if not self.running:
            raise NotStartedError("The consumer not running, please start it first.")
        if mq not in self._queues:
            why = ", may be rebalancing" if self._mode is _Mode.SUBSCRIBE else ""
            raise MQClientError(f"The message queue is not in assigned list{why}, message queue: {mq}")
        lo = max(0, await min_offset(self.instance, mq))
        hi = max(0, await max_offset(self.instance, mq))
        if offset < lo or offset > hi:
            raise MQClientError(f"Seek offset illegal, seek offset = {offset}, min offset = {lo}, max offset = {hi}")
        await self._seek_unchecked(mq, offset)

    async def _seek_unchecked(self, mq: MessageQueue, offset: int) -> None:
        st = self._queues.get(mq)
        if st is None:
            raise MQClientError(f"The message queue is not in assigned list, message queue: {mq}")
        self._restart_queue(st, offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        await self.seek(mq, max(0, await min_offset(self.instance, mq)))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        await self.seek(mq, max(0, await max_offset(self.instance, mq)))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            st = self._queues.get(mq)
            if st is not None:
                st.paused = True

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            st = self._queues.get(mq)
            if st is not None:
                st.paused = False
        if self._ready_event is not None:
            self._ready_event.set()
        if self._handoff is not None:
            self._fill_handoff()

    def is_paused(self, mq: MessageQueue) -> bool:
        st = self._queues.get(mq)
        return bool(st and st.paused)

    # ------------------------------------------------------------------ queries
    async def _any_instance(self) -> MQClientInstance:
        if self._instance is not None:
            return self._instance
        if self._reader is None:
            self._reader = await QueueReader.create(config=self.client_config, consumer_group=self._group)
        return self._reader.instance

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of a topic, from the NameServer."""
        inst = await self._any_instance()
        route = await inst.api.get_topic_route_info_from_name_server(topic)
        return sorted(topic_route_to_subscribe_info(topic, route))

    async def min_offset(self, mq: MessageQueue) -> int:
        return max(0, await min_offset(await self._any_instance(), mq))

    async def max_offset(self, mq: MessageQueue) -> int:
        return max(0, await max_offset(await self._any_instance(), mq))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        from .rebalance import search_offset

        return await search_offset(await self._any_instance(), mq, int(timestamp_ms))

    # ------------------------------------------------------------------ plain range reads
    async def _queue_reader(self) -> QueueReader:
        if self._reader is None:
            if self._instance is not None:
                self._reader = QueueReader(self._instance, consumer_group=self._group)
            else:
                self._reader = await QueueReader.create(config=self.client_config, consumer_group=self._group)
        return self._reader

    async def read_range(
        self, mq: MessageQueue, start: int, end: int, *, sub_expression: str = SUB_ALL
    ) -> AsyncIterator[list[MessageExt]]:
        """Messages of `mq` with start <= offset < end, in order, one list per pull; no group
        membership, no offsets committed (client.reader.QueueReader.read_range)."""
        reader = await self._queue_reader()
        async for msgs in reader.read_range(mq, start, end, sub_expression=sub_expression):
            yield msgs

    async def close_reader(self) -> None:
        if self._reader is not None:
            r, self._reader = self._reader, None
            await r.close()
