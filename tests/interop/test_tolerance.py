"""Protocol-level tolerance: hand-built frames as other real RocketMQ clients write them (see
shared/reference/real-client-wire.md), sent to real mqnamesrv + mqbroker subprocesses.

Covers: JSON headers with number/boolean extFields values and unknown signature fields, the
trailing newline of the C++ core, SEND_MESSAGE (10) with long names, SEND_MESSAGE_V2 (310) with
and without `l`/`m`, SEND_BATCH_MESSAGE (320), ROCKETMQ binary headers (answered in kind),
offsetMsgId and UNIQ_KEY ids, C++ heartbeat bodies (enum names or ordinals, codeSet [0]), the
TBW102 route with auto-create on and off, and Java-style JSON bodies (unquoted integer keys).
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from client.message import Message, encode_messages
from remoting import jsonutil
from remoting.body import ClusterInfo, ConsumerRunningInfo, TopicRouteData
from remoting.codec import decode_frame
from remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from remoting.command import RemotingCommand
from remoting.headers import decode_send_header_v2
from remoting.message import (
    MessageExt,
    decode_messages,
    decode_offset_msg_id,
    encode_properties,
)

from .conftest import InteropCluster, start_cluster

pytestmark = pytest.mark.interop

SIGNATURE = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "N/YT7X6tJe5UfutmW+uNwTTJ7Fc="}
UNIQ = "7F0000013B05771650536C65F35B0000"


@pytest.fixture(scope="module")
def no_autocreate_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InteropCluster]:
    yield from start_cluster(tmp_path_factory.mktemp("tolerance-noauto"), autoCreateTopicEnable=False)


# ---------------------------------------------------------------------- raw frames


def json_frame(header: dict[str, Any], body: bytes = b"", *, newline: bool = True) -> bytes:
    """A frame with a JSON header exactly as given (values keep their JSON types)."""
    hb = json.dumps(header, separators=(",", ":")).encode() + (b"\n" if newline else b"")
    return struct.pack(">II", 4 + len(hb) + len(body), len(hb)) + hb + body


def binary_frame(
    code: int, ext: dict[str, str], body: bytes = b"", *, opaque: int = 7, remark: str = ""
) -> bytes:
    """A frame with a ROCKETMQ binary header (RocketMQSerializable), built by hand: code int16,
    language int8, version int16, opaque int32, flag int32, remark (int32 length + UTF-8), extFields
    (int32 total length, then per field int16 key length + key, int32 value length + value)."""
    rb = remark.encode()
    fields = b"".join(
        struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode())) + v.encode()
        for k, v in ext.items()
    )
    hb = (
        struct.pack(">hbhii", code, int(LanguageCode.CPP), 333, opaque, 0)
        + struct.pack(">i", len(rb))
        + rb
        + struct.pack(">i", len(fields))
        + fields
    )
    return struct.pack(">II", 4 + len(hb) + len(body), (1 << 24) | len(hb)) + hb + body


async def call(addr: str, frame: bytes, timeout: float = 5.0) -> tuple[int, RemotingCommand, bytes]:
    """Send one frame on a fresh connection; returns (serialize type byte, response, raw header)."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    try:
        writer.write(frame)
        await writer.drain()
        (length,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), timeout))
        data = await asyncio.wait_for(reader.readexactly(length), timeout)
    finally:
        writer.close()
    (word,) = struct.unpack_from(">I", data, 0)
    resp = decode_frame(data)
    assert resp.is_response
    return word >> 24, resp, data[4 : 4 + (word & 0xFFFFFF)]


class RawConnection:
    """One client connection for a sequence of hand-built request frames."""

    def __init__(self, addr: str) -> None:
        self.addr = addr

    async def __aenter__(self) -> RawConnection:
        host, port = self.addr.rsplit(":", 1)
        self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()

    async def call(self, frame: bytes, timeout: float = 5.0) -> RemotingCommand:
        """Send a request; return the next response (skipping requests the server sends us, such as
        NOTIFY_CONSUMER_IDS_CHANGED)."""
        self.writer.write(frame)
        await self.writer.drain()
        while True:
            (length,) = struct.unpack(">I", await asyncio.wait_for(self.reader.readexactly(4), timeout))
            cmd = decode_frame(await asyncio.wait_for(self.reader.readexactly(length), timeout))
            if cmd.is_response:
                return cmd


