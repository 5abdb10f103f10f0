"""The `rocketmq` sink: `df.write.format("rocketmq")` and `df.writeStream.format("rocketmq")`.

Columns read from the DataFrame (others are ignored, so a frame read from the source can be
written back as it is):

| column | type | |
|---|---|---|
| topic | string | required unless the `topic` option is set (the column wins when both are present and non-null) |
| body | binary or string | required, non-empty (strings are encoded as UTF-8) |
| tags | string | optional |
| keys | string or array<string> | optional (a string is stored as is: space-separated keys) |
| properties | map<string,string> | optional user properties |
| delayLevel | int | optional: 1..18 delivers later (messageDelayLevel); such messages are sent one by one |

Each task sends its rows with SEND_BATCH_MESSAGE: up to `sendBatchSize` messages (and at most
~1 MiB of bodies) of one topic per batch, `sendPipeline` batches in flight at once on the
process's shared producer. The task's commit message counts what it sent; the driver logs the
totals. Delivery is at-least-once (as Spark's Kafka sink): a retried task or micro-batch sends its
rows again.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from client.message import Message

from .errors import OptionError
from .options import SinkOptions

log = structlog.get_logger(__name__)

MAX_BATCH_BODY_BYTES = 1 << 20

__all__ = ["RocketMQCommitMessage", "RocketMQStreamWriter", "RocketMQWriter", "check_sink_schema"]


@dataclass
class RocketMQCommitMessage(WriterCommitMessage):
    """What one write task sent."""

    messages: int = 0
    batches: int = 0
    body_bytes: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Validate the DataFrame's columns on the driver, naming the column that is wrong."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise OptionError("the rocketmq sink needs a 'body' column (binary or string)")
    if not isinstance(fields["body"], BinaryType | StringType):
        raise OptionError(f"column 'body' must be binary or string, not {fields['body'].simpleString()}")
    if "topic" in fields:
        if not isinstance(fields["topic"], StringType):
            raise OptionError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    elif not opts.topic:
        raise OptionError("the rocketmq sink needs a 'topic' column or the 'topic' option")
    if "tags" in fields and not isinstance(fields["tags"], StringType):
        raise OptionError(f"column 'tags' must be a string, not {fields['tags'].simpleString()}")
    if "keys" in fields:
        t = fields["keys"]
        if not (isinstance(t, StringType) or (isinstance(t, ArrayType) and isinstance(t.elementType, StringType))):
            raise OptionError(f"column 'keys' must be a string or array<string>, not {t.simpleString()}")
    if "properties" in fields:
        t = fields["properties"]
        if not (isinstance(t, MapType) and isinstance(t.keyType, StringType) and isinstance(t.valueType, StringType)):
            raise OptionError(f"column 'properties' must be map<string,string>, not {t.simpleString()}")
    if "delayLevel" in fields and not isinstance(fields["delayLevel"], IntegerType | LongType | ShortType):
        raise OptionError(f"column 'delayLevel' must be an integer, not {fields['delayLevel'].simpleString()}")


# ------------------------------------------------------------------------------------------ producers

_lock = threading.Lock()
_producers: dict[tuple[object, ...], Any] = {}


def shared_producer(opts: SinkOptions) -> Any:
    """The process's started blocking Producer for these options (Spark reuses Python workers)."""
    from client.sync import Producer

    key = (os.getpid(), opts.namesrv_addr, opts.producer_group, opts.send_timeout_ms)
    with _lock:
        p = _producers.get(key)
        if p is None:
            for stale in [k for k in _producers if k[0] != os.getpid()]:
                _producers.pop(stale, None)
            p = Producer(opts.producer_group, opts.namesrv_addr, send_msg_timeout=opts.send_timeout_ms)
            p.start()
            _producers[key] = p
        return p


def _to_message(row: dict[str, Any], default_topic: str | None) -> Message:
    topic = row.get("topic") or default_topic
    if not topic:
        raise ValueError("a row has a null 'topic' and no 'topic' option is set")
    body = row.get("body")
    if body is None or len(body) == 0:
        raise ValueError(f"a row for topic {topic!r} has a null or empty 'body' (RocketMQ needs a non-empty body)")
    props = row.get("properties")
    if props is not None and not isinstance(props, dict):
        props = dict(props)  # Arrow gives a map as a list of (key, value) pairs
    return Message(
        topic,
        body,
        tags=row.get("tags") or None,
        keys=row.get("keys") or None,
        properties=props or None,
        delay_level=int(row.get("delayLevel") or 0),
    )


