"""MessageExtBrokerInner: what the broker hands to the store for one put."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remoting.message import MAX_TOPIC_LENGTH, MessageConst, MessagePropertyAccessors, encode_properties


def record_topic_part(topic: str) -> bytes | None:
    """The topic as a CommitLog record stores it: one length byte, then UTF-8 (None: empty or too long)."""
    tb = topic.encode("utf-8")
    return bytes((len(tb),)) + tb if 0 < len(tb) <= MAX_TOPIC_LENGTH else None


@dataclass(slots=True)
class MessageExtBrokerInner(MessagePropertyAccessors):
    topic: str
    body: bytes = b""
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    properties_string: str = ""  # cached encode_properties(properties); computed on demand when empty
    tags_code: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    store_timestamp: int = 0
    body_crc: int = -1  # -1: the store computes it
    # The target queue's ConsumeQueue when the broker already holds it (a producer's memoized send): the
    # put and the dispatcher then skip their per-topic look-ups. A hint only: used while it is this
    # message's topic (the same str object) and queue id and still in the store's table.
    consume_queue: Any = None

    def get_properties_string(self) -> str:
        ps = self.properties_string
        if not ps and self.properties:
            ps = encode_properties(self.properties)
            self.properties_string = ps
        return ps

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def put_property(self, name: str, value: str) -> None:
        self.properties[name] = value
        self.properties_string = ""

    def is_wait_store_msg_ok(self) -> bool:
        return self.properties.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK) != "false"
