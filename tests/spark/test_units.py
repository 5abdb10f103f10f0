"""Pure parts of the connector: options, offsets JSON, planning, record decoding (no Spark session, no daemons)."""

from __future__ import annotations

import datetime as dt
import zlib

import pytest

pytest.importorskip("pyspark.sql.datasource")
pa = pytest.importorskip("pyarrow")

from client.message import MessageQueue  # noqa: E402
from client.reader import OffsetOutOfRangeError, PulledChunk, TagExpression  # noqa: E402
from remoting.message import encode_message_record, encode_properties  # noqa: E402
from spark_connector.errors import OptionError  # noqa: E402
from spark_connector.offsets import (  # noqa: E402
    EARLIEST,
    LATEST,
    offsets_from_json,
    offsets_to_json,
)
from spark_connector.options import TagFilter, parse_sink_options, parse_source_options  # noqa: E402
from spark_connector.planning import QueueRangePartition, plan_partitions, rate_limit  # noqa: E402
from spark_connector.rows import SOURCE_SCHEMA, ArrowBatchBuilder, chunk_tuples, source_arrow_schema  # noqa: E402

NS = "127.0.0.1:9876"


def mq(q: int, broker: str = "broker-a", topic: str = "T") -> MessageQueue:
    return MessageQueue(topic, broker, q)


# ------------------------------------------------------------------------------------------ offsets


def test_offsets_json_round_trip_is_nested_per_topic_and_sorted() -> None:
    offs = {mq(1): 5, mq(0): 12, mq(0, "broker-b"): 3, mq(2, topic="U"): 7}
    text = offsets_to_json(offs)
    assert text == '{"T":{"broker-a/0":12,"broker-a/1":5,"broker-b/0":3},"U":{"broker-a/2":7}}'
    assert offsets_from_json(text) == offs


def test_offsets_json_broker_name_may_contain_slash() -> None:
    assert offsets_from_json('{"T": {"a/b/3": 1}}') == {MessageQueue("T", "a/b", 3): 1}


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[1]", "expected a JSON object"),
        ('{"T": 5}', "must map to an object"),
        ('{"T": {"broker-a": 5}}', "bad queue key"),
        ('{"T": {"broker-a/x": 5}}', "bad queue key"),
        ('{"T": {"broker-a/0": "5"}}', "must be an integer"),
        ('{"T": {"broker-a/0": -1}}', "must be >= 0"),
        ("{not json", "not valid JSON"),
    ],
)
def test_offsets_json_errors_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(OptionError, match=needle):
        offsets_from_json(text)


def test_sentinels_only_where_allowed() -> None:
    assert offsets_from_json('{"T": {"b/0": -2, "b/1": -1}}', allow_sentinels=True) == {
        MessageQueue("T", "b", 0): EARLIEST,
        MessageQueue("T", "b", 1): LATEST,
    }


# ------------------------------------------------------------------------------------------ options


def test_source_options_defaults_streaming_and_batch() -> None:
    s = parse_source_options({"nameServer": NS, "topic": "A, B,A"}, streaming=True)
    assert s.topics == ("A", "B")
    assert s.starting.kind == "latest" and s.ending.kind == "latest"
    assert s.fail_on_data_loss is True and s.group is None and s.max_offsets_per_trigger is None
    assert s.tag_filter.match_all and s.row_format == "arrow"
    b = parse_source_options({"nameserver": NS, "TOPIC": "A"}, streaming=False)  # case-insensitive
    assert b.starting.kind == "earliest"