class _Sender:
    """Pipelined sends from a task thread: batches per topic, at most `pipeline` in flight."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        from client.sync import get_loop_thread

        self.producer = shared_producer(opts)
        self.runner = get_loop_thread()
        self.inflight: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
        self.pending: dict[str, list[Message]] = {}
        self.pending_bytes: dict[str, int] = {}
        self.stats = RocketMQCommitMessage()

    def add(self, msg: Message) -> None:
        self.stats.messages += 1
        self.stats.body_bytes += len(msg.body)
        self.stats.per_topic[msg.topic] = self.stats.per_topic.get(msg.topic, 0) + 1
        if msg.delay_level:
            self._submit([msg])
            return
        lst = self.pending.setdefault(msg.topic, [])
        if lst and self.pending_bytes[msg.topic] + len(msg.body) > MAX_BATCH_BODY_BYTES:
            self._flush_topic(msg.topic)
            lst = self.pending.setdefault(msg.topic, [])
        lst.append(msg)
        self.pending_bytes[msg.topic] = self.pending_bytes.get(msg.topic, 0) + len(msg.body)
        if len(lst) >= self.opts.send_batch_size:
            self._flush_topic(msg.topic)

    def _flush_topic(self, topic: str) -> None:
        msgs = self.pending.pop(topic, None)
        self.pending_bytes.pop(topic, None)
        if msgs:
            self._submit(msgs)

    def _submit(self, msgs: list[Message]) -> None:
        while len(self.inflight) >= self.opts.send_pipeline:
            self.inflight.popleft().result()
        p = self.producer.async_producer
        timeout = self.opts.send_timeout_ms
        # Handed to the loop with the task's other sends of the moment (LoopThread.start_future); a single
        # message without a coroutine or Task on the loop when it can (send_future).
        if len(msgs) == 1:
            begin: Callable[[], Any] = functools.partial(p.send_future, msgs[0], timeout=timeout)
        else:
            begin = functools.partial(p.send_batch, msgs, timeout=timeout)
        self.inflight.append(self.runner.start_future(begin))
        self.stats.batches += 1

    def finish(self) -> RocketMQCommitMessage:
        for topic in list(self.pending):
            self._flush_topic(topic)
        while self.inflight:
            self.inflight.popleft().result()
        return self.stats

    def abandon(self) -> None:
        for f in self.inflight:
            f.cancel()
        self.inflight.clear()


def write_batches(opts: SinkOptions, iterator: Iterator[Any]) -> RocketMQCommitMessage:
    """Send every row of the task's Arrow record batches; returns the counts."""
    t0 = time.monotonic()
    sender = _Sender(opts)
    ok = False
    try:
        for batch in iterator:
            names = batch.schema.names
            cols = {n: batch.column(i).to_pylist() for i, n in enumerate(names) if n in _COLUMNS}
            n = batch.num_rows
            get = {k: v.__getitem__ for k, v in cols.items()}
            for i in range(n):
                sender.add(_to_message({k: g(i) for k, g in get.items()}, opts.topic))
        stats = sender.finish()
        ok = True
    finally:
        if not ok:
            sender.abandon()
    stats.seconds = time.monotonic() - t0
    return stats


_COLUMNS = frozenset({"topic", "body", "tags", "keys", "properties", "delayLevel"})


def _summarise(messages: list[WriterCommitMessage | None]) -> RocketMQCommitMessage:
    total = RocketMQCommitMessage()
    for m in messages:
        if isinstance(m, RocketMQCommitMessage):
            total.messages += m.messages
            total.batches += m.batches
            total.body_bytes += m.body_bytes
            total.seconds = max(total.seconds, m.seconds)
            for t, c in m.per_topic.items():
                total.per_topic[t] = total.per_topic.get(t, 0) + c
    return total


class RocketMQWriter(DataSourceArrowWriter):
    """Batch writes (df.write). `last_commit` holds the totals after commit (driver side)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts
        self.last_commit: RocketMQCommitMessage | None = None

    def write(self, iterator: Iterator[Any]) -> RocketMQCommitMessage:  # type: ignore[override]
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self.last_commit = total = _summarise(messages)
        log.info("sink_committed", messages=total.messages, batches=total.batches, bytes=total.body_bytes,
                 topics=total.per_topic)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        total = _summarise(messages)
        log.warning("sink_aborted", messages_sent_by_finished_tasks=total.messages,
                    note="rows of finished tasks were delivered; a retry sends them again")


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes (df.writeStream): each micro-batch's rows, at least once."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> RocketMQCommitMessage:  # type: ignore[override]
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        total = _summarise(messages)
        log.info("sink_batch_committed", batch_id=batchId, messages=total.messages, batches=total.batches)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        total = _summarise(messages)
        log.warning("sink_batch_aborted", batch_id=batchId, messages_sent_by_finished_tasks=total.messages)
