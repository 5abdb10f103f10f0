"""The producer's per-message shortcuts keep the slow path's behaviour: cached topic checks still
reject bad messages, hand-edited None properties are skipped, fast-path time-outs are typed and free
their permit, batch bodies keep Java's layout, and unique ids stay unique across fork."""

from __future__ import annotations

import asyncio
import multiprocessing
import struct
from collections.abc import AsyncIterator

import pytest

from client import Message, Producer
from client.errors import InvalidMessageError
from client.message import SendStatus, encode_messages
from client.msg_id import MessageIdGenerator, create_uniq_id
from remoting import RemotingTimeoutError
from remoting.message import decode_properties, encode_properties
from tests.client.fakes import FakeBroker, FakeNameServer, one_broker_cluster, wait_until


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeNameServer, FakeBroker]]:
    async with one_broker_cluster("HotTopic") as pair:
        yield pair


async def test_cached_topic_check_still_rejects_bad_messages(fakes: tuple[FakeNameServer, FakeBroker]) -> None:
    ns, b = fakes
    async with Producer("hot_pg", ns.addr) as p:
        await p.send(Message("HotTopic", b"warm"))
        await p.send_async(Message("HotTopic", b"cached now"))
        for bad, match in (
            (Message("HotTopic", b""), "(?i)length is zero"),
            (Message("HotTopic", b"x" * (p.max_message_size + 1)), "(?i)size over max"),
            (Message("bad topic!", b"x"), "(?i)illegal characters"),
            (Message("SCHEDULE_TOPIC_XXXX", b"x"), "(?i)forbidden"),
        ):
            with pytest.raises(InvalidMessageError, match=match):
                await p.send_async(bad)
            with pytest.raises(InvalidMessageError, match=match):
                await p.send_batch_async([Message("HotTopic", b"ok"), bad])


async def test_hand_edited_none_property_is_skipped(fakes: tuple[FakeNameServer, FakeBroker]) -> None:
    ns, b = fakes
    async with Producer("hot_pg", ns.addr) as p:
        await p.send(Message("HotTopic", b"warm"))
        m = Message("HotTopic", b"x", tags="T")
        m.properties["gone"] = None  # type: ignore[assignment]
        r = await p.send_async(m)
        props = decode_properties(b.sends[-1].ext_fields["i"])
        assert props == {"TAGS": "T", "WAIT": "true", "UNIQ_KEY": r.msg_id}


async def test_fast_path_timeout_is_typed_and_frees_its_permit(fakes: tuple[FakeNameServer, FakeBroker]) -> None:
    ns, b = fakes
    async with Producer("hot_pg", ns.addr, send_msg_timeout=300, retry_times_when_send_async_failed=0) as p:
        await p.send(Message("HotTopic", b"warm"))  # route + open connection: the fast path applies
        n0 = len(b.sends)
        b.behaviour = lambda cmd: "hang"
        with pytest.raises(RemotingTimeoutError) as ei:
            await p.send_async(Message("HotTopic", b"never"))
        assert b.addr in str(ei.value) and ei.value.elapsed_ms >= 290 and len(b.sends) - n0 == 1
        assert p._async_permits.active == 0 and not p._inflight
        b.behaviour = lambda cmd: "ok"
        assert (await p.send_async(Message("HotTopic", b"after"))).msg_id


def _reference_batch_body(msgs: list[Message]) -> bytes:
    out = b""
    for m in msgs:
        props = encode_properties(m.properties).encode()
        body = bytes(m.body)
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(props), 0, 0, m.flag, len(body))
        out += body + struct.pack(">h", len(props)) + props
    return out


def test_batch_body_equals_the_reference_encoding() -> None:
    m1 = Message("T", bytearray(b"abc"), tags="x", keys=["k1", "k2"], flag=3)
    m2 = Message("T", b"\x00" * 40, properties={"u": "v"})
    m2.properties["none"] = None  # type: ignore[assignment]
    m3 = Message("T", memoryview(b"mv-body"))
    msgs = [m1, m2, m3]
    assert encode_messages(msgs) == _reference_batch_body(msgs)