def cpp_header(code: int, ext: dict[str, Any], opaque: int = 1) -> dict[str, Any]:
    return {
        "code": code,
        "extFields": {**SIGNATURE, **ext},
        "flag": 0,
        "language": "CPP",
        "opaque": opaque,
        "remark": "",
        "version": 333,
    }


def cpp_send_v2(topic: str, props: str, *, queue_id: int = 0, lm: bool = True) -> dict[str, Any]:
    """SEND_MESSAGE_V2 extFields as the C++ 2.1.0 core writes them (numbers for d, e, f, h, l)."""
    ext: dict[str, Any] = {
        "a": "PID-test",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": str(int(time.time() * 1000)),
        "h": 0,
        "i": props,
        "j": "0",
        "k": "0",
    }
    if lm:
        ext.update({"l": 16, "m": "0"})
    return cpp_header(RequestCode.SEND_MESSAGE_V2, ext)


def message_props(tags: str = "tagA", keys: str = "k1", uniq: str = UNIQ, **user: str) -> str:
    return encode_properties({"KEYS": keys, "TAGS": tags, "UNIQ_KEY": uniq, "WAIT": "true", **user})


async def pull_all(
    broker: str,
    topic: str,
    queue_id: int,
    *,
    group: str = "tolerance-reader",
    subscription: str = "*",
    sys_flag: int = 4,
) -> list[MessageExt]:
    """PULL_MESSAGE with numeric extFields values (as several clients send), no suspend."""
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": sys_flag,
        "commitOffset": 0,
        "suspendTimeoutMillis": 15000,
        "subscription": subscription,
        "subVersion": 0,
        "expressionType": "TAG",
    }
    for _ in range(50):  # the consume queue is built just after the send is acknowledged
        _t, r, _h = await call(broker, json_frame(cpp_header(RequestCode.PULL_MESSAGE, ext)))
        if r.code == ResponseCode.SUCCESS:
            return decode_messages(r.body_bytes())
        if r.code == ResponseCode.PULL_RETRY_IMMEDIATELY:  # NO_MATCHED_MESSAGE: all filtered out
            return []
        assert r.code == ResponseCode.PULL_NOT_FOUND, (r.code, r.remark)
        await asyncio.sleep(0.05)
    return []


# ---------------------------------------------------------------------- routes


async def test_cpp_route_request_verbatim_and_an_answer_it_accepts(interop_cluster: InteropCluster) -> None:
    """The C++ core's first frame, byte for byte (trailing newline, signature fields, version 333)."""
    header = (
        b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",'
        b'"topic":"TBW102"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":333}\n'
    )
    frame = struct.pack(">II", 4 + len(header), len(header)) + header
    stype, r, raw = await call(interop_cluster.namesrv, frame)
    assert stype == SerializeType.JSON
    assert r.code == ResponseCode.SUCCESS and r.opaque == 0, r.remark
    h = json.loads(raw)
    assert h["flag"] == 1 and h["language"] == "JAVA" and h["serializeTypeCurrentRPC"] == "JSON"
    route = TopicRouteData.decode(r.body_bytes())
    assert [bd.broker_addrs for bd in route.broker_datas] == [{0: interop_cluster.broker}]
    assert b'"brokerAddrs":{"0":' in r.body_bytes()  # keys quoted: every client seen parses this form


