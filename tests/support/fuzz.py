"""Valid request frames of many kinds, and random mutations of them, for the fuzz tests.

The seeds are what clients put on the wire: our producer's pipelined SEND headers (MSGPACK, g and i first,
which the frame decoder reads on its fast path), batches, pulls, and the other requests a client or mqadmin
sends, each as JSON (Java's), MSGPACK (ours) and ROCKETMQ (binary) headers. A mutation changes, drops or inserts
a few header bytes (keeping or breaking the lengths), gives a header value another type, or changes a few body
bytes. fuzz_requests sends mutations to a live server, each on a connection of its own."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from client.message import Message, encode_messages
from remoting.codec import FrameDecoder, encode
from remoting.codes import RequestCode, SerializeType
from remoting.command import RemotingCommand
from remoting.connection import RequestDispatcher
from remoting.errors import ProtocolError

TOPIC = "FuzzT"
GROUP = "FuzzG"
_STYPES = (SerializeType.JSON, SerializeType.MSGPACK, SerializeType.ROCKETMQ)


def _send_ext(k: int, props: str) -> dict[str, str]:
    """A SEND_MESSAGE_V2 header as our producer orders it: g and i first, then the constant entries."""
    return {"g": str(1763800000000 + k), "i": props, "a": "PG", "b": TOPIC, "c": "TBW102", "d": "4",
            "e": str(k % 4), "f": "0", "h": "0", "j": "0", "k": "false", "m": "false"}


def broker_request_frames() -> list[bytes]:
    body_json = json.dumps
    mq = {"topic": TOPIC, "brokerName": "broker-fuzz", "queueId": 0}
    others: list[tuple[int, dict[str, str] | None, bytes | None]] = [
        (RequestCode.PULL_MESSAGE, {
            "queueOffset": "1", "sysFlag": "3", "commitOffset": "0", "consumerGroup": GROUP, "topic": TOPIC,
            "queueId": "0", "maxMsgNums": "32", "suspendTimeoutMillis": "1000", "subscription": "TagA || TagB",
            "subVersion": "1", "expressionType": "TAG"}, None),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}, None),
        (RequestCode.UPDATE_CONSUMER_OFFSET,
         {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "1"}, None),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": TOPIC, "queueId": "0", "timestamp": "1763800000000"}, None),
        (RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}, None),
        (RequestCode.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": "0"}, None),
        (RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": TOPIC, "queueId": "0"}, None),
        (RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "0"}, None),
        (RequestCode.QUERY_MESSAGE, {"topic": TOPIC, "key": "k1", "maxNum": "32", "beginTimestamp": "0",
                                     "endTimestamp": "9999999999999"}, None),
        (RequestCode.HEART_BEAT, None, body_json({
            "clientID": "127.0.0.1@1", "producerDataSet": [{"groupName": "PG"}], "consumerDataSet": [{
                "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
                    "classFilterMode": False, "topic": TOPIC, "subString": "TagA || TagB", "tagsSet": ["TagA", "TagB"],
                    "codeSet": [2598919, 2598920], "subVersion": 1, "expressionType": "TAG"}]}]}).encode()),
        (RequestCode.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@1", "producerGroup": "PG", "consumerGroup": GROUP},
         None),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {
            "offset": "0", "group": GROUP, "delayLevel": "0", "originMsgId": "7F00000100002A9F0000000000000000",
            "originTopic": TOPIC, "unitMode": "false", "maxReconsumeTimes": "16"}, None),
        (RequestCode.END_TRANSACTION, {
            "producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": "0", "commitOrRollback": "8",
            "fromTransactionCheck": "false", "msgId": "7F00000100002A9F0000000000000000", "transactionId": "X"},
         None),
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}, None),
        (RequestCode.LOCK_BATCH_MQ, None,
         body_json({"consumerGroup": GROUP, "clientId": "127.0.0.1@1", "mqSet": [mq]}).encode()),
        (RequestCode.UNLOCK_BATCH_MQ, None,
         body_json({"consumerGroup": GROUP, "clientId": "127.0.0.1@1", "mqSet": [mq]}).encode()),
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "FuzzNew", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, None),
        (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body_json({
            "groupName": "FuzzNewG", "consumeEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1}).encode()),
        (RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}, None),
        (RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": GROUP}, None),
        (RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC}, None),
        (RequestCode.GET_BROKER_RUNTIME_INFO, None, None),
        (RequestCode.GET_ALL_TOPIC_CONFIG, None, None),
    ]
    frames = []
    for k, props in enumerate(("WAIT\x01true\x02UNIQ_KEY\x01" + "7F0000010E1C18B4AAC2000000000001",
                               "TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true\x02UNIQ_KEY\x01" + "7F" * 16,
                               "TAGS\x01标签\x02color\x01紅\x02UNIQ_KEY\x01" + "AB" * 16)):
        for st in _STYPES:
            frames.append(encode(RemotingCommand(RequestCode.SEND_MESSAGE_V2, 1000 + k, 0, None, _send_ext(k, props),
                                                 b"x" * (10 + 500 * k), serialize_type=st)))
    # Batches: one of one shape (the broker reads it column by column), one of mixed messages.
    uniform = [Message(TOPIC, b"u" * 64, tags="TagA", keys=[f"k{i:02d}"]) for i in range(4)]
    mixed = [Message(TOPIC, b"m" * (1 + 40 * i), tags=["TagA", None, "标签"][i % 3], properties={"p": "v" * (i + 1)})
             for i in range(4)]
    for k, msgs in enumerate((uniform, mixed)):
        for i, m in enumerate(msgs):
            m.properties["UNIQ_KEY"] = f"7F0000010E1C18B4AAC2{k:06X}{i:06X}"
        ext = _send_ext(k, "WAIT\x01true")
        for st in _STYPES:
            frames.append(encode(RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, 2000 + k, 0, None, dict(ext),
                                                 encode_messages(msgs), serialize_type=st)))
    for code, ext, body in others:
        for st in _STYPES:
            frames.append(encode(RemotingCommand(code, 77, 0, None, dict(ext) if ext else None, body,
                                                 serialize_type=st)))
    return frames


def mutate(rnd: random.Random, frame: bytes) -> bytes:
    """`frame` with a few bytes changed, dropped or inserted: in the header mostly, the frame and header
    lengths kept consistent or not (a MSGPACK str sometimes made an array or map, a JSON value given another
    type); or, for a frame with a body, in the body (JSON-ish bytes half the time)."""
    f = bytearray(frame)
    hl = int.from_bytes(f[4:8], "big") & 0xFFFFFF
    kind = rnd.random()
    if f[4] == 2 and kind < 0.1:
        # MSGPACK: a str's marker made a one-element array or map marker (a value of another type, where
        # a decoder expects a str)
        marks = [j for j in range(8, 8 + hl) if 0xA0 <= f[j] <= 0xBF]
        if marks:
            f[rnd.choice(marks)] = rnd.choice((0x91, 0x81))
            return bytes(f)
    if f[4] == 0 and kind < 0.1:
        # JSON: one extFields value given another type (a list, a map, a number, true or null)
        try:
            header = json.loads(bytes(f[8 : 8 + hl]))
        except ValueError:
            header = None
        ext = header.get("extFields") if isinstance(header, dict) else None
        if ext:
            k = rnd.choice(sorted(ext))
            ext[k] = rnd.choice(([ext[k]], {"v": ext[k]}, 7, -1.5, True, None))
            h = json.dumps(header, ensure_ascii=False).encode()
            body = bytes(f[8 + hl :])
            return (4 + len(h) + len(body)).to_bytes(4, "big") + len(h).to_bytes(4, "big") + h + body
    if 8 + hl < len(f) and kind < 0.25:
        for _ in range(rnd.randint(1, 4)):
            j = rnd.randrange(8 + hl, len(f))
            f[j] = rnd.randrange(256) if rnd.random() < 0.5 else rnd.choice(b'{}[]":,09 \\')
    elif kind < 0.6:
        for _ in range(rnd.randint(1, 3)):
            f[rnd.randrange(8, min(len(f), 8 + hl + 2))] = rnd.randrange(256)
    elif kind < 0.75:
        j = rnd.randrange(8, 8 + hl)
        del f[j : j + rnd.randint(1, 4)]
        f[0:4] = (len(f) - 4).to_bytes(4, "big")
        if rnd.random() < 0.5:
            f[5:8] = max(0, hl - rnd.randint(0, 4)).to_bytes(3, "big")
    elif kind < 0.9:
        j = rnd.randrange(8, 8 + hl)
        f[j:j] = rnd.randbytes(rnd.randint(1, 4))
        f[0:4] = (len(f) - 4).to_bytes(4, "big")
        if rnd.random() < 0.5:
            f[5:8] = (hl + rnd.randint(0, 4)).to_bytes(3, "big")
    else:
        f[5:8] = rnd.randrange(0, hl + 20).to_bytes(3, "big")
    return bytes(f)


def spy_processor_failures(monkeypatch: Any) -> list[tuple[int, str]]:
    """(code, exception) of every request a processor raised on (answered SYSTEM_ERROR by the dispatcher),
    in any server of this process, from now to the end of the test."""
    failed: list[tuple[int, str]] = []
    record = RequestDispatcher._failed

    def spy(self: RequestDispatcher, ctx: Any, cmd: RemotingCommand, e: BaseException) -> None:
        failed.append((cmd.code, f"{type(e).__name__}: {e}"))
        record(self, ctx, cmd, e)

    monkeypatch.setattr(RequestDispatcher, "_failed", spy)
    return failed


async def fuzz_requests(addr: str, seeds: list[bytes], rnd: random.Random, n: int) -> tuple[int, list[RemotingCommand]]:
    """`n` mutations of the seed frames to the server at `addr`, each on a connection of its own. Returns how
    many the frame decoder took that must be answered, and those of them that were not."""
    requests = 0
    unanswered: list[RemotingCommand] = []
    for _ in range(n):
        frame = mutate(rnd, rnd.choice(seeds))
        try:
            cmds = FrameDecoder().feed(frame)
        except ProtocolError:
            continue
        if len(cmds) != 1:
            continue
        wait = answer_expected(cmds[0])
        requests += wait
        if not await exchange(addr, frame, wait):
            unanswered.append(cmds[0])
    return requests, unanswered


def answer_expected(cmd: Any) -> bool:
    """Whether a server must answer this decoded request: not a response or oneway frame, not a pull (which
    may be held)."""
    return not cmd.flag & 3 and cmd.code != RequestCode.PULL_MESSAGE


async def exchange(addr: str, frame: bytes, wait: bool) -> bool:
    """Write `frame` on a new connection; with `wait`, whether an answer (or the server's close) came within 2 s."""
    host, port = addr.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(frame)
        await writer.drain()
        if not wait:
            return True
        try:
            await asyncio.wait_for(reader.read(4), 2)  # a frame's first bytes, or b"" when the server closed it
        except TimeoutError:
            return False
        return True
    finally:
        writer.close()
        await writer.wait_closed()
