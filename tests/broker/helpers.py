"""Request builders for broker tests: what real clients put on the wire."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable

from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode_send_header_v2,
)
from remoting.message import encode_properties

PULL_SUSPEND_SUBSCRIPTION = 0x2 | 0x4
PULL_COMMIT_SUSPEND_SUBSCRIPTION = 0x1 | 0x2 | 0x4


def props(tags: str | None = None, keys: str | None = None, uniq: str | None = None, **extra: str) -> str:
    p: dict[str, str] = {}
    if keys:
        p["KEYS"] = keys
    if tags:
        p["TAGS"] = tags
    if uniq:
        p["UNIQ_KEY"] = uniq
    p["WAIT"] = "true"
    p.update(extra)
    return encode_properties(p)


def send_v1(topic: str, body: bytes, *, queue_id: int = -1, group: str = "PG", properties: str = "",
            default_queue_nums: int = 4, **kw: object) -> RemotingCommand:
    """SEND_MESSAGE (10) with RocketMQ's long header names, values as strings (old Java clients)."""
    h = SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=default_queue_nums,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties,
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )
    for k, v in kw.items():
        setattr(h, k, v)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, h.encode(), body)


def send_v2(topic: str, body: bytes, *, queue_id: int = -1, group: str = "PG", properties: str = "",
            omit_lm: bool = True) -> RemotingCommand:
    """SEND_MESSAGE_V2 (310) with short names and int/bool values, as the C++ core sends it."""
    ext: dict = {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": "N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": str(int(time.time() * 1000)),
        "h": 0,
        "i": properties,
        "j": "0",
        "k": False,
    }
    if not omit_lm:
        ext["l"] = 16
        ext["m"] = False
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)


def encode_batch(messages: list[tuple[bytes, str]]) -> bytes:
    """MessageDecoder.encodeMessages: TOTALSIZE MAGIC(0) BODYCRC(0) FLAG BODY(4+n) PROPERTIES(2+n) per message."""
    out = bytearray()
    for body, properties in messages:
        pb = properties.encode()
        total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(pb)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(pb)) + pb
    return bytes(out)


def send_batch(topic: str, messages: list[tuple[bytes, str]], *, queue_id: int = -1, group: str = "PG") -> RemotingCommand:
    h = SendMessageRequestHeader(
        producer_group=group, topic=topic, queue_id=queue_id, born_timestamp=int(time.time() * 1000),
        properties=encode_properties({"WAIT": "true"}), batch=True,
    )
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, encode_send_header_v2(h), encode_batch(messages))


def pull(topic: str, queue_id: int, offset: int, *, group: str = "CG", subscription: str | None = "*",
         sys_flag: int = PULL_SUSPEND_SUBSCRIPTION, suspend_ms: int = 15000, max_nums: int = 32,
         commit_offset: int = 0) -> RemotingCommand:
    h = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=sys_flag,
        commit_offset=commit_offset,
        suspend_timeout_millis=suspend_ms,
        subscription=subscription,
        sub_version=0,
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, h.encode())


async def wait_until(pred: Callable[[], object], timeout: float = 5.0, interval: float = 0.02) -> object:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


async def invoke(client: RemotingClient, addr: str, cmd: RemotingCommand, timeout_ms: float = 5000) -> RemotingCommand:
    return await client.invoke(addr, cmd, timeout_ms)
