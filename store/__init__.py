"""The message store: CommitLog + ConsumeQueue + IndexFile on memory-mapped files (RocketMQ 4.x layout).

Entry point: `DefaultMessageStore(MessageStoreConfig(...))`; see message_store.py for the threading model.
"""

from .config import BrokerRole, FlushDiskType, MessageStoreConfig
from .filter import MessageFilter, TagsCodeFilter
from .message import MessageExtBrokerInner
from .message_store import DefaultMessageStore, StoreNotAvailableError
from .results import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)

__all__ = [
    "AppendMessageResult",
    "AppendMessageStatus",
    "BrokerRole",
    "DefaultMessageStore",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageExtBrokerInner",
    "MessageFilter",
    "MessageStoreConfig",
    "PutMessageResult",
    "PutMessageStatus",
    "QueryMessageResult",
    "StoreNotAvailableError",
    "TagsCodeFilter",
]
