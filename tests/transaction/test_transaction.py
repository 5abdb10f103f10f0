"""Transactional messages end to end: TransactionProducer against real daemons (one module cluster,
checks every 300 ms, transactionTimeOut 600 ms, transactionCheckMax 3)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client import (
    Admin,
    LocalTransactionState,
    Message,
    MQBrokerError,
    TransactionProducer,
    TransactionSendResult,
)
from client.mq_client_api import MQClientAPIImpl
from remoting.client import RemotingClient
from remoting.codes import ResponseCode
from remoting.message import MessageConst, decode_offset_msg_id

from .helpers import (
    CHECK_MAX_TOPIC,
    CLIENT_CONFIG,
    HALF_TOPIC,
    Recorder,
    TxCluster,
    end_transaction,
    eventually,
    pull_queue,
    pull_topic,
)

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN
# Long enough for several check rounds to pass over a half message (age > 600 ms, rounds every 300 ms).
SETTLE_S = 1.6


def producer(c: TxCluster, group: str, listener: Any, **kw: Any) -> TransactionProducer:
    return TransactionProducer(group, listener, c.namesrv, client_config=CLIENT_CONFIG, **kw)


async def bodies(remoting: RemotingClient, c: TxCluster, topic: str) -> list[bytes]:
    return sorted(m.body for m in await pull_topic(remoting, c.broker, topic))


async def test_commit_is_consumed_exactly_once_and_half_is_invisible(
    tx_cluster: TxCluster, remoting: RemotingClient
) -> None:
    c = tx_cluster
    seen_during_local_tx: dict[str, Any] = {}

    class L(Recorder):
        async def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
            # The half message is stored, the decision is not made: consumers must not see it yet.
            seen_during_local_tx["real"] = await pull_topic(remoting, c.broker, "TxCommit")
            seen_during_local_tx["half"] = await pull_queue(remoting, c.broker, HALF_TOPIC, 0)
            seen_during_local_tx["arg"] = arg
            seen_during_local_tx["tid"] = msg.transaction_id
            return COMMIT

    lis = L()
    async with producer(c, "PG-commit", lis) as p:
        msg = Message("TxCommit", b"paid", tags="TagA", keys=["order-1"], properties={"shop": "7"})
        r = await p.send_in_transaction(msg, arg={"order": 1})
        assert isinstance(r, TransactionSendResult)
        assert r.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        assert seen_during_local_tx["real"] == []
        assert seen_during_local_tx["arg"] == {"order": 1}
        assert seen_during_local_tx["tid"] == r.msg_id
        halves = [m for m in seen_during_local_tx["half"] if m.uniq_key == r.msg_id]
        assert len(halves) == 1
        half = halves[0]
        assert half.properties[MessageConst.PROPERTY_REAL_TOPIC] == "TxCommit"
        assert half.properties[MessageConst.PROPERTY_REAL_QUEUE_ID] == str(r.queue.queue_id)
        assert half.properties[MessageConst.PROPERTY_PRODUCER_GROUP] == "PG-commit"
        assert half.queue_offset == r.queue_offset

        got = await eventually(lambda: pull_topic(remoting, c.broker, "TxCommit"))
        assert len(got) == 1
        m = got[0]
        assert (m.body, m.tags, m.keys, m.properties.get("shop")) == (b"paid", "TagA", "order-1", "7")
        assert m.uniq_key == r.msg_id
        assert m.queue_id == r.queue.queue_id
        for marker in ("TRAN_MSG", "REAL_TOPIC", "REAL_QID"):
            assert marker not in m.properties
        await asyncio.sleep(SETTLE_S)
        assert len(await pull_topic(remoting, c.broker, "TxCommit")) == 1
        assert lis.checked == []  # decided at once: never checked back


async def test_rollback_is_never_consumed(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = tx_cluster
    lis = Recorder(execute={b"cancel": ROLLBACK, b"keep": COMMIT})
    async with producer(c, "PG-rollback", lis) as p:
        r1 = await p.send_in_transaction(Message("TxRollback", b"cancel"))
        r2 = await p.send_in_transaction(Message("TxRollback", b"keep"))
        assert r1.local_transaction_state is ROLLBACK and r2.local_transaction_state is COMMIT
        await eventually(lambda: pull_topic(remoting, c.broker, "TxRollback"))
        await asyncio.sleep(SETTLE_S)
        assert await bodies(remoting, c, "TxRollback") == [b"keep"]
        assert lis.checked == []


async def test_unknown_is_resolved_by_check_back(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = tx_cluster
    lis = Recorder(check={b"a": COMMIT, b"b": ROLLBACK})
    async with producer(c, "PG-check", lis) as p:
        ra = await p.send_in_transaction(Message("TxCheck", b"a", tags="T", keys="ka"))
        rb = await p.send_in_transaction(Message("TxCheck", b"b"))
        assert ra.local_transaction_state is UNKNOWN and rb.local_transaction_state is UNKNOWN
        assert await bodies(remoting, c, "TxCheck") == []
        await eventually(lambda: pull_topic(remoting, c.broker, "TxCheck"), timeout=10)
        await eventually(lambda: lis.checks_of(b"b") >= 1)
        checked_a = next(m for m in lis.checked if m.body == b"a")
        # What a checking listener gets: the message as sent, in its real topic, with its transaction id.
        assert checked_a.topic == "TxCheck" and checked_a.queue_id == ra.queue.queue_id
        assert checked_a.transaction_id == ra.msg_id == checked_a.uniq_key
        assert (checked_a.tags, checked_a.keys) == ("T", "ka")
        assert checked_a.properties[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] == "1"
        await asyncio.sleep(SETTLE_S)
        got = await pull_topic(remoting, c.broker, "TxCheck")
        assert [m.body for m in got] == [b"a"]
        assert got[0].uniq_key == ra.msg_id
        # Decided on the first check: never asked again.
        assert lis.checks_of(b"a") == 1 and lis.checks_of(b"b") == 1


async def test_listener_error_means_unknown(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = tx_cluster
    lis = Recorder(execute={b"boom": RuntimeError("db down")}, check={b"boom": "COMMIT"})
    async with producer(c, "PG-error", lis) as p:
        r = await p.send_in_transaction(Message("TxError", b"boom"))
        assert r.local_transaction_state is UNKNOWN
        got = await eventually(lambda: pull_topic(remoting, c.broker, "TxError"))
        assert [m.body for m in got] == [b"boom"]


async def test_blocking_listener_runs_in_thread_pool(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    import threading
    import time

    c = tx_cluster
    threads: list[str] = []
    loop_thread = threading.current_thread().name

    class Blocking:
        def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
            threads.append(threading.current_thread().name)
            time.sleep(0.05)  # blocking is fine here
            return "UNKNOW" if msg.body == b"later" else "COMMIT_MESSAGE"

        def check_local_transaction(self, msg: Any) -> Any:
            threads.append(threading.current_thread().name)
            return LocalTransactionState.COMMIT

    async with producer(c, "PG-blocking", Blocking()) as p:
        now = await p.send_in_transaction(Message("TxBlocking", b"now"))
        later = await p.send_in_transaction(Message("TxBlocking", b"later"))
        assert now.local_transaction_state is COMMIT and later.local_transaction_state is UNKNOWN
        await eventually(lambda: len(threads) >= 3, timeout=10)
        await eventually(lambda: _has_two(remoting, c))
        assert all(t != loop_thread and t.startswith("tx-listener-PG-blocking_") for t in threads)


async def _has_two(remoting: RemotingClient, c: TxCluster) -> bool:
    return await bodies(remoting, c, "TxBlocking") == [b"later", b"now"]


async def test_check_max_then_rolled_back(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    """The producer never knows: asked transactionCheckMax (3) times, then the message is given up
    (moved to TRANS_CHECK_MAX_TIME_TOPIC as RocketMQ does) and counts as rolled back."""
    c = tx_cluster
    lis = Recorder()
    async with producer(c, "PG-max", lis) as p:
        r, kept = await _given_up(remoting, c, p, "TxMax", b"never-known")
        assert kept.properties[MessageConst.PROPERTY_REAL_TOPIC] == "TxMax"
        assert kept.properties[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] == "3"
        assert lis.checks_of(b"never-known") == 3
        await asyncio.sleep(SETTLE_S)
        assert lis.checks_of(b"never-known") == 3
        assert await bodies(remoting, c, "TxMax") == []
        # The producer finally says commit (its first END_TRANSACTION, late): ignored, it was rolled back.
        _, _, offset = decode_offset_msg_id(r.offset_msg_id)
        resp = await end_transaction(
            remoting, c.broker, group="PG-max", tran_state_table_offset=r.queue_offset,
            commit_log_offset=offset, commit=True, msg_id=r.msg_id,
        )
        assert resp.code == ResponseCode.SUCCESS and "already" in (resp.remark or "")
        await asyncio.sleep(0.3)
        assert await bodies(remoting, c, "TxMax") == []
    assert "transaction_discarded" in c.broker_daemon.output()


async def test_resume_check_of_a_given_up_transaction(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    """RESUME_CHECK_HALF_MESSAGE (mqadmin resumeCheckHalfMessage): a transaction given up after transactionCheckMax
    checks is asked about again, from zero, and a commit then delivers it (once)."""
    c = tx_cluster
    lis = Recorder()
    async with producer(c, "PG-resume", lis) as p:
        _, kept = await _given_up(remoting, c, p, "TxResume", b"decided-late")
        assert lis.checks_of(b"decided-late") == 3 and await bodies(remoting, c, "TxResume") == []
        lis.check[b"decided-late"] = COMMIT  # the producer knows now
        async with Admin(c.namesrv) as admin:
            assert await admin.resume_check_half_message(kept.offset_msg_id) == c.broker
            sent = await p.send(Message("TxResume", b"plain"))
            with pytest.raises(MQBrokerError, match="not a transaction's"):
                await admin.resume_check_half_message(sent.offset_msg_id)
        assert await eventually(lambda: _has(bodies(remoting, c, "TxResume"), b"decided-late"), timeout=15)
        assert lis.checks_of(b"decided-late") == 4
        resumed = [m for m in lis.checked if m.body == b"decided-late"][-1]
        assert resumed.properties[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] == "1"  # counted from 0 again
        await asyncio.sleep(SETTLE_S)
        assert await bodies(remoting, c, "TxResume") == [b"decided-late", b"plain"]


async def _given_up(
    remoting: RemotingClient, c: TxCluster, p: TransactionProducer, topic: str, body: bytes
) -> tuple[TransactionSendResult, Any]:
    """Send a transaction its listener never decides; wait until the broker gives it up (its copy appears in
    TRANS_CHECK_MAX_TIME_TOPIC). Returns the send's result and that copy."""
    r = await p.send_in_transaction(Message(topic, body))
    kept = await eventually(lambda: _find(pull_queue(remoting, c.broker, CHECK_MAX_TOPIC, 0), r.msg_id), timeout=15)
    return r, kept


