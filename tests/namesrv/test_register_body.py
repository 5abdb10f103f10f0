"""REGISTER_BROKER body shapes: JSON, the old wrapper JSON, Java's compressed binary form."""

from __future__ import annotations

import struct
import zlib

import pytest

from remoting.body import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    decode_register_broker_body,
    encode_register_broker_body,
)


def java_compressed(version_json: bytes, topic_lines: list[str], filter_json: bytes = b"[]") -> bytes:
    """Built by hand from RegisterBrokerBody.encode(true) in RocketMQ 4.9.4."""
    out = struct.pack(">i", len(version_json)) + version_json + struct.pack(">i", len(topic_lines))
    for line in topic_lines:
        b = line.encode()
        out += struct.pack(">i", len(b)) + b
    out += struct.pack(">i", len(filter_json)) + filter_json
    return zlib.compress(out, 9)


def test_java_json_register_body() -> None:
    body = (
        b'{"filterServerList":["1.2.3.4:5"],"topicConfigSerializeWrapper":{"dataVersion":{"counter":2,'
        b'"timestamp":1700000000000},"topicConfigTable":{"TopicTest":{"order":false,"perm":6,"readQueueNums":4,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}}}}'
    )
    reg = decode_register_broker_body(body, False)
    w = reg.topic_config_serialize_wrapper
    assert w.data_version == DataVersion(timestamp=1700000000000, counter=2)
    assert w.topic_config_table["TopicTest"].write_queue_nums == 4
    assert reg.filter_server_list == ["1.2.3.4:5"]


def test_old_wrapper_shape() -> None:
    body = (
        b'{"dataVersion":{"counter":9,"timestamp":5},"topicConfigTable":{"T":{"topicName":"T",'
        b'"readQueueNums":2,"writeQueueNums":3,"perm":6,"topicSysFlag":1}}}'
    )
    reg = decode_register_broker_body(body, False)
    assert reg.topic_config_serialize_wrapper.data_version.counter == 9
    assert reg.topic_config_serialize_wrapper.topic_config_table["T"].topic_sys_flag == 1
    assert reg.filter_server_list == []


def test_empty_body_means_no_topics_and_zero_version() -> None:
    reg = decode_register_broker_body(b"", False)
    assert reg.topic_config_serialize_wrapper.topic_config_table == {}
    assert reg.topic_config_serialize_wrapper.data_version == DataVersion(timestamp=0, counter=0)


def test_java_compressed_form() -> None:
    data = java_compressed(
        b'{"counter":3,"timestamp":1700000000123}',
        ["TopicTest 8 4 6 SINGLE_TAG", "%RETRY%g 1 1 6 SINGLE_TAG"],
        b'["10.0.0.5:3000"]',
    )
    reg = decode_register_broker_body(data, True)
    w = reg.topic_config_serialize_wrapper
    assert w.data_version == DataVersion(timestamp=1700000000123, counter=3)
    assert {n: (t.read_queue_nums, t.write_queue_nums, t.perm) for n, t in w.topic_config_table.items()} == {
        "TopicTest": (8, 4, 6),
        "%RETRY%g": (1, 1, 6),
    }
    assert reg.filter_server_list == ["10.0.0.5:3000"]


def test_compressed_round_trip() -> None:
    reg = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table={
                "A": TopicConfig(topic_name="A", read_queue_nums=2, write_queue_nums=3, perm=4)
            },
            data_version=DataVersion(timestamp=11, counter=12),
        ),
        filter_server_list=["f:1"],
    )
    back = decode_register_broker_body(encode_register_broker_body(reg, True), True)
    assert back == reg
    assert decode_register_broker_body(encode_register_broker_body(reg, False), False) == reg


@pytest.mark.parametrize(
    ("data", "compressed", "needle"),
    [
        (b"{not json", False, "not valid JSON"),
        (b"[1,2]", False, "not a JSON object"),
        (b'{"something":"else"}', False, "neither"),
        (b'{"topicConfigTable":{"T":{"readQueueNums":"x"}}}', False, "topicName"),
        (b"definitely not zlib", True, "does not inflate"),
        (zlib.compress(struct.pack(">i", 100) + b"{}"), True, "bad length"),
        (java_compressed(b'{"counter":1,"timestamp":1}', ["T 1 1"]), True, "bad topic config"),
        (java_compressed(b'{"counter":1,"timestamp":1}', ["T a b c SINGLE_TAG"]), True, "bad topic config"),
        (zlib.compress(struct.pack(">i", 2) + b"{}"), True, "topic count"),
    ],
)
def test_bad_bodies_raise_a_clear_error(data: bytes, compressed: bool, needle: str) -> None:
    with pytest.raises(ValueError) as ei:
        decode_register_broker_body(data, compressed)
    assert needle in str(ei.value)


def test_route_data_accepts_java_unquoted_integer_keys() -> None:
    raw = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
        b'"perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    route = TopicRouteData.decode(raw)
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