async def test_tbw102_route_is_topic_not_exist_when_auto_create_is_off(
    no_autocreate_cluster: InteropCluster, interop_cluster: InteropCluster
) -> None:
    """With no route for a topic, the C++ cores ask for TBW102; TOPIC_NOT_EXIST makes them fail cleanly."""
    for topic in ("TBW102", "NoSuchTopic_tolerance"):
        _t, r, _h = await call(
            no_autocreate_cluster.namesrv,
            json_frame(cpp_header(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})),
        )
        assert r.code == ResponseCode.TOPIC_NOT_EXIST, (topic, r.code, r.remark)
        assert topic in (r.remark or "")
    _t, r, _h = await call(
        interop_cluster.namesrv,
        json_frame(cpp_header(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic_tol"})),
    )
    assert r.code == ResponseCode.TOPIC_NOT_EXIST


# ---------------------------------------------------------------------- sends


async def test_send_v2_as_the_cpp_core_writes_it(interop_cluster: InteropCluster) -> None:
    topic = "Tol_v2_cpp"
    props = message_props(myprop="v1")
    _t, r, raw = await call(interop_cluster.broker, json_frame(cpp_send_v2(topic, props), b"hello-cpp"))
    assert r.code == ResponseCode.SUCCESS, r.remark
    ext = json.loads(raw)["extFields"]
    assert all(isinstance(v, str) for v in ext.values())  # Java-style: every value a string
    assert ext["queueId"] == "0" and ext["queueOffset"] == "0"
    host, port, offset = decode_offset_msg_id(ext["msgId"])
    assert f"{host}:{port}" == interop_cluster.broker and offset >= 0
    [m] = await pull_all(interop_cluster.broker, topic, 0)
    assert (m.body, m.tags, m.keys, m.uniq_key, m.properties["myprop"]) == (
        b"hello-cpp",
        "tagA",
        "k1",
        UNIQ,
        "v1",
    )
    assert m.born_timestamp > 0 and m.msg_id == ext["msgId"]


async def test_send_v2_without_l_and_m(interop_cluster: InteropCluster) -> None:
    topic = "Tol_v2_nolm"
    _t, r, _h = await call(
        interop_cluster.broker,
        json_frame(cpp_send_v2(topic, message_props(tags="B"), queue_id=1, lm=False), b"no-lm"),
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    [m] = await pull_all(interop_cluster.broker, topic, 1)
    assert (m.body, m.tags) == (b"no-lm", "B")


async def test_send_v1_long_names_with_numbers_booleans_and_unknown_fields(
    interop_cluster: InteropCluster,
) -> None:
    topic = "Tol_v1"
    ext = {
        "producerGroup": "PID-old",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 2,
        "sysFlag": 0,
        "bornTimestamp": int(time.time() * 1000),
        "flag": 0,
        "properties": message_props(tags="Old", keys="a b", uniq="0A0000010000000000000000000000AA", p="1"),
        "reconsumeTimes": 0,
        "unitMode": False,
        "batch": False,
        "maxReconsumeTimes": 16,
        "someFutureField": {"nested": [1, 2]},
        "traceOn": True,
    }
    _t, r, raw = await call(
        interop_cluster.broker, json_frame(cpp_header(RequestCode.SEND_MESSAGE, ext), b"v1-body")
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert json.loads(raw)["extFields"]["queueId"] == "2"
    [m] = await pull_all(interop_cluster.broker, topic, 2)
    assert (m.body, m.tags, m.keys, m.properties["p"]) == (b"v1-body", "Old", "a b", "1")


async def test_send_v1_with_a_bad_value_names_the_field(interop_cluster: InteropCluster) -> None:
    ext = {
        "producerGroup": "P",
        "topic": "Tol_bad",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": "zero",
        "sysFlag": 0,
        "bornTimestamp": 0,
        "flag": 0,
        "properties": "",
    }
    _t, r, _h = await call(
        interop_cluster.broker, json_frame(cpp_header(RequestCode.SEND_MESSAGE, ext), b"x")
    )
    assert r.code != ResponseCode.SUCCESS
    assert "queueId" in (r.remark or "")


async def test_send_batch_with_numbers_and_booleans(interop_cluster: InteropCluster) -> None:
    topic = "Tol_batch"
    body = encode_messages([Message(topic, f"b{i}".encode(), tags="T", keys=f"k{i}") for i in range(3)])
    ext = {
        "a": "PID-batch",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": 3,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": "",
        "j": 0,
        "k": False,
        "m": True,
    }
    _t, r, raw = await call(
        interop_cluster.broker, json_frame(cpp_header(RequestCode.SEND_BATCH_MESSAGE, ext), body)
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert json.loads(raw)["extFields"]["msgId"].count(",") == 2  # one offsetMsgId per message
    msgs = await pull_all(interop_cluster.broker, topic, 3)
    assert [(m.body, m.keys) for m in msgs] == [(f"b{i}".encode(), f"k{i}") for i in range(3)]


async def test_cpp_batch_send_v2_with_batch_flag_1(interop_cluster: InteropCluster) -> None:
    """The C++ 2.1.0 core sends a batch as SEND_MESSAGE_V2 (310), not 320, and writes its bools with
    ostream <<: "m":"1" means batch, "k":"0" unitMode false."""
    topic = "Tol_cpp_batch"
    body = encode_messages([Message(topic, f"c{i}".encode(), tags="CB", keys=f"ck{i}") for i in range(3)])
    header = cpp_send_v2(topic, encode_properties({"WAIT": "true"}), queue_id=2)
    header["extFields"].update({"m": "1", "k": "0"})
    _t, r, _h = await call(interop_cluster.broker, json_frame(header, body))
    assert r.code == ResponseCode.SUCCESS, r.remark
    msgs = await pull_all(interop_cluster.broker, topic, 2)
    assert [(m.body, m.tags, m.keys) for m in msgs] == [(f"c{i}".encode(), "CB", f"ck{i}") for i in range(3)]


def test_boolean_header_values_in_every_spelling() -> None:
    for spelling, want in (
        ("true", True),
        ("TRUE", True),
        ("1", True),
        (True, True),
        (1, True),
        ("false", False),
        ("0", False),
        (False, False),
        (0, False),
        ("", False),
    ):
        h = decode_send_header_v2({"a": "P", "b": "T", "k": spelling, "m": spelling})
        assert (h.unit_mode, h.batch) == (want, want), spelling


# ---------------------------------------------------------------------- binary headers


async def test_rocketmq_binary_headers_are_answered_in_kind(interop_cluster: InteropCluster) -> None:
    topic = "Tol_binary"
    ext = {
        "a": "PID-bin",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "1",
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": message_props(tags="Bin"),
        "j": "0",
        "k": "false",
        "l": "16",
        "m": "false",
        **SIGNATURE,
    }
    stype, r, _h = await call(
        interop_cluster.broker, binary_frame(RequestCode.SEND_MESSAGE_V2, ext, b"bin-body")
    )
    assert stype == SerializeType.ROCKETMQ
    assert r.code == ResponseCode.SUCCESS and r.opaque == 7, r.remark
    assert r.ext_fields is not None and r.ext_fields["queueId"] == "1"

    route_request = binary_frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, **SIGNATURE}, opaque=9)
    for _ in range(
        100
    ):  # the broker registers the auto-created topic with the NameServer just after the send
        stype, r, _h = await call(interop_cluster.namesrv, route_request)
        assert stype == SerializeType.ROCKETMQ and r.opaque == 9
        if r.code != ResponseCode.TOPIC_NOT_EXIST:
            break
        await asyncio.sleep(0.05)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert TopicRouteData.decode(r.body_bytes()).queue_datas[0].write_queue_nums == 4
    [m] = await pull_all(interop_cluster.broker, topic, 1)
    assert (m.body, m.tags) == (b"bin-body", "Bin")

    stype, r, _h = await call(
        interop_cluster.broker, binary_frame(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "1"})
    )
    assert stype == SerializeType.ROCKETMQ and r.code == ResponseCode.SUCCESS
    assert r.ext_fields == {"offset": "1"}


# ---------------------------------------------------------------------- message ids


async def test_offset_msg_id_and_uniq_key_both_find_the_message(interop_cluster: InteropCluster) -> None:
    topic, uniq = "Tol_ids", "7F00000100002A9F0000000000000123"
    _t, r, _h = await call(
        interop_cluster.broker,
        json_frame(cpp_send_v2(topic, message_props(tags="Id", keys="idk", uniq=uniq)), b"by-id"),
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields is not None
    offset_msg_id = r.ext_fields["msgId"]
    _host, _port, offset = decode_offset_msg_id(offset_msg_id)

    # VIEW_MESSAGE_BY_ID: the commit log offset from the offsetMsgId (a number, as some clients send it)
    _t, v, _h = await call(
        interop_cluster.broker, json_frame(cpp_header(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
    )
    assert v.code == ResponseCode.SUCCESS, v.remark
    [m] = decode_messages(v.body_bytes())
    assert (m.body, m.uniq_key, m.msg_id) == (b"by-id", uniq, offset_msg_id)

    # QUERY_MESSAGE by the UNIQ_KEY (the id most clients report), through the index
    q_ext = {
        "topic": topic,
        "key": uniq,
        "maxNum": 32,
        "beginTimestamp": 0,
        "endTimestamp": 2**63 - 1,
        "_UNIQUE_KEY_QUERY": "true",
    }
    found: list[MessageExt] = []
    for _ in range(50):  # the index is built just after the send is acknowledged
        _t, q, _h = await call(
            interop_cluster.broker, json_frame(cpp_header(RequestCode.QUERY_MESSAGE, q_ext))
        )
        if q.code == ResponseCode.SUCCESS:
            found = decode_messages(q.body_bytes())
            break
        assert q.code == ResponseCode.QUERY_NOT_FOUND, q.remark
        await asyncio.sleep(0.05)
    assert [(m.body, m.msg_id) for m in found] == [(b"by-id", offset_msg_id)]


# ---------------------------------------------------------------------- heartbeats and pulls


def heartbeat_body_cpp1(client_id: str, group: str, topic: str) -> bytes:
    """C++ 1.x core: enum names, subVersion as a string, codeSet from atoi(tag) = [0], no expressionType."""
    return (
        json.dumps(
            {
                "clientID": client_id,
                "consumerDataSet": [
                    {
                        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                        "consumeType": "CONSUME_PASSIVELY",
                        "groupName": group,
                        "messageModel": "CLUSTERING",
                        "subscriptionDataSet": [
                            {
                                "codeSet": [0],
                                "subString": "TagA",
                                "subVersion": str(int(time.time() * 1000)),
                                "tagsSet": ["TagA"],
                                "topic": topic,
                            },
                            {"subString": "*", "subVersion": "0", "topic": f"%RETRY%{group}"},
                        ],
                    }
                ],
                "producerDataSet": [{"groupName": "PID-hb"}],
            }
        )
        + "\n"
    ).encode()


def heartbeat_body_cpp2(client_id: str, group: str, topic: str) -> bytes:
    """C++ 2.x core: enums as their ordinals (consumeType 1 = PASSIVELY, messageModel 1 = CLUSTERING,
    consumeFromWhere 4 = FIRST_OFFSET)."""
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": 1,
                    "messageModel": 1,
                    "consumeFromWhere": 4,
                    "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}],
                }
            ],
        }
    ).encode()


async def test_cpp_heartbeats_register_and_tag_filtering_ignores_their_code_set(
    interop_cluster: InteropCluster,
) -> None:
    br = interop_cluster.broker
    topic = "Tol_hb"
    for i, tag in enumerate(["TagA", "TagB", "TagA", "TagC"]):
        frame = json_frame(
            cpp_send_v2(topic, message_props(tags=tag, uniq=f"{i:032X}"), queue_id=i % 2), tag.encode()
        )
        _t, r, _h = await call(br, frame)
        assert r.code == ResponseCode.SUCCESS, r.remark
    await pull_all(br, topic, 1)  # wait until the consume queues are built

    pulls_without_subscription_flag = {
        "topic": topic,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 0,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subVersion": 0,
    }
    for body, group, cid in (
        (heartbeat_body_cpp1("127.0.0.1@111#1", "G_hb1", topic), "G_hb1", "127.0.0.1@111#1"),
        (heartbeat_body_cpp2("127.0.0.1@222#2", "G_hb2", topic), "G_hb2", "127.0.0.1@222#2"),
    ):
        # one connection, as a client keeps it: heartbeat, list the group, pull by the registered subscription
        async with RawConnection(br) as conn:
            r = await conn.call(json_frame(cpp_header(RequestCode.HEART_BEAT, {}), body))
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await conn.call(
                json_frame(cpp_header(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}))
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert json.loads(r.body_bytes()) == {"consumerIdList": [cid]}
            tags = []
            for q in range(2):
                ext = {**pulls_without_subscription_flag, "consumerGroup": group, "queueId": q}
                r = await conn.call(json_frame(cpp_header(RequestCode.PULL_MESSAGE, ext)))
                assert r.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), (
                    r.code,
                    r.remark,
                )
                if r.code == ResponseCode.SUCCESS:
                    tags += [m.tags for m in decode_messages(r.body_bytes())]
        # the 1.x heartbeat subscribes TagA with codeSet [0]: the broker matches the tag's real hash code
        assert sorted(tags) == (["TagA", "TagA"] if group == "G_hb1" else ["TagA", "TagA", "TagB", "TagC"])

    # a pull's own subscription string (FLAG_SUBSCRIPTION) decides when it carries one
    tags = [
        m.tags for q in range(2) for m in await pull_all(br, topic, q, group="G_hb1", subscription="TagA")
    ]
    assert tags == ["TagA", "TagA"]


