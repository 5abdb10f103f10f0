"""Consumers: PushConsumer (listener callbacks, concurrent or orderly) and LitePullConsumer (poll).

Modules: `push_consumer`, `lite_pull_consumer` (the public classes), `rebalance` (queue
assignment), `pull_service` + `pull_api` (pull loops, long polling), `process_queue` (per-queue
cache and commit point), `consume_service` (listener execution), `offset_store` (broker / local
file offsets), `listener` (statuses, contexts, MessageModel, ConsumeFromWhere), `filter` (tag
expressions and SQL92 selectors: MessageSelector), `allocate` (queue allocation strategies).
"""

from .allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
)
from .filter import MessageSelector
from .listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    ConsumeType,
    MessageModel,
)
from .lite_pull_consumer import LitePullConsumer
from .offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType, RemoteBrokerOffsetStore
from .process_queue import ProcessQueue
from .push_consumer import PushConsumer

__all__ = [
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeType",
    "LitePullConsumer",
    "LocalFileOffsetStore",
    "MessageModel",
    "MessageSelector",
    "OffsetStore",
    "ProcessQueue",
    "PushConsumer",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
]
