"""The producer: Producer (send pipeline), MQFaultStrategy (broker avoidance), queue selectors."""

from .fault import LatencyFaultTolerance, MQFaultStrategy
from .producer import DEFAULT_RETRY_RESPONSE_CODES, CommunicationMode, Producer, SendCallback
from .selector import (
    MessageQueueSelector,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
    java_hash_code,
)

__all__ = [
    "DEFAULT_RETRY_RESPONSE_CODES",
    "CommunicationMode",
    "LatencyFaultTolerance",
    "MQFaultStrategy",
    "MessageQueueSelector",
    "Producer",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendCallback",
    "java_hash_code",
]
