"""Transactional messages: half messages, END_TRANSACTION, and the check-back service.

Wiring (BrokerController): `prepare_message` is a send-message transformer, EndTransactionProcessor
serves END_TRANSACTION in the "end_transaction" group, `TransactionalMessageService.load()` runs after
the store starts, and TransactionalMessageCheckService runs while the broker listens.
"""

from .end_transaction_processor import EndTransactionProcessor
from .transactional_message_bridge import TransactionalMessageBridge
from .transactional_message_check_listener import TransactionalMessageCheckListener, build_check_request
from .transactional_message_check_service import TransactionalMessageCheckService
from .transactional_message_service import TransactionalMessageService
from .transactional_message_util import CID_SYS_RMQ_TRANS, REMOVE_TAG

__all__ = [
    "CID_SYS_RMQ_TRANS",
    "REMOVE_TAG",
    "EndTransactionProcessor",
    "TransactionalMessageBridge",
    "TransactionalMessageCheckListener",
    "TransactionalMessageCheckService",
    "TransactionalMessageService",
    "build_check_request",
]
