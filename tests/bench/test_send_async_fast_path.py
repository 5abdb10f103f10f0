"""send_async / send_batch_async take a Task-free first attempt when the route and the connection
are at hand; a failed first attempt must still be retried (or not) exactly as the slow path does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from client import Message, Producer
from client.errors import MQBrokerError
from client.message import SendStatus
from remoting import RemotingCommand, ResponseCode
from tests.client.fakes import FakeBroker, FakeNameServer, one_broker_cluster


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeNameServer, FakeBroker]]:
    async with one_broker_cluster("FastTopic") as pair:
        yield pair


def script(*answers: object):  # type: ignore[no-untyped-def]
    seq = list(answers)

    def behaviour(cmd: RemotingCommand) -> object:
        return seq.pop(0) if seq else "ok"

    return behaviour


async def test_fast_path_retries_busy_and_retryable_codes(fakes: tuple[FakeNameServer, FakeBroker]) -> None:
    ns, b = fakes
    async with Producer("fast_pg", ns.addr, system_busy_backoff=10) as p:
        await p.send(Message("FastTopic", b"warm"))  # route + open connection: the fast path applies now
        n0 = len(b.sends)
        b.behaviour = script((ResponseCode.SYSTEM_BUSY, "busy"), (ResponseCode.SYSTEM_ERROR, "oops"))
        r = await p.send_async(Message("FastTopic", b"x"))
        assert r.status is SendStatus.SEND_OK
        assert len(b.sends) - n0 == 3  # the first attempt + two retries (retry_times_when_send_async_failed=2)
        # Three failures: the error of the last attempt, with every attempt counted.
        b.behaviour = script(*[(ResponseCode.SYSTEM_ERROR, "down")] * 3)
        with pytest.raises(MQBrokerError) as ei:
            await p.send_async(Message("FastTopic", b"y"))
        assert ei.value.code == ResponseCode.SYSTEM_ERROR
        # A code that is not retried fails at once after one attempt.
        n1 = len(b.sends)
        b.behaviour = script((ResponseCode.MESSAGE_ILLEGAL, "bad"))
        with pytest.raises(MQBrokerError) as ei:
            await p.send_async(Message("FastTopic", b"z"))
        assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL and len(b.sends) - n1 == 1
        # Batches take the same path.
        b.behaviour = script((ResponseCode.SYSTEM_BUSY, "busy"))
        r = await p.send_batch_async([Message("FastTopic", b"b%d" % i) for i in range(4)])
        assert r.status is SendStatus.SEND_OK
        # An invalid message fails its future (not the call).
        fut = p.send_async(Message("FastTopic", b""))
        with pytest.raises(Exception, match="(?i)body"):
            await fut
        # Cancelling a pending send frees its permit.
        b.behaviour = lambda cmd: "hang"
        fut = p.send_async(Message("FastTopic", b"never"))
        await asyncio.sleep(0.05)
        assert p._async_permits.active == 1
        fut.cancel()
        await asyncio.sleep(0)
        assert p._async_permits.active == 0
        b.behaviour = lambda cmd: "ok"
        r = await p.send_async(Message("FastTopic", b"after"))
        assert r.status is SendStatus.SEND_OK
