"""Spark connector benchmark (not a test): source rows/s against a synthetic source, and sink rows/s.

    .venv/bin/python bench/bench_spark.py [--rows 200000] [--runs 3] [--size 1024] [--namesrv ADDR]

Without --namesrv it starts its own NameServer and broker (temporary store) on free loopback ports.
It produces `--rows` messages of `--size` bytes (1 KiB by default) into a 4-queue topic, then in
ONE local[2] SparkSession runs, interleaved, `--runs` times each:

- `rocketmq`: readStream from the topic, startingOffsets=earliest, Trigger.AvailableNow, noop sink;
- `synthetic`: a Python streaming data source of the same schema and row shape (same bodies,
  tags, keys, properties, 4 partitions) that generates its rows in memory, same trigger and sink;

each in the Arrow (RecordBatch) and tuple row formats. It reports rows/s (rows / wall time from
start() to termination, first-batch planning included, as a user sees it) as the median of the
runs, and the rocketmq/synthetic ratio; also rows/s within the batches (addBatch time, without
query start-up) and the broker's CPU per row while it served the rocketmq runs (everything, the
broker included, shares the machine's cores). Then the sink: df.write.format("rocketmq") of the same
number of rows, batched (SEND_BATCH_MESSAGE, sendBatchSize 64) vs one message per send
(sendBatchSize=1, 64 in flight). Every process it starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow  # noqa: E402

from spark_connector.rows import SOURCE_SCHEMA  # noqa: E402

QUEUES = 4


# ------------------------------------------------------------------------------------------ synthetic source


class _Range(InputPartition):
    def __init__(self, queue_id: int, start: int, end: int) -> None:
        self.queue_id, self.start, self.end = queue_id, start, end


class SyntheticReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`rows` rows over QUEUES partitions, the same shape as the rocketmq source's rows."""

    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options["rows"])
        self.size = int(options.get("size", "1024"))
        self.arrow = options.get("rowFormat", "arrow") == "arrow"

    def initialOffset(self) -> dict:  # type: ignore[type-arg]
        return {"offset": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: Any) -> dict:  # type: ignore[type-arg]
        assert isinstance(limit, ReadAllAvailable)
        return {"offset": self.rows}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:  # type: ignore[type-arg]
        a, b = start["offset"], end["offset"]
        per = (b - a + QUEUES - 1) // QUEUES
        return [_Range(q, a + q * per, min(b, a + (q + 1) * per)) for q in range(QUEUES) if a + q * per < b]

    def read(self, p: InputPartition) -> Iterator[Any]:
        import datetime as dt

        assert isinstance(p, _Range)
        body = os.urandom(self.size)
        now_ms = int(time.time() * 1000)
        if not self.arrow:
            epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            for i in range(p.start, p.end):
                ts = epoch + dt.timedelta(milliseconds=now_ms + i)
                yield (
                    "BenchTopic", "broker-a", p.queue_id, i, f"7F000001{i:024X}", f"7F00000100002A9F{i:016X}",
                    "TagA", f"k{i}", bytes(body), {"i": str(i)}, ts, ts, 0,
                )
            return
        import pyarrow as pa

        from spark_connector.rows import source_arrow_schema

        schema = source_arrow_schema()
        ts_type = pa.timestamp("us", tz="UTC")
        for lo in range(p.start, p.end, 8192):
            hi = min(p.end, lo + 8192)
            idx = range(lo, hi)
            n = hi - lo
            keys, vals = [], []
            for i in idx:
                keys.append("i")
                vals.append(str(i))
            props = pa.MapArray.from_arrays(pa.array(range(n + 1), pa.int32()), pa.array(keys), pa.array(vals))
            ts = [(now_ms + i) * 1000 for i in idx]
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(["BenchTopic"] * n),
                    pa.array(["broker-a"] * n),
                    pa.array([p.queue_id] * n, pa.int32()),
                    pa.array(list(idx), pa.int64()),
                    pa.array([f"7F000001{i:024X}" for i in idx]),
                    pa.array([f"7F00000100002A9F{i:016X}" for i in idx]),
                    pa.array(["TagA"] * n),
                    pa.array([f"k{i}" for i in idx]),
                    pa.array([bytes(body) for _ in idx], pa.binary()),
                    props.cast(schema.field("properties").type),
                    pa.array(ts, ts_type),
                    pa.array(ts, ts_type),
                    pa.array([0] * n, pa.int32()),
                ],
                schema=schema,
            )


class SyntheticSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "synthetic_rmq"

    def schema(self) -> Any:
        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SyntheticReader(dict(self.options))


# ------------------------------------------------------------------------------------------ helpers


def produce(namesrv: str, topic: str, rows: int, size: int) -> float:
    """Send `rows` messages of `size` bytes with pipelined SEND_BATCH_MESSAGE; returns seconds."""
    from client import Message, Producer
    from client.sync import run

    async def go() -> float:
        t0 = time.perf_counter()
        async with Producer("bench_spark_producer", namesrv, send_msg_timeout=30_000) as p:
            sem = asyncio.Semaphore(16)
            body = os.urandom(size)

            async def one(lo: int) -> None:
                async with sem:
                    msgs = [
                        Message(topic, body, tags="TagA", keys=f"k{i}", properties={"i": str(i)})
                        for i in range(lo, min(rows, lo + 64))
                    ]
                    await p.send_batch(msgs)

            await asyncio.gather(*(one(lo) for lo in range(0, rows, 64)))
        return time.perf_counter() - t0

    return run(go())


def process_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) a process has used so far (Linux /proc), None elsewhere."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_stream(spark: Any, fmt: str, options: dict[str, str], tmp: Path, rows: int) -> tuple[float, float]:
    """(rows/s over the query's wall time, rows/s over its batches' addBatch time)."""
    r = spark.readStream.format(fmt)
    for k, v in options.items():
        r = r.option(k, v)
    t0 = time.perf_counter()
    q = (
        r.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp / uuid.uuid4().hex))
        .trigger(availableNow=True)
        .start()
    )
    if not q.awaitTermination(900):
        q.stop()
        raise RuntimeError(f"{fmt} run did not finish")
    dt_s = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    got = sum(p["numInputRows"] for p in progress)
    if got != rows:
        raise RuntimeError(f"{fmt} read {got} rows, expected {rows}")
    add_ms = sum(p["durationMs"].get("addBatch", 0) for p in progress)
    return rows / dt_s, rows / max(add_ms / 1000, 1e-9)


def run_sink(spark: Any, namesrv: str, rows: int, size: int, options: dict[str, str]) -> float:
    from pyspark.sql import functions as F

    topic = f"BenchSink_{uuid.uuid4().hex[:6]}"
    df = (
        spark.range(rows, numPartitions=4)
        .select(
            F.lit(os.urandom(size)).alias("body"),
            F.lit("TagA").alias("tags"),
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("keys"),
        )
        .cache()
    )
    df.count()
    w = df.write.format("rocketmq").option("nameServer", namesrv).option("topic", topic).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    t0 = time.perf_counter()
    w.save()
    dt_s = time.perf_counter() - t0
    df.unpersist()
    return rows / dt_s