def test_ids_in_one_millisecond_share_the_time_part_and_count_up() -> None:
    gen = MessageIdGenerator(ip="10.0.0.1", pid=7, seed=1)
    ids = [gen.create() for _ in range(1000)]
    assert len(set(ids)) == 1000
    counters = [int(i[-4:], 16) for i in ids]
    assert all((b - a) & 0xFFFF == 1 for a, b in zip(counters, counters[1:], strict=False))
    assert all(len(i) == 32 and i[:20] == ids[0][:20] for i in ids)


def _child_id(q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    q.put(create_uniq_id())


def test_a_forked_child_gets_its_own_id_prefix() -> None:
    parent = create_uniq_id()  # the parent's generator exists before the fork
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_child_id, args=(q,))
    proc.start()
    try:
        child = q.get(timeout=10)
    finally:
        proc.join(10)
    # ip (8 hex) | pid (4 hex) | per-process random (8 hex): the child's pid and seed differ.
    assert child[8:20] != parent[8:20]
    assert int(child[8:12], 16) == (proc.pid or 0) & 0xFFFF


async def test_sends_beyond_the_in_flight_bound_wait_in_order_and_a_cancelled_one_is_skipped(
    fakes: tuple[FakeNameServer, FakeBroker],
) -> None:
    ns, b = fakes
    async with Producer("hot_pg", ns.addr, max_async_inflight=2, send_msg_timeout=400,
                        retry_times_when_send_async_failed=0) as p:
        await p.send(Message("HotTopic", b"warm"))  # route + open connection: the fast path applies
        n0 = len(b.sends)
        b.behaviour = lambda cmd: "hang"
        futs = [p.send_async(Message("HotTopic", b"%d" % i)) for i in range(5)]
        await wait_until(lambda: len(b.sends) - n0 == 2)
        await asyncio.sleep(0.1)
        assert len(b.sends) - n0 == 2 and p._async_permits.active == 2  # three wait for a permit
        futs[2].cancel()  # a waiting send gives up: it must never reach the broker
        b.behaviour = lambda cmd: "ok"
        results = await asyncio.gather(*futs, return_exceptions=True)
        assert [type(r).__name__ for r in results[:3]] == ["RemotingTimeoutError"] * 2 + ["CancelledError"]
        assert all(r.status is SendStatus.SEND_OK for r in results[3:])  # type: ignore[union-attr]
        assert [c.body for c in b.sends[n0:]] == [b"0", b"1", b"3", b"4"]
        assert p._async_permits.active == 0 and not p._async_permits._waiters and not p._inflight


async def test_retry_message_keeps_its_reconsume_times_when_the_first_send_must_connect(
    fakes: tuple[FakeNameServer, FakeBroker],
) -> None:
    ns, b = fakes
    topic = "%RETRY%hot_cg"
    ns.add_route(topic, {"broker-a": b.addr})
    async with Producer("hot_pg", ns.addr) as p:
        await p.fetch_publish_message_queues(topic)  # route known, no broker connection yet
        m = Message(topic, b"again", properties={"RECONSUME_TIME": "3", "MAX_RECONSUME_TIMES": "16"})
        r = await p.send_async(m)
        assert r.msg_id
        ext = b.sends[-1].ext_fields
        assert (ext["j"], ext["l"]) == ("3", "16")


