"""Fixtures of the Spark connector suite: one SparkSession and one NameServer + broker per session.

Every test here is marked `spark` (needs pyspark >= 4.2, pyarrow and Java 17). Tests isolate
themselves by topic name (`topic_name()`), so the daemons and the Spark session are shared.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemons import Daemon, start_broker, start_namesrv

HERE = Path(__file__).parent

try:  # Without the spark extra only the client.reader tests can run.
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError:
    collect_ignore_glob = ["test_units.py", "test_stream.py", "test_batch_and_sink.py", "test_data_loss.py", "test_example.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(HERE):
            item.add_marker(pytest.mark.spark)


_seq = itertools.count()


def topic_name(prefix: str = "SparkT") -> str:
    """A topic name no other test uses."""
    return f"{prefix}_{next(_seq)}_{uuid.uuid4().hex[:6]}"


@dataclass
class Cluster:
    namesrv: str
    broker: str
    broker_daemon: Daemon
    tmp: Path


@pytest.fixture(scope="session")
def rmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A real NameServer and broker shared by the whole Spark suite."""
    tmp = tmp_path_factory.mktemp("rmq")
    ns, ns_addr = start_namesrv(tmp)
    try:
        br, br_addr = start_broker(tmp, ns_addr, extra={"enablePropertyFilter": True})  # (for SQL92 reads)
        try:
            yield Cluster(ns_addr, br_addr, br, tmp)
        finally:
            br.terminate()
    finally:
        ns.terminate()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local SparkSession (local[2], loopback only, no UI) with the rocketmq source registered."""
    pytest.importorskip("pyspark.sql.datasource")
    pytest.importorskip("pyarrow")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import spark_connector

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rocketmq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.stopTimeout", "20s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    try:
        yield session
    finally:
        for q in session.streams.active:
            q.stop()
        session.stop()


# ------------------------------------------------------------------------------------------ helpers


def produce(
    namesrv: str,
    topic: str,
    n: int,
    *,
    start: int = 0,
    body: Callable[[int], bytes] | None = None,
    tags: Callable[[int], str | None] | None = None,
    batch: int = 0,
    queue: Any = None,
) -> list[str]:
    """Send n messages (keys k<i>, property i=<i>); returns their msg ids. batch>0 uses send_batch.

    `queue` (a MessageQueue) pins every send to that queue.
    """
    from client import Message
    from client.sync import Producer

    def make(i: int) -> Message:
        b = body(i) if body else f"msg-{i}".encode()
        t = tags(i) if tags else "TagA"
        return Message(topic, b, tags=t, keys=f"k{i}", properties={"i": str(i)})

    ids: list[str] = []
    # Its own client instance, so the route is fresh (a shared one may cache a smaller queue count).
    with Producer(f"pg_{topic}", namesrv, instance_name=f"produce-{uuid.uuid4().hex[:8]}") as p:
        if batch:
            for lo in range(start, start + n, batch):
                r = p.send_batch([make(i) for i in range(lo, min(start + n, lo + batch))], queue=queue)
                ids.extend(r.msg_id.split(","))
        else:
            for i in range(start, start + n):
                ids.append(p.send(make(i), queue=queue).msg_id)
    return ids


def wait_until(cond: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s")
        time.sleep(interval)


def run_available_now(spark: Any, reader: Any, checkpoint: Path, name: str, timeout: float = 120.0) -> tuple[list[Any], list[dict[str, Any]]]:
    """Run a readStream to completion with Trigger.AvailableNow into a foreachBatch collector.

    Returns (rows, progress) where rows are all collected Rows and progress the query's
    recentProgress entries with numInputRows > 0.
    """
    collected: list[Any] = []

    def sink(df: Any, batch_id: int) -> None:
        collected.extend(df.collect())

    q = (
        reader.writeStream.foreachBatch(sink)
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = q.awaitTermination(timeout)
        assert finished, f"query {name} did not finish within {timeout}s"
        if q.exception() is not None:
            raise q.exception()  # type: ignore[misc]
        progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    finally:
        if q.isActive:
            q.stop()
    return collected, progress
