"""INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223: the broker relays GET_CONSUMER_STATUS_FROM_CLIENT, 221, to the
group's clients) and GET_ALL_PRODUCER_INFO (328) against an in-process broker, with hand-made clients; and
both bodies in the form Java's fastjson writes."""

from __future__ import annotations

import time
from collections.abc import Awaitable

import pytest

from broker.client import broker2client
from remoting.body import (
    ConsumerData,
    GetConsumerStatusBody,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    ProducerTableInfo,
    SubscriptionData,
)
from remoting.client import RemotingClient
from remoting.codes import LanguageCode, RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext, RequestDispatcher
from remoting.headers import GetConsumerStatusRequestHeader
from tests.broker.conftest import BrokerHarness
from tests.broker.helpers import wait_until


def mq(queue_id: int, topic: str = "ST", broker: str = "broker-t") -> MessageQueue:
    return MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)


def heartbeat(
    client_id: str, *, group: str | None = None, producer: str | None = None, version: int | None = None
) -> RemotingCommand:
    consumers = (
        [ConsumerData(group_name=group, subscription_data_set=[SubscriptionData(topic="ST", sub_string="*")])]
        if group
        else []
    )
    producers = [ProducerData(group_name=producer)] if producer else []
    body = HeartbeatData(client_id=client_id, consumer_data_set=consumers, producer_data_set=producers).encode()
    cmd = RemotingCommand.request(RequestCode.HEART_BEAT, None, body)
    if version is not None:
        cmd.version = version
    return cmd


def status_request(topic: str, group: str, client_addr: str | None = None) -> RemotingCommand:
    header = GetConsumerStatusRequestHeader(topic=topic, group=group, client_addr=client_addr)
    return RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, header.encode())


