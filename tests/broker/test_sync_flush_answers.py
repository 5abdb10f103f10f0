"""With SYNC_FLUSH, no send is answered before the fsync that covers it has ended, whatever shape it
came in: RocketMQ's request shapes one at a time and pipelined, batches, and every send path of our
producer (its pipelined callback path, futures, async, batches, auto-batching). A SIGKILL test cannot
see an early answer, since the page cache survives it; a power cut would lose a message that was
answered SEND_OK. Here the commit log's fsync is held shut, and every answer must wait for it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from client import Message, Producer, SendStatus
from remoting.body import TopicConfig
from remoting.codes import ResponseCode
from remoting.message import decode_offset_msg_id
from store.mapped_file import MappedFile
from tests.broker.conftest import running_broker
from tests.broker.helpers import props, send_batch, send_v1, send_v2
from tests.support.daemons import free_port


async def test_no_sync_flush_send_is_answered_before_its_fsync_ends(tmp_path: Path, namesrv: str) -> None:
    async with running_broker(
        tmp_path / "store", flushDiskType="SYNC_FLUSH", listenPort=free_port(), namesrvAddr=namesrv
    ) as h:
        h.controller.topic_config_manager.update_topic_config(
            TopicConfig(topic_name="Durable", read_queue_nums=2, write_queue_nums=2)
        )
        await h.controller.register_and_wait()
        plain = Producer("PG-plain", namesrv_addr=namesrv)
        batching = Producer("PG-batching", namesrv_addr=namesrv, auto_batch=True)
        await plain.start()
        await batching.start()
        try:
            for p in (plain, batching):  # routes, connections, the header caches of the callback path
                assert (await p.send(Message("Durable", b"warm"))).send_status is SendStatus.SEND_OK
            store = h.controller.message_store
            opened = threading.Event()
            entered = threading.Event()

            def held_fsync(mf: MappedFile) -> None:
                entered.set()
                opened.wait(10)
                MappedFile.fsync_blocking(mf)

            store.commit_log_fsync = held_fsync  # type: ignore[method-assign]

            raw = [
                send_v1("Durable", b"v1", queue_id=0, properties=props(uniq="R1")),
                send_v2("Durable", b"v2", queue_id=1, properties=props(uniq="R2", tags="T", keys="K")),
                send_batch("Durable", [(b"b0", props(uniq="RB0")), (b"b1", props(uniq="RB1"))], queue_id=0),
            ] + [send_v2("Durable", f"p{i}".encode(), queue_id=i % 2, properties=props(uniq=f"RP{i}")) for i in range(8)]
            raw_answers = [await h.client.invoke_future(h.addr, c, 15000) for c in raw]  # one write: a run
            sent: list[asyncio.Future[object]] = [*raw_answers]
            sent.append(asyncio.ensure_future(plain.send(Message("Durable", b"send", tags="T", keys="K1"))))
            sent += [plain.send_future(Message("Durable", f"f{i}".encode())) for i in range(6)]
            sent.append(asyncio.ensure_future(plain.send_batch([Message("Durable", b"x0"), Message("Durable", b"x1")])))
            callback_results: list[object] = []
            for i in range(3):
                plain.send_async(
                    Message("Durable", f"a{i}".encode()), lambda r, e: callback_results.append(r if e is None else e)
                )
            sent += [asyncio.ensure_future(batching.send(Message("Durable", f"ab{i}".encode()))) for i in range(10)]

            await asyncio.sleep(0.5)  # long enough for any early answer to arrive
            assert entered.is_set()
            early = [i for i, f in enumerate(sent) if f.done()]
            assert early == [] and callback_results == [], (early, callback_results)

            opened.set()
            results = await asyncio.wait_for(asyncio.gather(*sent), 15)
            flushed = store.commit_log.mapped_file_queue.flushed_where
            for r in results[: len(raw)]:
                assert r.code == ResponseCode.SUCCESS, r.remark  # type: ignore[attr-defined]
                assert decode_offset_msg_id(r.ext_fields["msgId"].split(",")[0])[2] < flushed  # type: ignore[attr-defined]
            assert all(r.send_status is SendStatus.SEND_OK for r in results[len(raw) :])  # type: ignore[attr-defined]
            for _ in range(100):
                if len(callback_results) == 3:
                    break
                await asyncio.sleep(0.05)
            assert [getattr(r, "send_status", r) for r in callback_results] == [SendStatus.SEND_OK] * 3
        finally:
            await batching.shutdown()
            await plain.shutdown()
