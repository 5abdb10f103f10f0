"""_build_batch's column-wise paths (one struct unpack for a batch of one shape, properties checked and
cut column by column) give exactly what the message-by-message reference gives: the same flags,
bodies, properties dicts and stored property bytes, for canonical and odd wire properties alike."""

from __future__ import annotations

import random
import struct

import pytest

from broker.processor.batch_template import decode_uniform_batch
from broker.processor.common import BadRequest
from broker.processor.send_message_processor import (
    _batch_item_slow,
    _columnar_properties,
    _per_message_properties,
    _uniform_columns,
    _walk_batch,
)
from remoting.message import decode_properties, encode_properties

_HEAD = struct.Struct(">iiiii")
_I16 = struct.Struct(">h")


def wire(msgs: list[tuple[int, bytes, bytes]]) -> bytes:
    """A SEND_BATCH_MESSAGE body from (flag, body, raw properties)."""
    out = []
    for flag, body, props in msgs:
        out.append(_HEAD.pack(20 + len(body) + 2 + len(props), 0, 0, flag, len(body)) + body + _I16.pack(len(props)) + props)
    return b"".join(out)


def reference(raw: bytes, batch_props: dict[str, str]) -> tuple[dict[str, str], bytes]:
    """What the store kept before the column paths: decode (invalid UTF-8 replaced), the message's own
    items win over the batch's, WAIT only in the dict, never in the stored bytes."""
    props = decode_properties(raw.decode("utf-8", "replace")) if raw else {}
    for k, v in batch_props.items():
        props.setdefault(k, v)
    stored = {k: v for k, v in props.items() if k != "WAIT"}
    return props, encode_properties(stored).encode("utf-8")


def test_uniform_columns_match_the_walk() -> None:
    rnd = random.Random(3)
    for _ in range(300):
        n = rnd.randint(2, 40)
        blen = rnd.randint(0, 50)
        plen_props = b"UNIQ_KEY\x01" + b"A" * rnd.randint(0, 5)
        msgs = [(rnd.randint(-5, 5), bytes(rnd.getrandbits(8) for _ in range(blen)), plen_props) for _ in range(n)]
        if rnd.random() < 0.3:  # one message of another shape: the walk handles it
            k = rnd.randrange(n)
            msgs[k] = (msgs[k][0], msgs[k][1] + b"x", msgs[k][2])
        data = wire(msgs)
        walked = _walk_batch(data)
        assert walked == ([f for f, _, _ in msgs], [b for _, b, _ in msgs], [p for _, _, p in msgs])
        cols = _uniform_columns(data)
        if cols is not None:
            assert cols == walked
        else:
            assert len({(len(b), len(p)) for _, b, p in msgs}) > 1


def test_uniform_columns_refuse_what_is_not_one_shape() -> None:
    one = wire([(0, b"abc", b"K\x01v")])
    assert _uniform_columns(one + one + one) is not None
    assert _uniform_columns(one) is None  # a single message: nothing to gain
    assert _uniform_columns(one + one[:-1] + b"w") is not None  # same sizes, other content
    bad = bytearray(one + one)
    struct.pack_into(">i", bad, len(one), 999)  # the second message's total size lies
    assert _uniform_columns(bytes(bad)) is None
    with pytest.raises(BadRequest):
        _walk_batch(bytes(bad))
    # Sizes that point past the body (a truncated or lying first header): refused, never read past the end.
    for total, body_len in ((10_000, 20), (10_000, 5_000), (60, 10_000), (60, -1), (10, 0)):
        lying = _HEAD.pack(total, 0, 0, 0, body_len) + bytes(40)
        assert _uniform_columns(lying) is None
        with pytest.raises(BadRequest):
            _walk_batch(lying)


