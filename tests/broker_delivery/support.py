"""Wire helpers for the delivery-guarantee tests: what a RocketMQ client sends, and bounded waits."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from remoting.body import HeartbeatData, SubscriptionGroupConfig, TopicConfigSerializeWrapper, TopicRouteData
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageResponseHeader,
)
from remoting.message import MessageExt, decode_messages, decode_offset_msg_id, encode_properties

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
PULL_SUBSCRIPTION = 0x4
PULL_SUSPEND_SUBSCRIPTION = 0x2 | 0x4

# Levels: 1=200ms 2=500ms 3=300ms 4=500ms 5=700ms 6=1s 7=2s 8=1h (retries use 3, 4, 5, ...)
DELAY_LEVELS = "200ms 500ms 300ms 500ms 700ms 1s 2s 1h"
DELAY_MS = {1: 200, 2: 500, 3: 300, 4: 500, 5: 700, 6: 1000, 7: 2000, 8: 3_600_000}


def now_ms() -> int:
    return int(time.time() * 1000)


def message_props(
    *, tags: str | None = None, keys: str | None = None, uniq: str | None = None, **extra: str
) -> str:
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


async def until(pred: Callable[[], Any | Awaitable[Any]], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


@dataclass
class Sent:
    msg_id: str  # offset msg id
    queue_id: int
    queue_offset: int
    commit_log_offset: int


class Wire:
    """One broker (and its NameServer) driven over the wire, as a RocketMQ client would."""

    def __init__(self, broker_addr: str, namesrv_addr: str | None = None) -> None:
        self.addr = broker_addr
        self.namesrv_addr = namesrv_addr
        self.client = RemotingClient()

    async def close(self) -> None:
        await self.client.close()

    async def call(self, cmd: RemotingCommand, timeout_ms: float = 5000, addr: str | None = None) -> RemotingCommand:
        return await self.client.invoke(addr or self.addr, cmd, timeout_ms)

    # ------------------------------------------------------------------ send

    def send_cmd(
        self, topic: str, body: bytes, *, queue_id: int = -1, properties: str = "", group: str = "PG",
        reconsume_times: int = 0, max_reconsume_times: int | None = None, sys_flag: int = 0,
    ) -> RemotingCommand:
        ext: dict[str, Any] = {
            "a": group, "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": sys_flag,
            "g": str(now_ms()), "h": 0, "i": properties, "j": str(reconsume_times), "k": False,
        }
        if max_reconsume_times is not None:
            ext["l"] = max_reconsume_times
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)

    async def send(self, topic: str, body: bytes, **kw: Any) -> Sent:
        r = await self.call(self.send_cmd(topic, body, **kw))
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        h = SendMessageResponseHeader.decode(r.ext_fields)
        return Sent(h.msg_id, h.queue_id, h.queue_offset, decode_offset_msg_id(h.msg_id)[2])

    async def send_back(
        self, offset: int, group: str, *, delay_level: int = 0, max_reconsume_times: int | None = None,
        origin_msg_id: str | None = None, origin_topic: str | None = None,
    ) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader(
            offset=offset, group=group, delay_level=delay_level, origin_msg_id=origin_msg_id,
            origin_topic=origin_topic, unit_mode=False, max_reconsume_times=max_reconsume_times,
        )
        return await self.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, h.encode()))

    # ------------------------------------------------------------------ pull

    async def pull_raw(
        self, topic: str, queue_id: int, offset: int, *, group: str = "CG", suspend_ms: int = 0, max_nums: int = 32
    ) -> RemotingCommand:
        h = PullMessageRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
            sys_flag=PULL_SUSPEND_SUBSCRIPTION if suspend_ms else PULL_SUBSCRIPTION, commit_offset=0,
            suspend_timeout_millis=suspend_ms, subscription="*", sub_version=0, expression_type="TAG",
        )
        return await self.call(RemotingCommand.request(RequestCode.PULL_MESSAGE, h.encode()), suspend_ms + 5000)

    async def pull(
        self, topic: str, queue_id: int, offset: int, *, group: str = "CG", wait_s: float = 0.0
    ) -> list[MessageExt]:
        """Messages from `offset` on; with wait_s, long-poll (bounded) until there is at least one."""
        deadline = time.monotonic() + wait_s
        while True:
            left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
            r = await self.pull_raw(topic, queue_id, offset, group=group, suspend_ms=min(left_ms, 5000))
            if r.code == ResponseCode.SUCCESS:
                return decode_messages(r.body_bytes())
            assert r.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED,
                              ResponseCode.PULL_RETRY_IMMEDIATELY), (r.code, r.remark)
            if time.monotonic() >= deadline:
                return []
            if r.code != ResponseCode.PULL_NOT_FOUND:
                await asyncio.sleep(0.02)

    async def pull_one(self, topic: str, queue_id: int, offset: int, *, group: str = "CG",
                       wait_s: float = 10.0) -> MessageExt:
        msgs = await self.pull(topic, queue_id, offset, group=group, wait_s=wait_s)
        assert msgs, f"no message at {topic}[{queue_id}] offset {offset} within {wait_s}s"
        return msgs[0]

    async def max_offset(self, topic: str, queue_id: int) -> int:
        r = await self.pull_raw(topic, queue_id, 0)
        if r.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED):
            return PullMessageResponseHeader.decode(r.ext_fields).max_offset
        raise AssertionError((r.code, r.remark))

    # ------------------------------------------------------------------ admin

    async def topic_configs(self) -> TopicConfigSerializeWrapper:
        r = await self.call(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        assert r.code == ResponseCode.SUCCESS, r.remark
        return TopicConfigSerializeWrapper.decode(r.body_bytes())

    async def set_topic_perm(self, topic: str, queues: int, perm: int) -> None:
        h = CreateTopicRequestHeader(topic=topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
        r = await self.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, h.encode()))
        assert r.code == ResponseCode.SUCCESS, r.remark

    async def create_group(self, group: str, **kw: Any) -> None:
        cfg = SubscriptionGroupConfig(group_name=group, **kw)
        r = await self.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, cfg.encode()))
        assert r.code == ResponseCode.SUCCESS, r.remark

    async def delay_offsets(self) -> dict[int, int]:
        r = await self.call(RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))
        assert r.code == ResponseCode.SUCCESS, r.remark
        return {int(k): int(v) for k, v in json.loads(r.body_bytes())["offsetTable"].items()}

    async def heartbeat(self, client_id: str, group: str, topic: str) -> None:
        data = HeartbeatData.model_validate({
            "clientID": client_id,
            "consumerDataSet": [{"groupName": group, "subscriptionDataSet": [{"topic": topic, "subString": "*"}]}],
        })
        r = await self.call(RemotingCommand.request(RequestCode.HEART_BEAT, None, data.encode()))
        assert r.code == ResponseCode.SUCCESS, r.remark

    async def route(self, topic: str) -> TopicRouteData | None:
        assert self.namesrv_addr is not None
        h = GetRouteInfoRequestHeader(topic=topic)
        r = await self.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, h.encode()),
                            addr=self.namesrv_addr)
        if r.code != ResponseCode.SUCCESS:
            return None
        return TopicRouteData.decode(r.body_bytes())
