"""Pieces of the transaction code that need no daemon."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading

import pytest

import client
import client.sync
from broker.transaction.transactional_message_service import check_times, root_of
from broker.transaction.transactional_message_util import UniqIdGenerator
from client import LocalTransactionState, MQClientError, SendResult, TransactionProducer, TransactionStatus
from client.message import Message, MessageQueue, SendStatus
from client.producer.transaction import TransactionMessageExt, TransactionSendResult
from remoting.message import MessageExt, MessageSysFlag


def test_states_and_aliases() -> None:
    S = LocalTransactionState
    assert S.COMMIT is S.COMMIT_MESSAGE and S.ROLLBACK is S.ROLLBACK_MESSAGE and S.UNKNOWN is S.UNKNOW
    assert TransactionStatus is S
    assert S.COMMIT.transaction_type == MessageSysFlag.TRANSACTION_COMMIT_TYPE == 8
    assert S.ROLLBACK.transaction_type == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE == 12
    assert S.UNKNOWN.transaction_type == 0
    assert S.of("commit") is S.COMMIT and S.of("ROLLBACK_MESSAGE") is S.ROLLBACK and S.of(None) is S.UNKNOW
    assert S.of(S.UNKNOWN) is S.UNKNOW
    with pytest.raises(ValueError):
        S.of("maybe")
    with pytest.raises(ValueError):
        S.of(True)


def test_transaction_send_result_is_a_send_result() -> None:
    r = TransactionSendResult(
        status=SendStatus.SEND_OK, msg_id="U", offset_msg_id="O", queue=MessageQueue("T", "b", 1), queue_offset=3,
        local_transaction_state=LocalTransactionState.COMMIT,
    )
    assert isinstance(r, SendResult) and r.send_status is SendStatus.SEND_OK
    assert r.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE


def test_check_message_carries_transaction_id() -> None:
    m = MessageExt(topic="T", body=b"x", properties={"UNIQ_KEY": "U1"}, queue_offset=7)
    w = TransactionMessageExt.wrap(m, "U1")
    assert isinstance(w, MessageExt)
    assert (w.topic, w.body, w.queue_offset, w.uniq_key, w.transaction_id) == ("T", b"x", 7, "U1", "U1")


def test_root_and_check_times() -> None:
    first = MessageExt(properties={})
    copy = MessageExt(properties={"TRAN_PREPARED_QUEUE_OFFSET": "4", "TRANSACTION_CHECK_TIMES": "2"})
    assert root_of(9, first) == 9 and check_times(first) == 0
    assert root_of(12, copy) == 4 and check_times(copy) == 2
    assert root_of(5, MessageExt(properties={"TRAN_PREPARED_QUEUE_OFFSET": "junk"})) == 5


def test_broker_uniq_ids() -> None:
    gen = UniqIdGenerator("127.0.0.1")
    ids = {gen.next() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"7F000001[0-9A-F]{24}", i) for i in ids)


def test_exports() -> None:
    for name in ("TransactionProducer", "LocalTransactionState", "TransactionStatus", "TransactionSendResult",
                 "TransactionListener"):
        assert name in client.__all__
    assert "TransactionProducer" in client.sync.__all__
    assert issubclass(client.sync.TransactionProducer, client.sync.Producer)


async def test_send_needs_a_listener() -> None:
    p = TransactionProducer("PG-none", None, "127.0.0.1:1")
    with pytest.raises(MQClientError, match="TransactionListener"):
        await p.send_in_transaction(Message("T", b"x"))


async def test_listener_kinds_are_called_where_they_belong() -> None:
    """async def on the loop; plain functions in the producer's thread pool; a plain function returning an
    awaitable is awaited."""
    p = TransactionProducer("PG-kinds", None, "127.0.0.1:1", listener_threads=2)
    p._executor = concurrent.futures.ThreadPoolExecutor(2)
    loop_thread = threading.current_thread()
    where: list[bool] = []

    async def a(x: int) -> int:
        where.append(threading.current_thread() is loop_thread)
        return x + 1

    def b(x: int) -> int:
        where.append(threading.current_thread() is loop_thread)
        return x + 2

    def c(x: int) -> object:
        return a(x)

    try:
        assert await p._call(a, 1) == 2
        assert await p._call(b, 1) == 3
        assert await p._call(c, 1) == 2
    finally:
        p._executor.shutdown()
    assert where == [True, False, True]
    await asyncio.sleep(0)
