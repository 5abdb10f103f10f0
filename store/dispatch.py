"""The dispatch tuples: what the reput service needs to know about CommitLog records (RocketMQ's
DispatchRequest, as plain tuples: the put path makes one per record and nothing re-parses it).

One record: (commit_log_offset, size, topic, queue_id, queue_offset, tags_code, store_timestamp, keys,
uniq_key, sys_flag, properties, consume_queue) -- what the put path queues, and what
CommitLog.check_record returns for a record read back from the log (start-up catch-up). The put path hands
the reput service one such tuple per record, or, for a batch,
one run tuple for all its records (contiguous in the CommitLog, one topic/queue, consecutive queue
offsets): (first_offset, end_offset, topic, queue_id, first_queue_offset, store_timestamp, sys_flag,
offsets, sizes, tags_codes, properties_list, uniq_column, consume_queue) -- told apart by its length.
uniq_column is what the put path knows of the index keys, so the dispatcher need not look at each record's
properties: a list of each record's UNIQ_KEY as UTF-8 bytes, all of one length, when no record has KEYS (a
batch of one shape with a UNIQ_KEY value column); None when the properties tell (anything else).
Both forms end with the records' ConsumeQueue when the put path was handed it
(MessageExtBrokerInner.consume_queue, MessageBatch.consume_queue; checked against topic and queue id), else
None: the dispatcher uses it while it is not `removed` instead of looking the queue up.
"""

from __future__ import annotations

from typing import Any

RUN_LEN = 13  # a run tuple's length (a record's is 12)
DispatchTuple = tuple[Any, ...]
