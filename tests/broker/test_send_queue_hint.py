"""A producer's memoized send (the frame decoder's SendFixed, one per producer queue) keeps the queue's
ConsumeQueue once the queue exists and hands it to the store with each message
(MessageExtBrokerInner.consume_queue); after the topic's queues are deleted it finds the new queue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from remoting.body import TopicConfig
from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.command import RemotingCommand
from store.commit_log import MessageBatch
from tests.broker.conftest import running_broker
from tests.broker.helpers import encode_batch

FIELDS = {"a": "PG", "b": "Hint", "c": "TBW102", "d": "4", "e": "1", "f": "0", "h": "0", "j": "0", "k": "false",
          "m": "false"}


def producer_batch(i: int, n: int) -> RemotingCommand:
    """SEND_BATCH_MESSAGE as client.Producer writes it (the batch flag m true), n messages of one shape."""
    ext = {"g": str(int(time.time() * 1000)), "i": "WAIT\x01true", **FIELDS, "m": "true"}
    body = encode_batch([(f"b{i}-{k}".encode(), f"UNIQ_KEY\x01{i:016X}{k:016X}\x02WAIT\x01true") for k in range(n)])
    cmd = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, body)
    cmd.serialize_type = SerializeType.MSGPACK
    return cmd


def producer_send(i: int) -> RemotingCommand:
    """SEND_MESSAGE_V2 as client.Producer writes it: g and i first, then the constant fields as strings."""
    ext = {"g": str(int(time.time() * 1000)), "i": f"WAIT\x01true\x02UNIQ_KEY\x01{i:032X}", **FIELDS}
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, f"b{i}-0".encode())
    cmd.serialize_type = SerializeType.MSGPACK
    return cmd


def hints_seen(store: Any) -> list[Any]:
    """What each unit handed to store.put_many from now on carried as its consume_queue, in order."""
    seen: list[Any] = []
    put_many = store.put_many

    async def spy(units):  # type: ignore[no-untyped-def]
        seen.extend(u.consume_queue if isinstance(u, MessageBatch) else u[0].consume_queue for u in units)
        return await put_many(units)

    store.put_many = spy
    return seen


def add_topic(h: Any) -> None:
    h.controller.topic_config_manager.update_topic_config(
        TopicConfig(topic_name="Hint", read_queue_nums=2, write_queue_nums=2)
    )


@pytest.mark.parametrize("per_request", [1, 4], ids=["single", "batch"])
async def test_a_producers_send_hands_the_store_its_queue(tmp_path: Path, per_request: int) -> None:
    async with running_broker(tmp_path) as h:
        add_topic(h)
        store = h.controller.message_store
        seen = hints_seen(store)

        async def send(i: int) -> int:
            cmd = producer_send(i) if per_request == 1 else producer_batch(i, per_request)
            r = await h.call(cmd)
            assert r.code == ResponseCode.SUCCESS, r.remark
            await store.reput_message_service.wait_caught_up(10)
            return int(r.ext_fields["queueOffset"])

        n = per_request
        assert await send(0) == 0  # no queue yet: the dispatcher makes it
        cq = store.get_consume_queue("Hint", 1)
        assert cq is not None
        assert [await send(1), await send(2)] == [n, 2 * n]
        assert seen == [None, cq, cq]
        assert cq.get_max_offset_in_queue() == 3 * n

        assert store.delete_topics({"Hint"}) == 1
        await store.wait_background_io()
        assert await send(3) == 0  # the kept queue is gone: none until the dispatcher makes the new one
        new = store.get_consume_queue("Hint", 1)
        assert new is not None and new is not cq
        assert await send(4) == n
        assert seen[3:] == [None, new]
        assert new.get_max_offset_in_queue() == 2 * n
        for qo in range(2 * n):
            unit = new.get_unit(qo)
            assert unit is not None
            m = store.look_message_by_offset(unit[0])
            assert m is not None and m.body == f"b{3 + qo // n}-{qo % n}".encode() and m.queue_offset == qo


async def test_two_brokers_in_one_process_keep_their_own_queues(tmp_path: Path) -> None:
    """The SendFixed cache is the process's: the same producer frame to two brokers of one process must give
    each broker's store its own queue."""
    async with running_broker(tmp_path / "a") as ha, running_broker(tmp_path / "b") as hb:
        for h in (ha, hb):
            add_topic(h)
        seen_a, seen_b = (hints_seen(h.controller.message_store) for h in (ha, hb))
        for i in range(4):
            for h in (ha, hb):
                r = await h.call(producer_send(i))
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert r.ext_fields["queueOffset"] == str(i)
                await h.controller.message_store.reput_message_service.wait_caught_up(10)
        qa = ha.controller.message_store.get_consume_queue("Hint", 1)
        qb = hb.controller.message_store.get_consume_queue("Hint", 1)
        assert qa is not None and qb is not None and qa is not qb
        assert seen_a[1:] == [qa] * 3 and seen_b[1:] == [qb] * 3
        assert qa.get_max_offset_in_queue() == qb.get_max_offset_in_queue() == 4
