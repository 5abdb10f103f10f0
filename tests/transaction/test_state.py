"""The broker's transaction state machine, in process (a BrokerController on loopback, no NameServer):
half messages, check rounds run by hand, re-put copies, and the state rebuilt after a restart."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.transaction import build_check_request
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import SendMessageRequestHeader, encode_send_header_v2
from remoting.message import MessageConst, MessageSysFlag, decode_message, encode_properties

from .helpers import end_transaction, pull_queue, pull_topic


def config(store: Path) -> BrokerConfig:
    return BrokerConfig.from_values(
        {
            "brokerName": "broker-tx",
            "brokerIP1": "127.0.0.1",
            "listenPort": 0,
            "storePathRootDir": str(store),
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 3000 * 20,
            "maxHashSlotNum": 5000,
            "maxIndexNum": 20000,
            # Rounds only when the test runs one; every half message is old enough at once.
            "transactionCheckInterval": 3600000,
            "transactionTimeOut": 0,
            "transactionCheckMax": 5,
        }
    )


@contextlib.asynccontextmanager
async def running(store: Path) -> AsyncIterator[tuple[BrokerController, RemotingClient]]:
    c = BrokerController(config(store))
    await c.start()
    client = RemotingClient()
    try:
        yield c, client
    finally:
        await client.close()
        await c.stop()


def send_half(
    topic: str, body: bytes, *, group: str = "PG", uniq: str, queue_id: int = 0, **extra: str
) -> RemotingCommand:
    props = {"UNIQ_KEY": uniq, "WAIT": "true", "TRAN_MSG": "true", "PGROUP": group, "TAGS": "tx", **extra}
    h = SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        queue_id=queue_id,
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
        born_timestamp=int(time.time() * 1000),
        properties=encode_properties(props),
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(h), body)


async def half(
    client: RemotingClient, c: BrokerController, body: bytes, uniq: str, **extra: str
) -> tuple[int, int]:
    """Send a half message; returns (queue offset in the half queue, commit log offset)."""
    r = await client.invoke(c.listen_addr, send_half("TxState", body, uniq=uniq, **extra), 5000)
    assert r.code == ResponseCode.SUCCESS, r.remark
    ext = r.ext_fields or {}
    phy = int(ext["msgId"][-16:], 16)
    return int(ext["queueOffset"]), phy


async def test_check_rounds_copies_and_reload(tmp_path: Path) -> None:
    store = tmp_path / "store"
    async with running(store) as (c, client):
        svc = c.transactional_message_service
        h0 = await half(client, c, b"h0", "U0")
        h1 = await half(client, c, b"h1", "U1")
        h2 = await half(client, c, b"h2", "U2")
        assert [h0[0], h1[0], h2[0]] == [0, 1, 2]
        await c.message_store.wait_dispatched(5)
        r = await end_transaction(client, c.listen_addr, group="PG", tran_state_table_offset=h1[0],
                                  commit_log_offset=h1[1], commit=True)
        assert r.code == ResponseCode.SUCCESS and not r.remark

        # A round: no producer is connected, so nobody is asked, but h0 and h2 are re-put (check times 1).
        asked = await c.transactional_message_check_service.check_once()
        assert asked == 0
        assert svc.half_offset == 3
        await c.message_store.wait_dispatched(5)
        halves = await pull_queue(client, c.listen_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
        copies = {m.body: m for m in halves if m.queue_offset >= 3}
        assert set(copies) == {b"h0", b"h2"}
        for body, root in ((b"h0", 0), (b"h2", 2)):
            props = copies[body].properties
            assert props[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] == "1"
            assert props[MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] == str(root)

        # h0 is decided through its first copy (the producer's own, late END_TRANSACTION).
        r = await end_transaction(client, c.listen_addr, group="PG", tran_state_table_offset=h0[0],
                                  commit_log_offset=h0[1], commit=False)
        assert r.code == ResponseCode.SUCCESS and not r.remark
        assert svc.is_resolved(0) and svc.is_resolved(1) and not svc.is_resolved(2)
        assert [m.body for m in await pull_topic(client, c.listen_addr, "TxState", 1)] == [b"h1"]

    # Restart: the state comes back from the half and op queues and the checker's offsets.
    async with running(store) as (c, client):
        svc = c.transactional_message_service
        assert svc.half_offset == 3
        assert svc.is_resolved(0) and svc.is_resolved(1) and not svc.is_resolved(2)
        copy_h0 = next(m for m in await pull_queue(client, c.listen_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
                       if m.body == b"h0" and m.queue_offset >= 3)
        again = await end_transaction(client, c.listen_addr, group="PG", tran_state_table_offset=copy_h0.queue_offset,
                                      commit_log_offset=copy_h0.commit_log_offset, commit=True)
        assert again.code == ResponseCode.SUCCESS and "already" in (again.remark or "")
        again = await end_transaction(client, c.listen_addr, group="PG", tran_state_table_offset=h1[0],
                                      commit_log_offset=h1[1], commit=True)
        assert "already" in (again.remark or "")
        # The round after the restart re-puts only the undecided h2 (check times 2) and moves past h0's copy.
        await c.transactional_message_check_service.check_once()
        await c.message_store.wait_dispatched(5)
        halves = await pull_queue(client, c.listen_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
        newest = [m for m in halves if m.queue_offset >= 5]
        assert [(m.body, m.properties[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES]) for m in newest] == [(b"h2", "2")]
        assert svc.half_offset == 5
        # h2 decided via its newest copy: committed once, with the half-only properties gone.
        r = await end_transaction(client, c.listen_addr, group="PG", tran_state_table_offset=newest[0].queue_offset,
                                  commit_log_offset=newest[0].commit_log_offset, commit=True)
        assert r.code == ResponseCode.SUCCESS and not r.remark
        await c.message_store.wait_dispatched(5)
        got = await pull_topic(client, c.listen_addr, "TxState", 1)
        assert [m.body for m in got] == [b"h1", b"h2"]
        committed = got[1]
        assert committed.uniq_key == "U2" and committed.tags == "tx"
        assert MessageSysFlag.get_transaction_value(committed.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        assert committed.prepared_transaction_offset == newest[0].commit_log_offset
        for p in ("TRAN_MSG", "REAL_TOPIC", "REAL_QID", "TRAN_PREPARED_QUEUE_OFFSET"):
            assert p not in committed.properties
        assert committed.properties["PGROUP"] == "PG"
        # Nothing is undecided any more: a round asks nobody and re-puts nothing.
        await c.transactional_message_check_service.check_once()
        await c.message_store.wait_dispatched(5)
        assert max(m.queue_offset for m in await pull_queue(client, c.listen_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0)) == 5
        assert svc.half_offset == 6
        assert svc.resolved_count == 0  # everything decided is behind the checker: nothing kept in memory


async def test_check_request_is_the_record_a_client_decodes(tmp_path: Path) -> None:
    async with running(tmp_path / "store") as (c, client):
        q, phy = await half(client, c, b"payload", "UQ")
        stored = c.message_store.look_message_by_offset(phy)
        assert stored is not None and stored.topic == "RMQ_SYS_TRANS_HALF_TOPIC"
        assert MessageSysFlag.get_transaction_value(stored.sys_flag) == MessageSysFlag.TRANSACTION_NOT_TYPE
        req = build_check_request(stored)
        assert req is not None and req.code == RequestCode.CHECK_TRANSACTION_STATE
        ext = req.ext_fields or {}
        assert ext["tranStateTableOffset"] == str(q)
        assert ext["commitLogOffset"] == str(phy)
        assert ext["msgId"] == ext["transactionId"] == "UQ"
        assert ext["offsetMsgId"] == stored.msg_id
        msg, end = decode_message(req.body_bytes(), decompress_body=True)
        assert end == len(req.body_bytes())
        assert (msg.topic, msg.queue_id, msg.body) == ("TxState", 0, b"payload")
        assert msg.queue_offset == q and msg.commit_log_offset == phy
        assert msg.properties["PGROUP"] == "PG" and msg.properties["UNIQ_KEY"] == "UQ"


async def test_half_message_keeps_delay_out_and_group_in(tmp_path: Path) -> None:
    async with running(tmp_path / "store") as (c, client):
        props = {"UNIQ_KEY": "UD", "WAIT": "true", "TRAN_MSG": "true", "DELAY": "3"}  # no PGROUP: the header's
        h = SendMessageRequestHeader(producer_group="PG-hdr", topic="TxDelay", queue_id=0,
                                     sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
                                     born_timestamp=int(time.time() * 1000), properties=encode_properties(props))
        r = await client.invoke(c.listen_addr, RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(h), b"d"), 5000)
        assert r.code == ResponseCode.SUCCESS
        stored = c.message_store.look_message_by_offset(int((r.ext_fields or {})["msgId"][-16:], 16))
        assert stored is not None and stored.topic == "RMQ_SYS_TRANS_HALF_TOPIC"
        assert stored.properties["PGROUP"] == "PG-hdr" and "DELAY" not in stored.properties
        assert "WAIT" not in stored.properties


async def test_check_immunity_time(tmp_path: Path) -> None:
    """A half message with CHECK_IMMUNITY_TIME_IN_SECONDS is not checked before that time, and does not hold up
    the half messages behind it: the round moves it to the end of the half queue without counting a check."""
    async with running(tmp_path / "store") as (c, client):
        await half(client, c, b"immune", "UI", CHECK_IMMUNITY_TIME_IN_SECONDS="3600")
        await half(client, c, b"plain", "UP")
        await c.message_store.wait_dispatched(5)
        await c.transactional_message_check_service.check_once()
        await c.message_store.wait_dispatched(5)
        svc = c.transactional_message_service
        assert svc.half_offset == 2
        copies = {m.body: m.properties for m in await pull_queue(client, c.listen_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
                  if m.queue_offset >= 2}
        assert copies[b"plain"][MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] == "1"
        assert MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES not in copies[b"immune"]
        assert copies[b"immune"][MessageConst.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] == "0"
        assert not svc.is_resolved(0) and not svc.is_resolved(1)


async def test_check_round_starting_in_the_same_millisecond(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A half message stored in the very millisecond a check round starts was stored before the round: the round
    checks it rather than taking it for one of its own copies (a flake when the round followed the send closely)."""
    from broker.transaction import transactional_message_service as tms

    async with running(tmp_path / "store") as (c, client):
        await half(client, c, b"immune", "UI", CHECK_IMMUNITY_TIME_IN_SECONDS="3600")
        _, phy = await half(client, c, b"plain", "UP")
        await c.message_store.wait_dispatched(5)
        stored = c.message_store.look_message_by_offset(phy)
        assert stored is not None
        monkeypatch.setattr(tms, "_now_ms", lambda: stored.store_timestamp)
        await c.transactional_message_check_service.check_once()
        await c.message_store.wait_dispatched(5)
        assert c.transactional_message_service.half_offset == 2
        copies = {m.body: m.properties for m in await pull_queue(client, c.listen_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
                  if m.queue_offset >= 2}
        assert copies[b"plain"][MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] == "1"