def test_source_options_values() -> None:
    s = parse_source_options(
        {
            "nameServer": NS,
            "topic": "T",
            "subExpression": "b || a",
            "startingOffsets": '{"T": {"broker-a/0": 5, "broker-a/1": -2}}',
            "maxOffsetsPerTrigger": "100",
            "failOnDataLoss": "false",
            "group": "g1",
            "maxRecordsPerPartition": "10",
            "minPartitions": "3",
        },
        streaming=True,
    )
    assert s.tag_filter.tags == frozenset({"a", "b"}) and s.tag_filter.expression == "a || b"
    assert s.starting.kind == "offsets" and s.starting.offsets[mq(0)] == 5 and s.starting.offsets[mq(1)] == EARLIEST
    assert s.max_offsets_per_trigger == 100 and not s.fail_on_data_loss and s.group == "g1"
    assert s.max_records_per_partition == 10 and s.min_partitions == 3
    ts = parse_source_options({"nameServer": NS, "topic": "T", "startingTimestamp": "1700000000000"}, streaming=True)
    assert ts.starting.kind == "timestamp" and ts.starting.timestamp == 1_700_000_000_000


@pytest.mark.parametrize(
    "opts, streaming, needle",
    [
        ({}, True, "topic: required"),
        ({"topic": "T", "bogus": "1"}, True, "unknown source option"),
        ({"topic": "T", "endingOffsets": "latest"}, True, "only for batch"),
        ({"topic": "T", "maxOffsetsPerTrigger": "5"}, False, "only for streaming"),
        ({"topic": "T", "maxOffsetsPerTrigger": "0"}, True, "must be >= 1"),
        ({"topic": "T", "maxOffsetsPerTrigger": "x"}, True, "expected an integer"),
        ({"topic": "T", "failOnDataLoss": "maybe"}, True, "expected true or false"),
        ({"topic": "T", "startingOffsets": "latest"}, False, "not allowed for batch"),
        ({"topic": "T", "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({"topic": "T", "startingOffsets": '{"U": {"b/0": 1}}'}, True, "not in the topic option"),
        ({"topic": "T", "subExpression": " || "}, True, "no tag"),
        ({"topic": "T", "expressionType": "SQL92"}, True, "needs an SQL92 expression"),
        ({"topic": "T", "expressionType": "XPATH", "subExpression": "a"}, True, "expected TAG or SQL92"),
        ({"topic": "T", "nameServer": "nonsense"}, True, "nameServer"),
    ],
)
def test_source_option_errors(opts: dict[str, str], streaming: bool, needle: str) -> None:
    opts = {"nameServer": NS, **opts}
    with pytest.raises(OptionError, match=needle):
        parse_source_options(opts, streaming=streaming)


def test_name_server_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.1:9876;10.0.0.2:9876")
    assert parse_source_options({"topic": "T"}, streaming=True).namesrv_addr == "10.0.0.1:9876;10.0.0.2:9876"
    monkeypatch.delenv("NAMESRV_ADDR")
    with pytest.raises(OptionError, match="nameServer"):
        parse_source_options({"topic": "T"}, streaming=True)


def test_sink_options() -> None:
    s = parse_sink_options({"nameServer": NS, "topic": "Out", "sendBatchSize": "10"})
    assert s.topic == "Out" and s.send_batch_size == 10 and s.producer_group
    with pytest.raises(OptionError, match="one default topic"):
        parse_sink_options({"nameServer": NS, "topic": "A,B"})


def test_tag_filter() -> None:
    f = TagFilter.parse("A || B")
    assert f.matches("A") and f.matches("B") and not f.matches("C") and not f.matches(None)
    assert TagFilter.parse(" * ").matches(None)
    e = TagExpression.parse("x||y")
    assert e.expression == "x || y" and e.matches("y") and not e.matches("z")
    sql = parse_source_options({"nameServer": NS, "topic": "T", "subExpression": " a > 5 ", "expressionType": "sql92"},
                               streaming=True).tag_filter
    assert (sql.expression, sql.expression_type, sql.match_all) == ("a > 5", "SQL92", False)
    e = TagExpression.parse(sql.selector)  # what the reader's pulls carry
    assert (e.expression, e.expression_type, e.tags) == ("a > 5", "SQL92", None)
    assert TagFilter.parse("TagA").selector == "TagA" and TagFilter.parse("*").match_all


# ------------------------------------------------------------------------------------------ planning


def test_rate_limit_spreads_by_backlog_and_admits_exactly_the_limit() -> None:
    start = {mq(0): 0, mq(1): 100, mq(2): 50}
    latest = {mq(0): 300, mq(1): 200, mq(2): 50, mq(3): 100}  # mq(3) is new: starts at 0
    end = rate_limit(start, latest, 100)
    assert sum(end[m] - start.get(m, 0) for m in end) == 100
    assert end[mq(2)] == 50  # no backlog
    assert end[mq(0)] - 0 == 60 and end[mq(1)] - 100 == 20 and end[mq(3)] == 20  # 300:100:100
    assert rate_limit(start, latest, 10_000) == {mq(0): 300, mq(1): 200, mq(2): 50, mq(3): 100}


def test_rate_limit_always_progresses_with_a_tiny_limit() -> None:
    start = {mq(i): 0 for i in range(8)}
    latest = {mq(i): 10 for i in range(8)}
    end = rate_limit(start, latest, 3)
    assert sum(end.values()) == 3
    assert all(v in (0, 1) for v in end.values())


def test_rate_limit_keeps_queues_missing_from_latest() -> None:
    end = rate_limit({mq(0): 5, mq(1): 7}, {mq(0): 9}, 100)
    assert end == {mq(0): 9, mq(1): 7}


def test_plan_partitions_one_per_queue_split_when_large() -> None:
    start = {mq(0): 0, mq(1): 10}
    end = {mq(0): 25, mq(1): 10, mq(2): 4}
    parts = plan_partitions(start, end, max_records_per_partition=10)
    assert [(p.queue_id, p.start, p.end) for p in parts] == [(0, 0, 8), (0, 8, 16), (0, 16, 25), (2, 0, 4)]
    assert all(isinstance(p, QueueRangePartition) for p in parts)


def test_plan_partitions_min_partitions_splits_big_ranges_first() -> None:
    parts = plan_partitions({mq(0): 0, mq(1): 0}, {mq(0): 90, mq(1): 10}, max_records_per_partition=10**6, min_partitions=4)
    per_queue = [sum(1 for p in parts if p.queue_id == q) for q in (0, 1)]
    assert sum(per_queue) >= 4 and per_queue[0] > per_queue[1]
    covered = sorted((p.queue_id, p.start, p.end) for p in parts)
    # contiguous cover of each range, no overlap
    for q, hi in ((0, 90), (1, 10)):
        rs = [(a, b) for qq, a, b in covered if qq == q]
        assert rs[0][0] == 0 and rs[-1][1] == hi and all(rs[i][1] == rs[i + 1][0] for i in range(len(rs) - 1))


def test_partition_pickles() -> None:
    import pickle

    p = QueueRangePartition("T", "b", 1, 5, 9)
    assert pickle.loads(pickle.dumps(p)) == p and p.mq == MessageQueue("T", "b", 1)


# ------------------------------------------------------------------------------------------ decoding


def _record(i: int, *, body: bytes = b"x" * 100, compress: bool = False, tags: str | None = "TagA") -> bytes:
    props = {"KEYS": f"k{i}", "UNIQ_KEY": f"UNIQ{i:06d}", "WAIT": "true", "color": "red", "i": str(i)}
    if tags:
        props["TAGS"] = tags
    stored = zlib.compress(body) if compress else body
    return bytes(
        encode_message_record(
            topic="T",
            queue_id=1,
            flag=0,
            body=stored,
            properties=encode_properties(props),
            sys_flag=1 if compress else 0,
            born_timestamp=1_700_000_000_000 + i,
            born_host=("127.0.0.1", 5555),
            store_host=("10.0.0.1", 10911),
            queue_offset=i,
            physical_offset=1000 * i,
            store_timestamp=1_700_000_000_500 + i,
            reconsume_times=i % 3,
        )
    )


def _chunk(n: int, lo: int = 0, hi: int = 10**9, tags: frozenset[str] | None = None, **kw: object) -> PulledChunk:
    data = b"".join(_record(i, tags="TagA" if i % 2 else "TagB", **kw) for i in range(n))  # type: ignore[arg-type]
    return PulledChunk(MessageQueue("T", "broker-a", 1), data, lo, hi, n, 0, n, tags)


def test_arrow_builder_matches_the_schema_spark_checks() -> None:
    b = ArrowBatchBuilder()
    assert b.add(_chunk(10, lo=2, hi=8)) == 6
    batch = b.take()
    assert batch is not None and batch.schema.equals(source_arrow_schema())
    assert len(b) == 0 and b.take() is None
    rows = batch.to_pylist()
    assert [r["queueOffset"] for r in rows] == [2, 3, 4, 5, 6, 7]
    r = rows[0]
    assert r["topic"] == "T" and r["brokerName"] == "broker-a" and r["queueId"] == 1
    assert r["msgId"] == "UNIQ000002" and r["tags"] == "TagB" and r["keys"] == "k2"
    assert r["offsetMsgId"] == "0A00000100002A9F00000000000007D0"
    assert r["body"] == b"x" * 100 and r["reconsumeTimes"] == 2
    assert dict(r["properties"]) == {"color": "red", "i": "2"}
    assert r["bornTimestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 2000, tzinfo=dt.UTC)
    assert r["storeTimestamp"].timestamp() * 1000 == pytest.approx(1_700_000_000_502)


def test_decoding_filters_tags_decompresses_and_keeps_system_properties_on_request() -> None:
    rows = list(chunk_tuples(_chunk(6, tags=frozenset({"TagA"}), body=b"y" * 5000, compress=True)))
    assert [r[3] for r in rows] == [1, 3, 5]
    assert all(r[8] == b"y" * 5000 for r in rows)
    assert rows[0][9] == {"color": "red", "i": "1"}
    assert isinstance(rows[0][10], dt.datetime) and rows[0][10].tzinfo is not None
    sys_rows = list(chunk_tuples(_chunk(1), include_system_properties=True))
    assert {"TAGS", "KEYS", "UNIQ_KEY", "WAIT"} <= set(sys_rows[0][9])
    assert len(sys_rows[0]) == len(SOURCE_SCHEMA.fields)


def test_arrow_builder_accumulates_several_chunks_of_different_queues() -> None:
    b = ArrowBatchBuilder()
    c1 = _chunk(3)
    c2 = PulledChunk(MessageQueue("U", "broker-b", 1), _chunk(2).body, 0, 10, 2, 0, 2, None)
    b.add(c1)
    b.add(PulledChunk(c1.mq, b"", 0, 10, 5, 0, 5, None))  # an empty (skipped offsets) chunk
    b.add(c2)
    batch = b.take()
    assert batch is not None
    assert batch.column("topic").to_pylist() == ["T", "T", "T", "U", "U"]
    assert batch.column("brokerName").to_pylist() == ["broker-a"] * 3 + ["broker-b"] * 2


def test_corrupt_body_is_reported() -> None:
    bad = PulledChunk(MessageQueue("T", "b", 0), b"\x00\x00\x00\x10garbagegarbage..", 0, 10, 1, 0, 1, None)
    with pytest.raises(ValueError, match="corrupt record"):
        list(chunk_tuples(bad))


def test_offset_out_of_range_error_says_why() -> None:
    low = OffsetOutOfRangeError(MessageQueue("T", "b", 0), 5, 10, 20)
    assert "below the queue's min offset 10" in str(low) and low.min_offset == 10
    high = OffsetOutOfRangeError(MessageQueue("T", "b", 0), 30, 0, 20)
    assert "beyond the queue's max offset 20" in str(high)