async def _has(bodies_coro: Any, body: bytes) -> bool:
    return body in await bodies_coro


async def _find(msgs_coro: Any, uniq: str) -> Any:
    return next((m for m in await msgs_coro if m.uniq_key == uniq), None)


async def test_producer_down_during_checks_then_rolled_back(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = tx_cluster
    async with producer(c, "PG-down", Recorder()) as p:
        r = await p.send_in_transaction(Message("TxDown", b"orphan"))
    # No producer of the group is connected: each round still counts a check, then gives up.
    kept = await eventually(lambda: _find(pull_queue(remoting, c.broker, CHECK_MAX_TOPIC, 0), r.msg_id), timeout=15)
    assert kept.properties[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] == "3"
    out = c.broker_daemon.output()
    assert sum(1 for line in out.splitlines() if "transaction_check_no_producer" in line and r.msg_id in line) >= 3
    # A producer of the group coming back later is not asked about it, and it is never delivered.
    late = Recorder(check={b"orphan": COMMIT})
    async with producer(c, "PG-down", late):
        await asyncio.sleep(SETTLE_S)
    assert late.checked == []
    assert await bodies(remoting, c, "TxDown") == []


async def test_end_transaction_is_idempotent(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = tx_cluster
    lis = Recorder(execute={b"once": COMMIT})
    async with producer(c, "PG-idem", lis) as p:
        r = await p.send_in_transaction(Message("TxIdem", b"once"))
        await eventually(lambda: pull_topic(remoting, c.broker, "TxIdem"))
        _, _, offset = decode_offset_msg_id(r.offset_msg_id)
        args = dict(group="PG-idem", tran_state_table_offset=r.queue_offset, commit_log_offset=offset, msg_id=r.msg_id)
        again = await end_transaction(remoting, c.broker, commit=True, **args)
        assert again.code == ResponseCode.SUCCESS and "already" in (again.remark or "")
        undo = await end_transaction(remoting, c.broker, commit=False, **args)
        assert undo.code == ResponseCode.SUCCESS and "already" in (undo.remark or "")

        # Two commits racing for an undecided transaction: one message.
        r2 = await p.send_in_transaction(Message("TxIdem", b"raced"))
        assert r2.local_transaction_state is UNKNOWN
        _, _, offset2 = decode_offset_msg_id(r2.offset_msg_id)
        args2 = dict(group="PG-idem", tran_state_table_offset=r2.queue_offset, commit_log_offset=offset2)
        answers = await asyncio.gather(*(end_transaction(remoting, c.broker, commit=True, **args2) for _ in range(4)))
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 4
        assert sum(1 for a in answers if "already" in (a.remark or "")) == 3

        await asyncio.sleep(SETTLE_S)
        assert await bodies(remoting, c, "TxIdem") == [b"once", b"raced"]
        assert lis.checked == []


async def test_end_transaction_refuses_what_does_not_match(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = tx_cluster
    async with producer(c, "PG-wrong", Recorder()) as p:
        r = await p.send_in_transaction(Message("TxWrong", b"x"))
        _, _, offset = decode_offset_msg_id(r.offset_msg_id)
        wrong_group = await end_transaction(
            remoting, c.broker, group="PG-other", tran_state_table_offset=r.queue_offset,
            commit_log_offset=offset, commit=True,
        )
        assert wrong_group.code == ResponseCode.SYSTEM_ERROR and "producer group" in (wrong_group.remark or "")
        wrong_offset = await end_transaction(
            remoting, c.broker, group="PG-wrong", tran_state_table_offset=r.queue_offset + 1000,
            commit_log_offset=offset, commit=True,
        )
        assert wrong_offset.code == ResponseCode.SYSTEM_ERROR
        assert "transaction state table offset" in (wrong_offset.remark or "")
        nothing_there = await end_transaction(
            remoting, c.broker, group="PG-wrong", tran_state_table_offset=0, commit_log_offset=offset + 1, commit=True
        )
        assert nothing_there.code == ResponseCode.SYSTEM_ERROR
        # Still undecided after all that: the right answer still works.
        ok = await end_transaction(
            remoting, c.broker, group="PG-wrong", tran_state_table_offset=r.queue_offset,
            commit_log_offset=offset, commit=False,
        )
        assert ok.code == ResponseCode.SUCCESS and not ok.remark


async def test_late_end_of_first_half_after_check_copy(tx_cluster: TxCluster, remoting: RemotingClient) -> None:
    """A check re-puts the half message (a new copy at a new offset). The producer's own END_TRANSACTION for
    the first copy arriving after that decides the transaction; the copy is not checked or committed again."""
    c = tx_cluster
    lis = Recorder()  # UNKNOWN to everything for now
    async with producer(c, "PG-late", lis) as p:
        r = await p.send_in_transaction(Message("TxLate", b"late"))
        await eventually(lambda: lis.checks_of(b"late") >= 1, timeout=10)
        _, _, offset = decode_offset_msg_id(r.offset_msg_id)
        resp = await end_transaction(
            remoting, c.broker, group="PG-late", tran_state_table_offset=r.queue_offset,
            commit_log_offset=offset, commit=True, msg_id=r.msg_id,
        )
        assert resp.code == ResponseCode.SUCCESS and not resp.remark
        lis.check[b"late"] = COMMIT  # a later check would now commit a second time
        n = lis.checks_of(b"late")
        await asyncio.sleep(SETTLE_S)
        assert lis.checks_of(b"late") <= n + 1  # at most one check was already on its way
        assert await bodies(remoting, c, "TxLate") == [b"late"]


async def test_reject_transaction_message(tx_cluster: TxCluster) -> None:
    c = tx_cluster
    api = MQClientAPIImpl(RemotingClient(), [c.namesrv])
    try:
        await api.update_broker_config(c.broker, {"rejectTransactionMessage": "true"})
        try:
            async with producer(c, "PG-reject", Recorder(), retry_times_when_send_failed=0) as p:
                with pytest.raises(MQBrokerError) as e:
                    await p.send_in_transaction(Message("TxReject", b"no"))
                assert e.value.code == ResponseCode.NO_PERMISSION
        finally:
            await api.update_broker_config(c.broker, {"rejectTransactionMessage": "false"})
    finally:
        await api.remoting.close()