async def test_a_completed_async_send_is_freed_without_the_cyclic_gc(fakes: tuple[FakeNameServer, FakeBroker]) -> None:
    """A pipelined send's future and its in-flight state must not form a reference cycle once answered:
    cycles pile up until a gc pass, which was most of the client's gc time on pipelined sends."""
    import gc
    import weakref

    ns, b = fakes
    async with Producer("hot_pg", ns.addr) as p:
        await p.send(Message("HotTopic", b"warm"))
        gc.disable()
        try:
            fut = p.send_async(Message("HotTopic", b"x"))
            assert getattr(fut, "_fast", None) is not None  # it did take the fast path
            r = await fut
            assert r.status is SendStatus.SEND_OK
            await asyncio.sleep(0)  # let the future's own done-callbacks run
            ref = weakref.ref(fut)
            del fut, r
            assert ref() is None
        finally:
            gc.enable()


@pytest.mark.parametrize(
    "make",
    [
        lambda: Message("HotTopic", b"x"),
        lambda: Message("HotTopic", b"x", wait_store_msg_ok=False),
        lambda: Message("HotTopic", b"x", tags="T"),
        lambda: Message("HotTopic", b"x", keys=["k1", "k2"]),
        lambda: Message("HotTopic", b"x", properties={"u": "v"}),
        lambda: Message("HotTopic", b"x", properties={"UNIQ_KEY": "given"}),
    ],
)
async def test_prepared_properties_equal_the_generic_encoding(
    fakes: tuple[FakeNameServer, FakeBroker], make: object
) -> None:
    """The no-tags/no-keys shortcut of the properties string gives the generic encoder's bytes."""
    ns, _b = fakes
    async with Producer("hot_pg", ns.addr) as p:
        for _ in range(2):
            msg = make()  # type: ignore[operator]
            prepared = p._prepare_now(msg)
            assert prepared.properties == encode_properties(msg.properties)
            assert decode_properties(prepared.properties)["UNIQ_KEY"] == prepared.uniq_id


def test_plain_message_shortcut_builds_the_general_properties() -> None:
    for wait in (True, False):
        want = {"WAIT": "true" if wait else "false"}
        for kw in ({}, {"keys": []}, {"properties": {}}, {"tags": ""}, {"keys": ""}, {"delay_level": 0}):
            m = Message("T", "body", wait_store_msg_ok=wait, **kw)  # type: ignore[arg-type]
            assert m.properties == want and list(m.properties) == ["WAIT"] and m.body == b"body"
    m = Message("T", b"x", tags="A", keys="k", properties={"u": "1"}, delay_level=2)
    assert list(m.properties.items()) == [("u", "1"), ("TAGS", "A"), ("KEYS", "k"), ("DELAY", "2"), ("WAIT", "true")]


async def test_prepared_batch_body_equals_the_reference_encoding(fakes: tuple[FakeNameServer, FakeBroker]) -> None:
    """_prepare_batch's shortcut for plain messages (properties string built with the new id) gives
    the generic encoder's bytes, mixed with messages that take the generic path."""
    ns, _b = fakes
    async with Producer("hot_pg", ns.addr) as p:
        msgs = [
            Message("HotTopic", b"plain-1"),
            Message("HotTopic", b"tagged", tags="T"),
            Message("HotTopic", b"plain-2", flag=9),
            Message("HotTopic", b"given-id", properties={"UNIQ_KEY": "given"}),
            Message("HotTopic", b"user-prop", properties={"u": "v"}),
        ]
        prepared = p._prepare_batch(msgs)
        assert bytes(prepared.body) == _reference_batch_body(msgs)
        assert prepared.uniq_id.split(",") == [m.properties["UNIQ_KEY"] for m in msgs]
        assert [m.properties["UNIQ_KEY"] for m in msgs][3] == "given"