@pytest.mark.parametrize("batch_props", [{"CLUSTER": "C"}, {"CLUSTER": "C", "X": "y"}, {"CLUSTER": "C", "TAGS": "bt"}])
def test_column_properties_match_the_reference(batch_props: dict[str, str]) -> None:
    rnd = random.Random(11)
    names = ["WAIT", "UNIQ_KEY", "TAGS", "KEYS", "CLUSTER", "X", "é", ""]
    values = ["true", "false", "v1", "v22", "", "é", "a\x01b"]
    batch_b = encode_properties(batch_props).encode()
    hits = 0
    for _ in range(3000):
        n = rnd.randint(1, 6)
        shape = rnd.sample(names[:6], rnd.randint(1, 4))
        raws: list[bytes] = []
        for _ in range(n):
            items = [(k, rnd.choice(values[:4])) for k in shape]
            if rnd.random() < 0.15:  # an odd message: other names, empty or separator-holding parts
                items = [(rnd.choice(names), rnd.choice(values)) for _ in range(rnd.randint(0, 3))]
            raw = "\x02".join(f"{k}\x01{v}" for k, v in items).encode()
            if rnd.random() < 0.05:
                raw += b"\xff"  # invalid UTF-8
            if rnd.random() < 0.05:
                raw += b"\x02"  # trailing separator
            raws.append(raw)
        want = [reference(r, batch_props) for r in raws]
        per = _per_message_properties(raws, batch_props, batch_b)
        assert per == ([p for p, _ in want], [s for _, s in want]), raws
        col = _columnar_properties(raws, batch_props, batch_b)
        if col is not None:
            hits += 1
            assert col == per, raws
            assert [list(p) for p in col[0]] == [list(p) for p in per[0]]  # same key order too
    assert hits > 200  # the column path is taken for the common shapes


def test_column_properties_cut_wait_wherever_it_is() -> None:
    batch = {"CLUSTER": "C"}
    for raw in (b"WAIT\x01true\x02UNIQ_KEY\x01u1", b"UNIQ_KEY\x01u1\x02WAIT\x01true",
                b"KEYS\x01k\x02WAIT\x01true\x02TAGS\x01t", b"WAIT\x01false"):
        raws = [raw, raw.replace(b"u1", b"u2")]
        col = _columnar_properties(raws, batch, b"CLUSTER\x01C")
        assert col is not None
        assert col == ([reference(r, batch)[0] for r in raws], [reference(r, batch)[1] for r in raws])
    # WAIT values that differ: cut message by message, same answer.
    raws = [b"WAIT\x01true\x02UNIQ_KEY\x01u1", b"WAIT\x01false\x02UNIQ_KEY\x01u2"]
    assert _columnar_properties(raws, batch, b"CLUSTER\x01C") == (
        [reference(r, batch)[0] for r in raws], [reference(r, batch)[1] for r in raws])


def test_column_properties_refuse_misaligned_messages() -> None:
    # Same keys overall, but the second message has one item and the third three (a repeated name).
    raws = [b"W\x01a\x02U\x01b", b"W\x01a", b"U\x01b\x02W\x01a\x02U\x01c"]
    assert _columnar_properties(raws, {"CLUSTER": "C"}, b"CLUSTER\x01C") is None
    # Two separators in one item, none in the next: alternation breaks.
    raws = [b"W\x01a\x02U\x01b", b"W\x01a\x01U\x02b"]
    assert _columnar_properties(raws, {"CLUSTER": "C"}, b"CLUSTER\x01C") is None


def test_slow_item_keeps_the_messages_own_value() -> None:
    props, stored = _batch_item_slow(b"CLUSTER\x01mine\x02WAIT\x01true\x02a\x01b", {"CLUSTER": "C", "Z": "z"})
    assert props == {"CLUSTER": "mine", "WAIT": "true", "a": "b", "Z": "z"}
    assert stored == b"CLUSTER\x01mine\x02a\x01b\x02Z\x01z"


def _assembled(pieces: tuple[bytes, ...], columns: list[list[bytes]], i: int) -> bytes:
    out = [pieces[0]]
    for col, piece in zip(columns, pieces[1:], strict=True):
        out += [col[i], piece]
    return b"".join(out)


