"""Auto-batching of single sends: RocketMQ 5's ProduceAccumulator (`DefaultMQProducer.setAutoBatch`).

With `Producer(auto_batch=True)`, `send()` and `send_async()` of plain messages are gathered per (topic,
queue, wait-store flag, mode, time-out) and go out as one SEND_BATCH_MESSAGE; every caller still gets
its own future and its own SendResult (its id, its offset msg id and its queue offset). A broker spends
about a third of a single send's CPU per message of a batch, so a producer with many sends in flight
moves several times more messages through the same broker.

When a batch goes out:
- `batch_max_delay_ms` = 0 (the default): at the end of the event loop's current iteration. Whatever
  the application sends in one turn of the loop (a burst, or the sends its completed ones released)
  goes together, and a lone send waits for nothing but the rest of that turn. Upstream waits up to
  10 ms by default, which an asyncio application does not need: its senders run on this loop.
- > 0: that many ms after the batch's first message (upstream's holdMs), or sooner when full.
- at once when its bodies reach `batch_max_bytes` (upstream's holdSize, 32 KiB; properties other than
  the wait-store flag count too, so that a batch of tiny bodies with big properties stays bounded).

Not batched, sent as they would be without auto-batching (as upstream's canBatch): messages with a
delay level, to a retry topic, carrying a transaction or producer-group property, bodies that would be
compressed (>= compress_msg_body_over_howmuch) or bigger than batch_max_bytes, and everything while
`total_batch_max_bytes` are held.

A batch of one goes out as a single send, and a batch that cannot be encoded as one (a message whose
properties exceed RocketMQ's 32 767 bytes) goes message by message, so that only that message fails. Each
key's messages keep their send order (one batch, one queue, consecutive offsets).

Unlike upstream, batches are not split by TAGS: a RocketMQ 4.x broker stores each message of a batch
with its own properties (tags, keys, UNIQ_KEY), indexes and filters them one by one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from remoting.message import MessageConst

from ..message import Message, MessageQueue, SendResult

if TYPE_CHECKING:
    from .producer import Producer

log = structlog.get_logger("client.producer.accumulator")

_DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
_TRAN = MessageConst.PROPERTY_TRANSACTION_PREPARED
_PGROUP = MessageConst.PROPERTY_PRODUCER_GROUP
_MSG_TYPE = MessageConst.PROPERTY_MESSAGE_TYPE  # a reply goes alone, as SEND_REPLY_MESSAGE_V2
_WAIT = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
_NOT_BATCHED_PROPERTIES = (_DELAY, _TRAN, _PGROUP, _MSG_TYPE)
_RETRY_PREFIX = "%RETRY%"

# Upstream's bounds (ProduceAccumulator.batchMaxDelayMs / batchMaxBytes).
MAX_BATCH_DELAY_MS = 30_000
MAX_BATCH_BYTES = 2 * 1024 * 1024

_Key = tuple[str, MessageQueue | None, bool, bool, float | None]


class _Accumulation:
    """The messages of one key waiting to go out as one batch, with their callers' futures."""

    __slots__ = ("key", "msgs", "futures", "size", "timer")

    def __init__(self, key: _Key) -> None:
        self.key = key
        self.msgs: list[Message] = []
        self.futures: list[asyncio.Future[SendResult]] = []
        self.size = 0  # bodies, and properties past WAIT
        self.timer: asyncio.TimerHandle | None = None