async def test_sync_send_takes_the_callback_path_with_the_sync_retry_count_and_no_async_permit(
    fakes: tuple[FakeNameServer, FakeBroker],
) -> None:
    """send() writes its first attempt like a pipelined send (no command, no timer per request) but keeps
    send()'s rules: retry_times_when_send_failed attempts, and no permit of max_async_inflight taken."""
    from client.producer import producer as producer_mod
    from remoting.codes import ResponseCode

    ns, b = fakes
    async with Producer("hot_pg", ns.addr, max_async_inflight=1, retry_times_when_send_failed=2,
                        retry_times_when_send_async_failed=0, send_msg_timeout=2000) as p:
        await p.send(Message("HotTopic", b"warm"))  # route + open connection
        started: list[object] = []
        real = producer_mod.Producer._start_fast

        def spy(self: Producer, out: object, *a: object, **kw: object) -> bool:
            started.append(a[3] if len(a) > 3 else kw.get("mode"))
            return real(self, out, *a, **kw)  # type: ignore[arg-type]

        producer_mod.Producer._start_fast = spy  # type: ignore[method-assign]
        try:
            b.behaviour = lambda cmd: "hang"
            held = p.send_async(Message("HotTopic", b"holds the only async permit"))
            await wait_until(lambda: len(b.held) == 1)
            assert p._async_permits.active == 1
            n0 = len(b.sends)
            answers = iter([(ResponseCode.SERVICE_NOT_AVAILABLE, "not now"), (ResponseCode.SYSTEM_ERROR, "no"), "ok"])
            b.behaviour = lambda cmd: next(answers)
            r = await p.send(Message("HotTopic", b"sync"))  # not blocked by the async permit
            assert r.status is SendStatus.SEND_OK and len(b.sends) - n0 == 3
            assert producer_mod.CommunicationMode.SYNC in started
            assert p._async_permits.active == 1 and not held.done()
            b.behaviour = lambda cmd: (ResponseCode.SYSTEM_ERROR, "down")
            n0 = len(b.sends)
            with pytest.raises(Exception, match="down"):
                await p.send(Message("HotTopic", b"fails"))
            assert len(b.sends) - n0 == 3  # 1 + retry_times_when_send_failed
        finally:
            producer_mod.Producer._start_fast = real  # type: ignore[method-assign]
            held.cancel()
        await asyncio.sleep(0)
        assert p._async_permits.active == 0


async def test_sync_send_time_out_is_typed_and_a_cancelled_send_frees_nothing_it_did_not_take(
    fakes: tuple[FakeNameServer, FakeBroker],
) -> None:
    ns, b = fakes
    async with Producer("hot_pg", ns.addr, send_msg_timeout=300) as p:
        await p.send(Message("HotTopic", b"warm"))
        n0 = len(b.sends)
        b.behaviour = lambda cmd: "hang"
        with pytest.raises(RemotingTimeoutError) as ei:
            await p.send(Message("HotTopic", b"never"))
        assert b.addr in str(ei.value) and len(b.sends) - n0 == 1  # the budget is spent: no retry
        t = asyncio.ensure_future(p.send(Message("HotTopic", b"cancelled")))
        await wait_until(lambda: len(b.sends) - n0 == 2)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert p._async_permits.active == 0 and not p._inflight
        b.behaviour = lambda cmd: "ok"
        assert (await p.send(Message("HotTopic", b"after"))).status is SendStatus.SEND_OK


def test_ids_cached_per_256_and_made_many_at_once_keep_the_layout() -> None:
    """create() caches the id up to its last byte (per ms and counter high byte); create_many() reads the
    clock once: both give prefix | ms since month start | 16-bit counter, counting up across the
    high-byte and wrap boundaries."""
    import itertools
    import time

    gen = MessageIdGenerator(ip="10.0.0.1", pid=7, seed=1)
    gen._counter = itertools.count(0xFFF0)  # cross the 0x..FF boundaries and the 16-bit wrap
    ids = [gen.create() for _ in range(600)] + gen.create_many(600) + [gen.create() for _ in range(10)]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 and set(i) <= set("0123456789ABCDEF") for i in ids)
    counters = [int(i[-4:], 16) for i in ids]
    assert counters[0] == 0xFFF0 and all((b - a) & 0xFFFF == 1 for a, b in zip(counters, counters[1:], strict=False))
    assert {i[:20] for i in ids} == {gen.prefix}
    start, _ = gen._start_ms, gen._next_start_ms
    now = time.time_ns() // 1_000_000
    for i in ids:
        assert abs(start + int(i[20:28], 16) - now) < 60_000  # the time part is the ms since the month began