def main() -> int:
    ap = argparse.ArgumentParser(description="Spark connector benchmark")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--namesrv", default=None, help="use a running cluster instead of starting one")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="extra rocketmq source option (repeatable), e.g. pullPipeline=32")
    ap.add_argument("--sink-rows", type=int, default=0, help="rows for the sink benchmark (default: --rows / 4)")
    ap.add_argument(
        "--tuned-broker",
        action="store_true",
        help="start the broker with bigger pull answers (maxTransferCountOnMessageInMemory=1024, "
        "maxTransferBytesOnMessageInMemory=4 MiB) instead of RocketMQ's 32 / 256 KiB",
    )
    args = ap.parse_args()

    from tests.support.daemons import start_broker, start_namesrv

    daemons = []
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as td:
        tmp = Path(td)
        try:
            broker_pid: int | None = None
            if args.namesrv:
                namesrv = args.namesrv
            else:
                ns, namesrv = start_namesrv(tmp)
                daemons.append(ns)
                conf: dict[str, object] = {"mappedFileSizeCommitLog": 256 * 1024 * 1024}
                if args.tuned_broker:
                    conf.update(maxTransferCountOnMessageInMemory=1024, maxTransferBytesOnMessageInMemory=4 << 20)
                br, _ = start_broker(tmp, namesrv, extra=conf)
                daemons.append(br)
                broker_pid = br.pid
            topic = f"BenchSpark_{uuid.uuid4().hex[:6]}"
            secs = produce(namesrv, topic, args.rows, args.size)
            print(f"produced {args.rows} x {args.size} B in {secs:.1f}s ({args.rows / secs:,.0f} msg/s); "
                  f"broker pull caps: {'1024 msgs / 4 MiB' if args.tuned_broker else 'RocketMQ defaults (32 msgs / 256 KiB)'}",
                  flush=True)

            from pyspark.sql import SparkSession

            import spark_connector

            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            try:
                spark_connector.register(spark)
                spark.dataSource.register(SyntheticSource)
                rmq_opts = {"nameServer": namesrv, "topic": topic, "startingOffsets": "earliest"}
                rmq_opts.update(kv.split("=", 1) for kv in args.option)
                syn_opts = {"rows": str(args.rows), "size": str(args.size)}
                results: dict[str, list[float]] = {}
                in_batch: dict[str, list[float]] = {}
                broker_us: list[float] = []
                # Warm-up (JVM, Python workers), not counted.
                run_stream(spark, "synthetic_rmq", syn_opts, tmp, args.rows)
                run_stream(spark, "rocketmq", rmq_opts, tmp, args.rows)
                print("warm-up done", flush=True)
                for i in range(args.runs):
                    for fmt_name in ("arrow", "tuples"):
                        for src, fmt, opts in (
                            ("synthetic", "synthetic_rmq", syn_opts),
                            ("rocketmq", "rocketmq", rmq_opts),
                        ):
                            cpu0 = process_cpu_s(broker_pid)
                            rate, batch_rate = run_stream(spark, fmt, {**opts, "rowFormat": fmt_name}, tmp, args.rows)
                            cpu1 = process_cpu_s(broker_pid)
                            if src == "rocketmq" and cpu0 is not None and cpu1 is not None:
                                broker_us.append((cpu1 - cpu0) / args.rows * 1e6)
                            results.setdefault(f"{src}/{fmt_name}", []).append(rate)
                            in_batch.setdefault(f"{src}/{fmt_name}", []).append(batch_rate)
                            print(f"run {i + 1} {src:<9} {fmt_name:<6} {rate:>10,.0f} rows/s "
                                  f"(in addBatch: {batch_rate:>10,.0f} rows/s)", flush=True)
                print()
                med = {k: statistics.median(v) for k, v in results.items()}
                for k, v in sorted(med.items()):
                    print(f"median {k:<17} {v:>10,.0f} rows/s  ({v * args.size / 1e6:,.1f} MB/s of bodies)")
                for fmt_name in ("arrow", "tuples"):
                    ratio = med[f"rocketmq/{fmt_name}"] / med[f"synthetic/{fmt_name}"]
                    print(f"ratio rocketmq/synthetic ({fmt_name}): {ratio:.0%}")
                best_syn = max(med["synthetic/arrow"], med["synthetic/tuples"])
                print(f"ratio rocketmq/arrow vs the faster synthetic: {med['rocketmq/arrow'] / best_syn:.0%}")
                if broker_us:
                    print(f"broker CPU while serving the rocketmq runs: median {statistics.median(broker_us):.1f} us/row")
                mb = {k: statistics.median(v) for k, v in in_batch.items()}
                for fmt_name in ("arrow", "tuples"):
                    ratio = mb[f"rocketmq/{fmt_name}"] / mb[f"synthetic/{fmt_name}"]
                    print(f"in-batch (addBatch) median rocketmq {mb[f'rocketmq/{fmt_name}']:,.0f} vs synthetic "
                          f"{mb[f'synthetic/{fmt_name}']:,.0f} rows/s ({fmt_name}): {ratio:.0%}")

                sink_rows = args.sink_rows or max(1000, args.rows // 4)
                sink: dict[str, list[float]] = {}
                for i in range(args.runs):
                    for name, opts in (
                        ("batched (sendBatchSize=64)", {}),
                        ("single sends (64 in flight)", {"sendBatchSize": "1", "sendPipeline": "64"}),
                    ):
                        rate = run_sink(spark, namesrv, sink_rows, args.size, opts)
                        sink.setdefault(name, []).append(rate)
                        print(f"sink run {i + 1} {name:<28} {rate:>10,.0f} rows/s", flush=True)
                for name, v in sink.items():
                    print(f"median sink {name:<28} {statistics.median(v):>10,.0f} rows/s")
            finally:
                spark.stop()
        finally:
            for d in reversed(daemons):
                d.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
