"""Windowed aggregation from one RocketMQ topic to another, with Spark Structured Streaming.

Run against `make run`'s local cluster (NameServer 127.0.0.1:9876) with one command:

    .venv/bin/python -m spark_connector.examples.window_agg --demo

`--demo` first sends 200 sample events to the topic `events`, runs the pipeline once over what is
there (Trigger.AvailableNow) and prints the aggregates it wrote to `events-agg`. Without `--demo`
the pipeline runs until Ctrl-C, every `--trigger-seconds`, picking up new events as they arrive:

    .venv/bin/python -m spark_connector.examples.window_agg --source events --sink events-agg

Input: message bodies are JSON objects {"key": str, "value": number, "ts": epoch-ms (optional;
the message's bornTimestamp otherwise)}. Bodies that do not parse (or lack key/value) are
skipped. Output: one message per (key, window) whose aggregate changed in a micro-batch
(outputMode update), body {"key", "windowStart", "windowEnd", "count", "sum", "avg"}, KEYS =
the key, TAGS = `agg`. Delivery is at least once, so readers keep the latest message per
(key, windowStart). The checkpoint (default ./data/spark-checkpoints/window_agg) makes restarts
continue where the last run stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

DEFAULT_NAMESRV = "127.0.0.1:9876"
EVENT_SCHEMA = "key string, value double, ts long"


def build_session(app_name: str = "rocketmq-window-agg") -> Any:
    """A local SparkSession that works on a loopback-only machine."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def aggregate(events: Any, window: str, watermark: str) -> Any:
    """Parse JSON bodies and aggregate value per key per tumbling window of event time."""
    from pyspark.sql import functions as F

    parsed = events.select(
        F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("e"), F.col("bornTimestamp")
    )
    valid = parsed.where(F.col("e.key").isNotNull() & F.col("e.value").isNotNull())
    with_time = valid.select(
        F.col("e.key").alias("key"),
        F.col("e.value").alias("value"),
        F.coalesce(F.timestamp_millis(F.col("e.ts")), F.col("bornTimestamp")).alias("eventTime"),
    )
    return (
        with_time.withWatermark("eventTime", watermark)
        .groupBy(F.window("eventTime", window), F.col("key"))
        .agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("sum"))
    )


def to_messages(aggregates: Any) -> Any:
    """Rows of the rocketmq sink: body (JSON), keys, tags."""
    from pyspark.sql import functions as F

    body = F.to_json(
        F.struct(
            F.col("key"),
            F.date_format(F.col("window.start"), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("windowStart"),
            F.date_format(F.col("window.end"), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("windowEnd"),
            F.col("count"),
            F.col("sum"),
            (F.col("sum") / F.col("count")).alias("avg"),
        )
    )
    return aggregates.select(body.alias("body"), F.col("key").alias("keys"), F.lit("agg").alias("tags"))


def start_pipeline(
    spark: Any,
    *,
    namesrv: str,
    source: str,
    sink: str,
    checkpoint: str,
    window: str = "10 seconds",
    watermark: str = "1 minute",
    available_now: bool = False,
    trigger_seconds: int = 5,
    group: str | None = "window-agg",
    max_offsets_per_trigger: int | None = None,
) -> Any:
    """Start the streaming query and return it (the caller awaits or stops it)."""
    import spark_connector

    spark_connector.register(spark)
    reader = (
        spark.readStream.format("rocketmq")
        .option("nameServer", namesrv)
        .option("topic", source)
        .option("startingOffsets", "earliest")
    )
    if group:
        reader = reader.option("group", group)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    out = to_messages(aggregate(reader.load(), window, watermark))

    def write_batch(batch: Any, batch_id: int) -> None:
        # Spark lets Python sinks run in append mode only; update mode (each micro-batch's changed
        # aggregates) goes through foreachBatch and the connector's batch writer.
        batch.write.format("rocketmq").option("nameServer", namesrv).option("topic", sink).mode("append").save()

    writer = (
        out.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .queryName("window_agg")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def latest_aggregates(namesrv: str, topic: str) -> dict[tuple[str, str], dict[str, Any]]:
    """What the pipeline wrote: the last message per (key, windowStart), read with the client."""
    from client.reader import BlockingQueueReader

    out: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    with BlockingQueueReader(namesrv) as reader:
        for mq in reader.fetch_queues(topic):
            lo, hi = reader.offset_range(mq)
            for batch in reader.read_range(mq, lo, hi):
                for m in batch:
                    rec = json.loads(m.body)
                    k = (rec["key"], rec["windowStart"])
                    if k not in out or out[k][0] <= m.store_timestamp:
                        out[k] = (m.store_timestamp, rec)
    return {k: v for k, (_, v) in out.items()}


def send_demo_events(namesrv: str, topic: str, n: int, *, seed: int = 1) -> list[dict[str, Any]]:
    """n JSON events over 4 keys and ~1 minute of event time, plus one malformed body."""
    from client import Message
    from client.sync import Producer

    rnd = random.Random(seed)
    base = (int(time.time() * 1000) // 60_000) * 60_000
    events = [
        {"key": f"user-{rnd.randrange(4)}", "value": float(rnd.randrange(100)), "ts": base + rnd.randrange(60_000)}
        for _ in range(n)
    ]
    with Producer("window-agg-demo", namesrv) as p:
        for e in events:
            p.send(Message(topic, json.dumps(e).encode(), tags="event", keys=e["key"]))
        p.send(Message(topic, b"not json", tags="event"))
    return events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", DEFAULT_NAMESRV))
    ap.add_argument("--source", default="events")
    ap.add_argument("--sink", default="events-agg")
    ap.add_argument("--window", default="10 seconds")
    ap.add_argument("--watermark", default="1 minute")
    ap.add_argument("--checkpoint", default=os.path.join("data", "spark-checkpoints", "window_agg"))
    ap.add_argument("--trigger-seconds", type=int, default=5)
    ap.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    ap.add_argument("--demo", action="store_true", help="send sample events, run once, print the result")
    ap.add_argument("--demo-events", type=int, default=200)
    args = ap.parse_args(argv)

    if args.demo:
        send_demo_events(args.namesrv, args.source, args.demo_events)
        print(f"sent {args.demo_events} demo events (and one malformed body) to {args.source}")
    spark = build_session()
    try:
        q = start_pipeline(
            spark,
            namesrv=args.namesrv,
            source=args.source,
            sink=args.sink,
            checkpoint=args.checkpoint,
            window=args.window,
            watermark=args.watermark,
            available_now=args.available_now or args.demo,
            trigger_seconds=args.trigger_seconds,
        )
        try:
            q.awaitTermination()
        except KeyboardInterrupt:
            q.stop()
        if q.exception() is not None:
            print(f"query failed: {q.exception()}", file=sys.stderr)
            return 1
        if args.demo:
            rows = sorted(latest_aggregates(args.namesrv, args.sink).values(), key=lambda r: (r["windowStart"], r["key"]))
            print(f"{len(rows)} aggregates in {args.sink} (latest per key and window):")
            for r in rows:
                print(f"  {r['windowStart']}  {r['key']:<8} count={r['count']:<4} sum={r['sum']:<8} avg={r['avg']:.2f}")
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