async def test_batch_ids_are_new_where_missing_and_kept_where_given(fakes: tuple[FakeNameServer, FakeBroker]) -> None:
    ns, b = fakes
    async with Producer("hot_pg", ns.addr) as p:
        msgs = [Message("HotTopic", b"a"), Message("HotTopic", b"b", properties={"UNIQ_KEY": "GIVEN"}),
                Message("HotTopic", b"c", tags="T")]
        r = await p.send_batch(msgs)
        ids = r.msg_id.split(",")
        assert ids[1] == "GIVEN" and len(set(ids)) == 3 and [m.properties["UNIQ_KEY"] for m in msgs] == ids
        assert b.sends[-1].body == encode_messages(msgs)


async def test_sync_batch_send_takes_the_callback_path_and_retries_as_send(
    fakes: tuple[FakeNameServer, FakeBroker],
) -> None:
    from client.producer import producer as producer_mod
    from remoting.codes import ResponseCode

    ns, b = fakes
    async with Producer("hot_pg", ns.addr, retry_times_when_send_failed=1, retry_times_when_send_async_failed=0) as p:
        await p.send(Message("HotTopic", b"warm"))
        modes: list[object] = []
        real = producer_mod.Producer._start_fast

        def spy(self: Producer, out: object, *a: object, **kw: object) -> bool:
            modes.append(a[3] if len(a) > 3 else kw.get("mode"))
            return real(self, out, *a, **kw)  # type: ignore[arg-type]

        producer_mod.Producer._start_fast = spy  # type: ignore[method-assign]
        try:
            answers = iter([(ResponseCode.SYSTEM_ERROR, "once"), "ok"])
            b.behaviour = lambda cmd: next(answers)
            n0 = len(b.sends)
            r = await p.send_batch([Message("HotTopic", b"a"), Message("HotTopic", b"b")])
        finally:
            producer_mod.Producer._start_fast = real  # type: ignore[method-assign]
        assert r.status is SendStatus.SEND_OK and len(r.msg_id.split(",")) == 2
        assert len(b.sends) - n0 == 2 and modes[0] is producer_mod.CommunicationMode.SYNC
        assert b.sends[-1].body == b.sends[-2].body  # the retry re-sends the batch as prepared
        assert p._async_permits.active == 0


async def test_fast_path_futures_belong_to_the_instance_loop_and_other_threads_are_refused(
    fakes: tuple[FakeNameServer, FakeBroker],
) -> None:
    """The fast path names the instance's loop instead of asking asyncio for the running one (a getpid()
    system call per look-up on CPython 3.11); off that loop's thread it must still refuse, as before."""
    ns, b = fakes
    loop = asyncio.get_running_loop()
    async with Producer("hot_pg", ns.addr) as p:
        await p.send(Message("HotTopic", b"warm"))
        inst = p._instance
        assert inst is not None and inst.loop_if_current() is loop
        fut = p.send_async(Message("HotTopic", b"fast"))
        assert fut.get_loop() is loop and (await fut).msg_id

        seen: list[object] = []

        def elsewhere() -> None:
            seen.append(inst.loop_if_current())
            try:
                p.send_async(Message("HotTopic", b"from another thread"))
            except RuntimeError as e:
                seen.append(e)

        n0 = len(b.sends)
        await asyncio.to_thread(elsewhere)
        assert seen[0] is None
        assert isinstance(seen[1], RuntimeError) and "no running event loop" in str(seen[1])
        await asyncio.sleep(0.05)
        assert len(b.sends) == n0  # nothing was written from the other thread
