"""Consume services: hand cached messages to the user's listener and act on what it returns.

ConsumeMessageConcurrentlyService
    Batches (consumeMessageBatchMaxSize, 1 by default) are taken from the queues that have messages
    waiting, round robin. An `async def` listener runs as a coroutine on the loop, in
    `consume_thread_max` workers. A plain function runs in `consume_thread_max` threads, with up to
    PLAIN_CALLS_QUEUED calls queued or running, as Java's ConsumeRequests wait in its consume
    executor's queue: a thread that finishes a call finds the next one waiting, and each
    outcome is settled in the callback that delivers it (no worker task woken per call).
    The waiting work is the messages already counted in each ProcessQueue (bounded by the pull
    flow control) plus at most one entry per queue in the ready queue: no unbounded buffers.
    RECONSUME_LATER (or an exception, or None) sends the messages back to the broker
    (CONSUMER_SEND_MSG_BACK; if that fails too, they are consumed again here after 5 s).
    The queue's offset advances to the lowest message still unfinished. Messages a listener has
    held longer than consume_timeout are sent back and released (cleanExpireMsg).

ConsumeMessageOrderlyService
    One queue is consumed by one worker at a time, in offset order, and (clustering) only while
    this client holds the queue's broker lock (renewed every 20 s; a lock older than 30 s is
    stale). SUSPEND_CURRENT_QUEUE_A_MOMENT puts the batch back and retries after
    suspend_current_queue_time_millis, up to max_reconsume_times; then the message goes to the
    DLQ (CONSUMER_SEND_MSG_BACK with delay level -1) and the queue moves on.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from remoting.body import ConsumeMessageDirectlyResult
from remoting.message import MessageConst, MessageExt, add_properties

from ..listener_threads import ListenerThreads
from ..message import MessageQueue
from ..validators import RETRY_GROUP_TOPIC_PREFIX
from .listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageModel,
)
from .process_queue import ProcessQueue

if TYPE_CHECKING:
    from .push_consumer import PushConsumer

log = structlog.get_logger(__name__)

MAX_TIME_CONSUME_CONTINUOUSLY_MS = 60_000
SEND_BACK_RETRY_LOCALLY_DELAY_S = 5.0
# A plain listener's calls queued or running (at least two a thread): enough that a thread finishing a call
# finds the next one waiting instead of sleeping until the loop has settled its outcome and queued more.
# The depth, not the thread count, sets the rate of short calls (1 message a call, no-op listener): 64
# queued ~80k msgs/s, 160 ~110-150k, 256-320 ~115-150k, with 1, 4 or 20 threads alike.
PLAIN_CALLS_QUEUED = 256
# An orderly queue's messages handed to a plain listener's thread at once (at least one batch), called a
# batch at a time in order while each succeeds: one hand-off per run, not per batch.
ORDERLY_RUN_MESSAGES = 32

__all__ = [
    "ConsumeMessageConcurrentlyService",
    "ConsumeMessageOrderlyService",
    "ListenerInvoker",
    "is_async_callable",
]


def is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__ if callable(fn) and not inspect.isfunction(fn) else None)


class ListenerInvoker:
    """Calls a listener: `async def` on the loop, a plain function in a bounded thread pool."""

    def __init__(self, fn: Callable[..., Any], max_threads: int, name: str) -> None:
        self.fn = fn
        self.is_async = is_async_callable(fn)
        self._threads: ListenerThreads | None = None
        if not self.is_async:
            self._threads = ListenerThreads(fn, max_threads, f"ConsumeMessageThread_{name}")

    @property
    def threads(self) -> ListenerThreads | None:
        """A plain listener's threads (None for an `async def` one)."""
        return self._threads

    async def __call__(self, msgs: list[MessageExt], context: Any) -> Any:
        if self.is_async:
            result = await self.fn(msgs, context)
        else:
            result = await self._threads.submit(msgs, context)  # type: ignore[union-attr]
        if type(result) in _STATUS_TYPES:  # the usual answer: no (slow, ABC-based) awaitable check
            return result
        if inspect.isawaitable(result):
            result = await result
        return result

    def shutdown(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()


_STATUS_TYPES = (ConsumeConcurrentlyStatus, ConsumeOrderlyStatus)
_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
_NOT_CALLED = object()  # a plain listener call skipped in its thread: the queue was dropped meanwhile
_RUN_GO_ON = object()  # an orderly run committed what it consumed: the queue's loop goes on


class _Started:
    """A listener call started outside a worker (ConsumeMessageConcurrentlyService._consume_now) that
    waits on `waiting_on` (what the coroutine yielded: a future, or None for a bare yield); it runs in
    `context`, as a Task's coroutine runs in the Task's."""

    __slots__ = ("coro", "waiting_on", "context")

    def __init__(self, coro: Any, waiting_on: Any, context: contextvars.Context) -> None:
        self.coro = coro
        self.waiting_on = waiting_on
        self.context = context


class _Wait:
    """Awaitable: wait, as the running Task, until what a hand-driven coroutine yielded is done --
    without taking its result (the coroutine takes it itself when resumed), as Task.__step waits."""

    __slots__ = ("waiting_on",)

    def __init__(self, waiting_on: Any) -> None:
        self.waiting_on = waiting_on

    def __await__(self) -> Any:
        fut = self.waiting_on
        if fut is None:
            yield  # a bare yield (asyncio.sleep(0)): one loop turn
        elif not fut.done():
            fut._asyncio_future_blocking = True
            yield fut


async def _finish_started(started: _Started) -> None:
    """Drive a coroutine started by hand to its end from the calling Task (what a Task of its own would
    have done after its first step), in the coroutine's own context; a cancellation of the calling Task
    is passed into the coroutine."""
    coro = started.coro
    run = started.context.run
    waiting_on = started.waiting_on
    while True:
        try:
            await _Wait(waiting_on)
        except BaseException as e:  # noqa: BLE001 - the Task's cancellation: into the coroutine, as Task.__step does
            try:
                waiting_on = run(coro.throw, e)
            except StopIteration:
                return
            continue
        try:
            waiting_on = run(coro.send, None)
        except StopIteration:
            return


_monotonic = time.monotonic


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _ServiceBase:
    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        self.consumer = consumer
        self.group = consumer.group
        self.invoker = ListenerInvoker(listener, consumer.consume_thread_max, consumer.group)
        self._ready: asyncio.Queue[tuple[MessageQueue, ProcessQueue] | None] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.TimerHandle] = set()
        self._aux: list[asyncio.Task[None]] = []
        # Listener calls started inline (_consume_now) once shutdown had begun: finished in tasks of their
        # own, as the workers may be gone, and waited for by shutdown as the workers are.
        self._tails: set[asyncio.Task[None]] = set()
        self.stopped = False
        self._idle = 0  # workers waiting for work
        self._warned_none = False

    @property
    def core_pool_size(self) -> int:
        return self.consumer.consume_thread_max

    def start(self) -> None:
        self._workers = [
            asyncio.get_running_loop().create_task(self._worker(), name=f"consume-{self.group}-{i}")
            for i in range(self.consumer.consume_thread_max)
        ]

    async def _worker(self) -> None:
        raise NotImplementedError

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        if self.stopped:
            return
        loop = asyncio.get_running_loop()

        def run() -> None:
            self._timers.discard(handle)
            if not self.stopped:
                fn()

        handle = loop.call_later(max(0.0, delay_s), run)
        self._timers.add(handle)

    def _warn_none(self, mq: MessageQueue) -> None:
        if not self._warned_none:
            self._warned_none = True
            log.warning("listener_returned_none", group=self.group, mq=str(mq), treated_as="retry")

    async def shutdown(self, await_s: float) -> None:
        """Stop taking work; let the listener calls under way finish (at most `await_s`), then cancel them.
        May be awaited from inside a listener call: that call is not waited for (it waits for this)."""
        self.stopped = True
        for h in list(self._timers):
            h.cancel()
        self._timers.clear()
        for t in self._aux:
            t.cancel()
        for _ in self._workers:
            self._ready.put_nowait(None)
        # One loop turn first: a listener's first step runs inline, outside any task (_consume_now), and
        # is only then handed to a task; past this, the task running this shutdown is the current one.
        await asyncio.sleep(0)
        me = asyncio.current_task()
        running: list[asyncio.Future[Any]] = [t for t in (*self._workers, *self._tails) if t is not me]
        drained = self._calls_drained()
        if drained is not None:
            running.append(drained)
        if running:
            _done, pending = await asyncio.wait(running, timeout=max(0.01, await_s))
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1)
        self._abandon_calls()
        self.invoker.shutdown()

    def _calls_drained(self) -> asyncio.Future[None] | None:
        """Done when the listener calls under way outside the workers and tails are over (None: none are)."""
        return None

    def _abandon_calls(self) -> None:
        """Shutdown stopped waiting: the outcome of a call still under way is not settled."""

    def _listener_raised(self, mq: MessageQueue, msgs: list[MessageExt], e: BaseException) -> None:
        log.warning(
            "consume_message_exception",
            group=self.group,
            mq=str(mq),
            offsets=[m.queue_offset for m in msgs],
            error=f"{type(e).__name__}: {e}",
        )

    @staticmethod
    def _mark_consume_start(msgs: list[MessageExt]) -> int:
        """Stamp the call's start on its messages (CONSUME_START_TIMESTAMP, ms); returns it in ns, which the
        call's consume RT is measured from."""
        now = time.time_ns()
        add_properties(msgs, ((MessageConst.PROPERTY_CONSUME_START_TIMESTAMP, str(now // 1_000_000)),))
        return now


class ConsumeMessageConcurrentlyService(_ServiceBase):
    """See the module doc."""

    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        super().__init__(consumer, listener)
        # A plain listener's path: the queues with messages waiting (round robin, as _ready for the
        # workers), the calls queued or running in its threads and at most how many, and a future
        # shutdown waits on until they are over.
        self._plain_threads = self.invoker.threads
        self._plain_ready: collections.deque[tuple[MessageQueue, ProcessQueue]] = collections.deque()
        self._plain_calls = 0
        self._plain_limit = max(PLAIN_CALLS_QUEUED, 2 * consumer.consume_thread_max)
        self._plain_drained: asyncio.Future[None] | None = None
        self._plain_abandoned = False

    def start(self) -> None:
        if self._plain_threads is None:
            super().start()  # the workers (a plain listener's calls need none)
        if self.consumer.message_model is MessageModel.CLUSTERING:
            period = max(0.5, self.consumer.consume_timeout * 60.0)
            self._aux.append(asyncio.get_running_loop().create_task(self._clean_expired_loop(period)))

    def submit_consume_request(
        self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch_to_consume: bool = True
    ) -> None:
        if not msgs or pq.dropped:
            return
        pq.pending.extend(msgs)
        if self._plain_threads is not None:
            self._mark_ready(mq, pq)
            self._start_plain_calls()
            return
        if self._idle > self._ready.qsize() and not pq.ready and self.invoker.is_async and not self.stopped:
            self._consume_now(mq, pq)
        else:
            self._mark_ready(mq, pq)

    def _mark_ready(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        if pq.pending and not pq.ready and not pq.dropped and not self.stopped:
            pq.ready = True
            if self._plain_threads is not None:
                self._plain_ready.append((mq, pq))
            else:
                self._ready.put_nowait((mq, pq))

    def _take_batch(self, mq: MessageQueue, pq: ProcessQueue, batch_size: int) -> list[MessageExt]:
        pending = pq.pending
        if batch_size >= len(pending):  # all of it (a pull answer fits one listener batch)
            msgs = list(pending)
            pending.clear()
        else:
            msgs = [pending.popleft() for _ in range(batch_size)]
        self._mark_ready(mq, pq)  # more waiting: back of the line (fair across queues)
        return msgs

    def _start_plain_calls(self) -> None:
        """A plain listener: queue calls in its threads, a batch of the next waiting queue each, while fewer
        than _plain_limit are queued or running."""
        threads = self._plain_threads
        ready = self._plain_ready
        batch_size = self.consumer.consume_message_batch_max_size
        while ready and self._plain_calls < self._plain_limit and not self.stopped:
            mq, pq = ready.popleft()
            pq.ready = False
            if pq.dropped:
                pq.pending.clear()
                continue
            msgs = self._take_batch(mq, pq, batch_size)
            context = ConsumeConcurrentlyContext(mq)
            if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a pulled message's topic is its queue's
                self.consumer.reset_retry_topic(msgs)
            self._plain_calls += 1
            took = [0.0]  # the call's duration, written by its thread
            threads.submit_callback(  # type: ignore[union-attr]
                self._call_plain, (msgs, context, pq, took), functools.partial(self._plain_done, msgs, pq, mq, context, took)
            )

    def _call_plain(
        self, msgs: list[MessageExt], context: ConsumeConcurrentlyContext, pq: ProcessQueue, took: list[float]
    ) -> Any:
        """In a listener thread: ConsumeRequest.run's call (its start stamped when it starts, as Java's), its
        duration left in `took` for the loop to count."""
        if pq.dropped:
            return _NOT_CALLED
        started = self._mark_consume_start(msgs)
        try:
            return self.invoker.fn(list(msgs), context)
        finally:
            took[0] = (time.time_ns() - started) / 1e6

    def _plain_done(
        self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, context: ConsumeConcurrentlyContext,
        took: list[float], status: Any, exc: BaseException | None,
    ) -> None:
        """On the loop: settle a plain listener call's outcome as consume_request does, then queue more."""
        self._plain_calls -= 1
        try:
            if self._plain_abandoned or status is _NOT_CALLED:
                return
            pq.consume_rt_ms += took[0]
            pq.consume_calls += 1
            if exc is not None:
                if isinstance(exc, asyncio.CancelledError):
                    return  # queued when shutdown gave up: not called, left in its process queue
                self._listener_raised(mq, msgs, exc)
                status = None
            elif type(status) not in _STATUS_TYPES and inspect.isawaitable(status):
                self._track_tail(self._settle_awaited(status, context, msgs, pq, mq))
                return
            rest = self._settle(status, exc is not None, context, msgs, pq, mq)
            if rest is not None:
                self._track_tail(rest)
        finally:
            if self._plain_calls == 0 and (drained := self._plain_drained) is not None and not drained.done():
                drained.set_result(None)
            self._start_plain_calls()

    async def _settle_awaited(
        self, result: Any, context: ConsumeConcurrentlyContext, msgs: list[MessageExt], pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        """A plain listener that returned an awaitable (ListenerInvoker awaits it): its outcome, settled."""
        status: Any = None
        raised = False
        try:
            status = await result
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raised = True
            self._listener_raised(mq, msgs, e)
        rest = self._settle(status, raised, context, msgs, pq, mq)
        if rest is not None:
            await rest

    def _track_tail(self, coro: Any) -> None:
        """Finish `coro` (the rest of a listener call: its send-backs, or a call started inline once shutdown
        had begun) in a task shutdown waits for."""
        tail = asyncio.get_running_loop().create_task(self._finish_rest(coro))
        self._tails.add(tail)
        tail.add_done_callback(self._tails.discard)

    async def _finish_rest(self, coro: Any) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("consume_request_failed", group=self.group)

    def _calls_drained(self) -> asyncio.Future[None] | None:
        if self._plain_calls == 0:
            return None
        self._plain_drained = asyncio.get_running_loop().create_future()
        return self._plain_drained

    def _abandon_calls(self) -> None:
        self._plain_abandoned = True

    def _consume_now(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """A worker is idle: start the (async) listener call right here, in the pull answer's callback,
        instead of waking the worker with it -- no queue hand-off and no loop turn between the answer
        and the listener. A call that completes without waiting (the usual listener) costs nothing
        more; one that has to wait is handed, as it stands, to an idle worker, which continues it:
        at most consume_thread_max listener calls still run at once."""
        msgs = self._take_batch(mq, pq, self.consumer.consume_message_batch_max_size)
        coro = self.consume_request(msgs, pq, mq)
        context = contextvars.copy_context()  # the call's own, as a Task's (nothing leaks into the read path)
        try:
            waiting_on = context.run(coro.send, None)
        except StopIteration:
            return
        except (Exception, asyncio.CancelledError):
            log.exception("consume_request_failed", group=self.group, mq=str(mq))
            return
        started = _Started(coro, waiting_on, context)
        if self.stopped:
            # Shutdown began during that first step (the listener asked for it): the workers may have
            # taken their stop markers already, so this call finishes in a task shutdown waits for.
            self._track_tail(_finish_started(started))
            return
        self._ready.put_nowait(started)  # type: ignore[arg-type]

    async def _worker(self) -> None:
        batch_size = self.consumer.consume_message_batch_max_size
        while True:
            self._idle += 1
            try:
                item = await self._ready.get()
            finally:
                self._idle -= 1
            if item is None:
                return
            if item.__class__ is _Started:
                # A listener call already under way: finished even once shutdown has begun (it waits
                # for the workers), as a Task of its own would have been.
                try:
                    await _finish_started(item)  # type: ignore[arg-type]
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("consume_request_failed", group=self.group)
                continue
            if self.stopped:
                continue  # not started: left in its process queue (not committed), up to this worker's None
            mq, pq = item  # type: ignore[misc]
            pq.ready = False
            if pq.dropped:
                pq.pending.clear()
                continue
            msgs = self._take_batch(mq, pq, batch_size)
            try:
                await self.consume_request(msgs, pq, mq)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consume_request_failed", group=self.group, mq=str(mq))

    async def consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """ConsumeRequest.run: call the listener with one batch and process the result."""
        if pq.dropped:
            return
        context = ConsumeConcurrentlyContext(mq)
        if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a pulled message's topic is its queue's
            self.consumer.reset_retry_topic(msgs)
        started = self._mark_consume_start(msgs)
        status: Any = None
        raised = False
        invoker = self.invoker
        try:
            if invoker.is_async:  # ListenerInvoker.__call__ inlined: one coroutine less per call
                status = await invoker.fn(list(msgs), context)
                if type(status) not in _STATUS_TYPES and inspect.isawaitable(status):
                    status = await status
            else:
                status = await invoker(list(msgs), context)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raised = True
            self._listener_raised(mq, msgs, e)
        pq.consume_rt_ms += (time.time_ns() - started) / 1e6
        pq.consume_calls += 1
        rest = self._settle(status, raised, context, msgs, pq, mq)
        if rest is not None:
            await rest

    def _settle(
        self, status: Any, raised: bool, context: ConsumeConcurrentlyContext, msgs: list[MessageExt],
        pq: ProcessQueue, mq: MessageQueue,
    ) -> Any:
        """Act on a listener call's status (None: it raised, or returned None); returns process_consume_result's
        coroutine when the messages need more than a commit (send-backs), else None."""
        if status is None:
            if not raised:
                self._warn_none(mq)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        elif not isinstance(status, ConsumeConcurrentlyStatus):
            log.warning("listener_returned_unknown_status", group=self.group, status=repr(status))
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            log.warning("consume_result_dropped_queue", group=self.group, mq=str(mq), msgs=len(msgs))
        elif status is _SUCCESS and msgs and context.ack_index >= len(msgs) - 1:
            # process_consume_result's all-acknowledged case, without its coroutine
            pq.consume_ok += len(msgs)
            offset = pq.remove_messages(msgs)
            if offset >= 0 and not pq.dropped:
                self.consumer.offset_store.update_offset(mq, offset, True)
        else:
            return self.process_consume_result(status, context, msgs, pq, mq)
        return None

    async def process_consume_result(
        self,
        status: ConsumeConcurrentlyStatus,
        context: ConsumeConcurrentlyContext,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        if not msgs:
            return
        ack_index = context.ack_index
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(ack_index, len(msgs) - 1)
            ok = ack_index + 1
            pq.consume_ok += ok
            pq.consume_failed += len(msgs) - ok
        else:
            ack_index = -1
            pq.consume_failed += len(msgs)
        failed = msgs[ack_index + 1 :]
        remove = msgs  # not mutated: a subset replaces it below when some sends back failed
        if failed:
            if self.consumer.message_model is MessageModel.BROADCASTING:
                for m in failed:
                    log.warning("broadcast_consume_failed_dropped", group=self.group, msg_id=m.msg_id, offset=m.queue_offset)
            else:
                results = await asyncio.gather(
                    *(self.consumer.send_message_back_safe(m, context.delay_level_when_next_consume, mq.broker_name) for m in failed)
                )
                back_failed = [m for m, ok in zip(failed, results, strict=True) if not ok]
                if back_failed:
                    for m in back_failed:
                        m.reconsume_times += 1
                    ids = {id(m) for m in back_failed}
                    remove = [m for m in msgs if id(m) not in ids]
                    self._later(
                        SEND_BACK_RETRY_LOCALLY_DELAY_S,
                        lambda: self.submit_consume_request(back_failed, pq, mq),
                    )
        offset = pq.remove_messages(remove)
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, offset, True)

    async def _clean_expired_loop(self, period_s: float) -> None:
        while not self.stopped:
            await asyncio.sleep(period_s)
            for mq, pq in list(self.consumer.process_queue_table().items()):
                try:
                    await self.clean_expired_msg(mq, pq)
                except Exception as e:
                    log.warning("clean_expired_msg_failed", mq=str(mq), error=f"{type(e).__name__}: {e}")

    async def clean_expired_msg(self, mq: MessageQueue, pq: ProcessQueue) -> int:
        """Send back (delay level 3) messages a listener has held over consume_timeout; returns how many."""
        timeout_ms = self.consumer.consume_timeout * 60_000
        cleaned = 0
        for _ in range(16):
            if pq.dropped:
                break
            msg = pq.first_message()
            if msg is None:
                break
            started = msg.get_property(MessageConst.PROPERTY_CONSUME_START_TIMESTAMP)
            if not started or _now_ms() - int(started) <= timeout_ms:
                break
            if not await self.consumer.send_message_back_safe(msg, 3, mq.broker_name):
                break
            log.info("expired_message_sent_back", group=self.group, mq=str(mq), offset=msg.queue_offset)
            if pq.first_offset() == msg.queue_offset:
                offset = pq.remove_messages([msg])
                if offset >= 0 and not pq.dropped:
                    self.consumer.offset_store.update_offset(mq, offset, True)
                cleaned += 1
        return cleaned

    async def consume_message_directly(self, msg: MessageExt, broker_name: str | None) -> ConsumeMessageDirectlyResult:
        mq = MessageQueue(msg.topic, broker_name or "", msg.queue_id)
        context = ConsumeConcurrentlyContext(mq)
        self.consumer.reset_retry_topic([msg])
        begin = _now_ms()
        result = ConsumeMessageDirectlyResult(order=False, auto_commit=True)
        try:
            status = await self.invoker([msg], context)
            if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
                result.consume_result = "CR_SUCCESS"
            elif status is ConsumeConcurrentlyStatus.RECONSUME_LATER:
                result.consume_result = "CR_LATER"
            else:
                result.consume_result = "CR_RETURN_NULL"
        except Exception as e:
            result.consume_result = "CR_THROW_EXCEPTION"
            result.remark = f"{type(e).__name__}: {e}"
        result.spent_time_mills = _now_ms() - begin
        return result


class ConsumeMessageOrderlyService(_ServiceBase):
    """See the module doc."""

    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        super().__init__(consumer, listener)
        self._mq_locks: dict[MessageQueue, asyncio.Lock] = {}

    def start(self) -> None:
        super().start()
        if self.consumer.message_model is MessageModel.CLUSTERING:
            self._aux.append(asyncio.get_running_loop().create_task(self._lock_loop()))

    async def _lock_loop(self) -> None:
        await asyncio.sleep(1.0)
        while not self.stopped:
            try:
                await self.consumer.rebalance.lock_all()
            except Exception as e:
                log.warning("lock_all_failed", group=self.group, error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(self.consumer.lock_interval_millis / 1000)

    def submit_consume_request(
        self, msgs: list[MessageExt] | None, pq: ProcessQueue, mq: MessageQueue, dispatch_to_consume: bool
    ) -> None:
        if dispatch_to_consume and not self.stopped and not pq.dropped:
            self._ready.put_nowait((mq, pq))

    def _submit_later(self, pq: ProcessQueue, mq: MessageQueue, delay_ms: int) -> None:
        if delay_ms == -1:
            delay_ms = self.consumer.suspend_current_queue_time_millis
        delay_ms = min(max(delay_ms, 10), 30_000)
        self._later(delay_ms / 1000, lambda: self.submit_consume_request(None, pq, mq, True))

    def _try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay_ms: int) -> None:
        async def relock() -> None:
            ok = not self.stopped and await self.consumer.rebalance.lock(mq)
            self._submit_later(pq, mq, 10 if ok else 3000)

        def go() -> None:
            t = asyncio.get_running_loop().create_task(relock())
            self._aux.append(t)
            t.add_done_callback(lambda task: self._aux.remove(task) if task in self._aux else None)

        self._later(delay_ms / 1000, go)

    async def _worker(self) -> None:
        while True:
            item = await self._ready.get()
            if item is None or self.stopped:
                return
            mq, pq = item
            try:
                await self.consume_request(mq, pq)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("orderly_consume_request_failed", group=self.group, mq=str(mq))
                self._submit_later(pq, mq, 1000)

    async def consume_request(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """ConsumeMessageOrderlyService.ConsumeRequest.run for one queue."""
        if pq.dropped:
            return
        clustering = self.consumer.message_model is MessageModel.CLUSTERING
        lock = self._mq_locks.setdefault(mq, asyncio.Lock())
        async with lock:
            if clustering and not (pq.locked and not pq.is_lock_expired()):
                if not pq.dropped:
                    self._try_lock_later_and_reconsume(mq, pq, 100)
                return
            begin = _now_ms()
            batch = self.consumer.consume_message_batch_max_size
            threads = self.invoker.threads
            status: Any
            while True:
                if pq.dropped or self.stopped:
                    return
                if clustering and (not pq.locked or pq.is_lock_expired()):
                    log.warning("orderly_queue_not_locked", group=self.group, mq=str(mq), locked=pq.locked)
                    self._try_lock_later_and_reconsume(mq, pq, 10)
                    return
                if _now_ms() - begin > MAX_TIME_CONSUME_CONTINUOUSLY_MS:
                    self._submit_later(pq, mq, 10)
                    return
                if threads is not None:
                    ran = await self._plain_run(mq, pq, batch, begin, clustering, threads)
                    if ran is None:
                        return
                    if ran is _RUN_GO_ON:
                        continue
                    msgs, status, context = ran
                else:
                    msgs = pq.take_messages(batch)
                    if not msgs:
                        return  # pq.consuming is now False: the next pull dispatches again
                    if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a pulled message's topic is its queue's
                        self.consumer.reset_retry_topic(msgs)
                    context = ConsumeOrderlyContext(mq)
                    status = None
                    async with pq.consume_lock:
                        if pq.dropped:
                            return
                        started = _monotonic()
                        try:
                            status = await self.invoker(list(msgs), context)
                        except asyncio.CancelledError:
                            raise
                        except Exception as e:
                            self._listener_raised(mq, msgs, e)
                        pq.consume_rt_ms += (_monotonic() - started) * 1000.0
                        pq.consume_calls += 1
                if status is None or not isinstance(status, ConsumeOrderlyStatus):
                    if status is None:
                        self._warn_none(mq)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if status is not ConsumeOrderlyStatus.SUCCESS:
                    log.info("orderly_consume_not_ok", group=self.group, mq=str(mq), status=status.value,
                             offsets=[m.queue_offset for m in msgs])
                if not await self.process_consume_result(msgs, status, context, pq, mq):
                    return

    async def _plain_run(
        self, mq: MessageQueue, pq: ProcessQueue, batch: int, begin: int, clustering: bool, threads: ListenerThreads,
    ) -> Any:
        """A plain listener's turn on a queue: up to ORDERLY_RUN_MESSAGES (at least one batch) taken at once
        and handed to a thread as one call, which runs the listener on each batch in order while each
        returns SUCCESS with auto_commit (and the queue is still this client's to consume: see
        _orderly_calls) -- one hand-off to a thread and back for the run instead of one per batch. What the
        run consumed is committed here; what it did not attempt goes back to the process queue. Returns
        None (nothing to consume), _RUN_GO_ON (all committed, or the run stopped before a batch: the loop's
        checks say why), or (batch, status, context) of the batch that stopped it, for the loop's usual
        handling with only that batch consuming (as if the batches before it had been committed one by one)."""
        taken = pq.take_messages(max(batch, ORDERLY_RUN_MESSAGES // batch * batch))
        if not taken:
            return None  # pq.consuming is now False: the next pull dispatches again
        if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a pulled message's topic is its queue's
            self.consumer.reset_retry_topic(taken)
        batches = [taken[i : i + batch] for i in range(0, len(taken), batch)]
        contexts = [ConsumeOrderlyContext(mq) for _ in batches]
        async with pq.consume_lock:
            if pq.dropped:
                return None
            took = [0.0]
            outcomes = await threads.submit_call(self._orderly_calls, batches, contexts, pq, begin, clustering, took)
        pq.consume_rt_ms += took[0]
        pq.consume_calls += len(outcomes)
        ok = 0  # the leading batches consumed with SUCCESS and auto_commit: committed together below
        for status, exc in outcomes:
            if exc is not None or status is not ConsumeOrderlyStatus.SUCCESS or not contexts[ok].auto_commit:
                break
            ok += 1
        stopper = batches[ok] if ok < len(outcomes) else None
        after = batches[ok + 1 if stopper is not None else ok :]
        if after:  # not attempted: back in the queue, to be taken again in order
            pq.make_message_to_consume_again([m for b in after for m in b])
        if ok:
            if stopper is not None:
                pq.make_message_to_consume_again(stopper)  # out of the commit of the batches before it
            offset = pq.commit()
            pq.consume_ok += sum(map(len, batches[:ok]))
            if offset >= 0 and (not pq.dropped or pq.releasing):
                self.consumer.offset_store.update_offset(mq, offset, False)
            if stopper is not None:
                stopper = pq.take_messages(len(stopper))  # the same messages: the lowest offsets cached
        if stopper is None:
            return _RUN_GO_ON
        status, exc = outcomes[ok]
        if exc is None and type(status) not in _STATUS_TYPES and inspect.isawaitable(status):
            try:  # (a plain callable that returned an awaitable: ListenerInvoker awaits it)
                status = await status
            except asyncio.CancelledError:
                raise
            except Exception as e:
                exc = e
        if exc is not None:
            self._listener_raised(mq, stopper, exc)
            status = None
        return stopper, status, contexts[ok]

    def _orderly_calls(
        self, batches: list[list[MessageExt]], contexts: list[ConsumeOrderlyContext], pq: ProcessQueue, begin: int,
        clustering: bool, took: list[float],
    ) -> list[tuple[Any, BaseException | None]]:
        """In a listener thread: the listener on each batch in order, stopping after the first that does not
        return SUCCESS with auto_commit, or before a batch once the queue is dropped or no longer locked, the
        service stopped, or the queue's turn over (what the loop checks between batches). The calls' time
        is left in `took`."""
        fn = self.invoker.fn
        outcomes: list[tuple[Any, BaseException | None]] = []
        started = _monotonic()
        for msgs, context in zip(batches, contexts, strict=True):
            if outcomes and (
                pq.dropped
                or self.stopped
                or (clustering and (not pq.locked or pq.is_lock_expired()))
                or _now_ms() - begin > MAX_TIME_CONSUME_CONTINUOUSLY_MS
            ):
                break
            try:
                status = fn(list(msgs), context)
            except Exception as e:  # noqa: BLE001 - the loop logs it and suspends the queue, as for one batch
                outcomes.append((None, e))
                break
            outcomes.append((status, None))
            if status is not ConsumeOrderlyStatus.SUCCESS or not context.auto_commit:
                break
        took[0] = (_monotonic() - started) * 1000.0
        return outcomes

    async def process_consume_result(
        self,
        msgs: list[MessageExt],
        status: ConsumeOrderlyStatus,
        context: ConsumeOrderlyContext,
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> bool:
        continue_consume = True
        commit_offset = -1
        S = ConsumeOrderlyStatus
        if context.auto_commit:
            if status in (S.SUCCESS, S.COMMIT, S.ROLLBACK):
                if status is not S.SUCCESS:
                    log.warning("orderly_status_illegal_with_auto_commit", mq=str(mq), status=status.value)
                commit_offset = pq.commit()
                pq.consume_ok += len(msgs)
            else:  # SUSPEND_CURRENT_QUEUE_A_MOMENT
                pq.consume_failed += len(msgs)
                again = await self._check_reconsume_times(msgs)
                if again:
                    pq.make_message_to_consume_again(again)
                    self._submit_later(pq, mq, context.suspend_current_queue_time_millis)
                    continue_consume = False
                else:
                    commit_offset = pq.commit()
        else:
            if status is S.SUCCESS:
                pq.consume_ok += len(msgs)
            elif status is S.COMMIT:
                commit_offset = pq.commit()
            elif status is S.ROLLBACK:
                pq.rollback()
                self._submit_later(pq, mq, context.suspend_current_queue_time_millis)
                continue_consume = False
            else:
                pq.consume_failed += len(msgs)
                again = await self._check_reconsume_times(msgs)
                if again:
                    pq.make_message_to_consume_again(again)
                    self._submit_later(pq, mq, context.suspend_current_queue_time_millis)
                    continue_consume = False
        if commit_offset >= 0 and (not pq.dropped or pq.releasing):
            self.consumer.offset_store.update_offset(mq, commit_offset, False)
        return continue_consume

    async def _check_reconsume_times(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """The messages to consume again; the ones over max_reconsume_times go to the DLQ."""
        max_times = self.consumer.max_reconsume_times_orderly()
        again: list[MessageExt] = []
        for m in msgs:
            if m.reconsume_times >= max_times:
                m.properties[MessageConst.PROPERTY_RECONSUME_TIME] = str(m.reconsume_times)
                if not await self.consumer.send_message_back_to_dlq(m):
                    m.reconsume_times += 1
                    again.append(m)
            else:
                m.reconsume_times += 1
                again.append(m)
        return again

    async def consume_message_directly(self, msg: MessageExt, broker_name: str | None) -> ConsumeMessageDirectlyResult:
        mq = MessageQueue(msg.topic, broker_name or "", msg.queue_id)
        context = ConsumeOrderlyContext(mq)
        self.consumer.reset_retry_topic([msg])
        begin = _now_ms()
        result = ConsumeMessageDirectlyResult(order=True)
        try:
            status = await self.invoker([msg], context)
            result.consume_result = {
                ConsumeOrderlyStatus.SUCCESS: "CR_SUCCESS",
                ConsumeOrderlyStatus.COMMIT: "CR_COMMIT",
                ConsumeOrderlyStatus.ROLLBACK: "CR_ROLLBACK",
                ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: "CR_LATER",
            }.get(status, "CR_RETURN_NULL")
        except Exception as e:
            result.consume_result = "CR_THROW_EXCEPTION"
            result.remark = f"{type(e).__name__}: {e}"
        result.auto_commit = context.auto_commit
        result.spent_time_mills = _now_ms() - begin
        return result
