"""Transactions across broker restarts and producers coming and going (a cluster per test,
checks every 300 ms, transactionTimeOut 600 ms, default transactionCheckMax 15)."""

from __future__ import annotations

import asyncio

from client import LocalTransactionState, Message
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import QueryConsumerOffsetRequestHeader
from remoting.message import MessageConst, decode_offset_msg_id

from .helpers import (
    HALF_TOPIC,
    Recorder,
    TxCluster,
    end_transaction,
    eventually,
    pull_topic,
)
from .test_transaction import SETTLE_S, bodies, producer

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK


async def checker_half_offset(remoting: RemotingClient, broker: str) -> int:
    h = QueryConsumerOffsetRequestHeader(consumer_group="CID_RMQ_SYS_TRANS", topic=HALF_TOPIC, queue_id=0)
    r = await remoting.invoke(broker, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, h.encode()), 5000)
    return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS and r.ext_fields else -1


async def test_broker_restart_keeps_decisions_and_checks_resume(own_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = own_cluster
    lis = Recorder(execute={b"A": COMMIT, b"B": ROLLBACK})  # C, D, E: unknown, and unknown on check for now
    p = producer(c, "PG-restart", lis)
    await p.start()
    try:
        ra = await p.send_in_transaction(Message("TxRestart", b"A"))
        await p.send_in_transaction(Message("TxRestart", b"B"))
        await p.send_in_transaction(Message("TxRestart", b"C"))
        await p.send_in_transaction(Message("TxRestart", b"D"))
        # C and D have been asked about (so re-put copies exist) before the restart ...
        await eventually(lambda: lis.checks_of(b"C") >= 1 and lis.checks_of(b"D") >= 1, timeout=10)
        # ... E is stored but nobody was asked about it yet.
        re_ = await p.send_in_transaction(Message("TxRestart", b"E"))
        assert await bodies(remoting, c, "TxRestart") == [b"A"]
        half_offset_before = await checker_half_offset(remoting, c.broker)
        assert half_offset_before > 0

        await asyncio.to_thread(c.restart_broker)

        # The checker's progress was persisted.
        assert await checker_half_offset(remoting, c.broker) >= half_offset_before
        # Decisions made before the restart stand: re-sending them changes nothing.
        _, _, a_off = decode_offset_msg_id(ra.offset_msg_id)
        again = await end_transaction(
            remoting, c.broker, group="PG-restart", tran_state_table_offset=ra.queue_offset,
            commit_log_offset=a_off, commit=True,
        )
        assert again.code == ResponseCode.SUCCESS and "already" in (again.remark or "")
        # E is decided by the producer's (late) END_TRANSACTION, after the restart.
        _, _, e_off = decode_offset_msg_id(re_.offset_msg_id)
        e_end = await end_transaction(
            remoting, c.broker, group="PG-restart", tran_state_table_offset=re_.queue_offset,
            commit_log_offset=e_off, commit=True,
        )
        assert e_end.code == ResponseCode.SUCCESS and not e_end.remark
        # C and D: the check resumes (once the producer has re-registered with the new broker process).
        lis.check.update({b"C": COMMIT, b"D": ROLLBACK, b"E": COMMIT})
        await eventually(lambda: _bodies_are(remoting, c, [b"A", b"C", b"E"]), timeout=20)
        await eventually(lambda: (b"D", ROLLBACK) in lis.answers, timeout=10)
        settled = {b: lis.checks_of(b) for b in (b"C", b"D", b"E")}
        await asyncio.sleep(SETTLE_S)
        assert await bodies(remoting, c, "TxRestart") == [b"A", b"C", b"E"]
        assert {b: lis.checks_of(b) for b in (b"C", b"D", b"E")} == settled  # decided: no more checks
        c_msgs = [m for m in lis.checked if m.body == b"C"]
        assert int(c_msgs[-1].properties[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES]) >= 2
    finally:
        await p.shutdown()


async def _bodies_are(remoting: RemotingClient, c: TxCluster, want: list[bytes]) -> bool:
    return await bodies(remoting, c, "TxRestart") == want


async def test_producer_down_then_back_is_checked_again(own_cluster: TxCluster, remoting: RemotingClient) -> None:
    c = own_cluster
    async with producer(c, "PG-back", Recorder()) as p:
        r = await p.send_in_transaction(Message("TxBack", b"pending"))
    # Rounds go by with nobody of the group to ask ...
    await eventually(
        lambda: sum(
            1 for line in c.broker_daemon.output().splitlines()
            if "transaction_check_no_producer" in line and r.msg_id in line
        ) >= 2,
        timeout=10,
    )
    # ... then a producer of the group is back: it is asked, and its answer counts.
    back = Recorder(check={b"pending": COMMIT})
    async with producer(c, "PG-back", back):
        got = await eventually(lambda: pull_topic(remoting, c.broker, "TxBack"), timeout=10)
        assert [m.body for m in got] == [b"pending"] and got[0].uniq_key == r.msg_id
        assert back.checked[0].transaction_id == r.msg_id
        assert int(back.checked[0].properties[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES]) >= 3
        await asyncio.sleep(SETTLE_S)
        assert len(await pull_topic(remoting, c.broker, "TxBack")) == 1
        assert back.checks_of(b"pending") == 1
