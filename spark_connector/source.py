"""The `rocketmq` source: streaming (DataSourceStreamReader) and batch (DataSourceReader) reads.

Driver side (a long-lived Python process per streaming query): offsets are resolved and planned
with a BlockingQueueReader (routes from the NameServer, min/max offsets from the brokers).
Executor side: each partition reads one queue range through the process's shared
BlockingQueueReader and yields pyarrow RecordBatches (or tuples, `rowFormat=tuples`).

Offsets: see `spark_connector.offsets` ({topic: {"broker/queueId": next offset}}).

Exactly once: a micro-batch is the offset range between two checkpointed offset maps and is
re-read identically after a restart, so a restarted query neither loses nor repeats rows
(given an idempotent or transactional sink, as always with Spark).

Offsets committed to the broker under `group` (for lag monitoring, best effort; UPDATE_CONSUMER_OFFSET
to each queue's master, failures logged and retried at the next commit):
Spark calls `commit(end)` for a batch only when it plans the *next* one, so the last batch of an
availableNow query is never committed that way. But Spark calls `latestOffset(start, ...)` only
after the batch ending at `start` has completed (its commit-log entry is written), so the source
also commits `start` there: the availableNow query's closing `latestOffset` call (which finds
nothing new) commits the last batch's end, and so does every trigger of a running query.
What is not covered: a query stopped (q.stop(), or the driver dying) after a batch completed but
before its next trigger asked for offsets leaves the broker one batch behind; `stop()` cannot tell
whether the last planned batch completed, so it commits nothing. The restarted query commits the
checkpointed offsets on its first trigger. The broker's offsets are never read back: the
checkpoint alone decides where a query resumes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence

import structlog
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from client.errors import MQClientError, TopicNotExistError
from client.message import MessageQueue
from client.reader import BlockingQueueReader, OffsetOutOfRangeError

from . import _runtime
from .errors import DataLossError, OptionError
from .offsets import EARLIEST, LATEST, QueueOffsets, offsets_from_jsonable, offsets_to_jsonable
from .options import OffsetSpec, SourceOptions
from .planning import QueueRangePartition, plan_partitions, rate_limit
from .rows import SOURCE_SCHEMA, ArrowBatchBuilder, batch_tuples

log = structlog.get_logger(__name__)

# A RecordBatch is handed to Spark once it holds this many rows or body bytes.
ARROW_BATCH_ROWS = 8192
ARROW_BATCH_BYTES = 16 << 20

__all__ = ["RocketMQBatchReader", "RocketMQStreamReader", "read_partition"]


def check_schema(schema: StructType | None) -> None:
    if schema is not None and schema != SOURCE_SCHEMA:
        raise OptionError(
            "the rocketmq source has a fixed schema; do not pass .schema(...) "
            f"(expected {SOURCE_SCHEMA.simpleString()}, got {schema.simpleString()})"
        )


# ------------------------------------------------------------------------------------------ executor side


def read_partition(opts: SourceOptions, part: QueueRangePartition) -> Iterator[object]:
    """Rows of one partition: RecordBatches (rowFormat=arrow) or tuples."""
    mq = part.mq
    reader = _runtime.shared_reader(opts)
    # Both formats decode through Arrow; `tuples` converts each batch to Python rows at the end.
    emit = (lambda b: [b]) if opts.row_format == "arrow" else batch_tuples
    builder = ArrowBatchBuilder(opts.include_system_properties)
    pending_bytes = 0
    start = part.start
    reached = start
    while start < part.end:
        try:
            for chunk in reader.read_range_raw(mq, start, part.end, sub_expression=opts.tag_filter.selector):
                reached = max(reached, chunk.next_offset)
                builder.add(chunk)
                pending_bytes += len(chunk.body)
                if len(builder) >= ARROW_BATCH_ROWS or pending_bytes >= ARROW_BATCH_BYTES:
                    batch = builder.take()
                    pending_bytes = 0
                    if batch is not None:
                        yield from emit(batch)
            break
        except OffsetOutOfRangeError as e:
            what = (
                f"{e}. Rows of offsets [{e.requested}, {min(e.min_offset, part.end)}) are lost"
                if e.requested < e.min_offset
                else f"{e}. Rows of offsets [{e.requested}, {part.end}) cannot be read"
            )
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"{what}. Set failOnDataLoss=false to skip lost offsets (logged) instead of failing."
                ) from None
            log.warning("data_loss_skipped", mq=str(mq), requested=e.requested, min_offset=e.min_offset,
                        max_offset=e.max_offset, partition_end=part.end)
            if e.requested < e.min_offset:
                start = reached = max(start, e.min_offset)
            else:
                reached = part.end
                break
    if reached < part.end:
        # The queue ended before the planned end: it was reset or truncated after planning.
        msg = f"{mq.topic}/{mq.broker_name}/{mq.queue_id} ended at offset {reached}, before the planned end {part.end}"
        if opts.fail_on_data_loss:
            raise DataLossError(f"{msg} (the queue was reset?). Set failOnDataLoss=false to continue.")
        log.warning("data_loss_queue_ended_early", mq=str(mq), reached=reached, planned_end=part.end)
    batch = builder.take()
    if batch is not None:
        yield from emit(batch)


# ------------------------------------------------------------------------------------------ driver side


class _Planner:
    """Driver-side offset resolution over a BlockingQueueReader (created on first use, not pickled)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._reader: BlockingQueueReader | None = None
        self._checked: set[str] = set()  # topics whose brokers accepted the SQL92 expression

    def __getstate__(self) -> dict[str, object]:
        return {"opts": self.opts, "_reader": None, "_checked": set()}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    @property
    def reader(self) -> BlockingQueueReader:
        if self._reader is None:
            self._reader = _runtime.new_reader(self.opts)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def queues(self, *, missing_ok: bool) -> list[MessageQueue]:
        out: list[MessageQueue] = []
        for topic in self.opts.topics:
            try:
                queues = self.reader.fetch_queues(topic)
            except TopicNotExistError:
                if not missing_ok:
                    raise OptionError(f"topic: {topic!r} does not exist (no route on the NameServer)") from None
                log.warning("topic_not_found_yet", topic=topic)
                continue
            if self.opts.tag_filter.expression_type == "SQL92" and topic not in self._checked:
                # The brokers compile the expression now (and say when property filtering is off), rather
                # than every partition failing its first pull.
                try:
                    self.reader.check_selector(topic, self.opts.tag_filter.selector)
                except MQClientError as e:
                    raise OptionError(f"subExpression: {e}") from None
                self._checked.add(topic)
            out.extend(queues)
        return out

    def ranges(self, queues: Sequence[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
        return self.reader.offset_ranges(queues) if queues else {}

    def resolve(
        self, spec: OffsetSpec, ranges: Mapping[MessageQueue, tuple[int, int]], *, what: str
    ) -> QueueOffsets:
        """Concrete offsets for every queue in `ranges`."""
        out: QueueOffsets = {}
        if spec.kind in ("offsets", "timestamp"):
            named = spec.offsets if spec.kind == "offsets" else spec.timestamps
            unknown = sorted(str(mq) for mq in named if mq not in ranges)
            if unknown:
                raise OptionError(f"{what}: names queue(s) the topic does not have: {', '.join(unknown)}")
        for mq, (lo, hi) in ranges.items():
            if spec.kind == "earliest":
                out[mq] = lo
            elif spec.kind == "latest":
                out[mq] = hi
            elif spec.kind == "offsets":
                v = spec.offsets.get(mq, spec.default)
                out[mq] = lo if v == EARLIEST else hi if v == LATEST else v
            else:
                ts = spec.timestamp if spec.timestamp is not None else spec.timestamps.get(mq)
                if ts is None:
                    out[mq] = lo if spec.default == EARLIEST else hi
                else:
                    out[mq] = min(max(self.reader.offset_for_timestamp(mq, ts), lo), hi)
        return out

    def check_loss(
        self, start: Mapping[MessageQueue, int], ranges: Mapping[MessageQueue, tuple[int, int]]
    ) -> tuple[QueueOffsets, QueueOffsets]:
        """(start to plan from, offsets to jump to when they moved): queues whose start is below
        their min offset (cleaned) or above their max (reset) fail the query when failOnDataLoss,
        else they are skipped ahead (logged)."""
        effective: QueueOffsets = dict(start)
        jumps: QueueOffsets = {}
        for mq, (lo, hi) in ranges.items():
            s = start.get(mq, 0)
            if lo <= s <= hi:
                continue
            if s < lo:
                msg = (f"{mq.topic}/{mq.broker_name}/{mq.queue_id}: offsets [{s}, {lo}) are gone "
                       f"(the queue's min offset is now {lo}; its files were cleaned)")
                target = lo
            else:
                msg = (f"{mq.topic}/{mq.broker_name}/{mq.queue_id}: the query is at offset {s} but the queue "
                       f"now ends at {hi} (it was reset or recreated)")
                target = hi
            if self.opts.fail_on_data_loss:
                raise DataLossError(f"{msg}. Set failOnDataLoss=false to skip ahead (logged) instead of failing.")
            log.warning("data_loss_skipped", detail=msg)
            effective[mq] = target
            jumps[mq] = target
        return effective, jumps

    def commit_to_broker(self, offsets: Mapping[MessageQueue, int], last: dict[MessageQueue, int]) -> None:
        group = self.opts.group
        if not group:
            return
        todo = {mq: off for mq, off in offsets.items() if last.get(mq) != off}
        if not todo:
            return
        try:
            ok = self.reader.commit_offsets(group, todo)
        except Exception as e:  # best effort: lag monitoring must never fail the query
            log.warning("broker_commit_failed", group=group, error=f"{type(e).__name__}: {e}")
            return
        if ok == len(todo):
            last.update(todo)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control (maxOffsetsPerTrigger) and Trigger.AvailableNow."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.planner = _Planner(opts)
        self._target: QueueOffsets | None = None
        self._latest: dict[str, dict[str, int]] | None = None
        self._committed: dict[MessageQueue, int] = {}

    # --- offsets
    def initialOffset(self) -> dict:  # type: ignore[type-arg]
        queues = self.planner.queues(missing_ok=True)
        ranges = self.planner.ranges(queues)
        start = self.planner.resolve(self.opts.starting, ranges, what="startingOffsets")
        log.info("initial_offsets", topics=",".join(self.opts.topics), queues=len(start), spec=self.opts.starting.describe())
        return offsets_to_jsonable(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        queues = self.planner.queues(missing_ok=True)
        self._target = {mq: hi for mq, (_, hi) in self.planner.ranges(queues).items()}
        log.info("available_now_target", queues=len(self._target), offsets=sum(self._target.values()))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # type: ignore[type-arg]
        begin = offsets_from_jsonable(start, what="start offset")
        # Spark asks for the next batch only after the batch ending at `start` completed.
        self.planner.commit_to_broker(begin, self._committed)
        queues = self.planner.queues(missing_ok=True)
        ranges = self.planner.ranges(queues)
        latest = {mq: hi for mq, (_, hi) in ranges.items()}
        self._latest = offsets_to_jsonable({**begin, **latest})
        if self._target is not None:
            # availableNow: never past what existed when the query started; later queues not at all.
            latest = {mq: min(hi, self._target[mq]) for mq, hi in latest.items() if mq in self._target}
            ranges = {mq: r for mq, r in ranges.items() if mq in self._target}
        effective, jumps = self.planner.check_loss(begin, ranges)
        latest = {mq: max(hi, effective.get(mq, 0)) for mq, hi in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(effective, latest, limit.max_rows)
        else:
            end = dict(effective)
            for mq, hi in latest.items():
                end[mq] = max(hi, effective.get(mq, 0))
        for mq, off in begin.items():
            end.setdefault(mq, off)  # queues gone from the route keep their offsets
        for mq, jump in jumps.items():
            end[mq] = max(end.get(mq, jump), jump)
        return offsets_to_jsonable(end)

    def reportLatestOffset(self) -> dict | None:  # type: ignore[type-arg]
        return self._latest

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:  # type: ignore[type-arg]
        return plan_partitions(
            offsets_from_jsonable(start, what="start offset"),
            offsets_from_jsonable(end, what="end offset"),
            max_records_per_partition=self.opts.max_records_per_partition,
            min_partitions=self.opts.min_partitions,
        )

    def read(self, partition: InputPartition) -> Iterator[object]:  # type: ignore[override]
        assert isinstance(partition, QueueRangePartition)
        return read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:  # type: ignore[type-arg]
        self.planner.commit_to_broker(offsets_from_jsonable(end, what="end offset"), self._committed)

    def stop(self) -> None:
        self.planner.close()


class RocketMQBatchReader(DataSourceReader):
    """spark.read: the offsets between startingOffsets (default earliest) and endingOffsets (default latest)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.planner = _Planner(opts)

    def partitions(self) -> Sequence[InputPartition]:
        t0 = time.monotonic()
        try:
            queues = self.planner.queues(missing_ok=False)
            ranges = self.planner.ranges(queues)
            start = self.planner.resolve(self.opts.starting, ranges, what="startingOffsets")
            end = self.planner.resolve(self.opts.ending, ranges, what="endingOffsets")
            start, _ = self.planner.check_loss(start, ranges)
        finally:
            self.planner.close()
        for mq in list(end):
            hi = ranges[mq][1]
            if end[mq] > hi:
                log.warning("ending_offset_clamped", mq=str(mq), requested=end[mq], max_offset=hi)
                end[mq] = hi
            end[mq] = max(end[mq], start.get(mq, 0))
        parts = plan_partitions(
            start, end, max_records_per_partition=self.opts.max_records_per_partition,
            min_partitions=self.opts.min_partitions,
        )
        log.info("batch_read_planned", topics=",".join(self.opts.topics), partitions=len(parts),
                 offsets=sum(p.end - p.start for p in parts), ms=math.floor((time.monotonic() - t0) * 1000))
        return parts

    def read(self, partition: InputPartition) -> Iterator[object]:  # type: ignore[override]
        if not isinstance(partition, QueueRangePartition):
            return iter(())  # Spark's placeholder partition when there is nothing to read
        return read_partition(self.opts, partition)
