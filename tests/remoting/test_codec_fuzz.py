"""Mutated request frames through the frame decoder: a ProtocolError or commands, never another exception;
and a command read on a fast path (our producer's sends and pulls, Java's JSON and ROCKETMQ shapes) is the one
the generic header decoder reads from the same bytes."""

from __future__ import annotations

import random

import pytest

from remoting.codec import FrameDecoder, decode_json_header, decode_msgpack_header, decode_rocketmq_header
from remoting.errors import ProtocolError
from tests.support.fuzz import broker_request_frames, mutate

GENERIC = {0: decode_json_header, 1: decode_rocketmq_header, 2: decode_msgpack_header}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutated_frames_decode_as_the_generic_decoder_does_or_are_refused(seed: int) -> None:
    rnd = random.Random(seed)
    seeds = broker_request_frames()
    decoded = refused = 0
    decoder = FrameDecoder()  # one decoder throughout: its shape memos see every frame that came before
    for _ in range(10000):
        frame = mutate(rnd, rnd.choice(seeds))
        try:
            cmds = decoder.feed(frame)
        except ProtocolError:
            refused += 1
            decoder = FrameDecoder()  # the connection would close
            continue
        if not cmds:  # a length that promises more bytes: a frame still incomplete
            decoder = FrameDecoder()
            continue
        decoded += 1
        (cmd,) = cmds
        length = int.from_bytes(frame[0:4], "big")
        word = int.from_bytes(frame[4:8], "big")
        hlen = word & 0xFFFFFF
        generic = GENERIC[word >> 24](memoryview(frame)[8 : 8 + hlen])  # the fast path read it: so must this
        body = frame[8 + hlen : 4 + length] or None
        assert (cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.version, cmd.ext_fields, cmd.body or None) == (
            generic.code, generic.opaque, generic.flag, generic.remark, generic.version, generic.ext_fields, body
        ), frame
    assert decoded > 1000 and refused > 5000  # both outcomes were exercised
