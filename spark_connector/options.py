"""Option parsing for the `rocketmq` data source (names are case-insensitive, as in Spark).

Source options (see the package docstring for the full contract):

| option | default | meaning |
|---|---|---|
| `nameServer` | $NAMESRV_ADDR | 'ip:port;ip:port' |
| `topic` | required | one topic or a comma list |
| `subExpression` | `*` | tag expression: `*` or `TagA || TagB`; with `expressionType=SQL92`, an SQL92 selector |
| `expressionType` | `TAG` | `TAG`, or `SQL92` (`subExpression` is then filtered by the broker over message properties: it needs `enablePropertyFilter=true`) |
| `startingOffsets` | streaming `latest`, batch `earliest` | `earliest` / `latest` / JSON per queue |
| `startingTimestamp` | - | ms since epoch: every queue starts at its first message stored at or after it |
| `startingOffsetsByTimestamp` | - | JSON {topic: {"broker/qid": ms}} |
| `endingOffsets` | `latest` | batch reads only: `latest` / JSON per queue |
| `endingTimestamp` | - | batch reads only: ms since epoch, exclusive |
| `maxOffsetsPerTrigger` | none | cap on queue offsets per micro-batch (spread over queues by backlog) |
| `failOnDataLoss` | true | fail when needed offsets are gone; false: log and skip ahead |
| `group` | none | consumer group under which processed offsets are committed to the broker |
| `maxRecordsPerPartition` | 1000000 | split a queue's range into Spark partitions of at most this many offsets |
| `minPartitions` | none | split ranges further so a batch has at least this many partitions |
| `pullBatchSize` | 1024 | messages asked for per pull (the broker caps it: 32 by default) |
| `pullPipeline` | 8 | pulls in flight per partition |
| `pullTimeoutMs` | 10000 | timeout of one pull |
| `includeSystemProperties` | false | keep RocketMQ's own properties (UNIQ_KEY, WAIT, ...) in `properties` |
| `rowFormat` | `arrow` | how partitions hand rows to Spark: `arrow` (pyarrow.RecordBatch, faster) or `tuples` |

Offsets JSON (`startingOffsets`, `endingOffsets`): `{"topic": {"brokerName/queueId": offset}}`; -2
means earliest and -1 latest; queues left out start at earliest / end at latest. Precedence of the
starting options, as in Spark's Kafka source: `startingTimestamp`, then
`startingOffsetsByTimestamp`, then `startingOffsets` (same for the ending ones). A timestamp
resolves to the first message stored at or after it (SEARCH_OFFSET_BY_TIMESTAMP); an ending
timestamp is exclusive. Starting options apply to a new query only: a restarted query resumes
from its checkpoint.

Sink options: `nameServer`, `topic` (default when the DataFrame has no `topic` column),
`producerGroup` (default `spark_connector_producer`), `sendBatchSize` (messages per batch send,
default 64), `sendPipeline` (batches in flight, default 8), `sendTimeoutMs` (default 10000).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from client.config import parse_namesrv_addr, resolve_namesrv_addr
from client.consumer.filter import MessageSelector
from client.errors import MQClientError
from client.message import MessageQueue

from .errors import OptionError
from .offsets import EARLIEST, LATEST, offsets_from_json

__all__ = [
    "OffsetSpec",
    "SinkOptions",
    "SourceOptions",
    "TagFilter",
    "parse_sink_options",
    "parse_source_options",
]

DEFAULT_READER_GROUP = "spark_connector_reader"
DEFAULT_PRODUCER_GROUP = "spark_connector_producer"

_SOURCE_KEYS = {
    "nameserver",
    "topic",
    "subexpression",
    "expressiontype",
    "startingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsets",
    "endingtimestamp",
    "maxoffsetspertrigger",
    "failondataloss",
    "group",
    "maxrecordsperpartition",
    "minpartitions",
    "pullbatchsize",
    "pullpipeline",
    "pulltimeoutms",
    "includesystemproperties",
    "rowformat",
    # Spark passes this one to every source of a DataStreamReader/Writer.
    "path",
}
_SINK_KEYS = {
    "nameserver",
    "topic",
    "producergroup",
    "sendbatchsize",
    "sendpipeline",
    "sendtimeoutms",
    "checkpointlocation",
    "path",
}


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A RocketMQ tag expression: `*` (everything) or `TagA || TagB` (messages with one of those tags); or,
    with expressionType SQL92, a selector over message properties the broker applies."""

    expression: str = "*"
    tags: frozenset[str] | None = None  # None = all
    expression_type: str = "TAG"

    @classmethod
    def parse(cls, expression: str | None, expression_type: str | None = None) -> TagFilter:
        kind = (expression_type or "TAG").strip().upper()
        if kind == "SQL92":
            sql = (expression or "").strip()
            if not sql or sql == "*":
                raise OptionError("subExpression: expressionType=SQL92 needs an SQL92 expression, e.g. \"a > 5\"")
            return cls(sql, None, "SQL92")
        if kind != "TAG":
            raise OptionError(f"expressionType: expected TAG or SQL92, got {expression_type!r}")
        expr = (expression or "*").strip()
        if not expr or expr == "*":
            return cls("*", None)
        tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
        if not tags:
            raise OptionError(f"subExpression: no tag in {expression!r} (use '*' or 'TagA || TagB')")
        return cls(" || ".join(sorted(tags)), tags)

    @property
    def match_all(self) -> bool:
        return self.tags is None and self.expression_type == "TAG"

    @property
    def selector(self) -> str | MessageSelector:
        """What the client's reader takes: the tag expression, or the SQL92 selector."""
        return MessageSelector.by_sql(self.expression) if self.expression_type == "SQL92" else self.expression

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where reading starts or ends: a kind plus per-queue details.

    kind 'earliest' | 'latest': every queue at its min / max offset.
    kind 'offsets': `offsets` per queue (values may be EARLIEST/LATEST); `default` for the others.
    kind 'timestamp': `timestamp` ms for every queue, or `timestamps` per queue (others: `default`).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp"]
    offsets: Mapping[MessageQueue, int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[MessageQueue, int] = field(default_factory=dict)
    default: int = EARLIEST

    def describe(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp={self.timestamp}" if self.timestamp is not None else "timestamp per queue"
        return "offsets per queue"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    namesrv_addr: str
    topics: tuple[str, ...]
    tag_filter: TagFilter
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    group: str | None
    max_records_per_partition: int
    min_partitions: int | None
    pull_batch_size: int
    pull_pipeline: int
    pull_timeout_ms: int
    include_system_properties: bool
    row_format: Literal["arrow", "tuples"]

    @property
    def reader_group(self) -> str:
        """The consumer group named in pull requests (never used to track membership)."""
        return self.group or DEFAULT_READER_GROUP


@dataclass(frozen=True, slots=True)
class SinkOptions:
    namesrv_addr: str
    topic: str | None
    producer_group: str
    send_batch_size: int
    send_pipeline: int
    send_timeout_ms: int


# ------------------------------------------------------------------------------------------ helpers


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items() if v is not None}


def _check_known(opts: Mapping[str, str], known: set[str], what: str) -> None:
    unknown = sorted(k for k in opts if k not in known)
    if unknown:
        raise OptionError(f"unknown {what} option(s): {', '.join(unknown)}")


def _int(opts: Mapping[str, str], key: str, name: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"{name}: must be >= {minimum}, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    s = str(raw).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise OptionError(f"{name}: expected true or false, got {raw!r}")


def _namesrv(opts: Mapping[str, str]) -> str:
    try:
        return ";".join(resolve_namesrv_addr(opts.get("nameserver") or None))
    except MQClientError as e:
        raise OptionError(f"nameServer: {e}") from None


def _topics(opts: Mapping[str, str], required: bool) -> tuple[str, ...]:
    raw = opts.get("topic")
    topics = tuple(dict.fromkeys(t.strip() for t in (raw or "").split(",") if t.strip()))
    if required and not topics:
        raise OptionError("topic: required (one topic or a comma-separated list)")
    return topics


def _offset_spec(
    opts: Mapping[str, str], topics: tuple[str, ...], *, ending: bool, default_kind: str
) -> OffsetSpec:
    prefix = "ending" if ending else "starting"
    ts_key = f"{prefix}timestamp"
    by_ts_key = f"{prefix}offsetsbytimestamp"
    off_key = f"{prefix}offsets"
    label = f"{prefix}Offsets"
    if ts_key in opts:
        ts = _int(opts, ts_key, f"{prefix}Timestamp", None, minimum=0)
        return OffsetSpec("timestamp", timestamp=ts)
    if by_ts_key in opts:
        per_queue = offsets_from_json(opts[by_ts_key], what=f"{prefix}OffsetsByTimestamp")
        _check_topics(per_queue, topics, f"{prefix}OffsetsByTimestamp")
        return OffsetSpec("timestamp", timestamps=per_queue, default=LATEST if ending else EARLIEST)
    raw = opts.get(off_key)
    if raw is None or not str(raw).strip():
        return OffsetSpec(default_kind)  # type: ignore[arg-type]
    text = str(raw).strip()
    low = text.lower()
    if low in ("earliest", "latest"):
        if ending and low == "earliest":
            raise OptionError("endingOffsets: 'earliest' is not allowed (use 'latest' or JSON per queue)")
        return OffsetSpec(low)  # type: ignore[arg-type]
    per_queue = offsets_from_json(text, allow_sentinels=True, what=label)
    _check_topics(per_queue, topics, label)
    if ending and any(v == EARLIEST for v in per_queue.values()):
        raise OptionError("endingOffsets: -2 (earliest) is not allowed as an ending offset")
    return OffsetSpec("offsets", offsets=per_queue, default=LATEST if ending else EARLIEST)


def _check_topics(per_queue: Mapping[MessageQueue, int], topics: tuple[str, ...], what: str) -> None:
    extra = sorted({mq.topic for mq in per_queue} - set(topics))
    if extra:
        raise OptionError(f"{what}: names topic(s) {', '.join(extra)} not in the topic option {','.join(topics)}")


# ------------------------------------------------------------------------------------------ public


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the reader options; raises OptionError naming the option."""
    opts = _lower(options)
    _check_known(opts, _SOURCE_KEYS, "source")
    topics = _topics(opts, required=True)
    if streaming:
        for key, name in (("endingoffsets", "endingOffsets"), ("endingtimestamp", "endingTimestamp")):
            if key in opts:
                raise OptionError(f"{name}: only for batch reads (spark.read), not for readStream")
    else:
        if "maxoffsetspertrigger" in opts:
            raise OptionError("maxOffsetsPerTrigger: only for streaming reads (readStream)")
    starting = _offset_spec(opts, topics, ending=False, default_kind="latest" if streaming else "earliest")
    if not streaming and starting.kind == "latest":
        raise OptionError("startingOffsets: 'latest' is not allowed for batch reads (the result would be empty)")
    ending = _offset_spec(opts, topics, ending=True, default_kind="latest")
    row_format = str(opts.get("rowformat", "arrow")).strip().lower()
    if row_format not in ("arrow", "tuples"):
        raise OptionError(f"rowFormat: expected arrow or tuples, got {opts.get('rowformat')!r}")
    group = (opts.get("group") or "").strip() or None
    return SourceOptions(
        namesrv_addr=_namesrv(opts),
        topics=topics,
        tag_filter=TagFilter.parse(opts.get("subexpression"), opts.get("expressiontype")),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger", None),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        group=group,
        max_records_per_partition=_int(opts, "maxrecordsperpartition", "maxRecordsPerPartition", 1_000_000) or 1,
        min_partitions=_int(opts, "minpartitions", "minPartitions", None),
        pull_batch_size=_int(opts, "pullbatchsize", "pullBatchSize", 1024) or 1,
        pull_pipeline=_int(opts, "pullpipeline", "pullPipeline", 8) or 1,
        pull_timeout_ms=_int(opts, "pulltimeoutms", "pullTimeoutMs", 10_000, minimum=100) or 10_000,
        include_system_properties=_bool(opts, "includesystemproperties", "includeSystemProperties", False),
        row_format=row_format,  # type: ignore[arg-type]
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    _check_known(opts, _SINK_KEYS, "sink")
    topics = _topics(opts, required=False)
    if len(topics) > 1:
        raise OptionError("topic: the sink takes one default topic (use a 'topic' column to write to several)")
    return SinkOptions(
        namesrv_addr=_namesrv(opts),
        topic=topics[0] if topics else None,
        producer_group=(opts.get("producergroup") or "").strip() or DEFAULT_PRODUCER_GROUP,
        send_batch_size=_int(opts, "sendbatchsize", "sendBatchSize", 64) or 64,
        send_pipeline=_int(opts, "sendpipeline", "sendPipeline", 8) or 8,
        send_timeout_ms=_int(opts, "sendtimeoutms", "sendTimeoutMs", 10_000, minimum=100) or 10_000,
    )


def validate_namesrv(addr: str) -> str:
    try:
        return ";".join(parse_namesrv_addr(addr))
    except MQClientError as e:
        raise OptionError(f"nameServer: {e}") from None
