"""A producer's memoized send (the frame decoder's SendFixed, one per producer queue) keeps the queue's
ConsumeQueue once the queue exists and hands it to the store with each message
(MessageExtBrokerInner.consume_queue); after the topic's queues are deleted it finds the new queue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, f"body{i}".encode())
    cmd.serialize_type = SerializeType.MSGPACK
    return cmd


async def test_a_producers_send_hands_the_store_its_queue(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        h.controller.topic_config_manager.update_topic_config(
            TopicConfig(topic_name="Hint", read_queue_nums=2, write_queue_nums=2)
        )
        store = h.controller.message_store
        seen: list[Any] = []
        put_many = store.put_many

        async def spy(units):  # type: ignore[no-untyped-def]
            seen.extend(u[0].consume_queue for u in units if not isinstance(u, MessageBatch))
            return await put_many(units)

        store.put_many = spy  # type: ignore[method-assign]

        async def send(i: int) -> int:
            r = await h.call(producer_send(i))
            assert r.code == ResponseCode.SUCCESS, r.remark
            await store.reput_message_service.wait_caught_up(10)
            return int(r.ext_fields["queueOffset"])

        assert await send(0) == 0  # no queue yet: the dispatcher makes it
        cq = store.get_consume_queue("Hint", 1)
        assert cq is not None
        assert [await send(1), await send(2)] == [1, 2]
        assert seen == [None, cq, cq]
        assert cq.get_max_offset_in_queue() == 3

        assert store.delete_topics({"Hint"}) == 1
        await store.wait_background_io()
        assert await send(3) == 0  # the kept queue is gone: none until the dispatcher makes the new one
        new = store.get_consume_queue("Hint", 1)
        assert new is not None and new is not cq
        assert await send(4) == 1
        assert seen[3:] == [None, new]
        assert new.get_max_offset_in_queue() == 2
        for qo, i in ((0, 3), (1, 4)):
            unit = new.get_unit(qo)
            assert unit is not None
            m = store.look_message_by_offset(unit[0])
            assert m is not None and m.body == f"body{i}".encode() and m.queue_offset == qo


async def test_two_brokers_in_one_process_keep_their_own_queues(tmp_path: Path) -> None:
    """The SendFixed cache is the process's: the same producer frame to two brokers of one process must give
    each broker's store its own queue."""
    async with running_broker(tmp_path / "a") as ha, running_broker(tmp_path / "b") as hb:
        seen: dict[str, list[Any]] = {"a": [], "b": []}
        for name, h in (("a", ha), ("b", hb)):
            h.controller.topic_config_manager.update_topic_config(
                TopicConfig(topic_name="Hint", read_queue_nums=2, write_queue_nums=2)
            )
            store = h.controller.message_store

            def spying(put_many, out):  # type: ignore[no-untyped-def]
                async def spy(units):  # type: ignore[no-untyped-def]
                    out.extend(u[0].consume_queue for u in units if not isinstance(u, MessageBatch))
                    return await put_many(units)
                return spy

            store.put_many = spying(store.put_many, seen[name])  # type: ignore[method-assign]
        for i in range(4):
            for h in (ha, hb):
                r = await h.call(producer_send(i))
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert r.ext_fields["queueOffset"] == str(i)
                await h.controller.message_store.reput_message_service.wait_caught_up(10)
        qa = ha.controller.message_store.get_consume_queue("Hint", 1)
        qb = hb.controller.message_store.get_consume_queue("Hint", 1)
        assert qa is not None and qb is not None and qa is not qb
        assert seen["a"][1:] == [qa] * 3 and seen["b"][1:] == [qb] * 3
        assert qa.get_max_offset_in_queue() == qb.get_max_offset_in_queue() == 4


async def test_a_producers_batch_hands_the_store_its_queue(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        h.controller.topic_config_manager.update_topic_config(
            TopicConfig(topic_name="Hint", read_queue_nums=2, write_queue_nums=2)
        )
        store = h.controller.message_store
        seen: list[Any] = []
        put_many = store.put_many

        async def spy(units):  # type: ignore[no-untyped-def]
            seen.extend(u.consume_queue for u in units if isinstance(u, MessageBatch))
            return await put_many(units)

        store.put_many = spy  # type: ignore[method-assign]

        async def send(i: int) -> int:
            r = await h.call(producer_batch(i, 4))
            assert r.code == ResponseCode.SUCCESS, r.remark
            await store.reput_message_service.wait_caught_up(10)
            return int(r.ext_fields["queueOffset"])

        assert await send(0) == 0
        cq = store.get_consume_queue("Hint", 1)
        assert cq is not None
        assert [await send(1), await send(2)] == [4, 8]
        assert seen == [None, cq, cq]
        assert store.delete_topics({"Hint"}) == 1
        await store.wait_background_io()
        assert await send(3) == 0
        new = store.get_consume_queue("Hint", 1)
        assert new is not None and new is not cq
        assert await send(4) == 4
        assert seen[3:] == [None, new]
        assert new.get_max_offset_in_queue() == 8
        for qo in range(8):
            unit = new.get_unit(qo)
            assert unit is not None
            m = store.look_message_by_offset(unit[0])
            assert m is not None and m.body == f"b{3 + qo // 4}-{qo % 4}".encode() and m.queue_offset == qo
