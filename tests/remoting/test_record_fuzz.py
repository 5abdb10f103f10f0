"""Mutated and cut CommitLog records (what a pull answer's body holds) through decode_messages, reading every
field of every message: a ValueError, or messages; never another exception (an IndexError or struct.error
from a length that points past the record, a UnicodeDecodeError, ...)."""

from __future__ import annotations

import random

import pytest

from remoting.message import (
    MessageSysFlag,
    decode_message,
    decode_messages,
    decode_record_properties,
    encode_message_record,
    encode_properties,
)

FIELDS = ("topic", "body", "properties", "tags", "keys", "msg_id", "born_host", "store_host", "queue_id", "queue_offset",
          "store_timestamp", "born_timestamp", "commit_log_offset", "sys_flag", "reconsume_times", "body_crc", "flag")


def records() -> bytes:
    out = bytearray()
    for i in range(12):
        v6 = i % 4 == 3
        props = {"TAGS": ["TagA", "标签", "t"][i % 3], "KEYS": f"k{i} k{i + 1}", "UNIQ_KEY": f"{i:032X}", "p": "v" * i}
        out += encode_message_record(
            topic=["T", "主题", "%RETRY%G"][i % 3], queue_id=i % 4, flag=i, body=bytes([i]) * (1 + 37 * i),
            properties=encode_properties(props),
            sys_flag=(MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG) if v6 else 0,
            born_timestamp=1763800000000 + i, born_host=("::1" if v6 else "127.0.0.1", 5000 + i),
            store_host=("::1" if v6 else "127.0.0.1", 10911), queue_offset=i, physical_offset=len(out),
            store_timestamp=1763800000100 + i,
        )
    return bytes(out)


@pytest.mark.parametrize("seed", [1, 2])
def test_mutated_records_decode_or_raise_value_error(seed: int) -> None:
    rnd = random.Random(seed)
    good = records()
    assert len(decode_messages(good)) == 12
    decoded = refused = 0
    for _ in range(8000):
        b = bytearray(good)
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        if rnd.random() < 0.2:
            del b[rnd.randrange(len(b)) :]
        try:
            for m in decode_messages(bytes(b)):
                for name in FIELDS:
                    getattr(m, name)
            m, _ = decode_message(memoryview(bytes(b)), read_body=False)  # the eager path queries take
        except ValueError:
            refused += 1
            continue
        decoded += 1
    assert decoded > 1000 and refused > 1000


def test_record_properties_read_alone_match_the_full_decode_and_refuse_corruption() -> None:
    """decode_record_properties (a broker's SQL92 filter reads each scanned record's properties with it):
    the properties decode_message finds, IPv4 and IPv6 layouts alike; a mutated or cut record gives a
    ValueError or a dict, never another exception."""
    good = records()
    pos = 0
    seen = 0
    while pos < len(good):
        m, end = decode_message(good, pos)
        assert decode_record_properties(memoryview(good)[pos:end]) == m.properties and m.properties
        pos = end
        seen += 1
    assert seen == 12
    first = bytes(memoryview(good)[: decode_message(good)[1]])
    rnd = random.Random(3)
    refused = 0
    for _ in range(4000):
        b = bytearray(first)
        for _ in range(rnd.randint(1, 3)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        if rnd.random() < 0.3:
            del b[rnd.randrange(len(b)) :]
        try:
            assert isinstance(decode_record_properties(bytes(b)), dict)
        except ValueError:
            refused += 1
    assert refused > 500