async def test_offsets_with_numeric_values(interop_cluster: InteropCluster) -> None:
    br = interop_cluster.broker
    topic = "Tol_offsets"
    _t, r, _h = await call(br, json_frame(cpp_send_v2(topic, message_props()), b"o"))
    assert r.code == ResponseCode.SUCCESS
    upd = {"consumerGroup": "G_off", "topic": topic, "queueId": 0, "commitOffset": 1}
    _t, r, _h = await call(br, json_frame(cpp_header(RequestCode.UPDATE_CONSUMER_OFFSET, upd)))
    assert r.code == ResponseCode.SUCCESS, r.remark
    qry = {"consumerGroup": "G_off", "topic": topic, "queueId": 0}
    _t, r, _h = await call(br, json_frame(cpp_header(RequestCode.QUERY_CONSUMER_OFFSET, qry)))
    assert r.code == ResponseCode.SUCCESS and r.ext_fields == {"offset": "1"}, (
        r.code,
        r.remark,
        r.ext_fields,
    )
    _t, r, _h = await call(
        br,
        json_frame(
            cpp_header(RequestCode.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@9#9", "consumerGroup": "G_off"})
        ),
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_null_remark_and_null_ext_values_are_absent_values(interop_cluster: InteropCluster) -> None:
    h = cpp_header(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102", "Signature": None})
    h["remark"] = None
    _t, r, _h = await call(interop_cluster.namesrv, json_frame(h, newline=False))
    assert r.code == ResponseCode.SUCCESS, r.remark


# ---------------------------------------------------------------------- Java-style JSON bodies


def test_java_style_bodies_with_unquoted_integer_keys() -> None:
    """fastjson writes Map<Long, String> keys unquoted; a Java NameServer's route and cluster bodies
    parse as well as the quoted form."""
    route = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    rd = TopicRouteData.decode(route)
    assert rd.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert TopicRouteData.decode(route.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')) == rd
    cluster = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    )
    ci = ClusterInfo.decode(cluster)
    assert ci.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911"}
    assert jsonutil.loads(b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5}}') is not None


def test_java_consumer_running_info_and_ours_in_its_form() -> None:
    """GET_CONSUMER_RUNNING_INFO as a Java 4.9 push consumer answers it (fastjson: mqTable keyed by the
    MessageQueue objects themselves; trimmed here), and ours written the same way."""
    java = (
        b'{"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"LIVE_T"}:{"cachedMsgCount":0,'
        b'"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,"cachedMsgSizeInMiB":0,"commitOffset":5891,"droped":false,'
        b'"lastConsumeTimestamp":1795581409723,"lastLockTimestamp":1795581409723,"lastPullTimestamp":1795581422143,'
        b'"locked":true,"transactionMsgCount":0,"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,'
        b'"tryUnlockTimes":0}},"properties":{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
        b'"PROP_NAMESERVER_ADDR":"127.0.0.1:19876;","PROP_CONSUMEORDERLY":"false","PROP_CLIENT_VERSION":"V4_9_8"},'
        b'"statusTable":{"LIVE_T":{"consumeFailedMsgs":2,"consumeFailedTPS":0.5,"consumeOKTPS":9.25,"consumeRT":1.5,'
        b'"pullRT":20.0,"pullTPS":9.75}},"subscriptionSet":[{"classFilterMode":false,"codeSet":[2598919,2598920],'
        b'"expressionType":"TAG","subString":"TagA || TagB","subVersion":1795581409733,"tagsSet":["TagA","TagB"],'
        b'"topic":"LIVE_T"}]}'
    )
    info = ConsumerRunningInfo.decode(java)
    [(mq, pq)] = info.mq_table.items()
    assert (mq.topic, mq.broker_name, mq.queue_id, pq.commit_offset, pq.locked) == ("LIVE_T", "broker-a", 0, 5891, True)
    st = info.status_table["LIVE_T"]
    assert (st.pull_rt, st.pull_tps, st.consume_rt, st.consume_ok_tps, st.consume_failed_tps, st.consume_failed_msgs) == (
        20.0, 9.75, 1.5, 9.25, 0.5, 2)
    assert info.subscription_set[0].tags_set == ["TagA", "TagB"] and info.properties["PROP_CLIENT_VERSION"] == "V4_9_8"
    ours = info.encode()
    assert b'"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"LIVE_T"}:{' in ours
    assert b'"cachedMsgSizeInMiB":0' in ours and b'"consumeOKTPS":9.25' in ours and b'"droped":false' in ours
    assert ConsumerRunningInfo.decode(ours) == info


async def test_java_broker_registration_body_with_unquoted_keys(interop_cluster: InteropCluster) -> None:
    """A REGISTER_BROKER as a Java broker sends it (numbers in the header, fastjson body with extra
    fields); the route then names it, and UNREGISTER_BROKER removes it again."""
    ns = interop_cluster.namesrv
    topic = "Tol_java_broker_topic"
    body = (
        '{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
        '"stateVersion":0,"timestamp":1700000000000},"topicConfigTable":{"' + topic + '":{"order":false,'
        '"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG","topicName":"' + topic + '",'
        '"topicSysFlag":0,"writeQueueNums":2}},"mappingDataVersion":{"counter":0,"timestamp":0},'
        '"topicQueueMappingInfoMap":{}}}'
    ).encode()
    ext = {
        "brokerName": "broker-java",
        "brokerAddr": "127.0.0.1:1",
        "clusterName": "JavaCluster",
        "haServerAddr": "127.0.0.1:2",
        "brokerId": 0,
        "compressed": False,
        "bodyCrc32": 0,
    }
    h = {
        "code": RequestCode.REGISTER_BROKER,
        "extFields": ext,
        "flag": 0,
        "language": "JAVA",
        "opaque": 3,
        "serializeTypeCurrentRPC": "JSON",
        "version": 395,
    }
    # the NameServer forgets a broker when its connection closes, as RocketMQ's does: keep it open
    async with RawConnection(ns) as broker_conn:
        r = await broker_conn.call(json_frame(h, body, newline=False))
        assert r.code == ResponseCode.SUCCESS, r.remark
        _t, rr, _h = await call(
            ns, json_frame(cpp_header(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        )
        assert rr.code == ResponseCode.SUCCESS, rr.remark
        rd = TopicRouteData.decode(rr.body_bytes())
        assert [(bd.broker_name, bd.broker_addrs) for bd in rd.broker_datas] == [
            ("broker-java", {0: "127.0.0.1:1"})
        ]
        assert [(q.broker_name, q.read_queue_nums) for q in rd.queue_datas] == [("broker-java", 2)]
        un = {
            "brokerName": "broker-java",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "JavaCluster",
            "brokerId": 0,
        }
        r2 = await broker_conn.call(json_frame({**h, "code": RequestCode.UNREGISTER_BROKER, "extFields": un}))
        assert r2.code == ResponseCode.SUCCESS, r2.remark
