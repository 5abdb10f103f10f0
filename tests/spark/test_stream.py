"""Structured streaming reads against a real cluster (shared SparkSession, availableNow queries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client.message import MessageQueue
from client.reader import BlockingQueueReader
from client.sync import Admin

from .conftest import Cluster, produce, run_available_now, topic_name, wait_until


def _stream(spark: Any, rmq: Cluster, topic: str, **options: object) -> Any:
    r = spark.readStream.format("rocketmq").option("nameServer", rmq.namesrv).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def test_available_now_reads_exactly_the_produced_messages(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    topic = topic_name()
    n = 60
    ids = produce(
        rmq.namesrv, topic, n, body=lambda i: f'{{"n": {i}}}'.encode(), tags=lambda i: "TagA" if i % 2 else "TagB"
    )
    rows, progress = run_available_now(
        spark, _stream(spark, rmq, topic, startingOffsets="earliest"), tmp_path / "ck", "exact"
    )
    assert len(rows) == n
    by_i = {int(r["properties"]["i"]): r for r in rows}
    assert sorted(by_i) == list(range(n))
    for i, r in by_i.items():
        assert r["topic"] == topic and r["brokerName"] == "broker-a"
        assert r["body"] == f'{{"n": {i}}}'.encode()
        assert r["tags"] == ("TagA" if i % 2 else "TagB")
        assert r["keys"] == f"k{i}"
        assert r["properties"] == {"i": str(i)}
        assert r["msgId"] == ids[i]
        assert len(r["offsetMsgId"]) == 32
        assert r["bornTimestamp"] is not None and r["storeTimestamp"] >= r["bornTimestamp"].replace(microsecond=0)
        assert r["reconsumeTimes"] == 0
    per_queue: dict[int, list[int]] = {}
    for r in rows:
        per_queue.setdefault(r["queueId"], []).append(r["queueOffset"])
    assert sum(len(v) for v in per_queue.values()) == n
    for offs in per_queue.values():
        assert sorted(offs) == list(range(len(offs)))
    assert sum(p["numInputRows"] for p in progress) == n


def test_max_offsets_per_trigger_splits_batches_and_commits_to_broker(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    topic = topic_name()
    produce(rmq.namesrv, topic, 100, batch=25)
    group = f"grp_{topic}"
    rows, progress = run_available_now(
        spark,
        _stream(spark, rmq, topic, startingOffsets="earliest", maxOffsetsPerTrigger=30, group=group),
        tmp_path / "ck",
        "limited",
    )
    assert [p["numInputRows"] for p in progress] == [30, 30, 30, 10]
    assert sorted(int(r["properties"]["i"]) for r in rows) == list(range(100))
    # Processed offsets are committed to the broker, the last availableNow batch included.
    with BlockingQueueReader(rmq.namesrv) as reader:
        queues = reader.fetch_queues(topic)
        for mq in queues:
            assert reader.committed_offset(group, mq) == reader.max_offset(mq), mq


def test_restart_from_checkpoint_reads_only_new_messages(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    topic = topic_name()
    ck = tmp_path / "ck"
    produce(rmq.namesrv, topic, 30)
    first, _ = run_available_now(spark, _stream(spark, rmq, topic, startingOffsets="earliest"), ck, "restart1")
    assert sorted(int(r["properties"]["i"]) for r in first) == list(range(30))
    produce(rmq.namesrv, topic, 20, start=30)
    # Options that only apply to a new query (startingOffsets) are ignored on restart, as in Spark.
    second, _ = run_available_now(spark, _stream(spark, rmq, topic, startingOffsets="latest"), ck, "restart2")
    assert sorted(int(r["properties"]["i"]) for r in second) == list(range(30, 50))
    third, _ = run_available_now(spark, _stream(spark, rmq, topic), ck, "restart3")
    assert third == []


def test_starting_offsets_latest_json_and_timestamp(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    topic = topic_name()
    produce(rmq.namesrv, topic, 20)
    latest, _ = run_available_now(spark, _stream(spark, rmq, topic), tmp_path / "ck1", "latest1")
    assert latest == []  # default startingOffsets=latest: what exists is skipped
    produce(rmq.namesrv, topic, 8, start=20)
    after, _ = run_available_now(spark, _stream(spark, rmq, topic), tmp_path / "ck1", "latest2")
    assert sorted(int(r["properties"]["i"]) for r in after) == list(range(20, 28))

    start_json = f'{{"{topic}": {{"broker-a/0": 2, "broker-a/1": -1}}}}'  # others: earliest
    with BlockingQueueReader(rmq.namesrv) as reader:
        q1 = reader.max_offset(MessageQueue(topic, "broker-a", 1))
    rows, _ = run_available_now(
        spark, _stream(spark, rmq, topic, startingOffsets=start_json), tmp_path / "ck2", "json"
    )
    assert len(rows) == 28 - 2 - q1
    assert all(not (r["queueId"] == 0 and r["queueOffset"] < 2) for r in rows)
    assert all(r["queueId"] != 1 for r in rows)


def test_several_topics_and_tag_expression(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    t1, t2 = topic_name(), topic_name()
    produce(rmq.namesrv, t1, 20, tags=lambda i: "TagA" if i % 4 == 0 else "TagB")
    produce(rmq.namesrv, t2, 12, tags=lambda i: "TagA" if i % 3 == 0 else "TagC")
    rows, _ = run_available_now(
        spark,
        _stream(spark, rmq, f"{t1},{t2}", startingOffsets="earliest", subExpression="TagA"),
        tmp_path / "ck",
        "multi",
    )
    got = sorted((r["topic"], int(r["properties"]["i"])) for r in rows)
    want = sorted([(t1, i) for i in range(20) if i % 4 == 0] + [(t2, i) for i in range(12) if i % 3 == 0])
    assert got == want and {r["tags"] for r in rows} == {"TagA"}


def test_new_queues_are_picked_up_from_offset_zero(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    topic = topic_name()

    def send(queue_ids: list[int], start: int) -> None:
        from client import Message
        from client.sync import Producer

        with Producer(f"pg_{topic}", rmq.namesrv, instance_name=f"grow-{start}") as p:
            for n, q in enumerate(queue_ids):
                i = start + n
                p.send(Message(topic, f"m{i}".encode(), keys=f"k{i}", properties={"i": str(i)}),
                       queue=MessageQueue(topic, "broker-a", q))

    with Admin(rmq.namesrv) as admin, BlockingQueueReader(rmq.namesrv) as reader:
        admin.create_topic(topic, broker_addr=rmq.broker, read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: len(reader.fetch_queues(topic)) == 2, 60, what="route with 2 queues")
        send([0, 1] * 5, 0)
        first, _ = run_available_now(spark, _stream(spark, rmq, topic, startingOffsets="earliest"), tmp_path / "ck", "grow1")
        assert sorted(int(r["properties"]["i"]) for r in first) == list(range(10))
        admin.create_topic(topic, broker_addr=rmq.broker, read_queue_nums=4, write_queue_nums=4)
        wait_until(lambda: len(reader.fetch_queues(topic)) == 4, 60, what="route with 4 queues")
        send([0, 1, 2, 3] * 5, 10)
    second, _ = run_available_now(spark, _stream(spark, rmq, topic), tmp_path / "ck", "grow2")
    got = sorted((r["queueId"], r["queueOffset"], int(r["properties"]["i"])) for r in second)
    assert [i for _, _, i in sorted(got, key=lambda g: g[2])] == list(range(10, 30)), got
    assert [(q, o) for q, o, _ in got if q >= 2] == [(q, o) for q in (2, 3) for o in range(5)], got


def test_tuple_row_format_gives_the_same_rows(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    topic = topic_name()
    produce(rmq.namesrv, topic, 15)
    a, _ = run_available_now(spark, _stream(spark, rmq, topic, startingOffsets="earliest"), tmp_path / "a", "fmt_a")
    t, _ = run_available_now(
        spark, _stream(spark, rmq, topic, startingOffsets="earliest", rowFormat="tuples"), tmp_path / "t", "fmt_t"
    )

    def key(r: Any) -> tuple[object, ...]:
        d = r.asDict()
        d["properties"] = tuple(sorted(d["properties"].items()))
        return tuple(sorted(d.items()))

    assert sorted(map(key, a)) == sorted(map(key, t)) and len(a) == 15


def test_stop_mid_stream_and_restart_neither_loses_nor_repeats(spark: Any, rmq: Cluster, tmp_path: Path) -> None:
    """A continuously running query is stopped between micro-batches and restarted from its
    checkpoint: keyed by batch id (what an idempotent sink does), every message arrives exactly once."""
    topic = topic_name()
    produce(rmq.namesrv, topic, 60, batch=20)
    ck = tmp_path / "ck"
    by_batch: dict[int, list[int]] = {}

    def sink(df: Any, batch_id: int) -> None:
        by_batch[batch_id] = [int(r["properties"]["i"]) for r in df.select("properties").collect()]

    stream = _stream(spark, rmq, topic, startingOffsets="earliest", maxOffsetsPerTrigger=10)
    q = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(ck)).trigger(
        processingTime="300 milliseconds"
    ).start()
    try:
        wait_until(lambda: len(by_batch) >= 2, 90, 0.1, what="two micro-batches")
    finally:
        q.stop()
    assert q.exception() is None
    first_run = dict(by_batch)
    assert 2 <= len(first_run) and sum(map(len, first_run.values())) < 60
    q2 = (
        _stream(spark, rmq, topic, maxOffsetsPerTrigger=10)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    assert q2.awaitTermination(120) and q2.exception() is None
    assert len(by_batch) > len(first_run)
    every = [i for rows in by_batch.values() for i in rows]
    assert sorted(every) == list(range(60))
