"""Python client for RocketMQ 4.x clusters: asyncio first, with a blocking facade in `client.sync`.

    from client import Message, Producer

    async with Producer("my-group", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))

Layers: `message` (Message, MessageQueue, SendResult), `errors` (one exception hierarchy),
`config` (ClientConfig), `instance` (the shared MQClientInstance runtime), `mq_client_api` (one
coroutine per request code), `producer`, `admin`; `sync` wraps them for blocking code.
"""

import os as _os

import structlog as _structlog

from remoting.log import configure_logging as _configure_logging

# An unconfigured structlog prints every debug line: a library should be quiet by default.
# Applications that configure structlog themselves are left alone; RMQ_LOG_LEVEL overrides.
if not _structlog.is_configured():
    _configure_logging(level=_os.environ.get("RMQ_LOG_LEVEL", "WARNING"))

from .admin import Admin  # noqa: E402
from .config import ClientConfig
from .consumer import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    LitePullConsumer,
    MessageModel,
    MessageSelector,
    PushConsumer,
)
from .errors import (
    InvalidMessageError,
    MQBrokerError,
    MQClientError,
    NoNameServerError,
    NoRouteError,
    NotStartedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeout,
    RequestTimeoutError,
    SystemBusyError,
    TopicNotExistError,
    error_for_code,
)
from .instance import MQClientInstance, MQClientManager, get_client_manager
from .message import (
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
    create_reply_message,
)
from .producer import (
    MessageQueueSelector,
    Producer,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
)

__all__ = [
    "Admin",
    "ClientConfig",
    "InvalidMessageError",
    "MQBrokerError",
    "MQClientError",
    "MQClientInstance",
    "MQClientManager",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageQueueSelector",
    "NoNameServerError",
    "RequestTimeoutError",
    "NoRouteError",
    "NotStartedError",
    "Producer",
    "PullResult",
    "PullStatus",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeout",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendResult",
    "SendStatus",
    "SystemBusyError",
    "TopicNotExistError",
    "error_for_code",
    "create_reply_message",
    "get_client_manager",
    # consumers
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "LitePullConsumer",
    "MessageModel",
    "MessageSelector",
    "PushConsumer",
]

# transactions
from .producer.transaction import (  # noqa: E402
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
    TransactionStatus,
)

__all__ += [
    "LocalTransactionState",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionStatus",
]