@pytest.mark.parametrize("batch_props", [{"CLUSTER": "C"}, {"CLUSTER": "C", "X": "y"}, {"CLUSTER": "C", "TAGS": "bt"}])
def test_uniform_batch_template_matches_the_reference(batch_props: dict[str, str]) -> None:
    """decode_uniform_batch (one struct for a batch of one shape, stored properties as pieces around the
    value columns) gives what the message-by-message reference gives, or refuses."""
    rnd = random.Random(5)
    names = ["WAIT", "UNIQ_KEY", "TAGS", "KEYS", "CLUSTER", "X", "é", ""]
    batch_b = encode_properties(batch_props).encode()
    hits = 0
    for _ in range(3000):
        n = rnd.randint(1, 7)
        shape = rnd.sample(names[:7], rnd.randint(1, 4))
        widths = {k: rnd.randint(1, 4) for k in shape}
        # Per item: one value throughout, or values of one byte length (ASCII, or two-byte characters).
        kinds = {k: rnd.choice([["true"], ["é", "ü"], ["t", "a", "z"]]) for k in shape}
        body_len = rnd.randint(0, 20)
        msgs: list[tuple[int, bytes, bytes]] = []
        for _ in range(n):
            items = []
            for k in shape:
                v = "".join(rnd.choice(kinds[k]) for _ in range(widths[k]))
                if rnd.random() < 0.03:
                    v = v[:-1] + rnd.choice(["\x01", "\x02", "\x00"])  # a separator (or NUL) in a value
                items.append((k, v))
            raw = "\x02".join(f"{k}\x01{v}" for k, v in items).encode()
            if rnd.random() < 0.03:
                raw = raw[:-1] + b"\xff"  # invalid UTF-8, same length
            if rnd.random() < 0.03:
                raw = raw.replace(b"\x01", b"\x02", 1)  # an item without a name-value separator
            msgs.append((rnd.randint(-2, 2), bytes(rnd.getrandbits(8) for _ in range(body_len)), raw))
        data = wire(msgs)
        got = decode_uniform_batch(data, batch_props, batch_b)
        if got is None:
            continue
        hits += 1
        flags, bodies, blen, props_list, pieces, columns, stored_len = got
        assert flags == [f for f, _, _ in msgs] and bodies == [b for _, b, _ in msgs] and blen == body_len
        want = [reference(p, batch_props) for _, _, p in msgs]
        assert props_list == [p for p, _ in want], msgs
        stored = [_assembled(pieces, columns, i) for i in range(len(msgs))]
        assert stored == [s for _, s in want], msgs
        assert {len(s) for s in stored} == {stored_len}
    assert hits > 500  # the common shapes take the template


def test_uniform_batch_template_refuses_other_shapes() -> None:
    batch, batch_b = {"CLUSTER": "C"}, b"CLUSTER\x01C"
    one = wire([(0, b"abc", b"WAIT\x01true\x02UNIQ_KEY\x01u1")] * 3)
    assert decode_uniform_batch(one, batch, batch_b) is not None
    assert decode_uniform_batch(wire([(0, b"abc", b"WAIT\x01true")]), batch, batch_b) is None  # one message
    # Same sizes, items in another order (or another name) in the second message.
    swapped = wire([(0, b"abc", b"A\x01x\x02B\x01y"), (0, b"abc", b"B\x01y\x02A\x01x")])
    assert decode_uniform_batch(swapped, batch, batch_b) is None
    other = wire([(0, b"abc", b"A\x01x\x02B\x01y"), (0, b"abc", b"A\x01x\x02C\x01y")])
    assert decode_uniform_batch(other, batch, batch_b) is None
    # A value that moves the separator (same length, same separator count).
    moved = wire([(0, b"abc", b"A\x01xy\x02B\x01z"), (0, b"abc", b"A\x01x\x02B\x01yz")])
    assert decode_uniform_batch(moved, batch, batch_b) is None
    # A name the batch sets too: the message's own value must win (the general path).
    assert decode_uniform_batch(wire([(0, b"a", b"CLUSTER\x01m")] * 2), batch, batch_b) is None
    # Lying sizes in a later message.
    bad = bytearray(one)
    struct.pack_into(">i", bad, len(one) // 3 + 16, 2)  # the second message's body length
    assert decode_uniform_batch(bytes(bad), batch, batch_b) is None