class ProduceAccumulator:
    """Gathers a producer's batchable sends into batches (see the module docstring). Runs on the event
    loop of the sends it is given; not thread-safe (nor is the producer's send path)."""

    def __init__(self, producer: Producer, max_delay_ms: int, max_bytes: int, total_max_bytes: int) -> None:
        self._producer = producer
        self.max_delay_ms = max_delay_ms
        self.max_bytes = max_bytes
        self.total_max_bytes = total_max_bytes
        self.held_bytes = 0  # bytes (as _Accumulation.size) gathered and not yet handed to the send path
        self._open: dict[_Key, _Accumulation] = {}
        self._turn_flush: asyncio.Handle | None = None
        self._delay_s = max_delay_ms / 1000.0

    # ------------------------------------------------------------------ gathering
    def add(
        self, msg: Message, queue: MessageQueue | None, timeout: float | None, sync: bool
    ) -> asyncio.Future[SendResult] | None:
        """The caller's future of `msg` in a batch; None when it is not batched (send it directly).
        Raises what the producer's own checks raise for an invalid message."""
        body = msg.body
        n = len(body)
        p = self._producer
        if (
            n > self.max_bytes
            or n >= p.compress_msg_body_over_howmuch
            or self.held_bytes + n > self.total_max_bytes
            or msg.topic.startswith(_RETRY_PREFIX)
            or (queue is not None and queue.topic != msg.topic)
        ):
            return None
        props = msg.properties
        if len(props) > 1 or _WAIT not in props:  # (a plain message has only WAIT: no look-ups for it)
            for k in _NOT_BATCHED_PROPERTIES:
                if k in props:
                    return None
            # Properties count as well (up to 32 KiB each): a batch of tiny bodies stays a bounded request.
            n += sum(len(k) + len(v) + 2 for k, v in props.items() if v is not None)
            if n > self.max_bytes or self.held_bytes + n > self.total_max_bytes:
                return None
        p._check_batch_member(msg)  # raises for an invalid message: only this send fails
        key: _Key = (msg.topic, queue, props.get(_WAIT) != "false", sync, timeout)
        acc = self._open.get(key)
        if acc is not None and acc.size + n > self.max_bytes:
            self._send(acc)
            acc = None
        loop = asyncio.get_running_loop()
        if acc is None:
            acc = self._open[key] = _Accumulation(key)
            if self._delay_s > 0:
                acc.timer = loop.call_later(self._delay_s, self._send_due, acc)
            elif self._turn_flush is None:
                self._turn_flush = loop.call_soon(self.flush)
        fut: asyncio.Future[SendResult] = loop.create_future()
        acc.msgs.append(msg)
        acc.futures.append(fut)
        acc.size += n
        self.held_bytes += n
        if acc.size >= self.max_bytes:
            self._send(acc)
        return fut

    def flush(self) -> None:
        """Send every batch being gathered now (the end of a loop turn, or the producer's shutdown)."""
        self._turn_flush = None
        if self._open:
            for acc in list(self._open.values()):
                self._send(acc)

    @property
    def pending(self) -> int:
        """Messages gathered and not yet handed to the send path."""
        return sum(len(a.msgs) for a in self._open.values())

    # ------------------------------------------------------------------ sending
    def _send_due(self, acc: _Accumulation) -> None:
        acc.timer = None
        if self._open.get(acc.key) is acc:
            self._send(acc)

    def _send(self, acc: _Accumulation) -> None:
        if self._open.get(acc.key) is acc:
            del self._open[acc.key]
        if acc.timer is not None:
            acc.timer.cancel()
            acc.timer = None
        self.held_bytes -= acc.size
        topic, queue, _wait, sync, timeout = acc.key
        msgs, futures = acc.msgs, acc.futures
        p = self._producer
        if len(msgs) == 1:
            # A batch of one costs the broker more than a single send: send it as one.
            try:
                chain_send(futures[0], p._send_direct(msgs[0], queue, timeout, sync), mark_retrieved=True)
            except Exception as e:  # noqa: BLE001 - this runs from a loop callback: fail the send, never hang it
                _fail(futures[0], e)
            return
        try:
            prepared = p._prepare_batch(msgs)
        except Exception as e:  # noqa: BLE001 - whatever refused the batch, each message gets its own answer
            log.debug("auto_batch_refused_sending_singly", topic=topic, messages=len(msgs), error=str(e))
            for m, f in zip(msgs, futures, strict=True):
                try:
                    chain_send(f, p._send_direct(m, queue, timeout, sync), mark_retrieved=True)
                except Exception as e1:  # noqa: BLE001 - this message's own error
                    _fail(f, e1)
            return
        ids = prepared.uniq_id.split(",")
        try:
            batch = p._send_prepared_batch(prepared, queue, timeout, sync)
        except Exception as e:  # noqa: BLE001 - as above: every caller gets the error
            for f in futures:
                _fail(f, e)
            return
        batch.add_done_callback(_splitter(futures, ids))


def _splitter(
    futures: list[asyncio.Future[SendResult]], ids: list[str]
) -> Callable[[asyncio.Future[SendResult]], None]:
    """The batch future's done callback: each caller's future gets its message's part of the result, as
    upstream's splitSendResults does (offset msg ids split on commas, queue offsets counted on)."""

    def split(batch: asyncio.Future[SendResult]) -> None:
        if batch.cancelled():
            for f in futures:
                if not f.done():
                    f.cancel()
            return
        exc = batch.exception()
        if exc is not None:
            for f in futures:
                _fail(f, exc)
            return
        r = batch.result()
        n = len(futures)
        offset_ids = r.offset_msg_id.split(",")
        if len(offset_ids) != n:
            offset_ids = [r.offset_msg_id] * n  # a broker that answered one id for the batch
        status, mq, first, tx, region, trace = (
            r.status, r.queue, r.queue_offset, r.transaction_id, r.region_id, r.trace_on
        )
        for i, f in enumerate(futures):
            if not f.done():
                f.set_result(SendResult(status, ids[i], offset_ids[i], mq, first + i, tx, region, trace))

    return split


def chain_send(out: asyncio.Future[SendResult], src: asyncio.Future[SendResult], *, mark_retrieved: bool = False) -> None:
    """Copy a send's outcome (`src`) into its caller's future `out` (unless `out` is done meanwhile); the
    caller cancelling `out` cancels the send, so its retries stop. With `mark_retrieved`, an error copied
    into `out` counts as retrieved (a caller may drop its future; the failure is logged per attempt)."""

    def copy(s: asyncio.Future[SendResult]) -> None:
        if out.done():
            if not s.cancelled():
                s.exception()  # retrieved: the caller gave up on it
            return
        if s.cancelled():
            out.cancel()
        elif (e := s.exception()) is not None:
            out.set_exception(e)
            if mark_retrieved:
                out.exception()
        else:
            out.set_result(s.result())

    src.add_done_callback(copy)
    out.add_done_callback(lambda o: src.cancel() if o.cancelled() and not src.done() else None)


def _fail(f: asyncio.Future[Any], exc: BaseException) -> None:
    if not f.done():
        f.set_exception(exc)
        f.exception()  # retrieved: a caller may drop its future (the failure is logged per attempt)
