"""What a consumer's listener returns and receives (RocketMQ's listener vocabulary).

Concurrent listeners, `fn(msgs, context) -> ConsumeConcurrentlyStatus`:

- CONSUME_SUCCESS: every message of the batch was handled (or the first `context.ack_index + 1`).
- RECONSUME_LATER: hand the batch back to the broker (%RETRY%<group>, delivered again after the
  delay level in `context.delay_level_when_next_consume`, 0 = the broker's schedule 3 + times).
  Raising an exception, or returning None, means RECONSUME_LATER.

Orderly listeners, `fn(msgs, context) -> ConsumeOrderlyStatus`:

- SUCCESS: done, move on.
- SUSPEND_CURRENT_QUEUE_A_MOMENT: stop this queue and consume the same messages again after
  `context.suspend_current_queue_time_millis` (default the consumer's, 1000 ms), up to
  max_reconsume_times, after which the message goes to %DLQ%<group>.
- COMMIT / ROLLBACK only mean something with `context.auto_commit = False` (as in Java).
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass

from ..message import MessageQueue

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeType",
    "MessageModel",
]


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    ROLLBACK = "ROLLBACK"
    COMMIT = "COMMIT"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class MessageModel(enum.Enum):
    """CLUSTERING: the group shares the queues (offsets on the broker). BROADCASTING: every
    consumer gets every message (offsets in a local file)."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    """Where a queue the group has never committed starts (a stored offset always wins).

    LAST_OFFSET: the queue's end, except that a queue whose first message is still in the
    broker's memory answers offset 0 (RocketMQ's "new queue" rule) and retry topics start at 0.
    FIRST_OFFSET: offset 0 (the broker corrects it to the queue's min offset).
    TIMESTAMP: the first message stored at or after `consume_timestamp`.
    """

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    # Deprecated in RocketMQ; behave as CONSUME_FROM_LAST_OFFSET.
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"


class ConsumeType(enum.Enum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # pull
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"  # push


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """Passed to a concurrent listener with each batch.

    `delay_level_when_next_consume`: on RECONSUME_LATER, the delay level for the next delivery
    (0 = the broker decides: 3 + times reconsumed; -1 = straight to the DLQ).
    `ack_index`: on CONSUME_SUCCESS, messages after this index are treated as failed.
    """

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = sys.maxsize


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """Passed to an orderly listener. `suspend_current_queue_time_millis` -1 = the consumer's."""

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1
