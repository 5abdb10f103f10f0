"""failOnDataLoss: a broker whose store really drops old files while the query is stopped.

The approach: a separate NameServer + broker with 64 KiB CommitLog files, 20-entry consume-queue
files, fileReservedTime=0 and deleteWhen = every hour, cleaning every 200 ms. Writing ~300 KiB
rotates the CommitLog, the cleaner deletes every file but the current one, and the queue's min
offset moves past the offset a query checkpointed earlier. Restarting that query must then fail
(failOnDataLoss=true, the default) or skip ahead to the new min offset (false).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from client import Message
from client.message import MessageQueue
from client.reader import BlockingQueueReader, OffsetOutOfRangeError
from client.sync import Producer
from spark_connector.errors import DataLossError
from spark_connector.options import parse_source_options
from spark_connector.planning import QueueRangePartition
from spark_connector.source import read_partition
from tests.support.daemons import start_broker, start_namesrv

from .conftest import run_available_now, wait_until

CLEANING_BROKER = {
    "mappedFileSizeCommitLog": 64 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 20,
    "fileReservedTime": 0,
    "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
    "cleanResourceInterval": 200,
    "deleteCommitLogFilesInterval": 10,
    "destroyMapedFileIntervalForcibly": 1000,
}


@dataclass
class Lossy:
    namesrv: str
    reader: BlockingQueueReader


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lossy]:
    tmp = tmp_path_factory.mktemp("lossy")
    ns, ns_addr = start_namesrv(tmp)
    try:
        br, _ = start_broker(tmp, ns_addr, name="broker-loss", extra=CLEANING_BROKER)
        try:
            reader = BlockingQueueReader(ns_addr)
            try:
                yield Lossy(ns_addr, reader)
            finally:
                reader.close()
        finally:
            br.terminate()
    finally:
        ns.terminate()


def _send(namesrv: str, mq: MessageQueue, n: int) -> None:
    with Producer(f"pg_{mq.topic}", namesrv) as p:
        for i in range(n):
            p.send(Message(mq.topic, os.urandom(1000), keys=f"k{i}"), queue=mq)


def _clean_past(lossy: Lossy, mq: MessageQueue, offset: int) -> tuple[int, int]:
    """Write until the cleaner has removed `offset` from the queue and has nothing left to remove
    (the min offset held still for 1 s: every file but the current one is gone); returns (min, max)."""
    _send(lossy.namesrv, mq, 300)
    seen: list[int] = []

    def settled() -> bool:
        seen.append(lossy.reader.min_offset(mq))
        return seen[-1] > offset and len(seen) >= 6 and len(set(seen[-6:])) == 1

    wait_until(settled, 30, 0.2, what=f"min offset of {mq} past {offset} and settled")
    return lossy.reader.offset_range(mq)


def test_reader_reports_cleaned_offsets(lossy: Lossy) -> None:
    mq = MessageQueue("LossReader", "broker-loss", 0)
    _send(lossy.namesrv, mq, 5)
    lo, hi = _clean_past(lossy, mq, 5)
    with pytest.raises(OffsetOutOfRangeError) as ei:
        list(lossy.reader.read_range(mq, 2, hi))
    assert ei.value.requested == 2 and ei.value.min_offset == lo and "cleaned" in str(ei.value)
    # The executor side of the source: fail with a clear message, or skip to the min offset.
    part = QueueRangePartition(mq.topic, mq.broker_name, mq.queue_id, 2, hi)
    strict = parse_source_options({"nameServer": lossy.namesrv, "topic": mq.topic}, streaming=True)
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        list(read_partition(strict, part))
    lenient = parse_source_options(
        {"nameServer": lossy.namesrv, "topic": mq.topic, "failOnDataLoss": "false"}, streaming=True
    )
    batches = list(read_partition(lenient, part))
    offsets = [o for b in batches for o in b.column("queueOffset").to_pylist()]
    assert offsets == list(range(lo, hi))


def test_streaming_query_fails_or_skips_when_checkpointed_offsets_were_cleaned(
    spark: Any, lossy: Lossy, tmp_path: Path
) -> None:
    topic = "LossStream"
    mq = MessageQueue(topic, "broker-loss", 0)
    _send(lossy.namesrv, mq, 10)
    ck = tmp_path / "ck"

    def stream(**options: str) -> Any:
        r = spark.readStream.format("rocketmq").option("nameServer", lossy.namesrv).option("topic", topic)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    first, _ = run_available_now(spark, stream(startingOffsets="earliest"), ck, "loss1")
    assert len(first) == 10
    lo, hi = _clean_past(lossy, mq, 10)

    with pytest.raises(Exception, match="are gone") as ei:
        run_available_now(spark, stream(), ck, "loss2")
    assert "failOnDataLoss" in str(ei.value)

    rows, _ = run_available_now(spark, stream(failOnDataLoss="false"), ck, "loss3")
    assert sorted(r["queueOffset"] for r in rows) == list(range(lo, hi))
    again, _ = run_available_now(spark, stream(failOnDataLoss="false"), ck, "loss4")
    assert again == []
