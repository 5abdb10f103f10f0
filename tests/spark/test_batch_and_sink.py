"""Batch reads (spark.read) and the sink (df.write / df.writeStream) against a real cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from client.message import MessageQueue
from client.reader import BlockingQueueReader

from .conftest import Cluster, produce, topic_name


def _read(spark: Any, rmq: Cluster, topic: str, **options: object) -> Any:
    r = spark.read.format("rocketmq").option("nameServer", rmq.namesrv).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _read_back(rmq: Cluster, topic: str) -> list[Any]:
    with BlockingQueueReader(rmq.namesrv) as reader:
        out = []
        for mq in reader.fetch_queues(topic):
            lo, hi = reader.offset_range(mq)
            out.extend(m for batch in reader.read_range(mq, lo, hi) for m in batch)
        return out


def test_batch_read_with_ending_offsets_and_timestamps(spark: Any, rmq: Cluster) -> None:
    topic = topic_name("Bt")
    produce(rmq.namesrv, topic, 30, batch=10)
    # Pin one batch to queue 0 so the ending offset below really cuts it (batches land at random).
    produce(rmq.namesrv, topic, 10, start=30, batch=10, queue=MessageQueue(topic, "broker-a", 0))
    every = _read(spark, rmq, topic).collect()  # earliest .. latest by default
    assert sorted(int(r["properties"]["i"]) for r in every) == list(range(40))

    ending = f'{{"{topic}": {{"broker-a/0": 3, "broker-a/1": -1}}}}'  # unlisted queues: latest
    rows = _read(spark, rmq, topic, endingOffsets=ending).collect()
    with BlockingQueueReader(rmq.namesrv) as reader:
        q0 = reader.max_offset(MessageQueue(topic, "broker-a", 0))
    assert len(rows) == 40 - (q0 - 3)
    assert {r["queueOffset"] for r in rows if r["queueId"] == 0} == {0, 1, 2}

    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    produce(rmq.namesrv, topic, 10, start=40)
    late = _read(spark, rmq, topic, startingTimestamp=cut).collect()
    assert sorted(int(r["properties"]["i"]) for r in late) == list(range(40, 50))
    early = _read(spark, rmq, topic, endingTimestamp=cut).select("properties").collect()
    assert sorted(int(r["properties"]["i"]) for r in early) == list(range(40))


def test_batch_read_filters_tags_and_splits_partitions(spark: Any, rmq: Cluster) -> None:
    topic = topic_name("Bt")
    produce(rmq.namesrv, topic, 30, tags=lambda i: "TagA" if i % 3 == 0 else "TagB", batch=10)
    df = _read(spark, rmq, topic, subExpression="TagA", maxRecordsPerPartition=2)
    assert df.rdd.getNumPartitions() >= 15  # 30 offsets, <= 2 per partition
    assert sorted(int(r["properties"]["i"]) for r in df.collect()) == list(range(0, 30, 3))


def test_batch_read_with_an_sql92_selector(spark: Any, rmq: Cluster) -> None:
    topic = topic_name("Bsql")
    produce(rmq.namesrv, topic, 12, tags=lambda i: "TagA" if i % 2 else "TagB")  # property i=<i>
    df = _read(spark, rmq, topic, subExpression="i >= 3 AND i < 9 AND TAGS = 'TagA'", expressionType="SQL92")
    assert sorted(int(r["properties"]["i"]) for r in df.collect()) == [3, 5, 7]
    # the brokers compile the expression when the read is planned, naming what is wrong
    with pytest.raises(Exception, match="subExpression: broker broker-a .* refuses the SQL92 expression"):
        _read(spark, rmq, topic, subExpression="i >>= 3", expressionType="SQL92").collect()


def test_batch_read_errors_are_clear(spark: Any, rmq: Cluster) -> None:
    with pytest.raises(Exception, match="does not exist"):
        _read(spark, rmq, topic_name("Missing")).collect()
    with pytest.raises(Exception, match="maxOffsetsPerTrigger: only for streaming"):
        _read(spark, rmq, "T", maxOffsetsPerTrigger=5).collect()


def test_sink_round_trip(spark: Any, rmq: Cluster) -> None:
    t1, t2 = topic_name("Out"), topic_name("Out")
    data = [
        (t1 if i % 2 else t2, f"payload-{i}", f"tag{i % 3}", [f"key{i}", f"alt{i}"], {"i": str(i), "src": "spark"})
        for i in range(50)
    ]
    df = spark.createDataFrame(data, "topic string, body string, tags string, keys array<string>, properties map<string,string>")
    df.write.format("rocketmq").option("nameServer", rmq.namesrv).option("sendBatchSize", 8).mode("append").save()
    got = {t: _read_back(rmq, t) for t in (t1, t2)}
    assert len(got[t1]) == 25 and len(got[t2]) == 25
    for t, msgs in got.items():
        for m in msgs:
            i = int(m.properties["i"])
            assert (t1 if i % 2 else t2) == t
            assert m.body == f"payload-{i}".encode()
            assert m.tags == f"tag{i % 3}" and m.keys == f"key{i} alt{i}" and m.properties["src"] == "spark"


def test_sink_default_topic_binary_body_and_schema_errors(spark: Any, rmq: Cluster) -> None:
    topic = topic_name("Out")
    df = spark.createDataFrame([(bytes([i, 0, 255]),) for i in range(1, 11)], "body binary")
    df.write.format("rocketmq").option("nameServer", rmq.namesrv).option("topic", topic).mode("append").save()
    assert sorted(m.body for m in _read_back(rmq, topic)) == sorted(bytes([i, 0, 255]) for i in range(1, 11))

    with pytest.raises(Exception, match="needs a 'body' column"):
        spark.createDataFrame([("x",)], "value string").write.format("rocketmq").option(
            "nameServer", rmq.namesrv
        ).option("topic", topic).mode("append").save()
    with pytest.raises(Exception, match="needs a 'topic' column or the 'topic' option"):
        df.write.format("rocketmq").option("nameServer", rmq.namesrv).mode("append").save()
    with pytest.raises(Exception, match="non-empty body"):
        spark.createDataFrame([(b"",)], "body binary").write.format("rocketmq").option(
            "nameServer", rmq.namesrv
        ).option("topic", topic).mode("append").save()


def test_stream_to_stream_copy(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    src, dst = topic_name("Src"), topic_name("Dst")
    produce(rmq.namesrv, src, 30, tags=lambda i: "TagA" if i % 2 else "TagB")
    q = (
        spark.readStream.format("rocketmq").option("nameServer", rmq.namesrv).option("topic", src)
        .option("startingOffsets", "earliest").option("subExpression", "TagA").load()
        .selectExpr("body", "tags", "keys", "properties")
        .writeStream.format("rocketmq").option("nameServer", rmq.namesrv).option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    msgs = _read_back(rmq, dst)
    assert sorted(int(m.properties["i"]) for m in msgs) == list(range(1, 30, 2))
    assert {m.tags for m in msgs} == {"TagA"}
