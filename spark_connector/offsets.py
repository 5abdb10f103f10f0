"""Offsets of the source: one queue offset per message queue, as JSON nested per topic.

The JSON form (what Spark writes to the checkpoint's `offsets/` log, what `startingOffsets` /
`endingOffsets` take, and what `partitions(start, end)` receives) maps topic -> queue -> offset,
where a queue is named `"<brokerName>/<queueId>"`:

    {"TopicA": {"broker-a/0": 12, "broker-a/1": 40, "broker-b/0": 7}, "TopicB": {...}}

An offset is a RocketMQ consume-queue offset: the *next* message to read (exclusive end of what
was read). In `startingOffsets` / `endingOffsets` two sentinels are allowed, as in Spark's Kafka
source: `-2` = earliest (the queue's min offset) and `-1` = latest (its max offset).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from client.message import MessageQueue

from .errors import OptionError

EARLIEST = -2
LATEST = -1

QueueOffsets = dict[MessageQueue, int]

__all__ = [
    "EARLIEST",
    "LATEST",
    "QueueOffsets",
    "offsets_from_json",
    "offsets_from_jsonable",
    "offsets_to_json",
    "offsets_to_jsonable",
    "parse_queue_key",
    "queue_key",
]


def queue_key(mq: MessageQueue) -> str:
    """'brokerName/queueId', the key of a queue inside its topic's map."""
    return f"{mq.broker_name}/{mq.queue_id}"


def parse_queue_key(topic: str, key: str) -> MessageQueue:
    """'broker-a/3' in topic T -> MessageQueue(T, 'broker-a', 3). The queue id is after the last '/'."""
    broker, sep, qid = key.rpartition("/")
    if not sep or not broker or not qid.strip().isdigit():
        raise OptionError(f"bad queue key {key!r} in topic {topic!r}: expected '<brokerName>/<queueId>'")
    return MessageQueue(topic, broker, int(qid))


def offsets_to_jsonable(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    """{mq: offset} -> {topic: {'broker/qid': offset}}, topics and queues sorted (stable checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.topic, {})[queue_key(mq)] = int(offsets[mq])
    return out


def offsets_from_jsonable(
    data: object, *, allow_sentinels: bool = False, what: str = "offsets"
) -> QueueOffsets:
    """Inverse of offsets_to_jsonable; validates shape and values, naming what was wrong."""
    if not isinstance(data, Mapping):
        raise OptionError(f"{what}: expected a JSON object {{topic: {{'broker/queueId': offset}}}}, got {data!r}")
    out: QueueOffsets = {}
    for topic, queues in data.items():
        if not isinstance(queues, Mapping):
            raise OptionError(f"{what}: topic {topic!r} must map to an object of 'broker/queueId': offset")
        for key, value in queues.items():
            mq = parse_queue_key(str(topic), str(key))
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"{what}: offset of {topic}/{key} must be an integer, got {value!r}")
            low = EARLIEST if allow_sentinels else 0
            if value < low:
                allowed = ">= 0, or -2 (earliest) / -1 (latest)" if allow_sentinels else ">= 0"
                raise OptionError(f"{what}: offset of {topic}/{key} must be {allowed}, got {value}")
            out[mq] = value
    return out


def offsets_to_json(offsets: Mapping[MessageQueue, int]) -> str:
    return json.dumps(offsets_to_jsonable(offsets), separators=(",", ":"))


def offsets_from_json(text: str, *, allow_sentinels: bool = False, what: str = "offsets") -> QueueOffsets:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise OptionError(f"{what}: not valid JSON ({e}): {text!r}") from None
    return offsets_from_jsonable(data, allow_sentinels=allow_sentinels, what=what)


def topics_of(offsets: Iterable[MessageQueue]) -> set[str]:
    return {mq.topic for mq in offsets}
