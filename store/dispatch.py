"""DispatchRequest: what the reput service needs to know about one CommitLog record.

The put path hands the reput service one tuple per record (DispatchRequest.as_tuple), or, for a batch,
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

RUN_LEN = 13


class DispatchRequest:
    """One record's routing facts. msg_size 0 = end-of-file blank; success False = bad/torn record."""

    __slots__ = (
        "topic",
        "queue_id",
        "commit_log_offset",
        "msg_size",
        "tags_code",
        "store_timestamp",
        "consume_queue_offset",
        "keys",
        "uniq_key",
        "sys_flag",
        "prepared_transaction_offset",
        "properties",
        "success",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        commit_log_offset: int,
        msg_size: int,
        tags_code: int,
        store_timestamp: int,
        consume_queue_offset: int,
        keys: str | None,
        uniq_key: str | None,
        sys_flag: int,
        prepared_transaction_offset: int,
        properties: dict[str, str] | None,
        success: bool = True,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.commit_log_offset = commit_log_offset
        self.msg_size = msg_size
        self.tags_code = tags_code
        self.store_timestamp = store_timestamp
        self.consume_queue_offset = consume_queue_offset
        self.keys = keys
        self.uniq_key = uniq_key
        self.sys_flag = sys_flag
        self.prepared_transaction_offset = prepared_transaction_offset
        self.properties = properties
        self.success = success

    def as_tuple(self) -> tuple[object, ...]:
        """The reput service's compact form (what the put path queues directly)."""
        return (
            self.commit_log_offset,
            self.msg_size,
            self.topic,
            self.queue_id,
            self.consume_queue_offset,
            self.tags_code,
            self.store_timestamp,
            self.keys,
            self.uniq_key,
            self.sys_flag,
            self.properties,
            None,
        )

    @classmethod
    def status(cls, msg_size: int, success: bool) -> DispatchRequest:
        return cls("", 0, 0, msg_size, 0, 0, 0, None, None, 0, 0, None, success)

    def __repr__(self) -> str:
        return (
            f"DispatchRequest(topic={self.topic!r}, queue_id={self.queue_id}, offset={self.commit_log_offset}, "
            f"size={self.msg_size}, cq_offset={self.consume_queue_offset}, success={self.success})"
        )
