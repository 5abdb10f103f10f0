"""Pipelined sends on one connection: the broker stores a run of them with one put_many and still
answers each request for itself (opaque, queue offset, msgId, errors), in arrival order."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from broker.processor.send_message_processor import (
    PROPERTY_SHAPES_MAX,
    PROPERTY_SHAPES_REST,
    PropertyShapes,
    _canonical_and_stored,
    _decode_properties,
    _encode_without_wait,
    _stored_properties,
)
from remoting.body import TopicConfig
from remoting.codes import ResponseCode
from remoting.headers import SendMessageResponseHeader
from remoting.message import decode_messages, decode_offset_msg_id, decode_properties, encode_properties
from tests.broker.conftest import running_broker
from tests.broker.helpers import props, pull, send_batch, send_v1, send_v2


async def test_pipelined_sends_are_grouped_and_answered_per_request(tmp_path: Path) -> None:
    async with running_broker(tmp_path, maxMessageSize=4096) as h:
        h.controller.topic_config_manager.update_topic_config(
            TopicConfig(topic_name="Pipe", read_queue_nums=2, write_queue_nums=2)
        )
        store = h.controller.message_store
        units_per_call: list[int] = []
        put_many = store.put_many

        async def counting(units):  # type: ignore[no-untyped-def]
            units_per_call.append(len(units))
            return await put_many(units)

        store.put_many = counting  # type: ignore[method-assign]
        await h.call(send_v2("Pipe", b"warm", queue_id=1, properties=props(uniq="W")))
        cmds = []
        expect: list[tuple[int, str | None]] = []  # (code, uniq) per request
        for i in range(12):
            cmds.append(send_v2("Pipe", f"m{i}".encode(), queue_id=0, properties=props(uniq=f"U{i}")))
            expect.append((ResponseCode.SUCCESS, f"U{i}"))
            if i == 3:
                cmds.append(send_v2("bad topic!", b"x", properties=props(uniq="B1")))
                expect.append((ResponseCode.INVALID_PARAMETER, None))
            if i == 5:
                cmds.append(send_batch("Pipe", [(b"b0", props(uniq="BA")), (b"b1", props(uniq="BB"))], queue_id=0))
                expect.append((ResponseCode.SUCCESS, None))
            if i == 7:
                cmds.append(send_v1("Pipe", b"x" * 5000, queue_id=0))
                expect.append((ResponseCode.MESSAGE_ILLEGAL, None))
            if i == 8:
                cmds.append(send_v2("Pipe", b"q", queue_id=9))
                expect.append((ResponseCode.INVALID_PARAMETER, None))
        # invoke_future writes all of them in one write: the broker reads them as one run.
        futs = [await h.client.invoke_future(h.addr, c, 5000) for c in cmds]
        resps = await asyncio.wait_for(asyncio.gather(*futs), 10)
        assert max(units_per_call) > 1, units_per_call

        offsets = []
        phys = []
        for (code, uniq), r in zip(expect, resps, strict=True):
            assert r.code == code, (code, r.code, r.remark)
            if code != ResponseCode.SUCCESS:
                continue
            rh = SendMessageResponseHeader.decode(r.ext_fields)
            assert rh.queue_id == 0 and rh.transaction_id == uniq
            ids = rh.msg_id.split(",")
            assert len(ids) == (1 if uniq else 2)
            offsets.append(rh.queue_offset)
            phys.extend(decode_offset_msg_id(i)[2] for i in ids)
            assert r.ext_fields["MSG_REGION"] == "DefaultRegion" and r.ext_fields["TRACE_ON"] == "true"
        # Arrival order is storage order: queue offsets and commit log offsets only go up.
        assert offsets == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13]
        assert phys == sorted(phys) and len(set(phys)) == len(phys)
        assert await store.wait_dispatched(5.0)
        p = await h.call(pull("Pipe", 0, 0, max_nums=32))
        assert p.code == ResponseCode.SUCCESS, p.remark
        got = decode_messages(p.body)
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(6)] + [b"b0", b"b1"] + [
            f"m{i}".encode() for i in range(6, 12)
        ]
        assert [m.uniq_key for m in got[:6]] == [f"U{i}" for i in range(6)]
        assert all("WAIT" not in m.properties and m.properties["CLUSTER"] == "DefaultCluster" for m in got)
        assert [m.msg_id for m in got[:1]] == [resps[0].ext_fields["msgId"]]


async def test_pipelined_sync_flush_sends_all_wait_for_disk(tmp_path: Path) -> None:
    async with running_broker(tmp_path, flushDiskType="SYNC_FLUSH") as h:
        await h.call(send_v2("Durable", b"warm", queue_id=0, properties=props(uniq="W")))
        cmds = [send_v2("Durable", f"d{i}".encode(), queue_id=0, properties=props(uniq=f"D{i}")) for i in range(20)]
        futs = [await h.client.invoke_future(h.addr, c, 5000) for c in cmds]
        resps = await asyncio.wait_for(asyncio.gather(*futs), 10)
        assert all(r.code == ResponseCode.SUCCESS for r in resps), [r.remark for r in resps]
        mfq = h.controller.message_store.commit_log.mapped_file_queue
        last_phy = decode_offset_msg_id(resps[-1].ext_fields["msgId"])[2]
        assert mfq.flushed_where > last_phy


def test_stored_properties_string_matches_reencoding() -> None:
    rnd = random.Random(7)
    parts = ["a", "b", "WAIT", "CLUSTER", "\x01", "\x02", "x", "UNIQ_KEY", "", "TAGS", "\u00e9"]
    for _ in range(20000):
        raw = "".join(rnd.choice(parts) for _ in range(rnd.randint(0, 12)))
        p, canonical = _decode_properties(raw)
        assert p == decode_properties(raw), repr(raw)
        if canonical:
            assert encode_properties(p) == raw, repr(raw)
            if "CLUSTER" not in p:
                want = dict(p)
                want["CLUSTER"] = "C"
                assert _stored_properties(raw, p, "CLUSTER\x01C") == _encode_without_wait(want), repr(raw)


def test_property_shapes_give_what_splitting_every_item_gives() -> None:
    """PropertyShapes (the send path's memo of a properties string without its UNIQ_KEY value) answers as
    _canonical_and_stored for any string: the same dict, in the same order, and the same stored string,
    on a first sight, on a hit with another id, and for strings that only look like a known shape (an id
    with a separator in it, an empty id, UNIQ_KEY as the end of a longer name)."""
    rnd = random.Random(11)
    parts = ["a", "b", "WAIT", "CLUSTER", "\x01", "\x02", "x", "UNIQ_KEY", "", "TAGS", "KEYS", "\u00e9"]
    heads = ["TAGS\x01t1\x02KEYS\x01k\x02WAIT\x01true\x02", "WAIT\x01true\x02", "a\x01b\x02", "",
             "TAGS\x01t\x02MY", "UNIQ_KEY\x01z\x02", "TRAN_MSG\x01true\x02", "CLUSTER\x01c\x02"]
    tails = ["", "\x02x\x01y", "\x02WAIT\x01false", "\x02", "\x02TAGS\x01t2"]
    ids = ["7F00000100010002", "AB", "", "a\x01b", "x\x02y", "\u00e9"]
    shapes = PropertyShapes()
    hits = 0
    for n in range(30000):
        if n % 3 == 0:
            raw = "".join(rnd.choice(parts) for _ in range(rnd.randint(0, 12)))
        else:
            raw = f"{rnd.choice(heads)}UNIQ_KEY\x01{rnd.choice(ids)}{n % 97 if n % 2 else ''}{rnd.choice(tails)}"
        before = len(shapes.shapes)
        got = shapes.get(raw, "C", "CLUSTER\x01C")
        hits += len(shapes.shapes) == before and got is not None
        want = _canonical_and_stored(raw, "C", "CLUSTER\x01C")
        assert (got is None) == (want is None), repr(raw)
        if got is not None and want is not None:
            assert list(got[0].items()) == list(want[0].items()) and got[1] == want[1], repr(raw)
            got[0]["TAGS"] = "changed by the caller"  # a hit hands out its own copy
    assert hits > 3000  # (about 5 400 with this seed)


def test_property_shapes_stay_bounded_when_every_message_has_its_own() -> None:
    shapes = PropertyShapes()
    for n in range(PROPERTY_SHAPES_MAX):
        shapes.get(f"KEYS\x01order-{n}\x02WAIT\x01true\x02UNIQ_KEY\x01{n:08X}", "C", "CLUSTER\x01C")
    assert len(shapes.shapes) == PROPERTY_SHAPES_MAX and not shapes.rest
    raw = "KEYS\x01order-x\x02WAIT\x01true\x02UNIQ_KEY\x01FFFF"
    assert shapes.get(raw, "C", "CLUSTER\x01C") == _canonical_and_stored(raw, "C", "CLUSTER\x01C")
    # Full: emptied, and the next sends go without it for a while (then it learns again).
    assert len(shapes.shapes) == 1 and shapes.rest == PROPERTY_SHAPES_REST
    for n in range(PROPERTY_SHAPES_REST):
        shapes.get(f"KEYS\x01again-{n}\x02UNIQ_KEY\x01{n:08X}", "C", "CLUSTER\x01C")
    assert len(shapes.shapes) == 1 and shapes.rest == 0
    shapes.get("KEYS\x01new\x02UNIQ_KEY\x0101", "C", "CLUSTER\x01C")
    assert len(shapes.shapes) == 2
    # Another cluster name: what was learnt for the old one is dropped.
    got = shapes.get("KEYS\x01new\x02UNIQ_KEY\x0102", "D", "CLUSTER\x01D")
    assert got is not None and got[1].endswith("CLUSTER\x01D") and got[0]["CLUSTER"] == "D"