class StatusClient:
    """A consumer client connection that answers GET_CONSUMER_STATUS_FROM_CLIENT with a fixed table, or
    with an error code (`decline`), or never (`silent`); it records what it was asked."""

    def __init__(
        self, table: dict[MessageQueue, int] | None = None, *, decline: bool = False, silent: bool = False
    ) -> None:
        self.table = table or {}
        self.decline = decline
        self.silent = silent
        self.asked: list[RemotingCommand] = []
        d = RequestDispatcher()
        d.register(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, self._on)
        d.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, lambda ctx, cmd: None)
        self.client = RemotingClient(d)

    def _on(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        self.asked.append(cmd)
        if self.silent:
            return None  # never answers
        if self.decline:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not here")
        return cmd.response(body=GetConsumerStatusBody(message_queue_table=self.table).encode())

    async def join(self, h: BrokerHarness, client_id: str, group: str, version: int | None = None) -> None:
        r = await self.client.invoke(h.addr, heartbeat(client_id, group=group, version=version), 5000)
        assert r.code == ResponseCode.SUCCESS, r.remark


# ---------------------------------------------------------------------------------------- consumer status


async def test_consumer_status_answers_each_clients_offsets_by_client_id(broker: BrokerHarness) -> None:
    h = broker
    a = StatusClient({mq(0): 7, mq(1): 3})
    b = StatusClient({mq(2): 11})
    try:
        await a.join(h, "client-a", "SG")
        await b.join(h, "client-b", "SG")
        r = await h.call(status_request("ST", "SG"), 10000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        body = GetConsumerStatusBody.decode(r.body)
        assert body.consumer_table == {"client-a": {mq(0): 7, mq(1): 3}, "client-b": {mq(2): 11}}
        assert body.message_queue_table == {}
        # fastjson's form: the queue objects themselves are the keys
        assert b'"client-b":{{"brokerName":"broker-t","queueId":2,"topic":"ST"}:11}' in r.body
        # each client was asked for the topic and group of the request, and nothing else
        for c in (a, b):
            [asked] = c.asked
            assert asked.ext_fields == {"topic": "ST", "group": "SG"}

        # clientAddr (a client id, whatever its name says): only that client is asked
        r = await h.call(status_request("ST", "SG", "client-b"), 10000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert GetConsumerStatusBody.decode(r.body).consumer_table == {"client-b": {mq(2): 11}}
        assert (len(a.asked), len(b.asked)) == (1, 2)

        r = await h.call(status_request("ST", "SG", "nobody"))
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "The Consumer <SG> <nobody> not online"
        assert (len(a.asked), len(b.asked)) == (1, 2)
    finally:
        await a.client.close()
        await b.client.close()


async def test_consumer_status_of_a_group_with_no_client_online(broker: BrokerHarness) -> None:
    r = await broker.call(status_request("ST", "NOGROUP"))
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == "No Any Consumer online in the consumer group: [NOGROUP]"
    r = await broker.call(RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": "ST"}))
    assert r.code == ResponseCode.INVALID_PARAMETER and "group" in r.remark


async def test_consumer_status_names_a_client_that_does_not_answer(
    broker: BrokerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker2client, "CONSUMER_STATUS_TIMEOUT_MS", 500)
    h = broker
    good = StatusClient({mq(0): 5})
    declining = StatusClient(decline=True)
    silent = [StatusClient(silent=True), StatusClient(silent=True)]
    try:
        await good.join(h, "client-good", "SG")
        await declining.join(h, "client-declining", "SG")
        # A client that answers with an error code is left out (as RocketMQ does), the others are answered.
        r = await h.call(status_request("ST", "SG"), 10000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert GetConsumerStatusBody.decode(r.body).consumer_table == {"client-good": {mq(0): 5}}
        assert len(declining.asked) == 1

        # Clients that do not answer at all: a bounded wait (the clients are asked at once, so two silent
        # ones cost one timeout), then an error naming each.
        for i, c in enumerate(silent):
            await c.join(h, f"client-silent-{i}", "SG")
        t0 = time.monotonic()
        r = await h.call(status_request("ST", "SG"), 10000)
        assert time.monotonic() - t0 < 0.95
        assert r.code == ResponseCode.SYSTEM_ERROR
        for i in range(2):
            assert f"<SG> <client-silent-{i}> did not answer GET_CONSUMER_STATUS_FROM_CLIENT within 500 ms" in r.remark
        assert "client-good" not in r.remark and "client-declining" not in r.remark
        assert [len(c.asked) for c in (good, declining, *silent)] == [2, 2, 1, 1]
        # the others can still be asked one by one
        r = await h.call(status_request("ST", "SG", "client-good"), 10000)
        assert GetConsumerStatusBody.decode(r.body).consumer_table == {"client-good": {mq(0): 5}}
    finally:
        for c in (good, declining, *silent):
            await c.client.close()


async def test_consumer_status_refuses_clients_before_v3_0_7(broker: BrokerHarness) -> None:
    h = broker
    old = StatusClient({mq(0): 1})
    new = StatusClient({mq(1): 2})
    try:
        await old.join(h, "client-old", "SG", version=27)  # MQVersion V3_0_6
        await new.join(h, "client-new", "SG")
        r = await h.call(status_request("ST", "SG"), 10000)
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert r.remark == "the client does not support this feature. version=V3_0_6"
        assert old.asked == [] and new.asked == []
        # Only the clients asked matter: the new one alone is answered.
        r = await h.call(status_request("ST", "SG", "client-new"), 10000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert GetConsumerStatusBody.decode(r.body).consumer_table == {"client-new": {mq(1): 2}}
    finally:
        await old.client.close()
        await new.client.close()


def test_consumer_status_body_in_java_form() -> None:
    """What a Java 4.9 client answers (fastjson: fields sorted, MessageQueue objects as keys) and what a
    Java broker answers; ours is written the same way."""
    from_client = (
        b'{"consumerTable":{},"messageQueueTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:12,'
        b'{"brokerName":"broker-b","queueId":3,"topic":"T"}:0}}'
    )
    body = GetConsumerStatusBody.decode(from_client)
    assert body.message_queue_table == {mq(0, "T", "broker-a"): 12, mq(3, "T", "broker-b"): 0}
    assert body.encode() == from_client
    from_broker = (
        b'{"consumerTable":{"10.0.0.1@123":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:4}},'
        b'"messageQueueTable":{}}'
    )
    body = GetConsumerStatusBody.decode(from_broker)
    assert body.consumer_table == {"10.0.0.1@123": {mq(1, "T", "broker-a"): 4}}
    assert body.encode() == from_broker


# ---------------------------------------------------------------------------------------- producer info


async def test_all_producer_info_lists_each_group_and_connection(broker: BrokerHarness) -> None:
    h = broker

    async def producer_table() -> dict[str, list[str]]:
        r = await h.call(RemotingCommand.request(RequestCode.GET_ALL_PRODUCER_INFO))
        assert r.code == ResponseCode.SUCCESS, r.remark
        return {g: sorted(p.client_id for p in ps) for g, ps in ProducerTableInfo.decode(r.body).data.items()}

    p1, p2 = RemotingClient(), RemotingClient()
    try:
        before = int(time.time() * 1000)
        assert (await p1.invoke(h.addr, heartbeat("prod-1", producer="PG1"), 5000)).code == ResponseCode.SUCCESS
        assert (await p2.invoke(h.addr, heartbeat("prod-2", producer="PG1"), 5000)).code == ResponseCode.SUCCESS
        java = heartbeat("prod-3", producer="PG2")
        java.language, java.version = LanguageCode.JAVA, 395
        assert (await p2.invoke(h.addr, java, 5000)).code == ResponseCode.SUCCESS
        after = int(time.time() * 1000)

        r = await h.call(RemotingCommand.request(RequestCode.GET_ALL_PRODUCER_INFO))
        assert r.code == ResponseCode.SUCCESS, r.remark
        info = ProducerTableInfo.decode(r.body)
        assert await producer_table() == {"PG1": ["prod-1", "prod-2"], "PG2": ["prod-3"]}
        by_id = {p.client_id: p for ps in info.data.values() for p in ps}
        assert (by_id["prod-1"].language, by_id["prod-3"].language) == ("PYTHON", "JAVA")
        assert by_id["prod-3"].version == 395
        for p in by_id.values():
            assert before <= p.last_update_timestamp <= after
            # Java's SocketAddress.toString() of the producer's end of the connection
            assert p.remote_ip.startswith("/127.0.0.1:")
        assert by_id["prod-2"].remote_ip == by_id["prod-3"].remote_ip != by_id["prod-1"].remote_ip
        assert b'"remoteIP":"/127.0.0.1:' in r.body and b'"lastUpdateTimestamp":' in r.body

        # A closed connection leaves the table; with no producer left it is empty, not an error.
        await p1.close()
        assert await wait_until(
            lambda: _eq(producer_table(), {"PG1": ["prod-2"], "PG2": ["prod-3"]})
        )
        await p2.close()
        assert await wait_until(lambda: _eq(producer_table(), {}))
    finally:
        await p1.close()
        await p2.close()


async def _eq(got: Awaitable[object], want: object) -> bool:
    return await got == want


def test_producer_table_info_in_java_form() -> None:
    """A Java 4.9.4+ broker's answer (fastjson: fields sorted, the language enum by name)."""
    java = (
        b'{"data":{"PG":[{"clientId":"10.0.0.1@4242","language":"JAVA","lastUpdateTimestamp":1700000000123,'
        b'"remoteIP":"/10.0.0.1:53211","version":401}]}}'
    )
    [p] = ProducerTableInfo.decode(java).data["PG"]
    assert (p.client_id, p.remote_ip, p.language, p.version, p.last_update_timestamp) == (
        "10.0.0.1@4242", "/10.0.0.1:53211", "JAVA", 401, 1700000000123)
