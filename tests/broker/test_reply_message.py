"""SEND_REPLY_MESSAGE(_V2) on the wire, as RocketMQ's Java clients use it: the requester is a raw
connection that heartbeats as a producer and answers PUSH_REPLY_MESSAGE_TO_CLIENT itself, so every
header field the broker pushes is checked by its Java name."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext, RequestDispatcher
from remoting.message import decode_properties
from tests.broker.conftest import BrokerHarness, running_broker
from tests.broker.helpers import props, send_v1, send_v2

REQUESTER = "10.0.0.9@requester"
REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


class Requester:
    """A producer client that takes the pushes (answering `code`)."""

    def __init__(self, code: int = ResponseCode.SUCCESS) -> None:
        self.code = code
        self.pushes: list[RemotingCommand] = []
        d = RequestDispatcher()
        d.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, self._on_push)
        self.client = RemotingClient(d)

    def _on_push(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        self.pushes.append(cmd)
        return cmd.response(self.code, None if self.code == ResponseCode.SUCCESS else "requester refused it")

    async def register(self, h: BrokerHarness) -> None:
        body = json.dumps({"clientID": REQUESTER, "consumerDataSet": [],
                           "producerDataSet": [{"groupName": "RequestGroup"}]}).encode()
        r = await self.client.invoke(h.addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, body), 5000)
        assert r.code == ResponseCode.SUCCESS


def reply_props(to: str | None = REQUESTER) -> str:
    extra = {"CORRELATION_ID": "corr-1", "MSG_TYPE": "reply", "TTL": "3000"}
    if to is not None:
        extra["REPLY_TO_CLIENT"] = to
    return props(**extra)


def as_reply(cmd: RemotingCommand, code: int) -> RemotingCommand:
    cmd.code = code
    return cmd


async def test_reply_is_pushed_to_the_requester_then_stored(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        req = Requester()
        try:
            await req.register(h)
            r = await h.call(as_reply(send_v2(REPLY_TOPIC, b"pong", properties=reply_props(), group="Responder"),
                                      RequestCode.SEND_REPLY_MESSAGE_V2))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.ext_fields["queueOffset"] == "0" and r.ext_fields["msgId"] != "0"  # stored
            assert len(req.pushes) == 1
            push = req.pushes[0]
            ext = push.ext_fields
            assert push.body == b"pong"
            assert ext["producerGroup"] == "Responder" and ext["topic"] == REPLY_TOPIC
            assert ext["bornHost"].startswith("127.0.0.1:") and ext["storeHost"].startswith("127.0.0.1:")
            assert int(ext["storeTimestamp"]) > 0 and int(ext["bornTimestamp"]) > 0
            assert {"queueId", "sysFlag", "flag", "defaultTopic", "defaultTopicQueueNums", "unitMode"} <= set(ext)
            pushed = decode_properties(ext["properties"])
            assert pushed["CORRELATION_ID"] == "corr-1" and pushed["REPLY_TO_CLIENT"] == REQUESTER
            assert int(pushed["PUSH_REPLY_TIME"]) > 0
            # RocketMQ's long header names (SEND_REPLY_MESSAGE) work the same
            r = await h.call(as_reply(send_v1(REPLY_TOPIC, b"pong2", properties=reply_props()),
                                      RequestCode.SEND_REPLY_MESSAGE))
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "1"
            assert [p.body for p in req.pushes] == [b"pong", b"pong2"]
        finally:
            await req.client.close()


async def test_replies_that_cannot_be_pushed_say_why(tmp_path: Path) -> None:
    async with running_broker(tmp_path, storeReplyMessageEnable="false") as h:
        req = Requester(code=ResponseCode.SYSTEM_ERROR)
        try:
            await req.register(h)
            send = as_reply(send_v2(REPLY_TOPIC, b"x", properties=reply_props()), RequestCode.SEND_REPLY_MESSAGE_V2)
            r = await h.call(send)
            assert r.code == ResponseCode.SYSTEM_ERROR and REQUESTER in r.remark and "requester refused it" in r.remark
            gone = as_reply(send_v2(REPLY_TOPIC, b"x", properties=reply_props("10.0.0.1@gone")),
                            RequestCode.SEND_REPLY_MESSAGE_V2)
            r = await h.call(gone)
            assert r.code == ResponseCode.SYSTEM_ERROR and "channel of <10.0.0.1@gone> not found" in r.remark
            r = await h.call(as_reply(send_v2(REPLY_TOPIC, b"x", properties=reply_props(None)),
                                      RequestCode.SEND_REPLY_MESSAGE_V2))
            assert r.code == ResponseCode.SYSTEM_ERROR and "REPLY_TO_CLIENT" in r.remark
            req.code = ResponseCode.SUCCESS
            r = await h.call(as_reply(send_v2(REPLY_TOPIC, b"y", properties=reply_props()),
                                      RequestCode.SEND_REPLY_MESSAGE_V2))
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["msgId"] == "0"  # pushed, not stored
            assert h.controller.message_store.get_max_offset_in_queue(REPLY_TOPIC, 0) == 0
            # a reply that fails the send checks is refused before anything is pushed
            n = len(req.pushes)
            r = await h.call(as_reply(send_v2("bad/topic", b"z", properties=reply_props()),
                                      RequestCode.SEND_REPLY_MESSAGE_V2))
            assert r.code == ResponseCode.INVALID_PARAMETER and len(req.pushes) == n
        finally:
            await req.client.close()


async def test_a_slow_requester_does_not_hold_up_sends(tmp_path: Path) -> None:
    """Replies run in their own request family: a push the requester takes long to answer leaves sends free."""
    async with running_broker(tmp_path, sendMessageThreadPoolNums="1") as h:
        release = asyncio.Event()
        req = Requester()

        async def slow(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await release.wait()
            return cmd.response()

        req.client.dispatcher.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, slow)
        try:
            await req.register(h)
            pending = asyncio.ensure_future(h.call(as_reply(send_v2(REPLY_TOPIC, b"x", properties=reply_props()),
                                                            RequestCode.SEND_REPLY_MESSAGE_V2), 15000))
            await asyncio.sleep(0.2)
            assert not pending.done()
            r = await asyncio.wait_for(h.call(send_v2("T", b"plain")), 5)
            assert r.code == ResponseCode.SUCCESS
            release.set()
            assert (await asyncio.wait_for(pending, 5)).code == ResponseCode.SUCCESS
        finally:
            release.set()
            await req.client.close()
