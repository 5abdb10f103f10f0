"""Client-side checks of topic names, group names and messages (RocketMQ's Validators/TopicValidator)."""

from __future__ import annotations

import re

from .errors import InvalidMessageError, MQClientError
from .message import Message

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"

_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")

NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)


def check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidMessageError("The specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidMessageError(
            f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}: {topic!r}"
        )
    if not _VALID.match(topic):
        raise InvalidMessageError(
            f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    return topic


def check_group(group: object, what: str = "group") -> str:
    if not isinstance(group, str) or not group.strip():
        raise MQClientError(f"the specified {what} is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise MQClientError(f"the specified {what} is longer than {GROUP_MAX_LENGTH} characters")
    if not _VALID.match(group):
        raise MQClientError(
            f"the specified {what}[{group}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    return group


def check_message(msg: object, max_message_size: int) -> Message:
    """Java's Validators.checkMessage: a Message with a valid, sendable topic and a non-empty body within the limit."""
    if not isinstance(msg, Message):
        raise InvalidMessageError(f"expected a Message, got {type(msg).__name__}")
    check_topic(msg.topic)
    if msg.topic in NOT_ALLOWED_SEND_TOPICS:
        raise InvalidMessageError(f"Sending message to topic[{msg.topic}] is forbidden.")
    body = msg.body
    if body is None:
        raise InvalidMessageError(f"the message body is null (topic {msg.topic})")
    if not isinstance(body, bytes | bytearray | memoryview):
        raise InvalidMessageError(f"the message body must be bytes or str, not {type(body).__name__}")
    n = len(body)
    if n == 0:
        raise InvalidMessageError(f"the message body length is zero (topic {msg.topic})")
    if n > max_message_size:
        raise InvalidMessageError(
            f"the message body size over max value, MAX: {max_message_size} (body is {n} bytes, topic {msg.topic})"
        )
    return msg
