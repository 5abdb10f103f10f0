"""Client pieces that need no network: messages, ids, routes, selectors, fault tolerance, errors, config."""

from __future__ import annotations

import os
import struct
import time
import zlib

import pytest

from client import Message, MessageQueue, error_for_code
from client.config import ClientConfig, parse_namesrv_addr, resolve_namesrv_addr
from client.errors import (
    InvalidMessageError,
    MQBrokerError,
    MQClientError,
    NoNameServerError,
    SystemBusyError,
    TopicNotExistError,
    annotate,
)
from client.message import encode_messages
from client.msg_id import MessageIdGenerator, create_uniq_id, decode_uniq_id
from client.producer.fault import LatencyFaultTolerance, MQFaultStrategy
from client.producer.selector import SelectMessageQueueByHash, as_selector, java_hash_code
from client.route import (
    TopicPublishInfo,
    route_changed,
    topic_route_to_publish_info,
    topic_route_to_subscribe_info,
)
from client.validators import check_message
from remoting.body import BrokerData, QueueData, TopicRouteData
from remoting.message import decode_properties

# ---------------------------------------------------------------------- Message


def test_message_properties_hold_tags_keys_delay_and_user_props() -> None:
    m = Message("T", "héllo", tags="TagA", keys=["k1", "k2"], properties={"color": "red"}, delay_level=3)
    assert m.body == "héllo".encode()
    assert m.properties == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3", "WAIT": "true"}
    assert (m.tags, m.keys, m.keys_list, m.delay_level) == ("TagA", "k1 k2", ["k1", "k2"], 3)
    m.delay_level = 0
    m.keys = "solo"
    m.tags = None
    assert "DELAY" not in m.properties and "TAGS" not in m.properties and m.keys == "solo"
    assert m.user_properties() == {"color": "red"}


def test_put_user_property_refuses_system_names() -> None:
    m = Message("T", b"x")
    with pytest.raises(ValueError, match="UNIQ_KEY"):
        m.put_user_property("UNIQ_KEY", "abc")
    m.put_user_property("trace", "1")
    assert m.get_property("trace") == "1"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"properties": {"color": ""}}, "'color'"),  # an empty value or name is dropped on the wire: refused here
        ({"properties": {"": "red"}}, "non-empty"),
        ({"properties": {"color": "red\x02blue"}}, "'color'"),  # \x01 / \x02 would split the stored properties
        ({"properties": {"co\x01lor": "red"}}, "property name"),
        ({"tags": "TagA\x01"}, "tags"),
        ({"keys": ["k1", "k\x022"]}, "keys"),
        ({"keys": "k1\x01"}, "keys"),
    ],
)
def test_message_refuses_what_its_stored_properties_would_lose_or_split(kwargs: dict, needle: str) -> None:
    with pytest.raises(InvalidMessageError, match=needle):
        Message("T", b"x", **kwargs)


def test_message_setters_refuse_property_separators() -> None:
    m = Message("T", b"x", properties={"ok": "fine", "unset": None})
    assert m.properties == {"ok": "fine", "WAIT": "true"}  # None: not set
    with pytest.raises(InvalidMessageError, match="tags"):
        m.tags = "a\x02b"
    with pytest.raises(InvalidMessageError, match="keys"):
        m.keys = ["a", "b\x01"]
    with pytest.raises(InvalidMessageError, match="'trace'"):
        m.put_user_property("trace", "1\x021")
    assert m.properties == {"ok": "fine", "WAIT": "true"}  # nothing half-set


def test_message_queue_is_hashable_and_sorts_like_java() -> None:
    a = MessageQueue("T", "broker-b", 0)
    b = MessageQueue("T", "broker-a", 3)
    c = MessageQueue("T", "broker-a", 1)
    assert sorted([a, b, c]) == [c, b, a]
    assert {a: 1}[MessageQueue("T", "broker-b", 0)] == 1


def test_batch_body_layout_matches_java_encode_message() -> None:
    m1 = Message("T", b"abc", tags="x")
    m1.flag = 7
    m2 = Message("T", b"")
    m2.body = b"zz"
    body = encode_messages([m1, m2])
    total, magic, crc, flag, blen = struct.unpack_from(">iiiii", body, 0)
    assert (magic, crc, flag, blen) == (0, 0, 7, 3)
    assert body[20:23] == b"abc"
    (plen,) = struct.unpack_from(">h", body, 23)
    assert decode_properties(body[25 : 25 + plen]) == m1.properties
    assert total == 25 + plen
    second = body[total:]
    assert struct.unpack_from(">i", second, 0)[0] == len(second)


def test_check_message_limits() -> None:
    with pytest.raises(MQClientError, match="blank"):
        check_message(Message("", b"x"), 100)
    with pytest.raises(MQClientError, match="illegal characters"):
        check_message(Message("a b", b"x"), 100)
    with pytest.raises(MQClientError, match="forbidden"):
        check_message(Message("SCHEDULE_TOPIC_XXXX", b"x"), 100)
    with pytest.raises(MQClientError, match="length is zero"):
        check_message(Message("T", b""), 100)
    with pytest.raises(MQClientError, match="over max value, MAX: 100"):
        check_message(Message("T", b"x" * 101), 100)
    check_message(Message("T", b"x" * 100), 100)


# ---------------------------------------------------------------------- UNIQ_KEY ids


def test_uniq_id_layout_ip_pid_time_counter() -> None:
    gen = MessageIdGenerator(ip="10.1.2.3", pid=0x1234, seed=0xCAFEBABE)
    a, b = gen.create(), gen.create()
    assert len(a) == 32 and a == a.upper()
    raw = bytes.fromhex(a)
    assert raw[:4] == bytes([10, 1, 2, 3])
    assert raw[4:6] == b"\x12\x34"
    assert raw[6:10] == b"\xca\xfe\xba\xbe"
    assert a[:20] == b[:20] == gen.prefix
    c1, c2 = struct.unpack(">H", raw[14:16])[0], struct.unpack(">H", bytes.fromhex(b)[14:16])[0]
    assert c2 == (c1 + 1) & 0xFFFF
    info = decode_uniq_id(a)
    assert info["ip"] == "10.1.2.3" and info["pid"] == 0x1234
    assert abs(int(info["timestamp_ms"]) - time.time() * 1000) < 5000


def test_default_ids_are_unique_and_carry_this_pid() -> None:
    ids = {create_uniq_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert decode_uniq_id(next(iter(ids)))["pid"] == os.getpid() & 0xFFFF


# ---------------------------------------------------------------------- selectors


def test_java_hash_code_and_default_selector_agree_with_java() -> None:
    # Java: "hello".hashCode() == 99162322, "order-1".hashCode() == -1207111310
    assert java_hash_code("hello") == 99162322
    assert java_hash_code("order-1") == -1207111310
    assert java_hash_code(42) == 42
    assert java_hash_code(2**40 + 5) == ((2**40 + 5) ^ ((2**40 + 5) >> 32)) & 0xFFFFFFFF
    queues = [MessageQueue("T", "b", i) for i in range(8)]
    sel = SelectMessageQueueByHash()
    # SelectMessageQueueByHash: abs(hashCode % n) -> 1207111310 % 8 == 6
    assert sel.select(queues, Message("T", b"x"), "order-1") == queues[6]
    assert sel.select(queues, Message("T", b"x"), "hello") == queues[99162322 % 8]


def test_as_selector_accepts_functions() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(4)]
    sel = as_selector(lambda qs, msg, arg: qs[arg % len(qs)])
    assert sel.select(queues, Message("T", b"x"), 5) == queues[1]
    with pytest.raises(TypeError):
        as_selector(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- routes


def _route(order_conf: str | None = None) -> TopicRouteData:
    return TopicRouteData(
        order_topic_conf=order_conf,
        queue_datas=[
            QueueData(broker_name="b-b", read_queue_nums=2, write_queue_nums=2, perm=6),
            QueueData(broker_name="b-a", read_queue_nums=3, write_queue_nums=3, perm=6),
            QueueData(broker_name="b-ro", read_queue_nums=2, write_queue_nums=2, perm=4),
            QueueData(broker_name="b-slave-only", read_queue_nums=2, write_queue_nums=2, perm=6),
        ],
        broker_datas=[
            BrokerData(cluster="c", broker_name="b-a", broker_addrs={0: "1.1.1.1:1"}),
            BrokerData(cluster="c", broker_name="b-b", broker_addrs={0: "1.1.1.2:1", 1: "1.1.1.3:1"}),
            BrokerData(cluster="c", broker_name="b-ro", broker_addrs={0: "1.1.1.4:1"}),
            BrokerData(cluster="c", broker_name="b-slave-only", broker_addrs={1: "1.1.1.5:1"}),
        ],
    )


def test_publish_info_writable_master_queues_sorted_by_broker() -> None:
    info = topic_route_to_publish_info("T", _route())
    assert info.message_queues == [MessageQueue("T", "b-a", i) for i in range(3)] + [
        MessageQueue("T", "b-b", i) for i in range(2)
    ]
    assert not info.order_topic and info.ok()
    sub = topic_route_to_subscribe_info("T", _route())
    assert MessageQueue("T", "b-ro", 1) in sub and len(sub) == 9


def test_publish_info_order_topic_conf_wins() -> None:
    info = topic_route_to_publish_info("T", _route("b-b:2;b-a:1"))
    assert info.order_topic
    assert info.message_queues == [
        MessageQueue("T", "b-b", 0),
        MessageQueue("T", "b-b", 1),
        MessageQueue("T", "b-a", 0),
    ]


def test_round_robin_skips_the_broker_that_just_failed() -> None:
    info = topic_route_to_publish_info("T", _route())
    for _ in range(20):
        assert info.select_one_message_queue("b-a").broker_name == "b-b"
    only_a = TopicPublishInfo("T", [MessageQueue("T", "b-a", i) for i in range(3)])
    assert only_a.select_one_message_queue("b-a").broker_name == "b-a"  # nothing else: fall back
    seen = {info.select_one_message_queue().queue_id for _ in range(10)}
    assert len(seen) > 1


def test_route_changed_ignores_list_order() -> None:
    r1 = _route()
    r2 = r1.model_copy(update={"queue_datas": list(reversed(r1.queue_datas))})
    assert not route_changed(r1, r2)
    r3 = r1.model_copy(update={"queue_datas": r1.queue_datas[:1]})
    assert route_changed(r1, r3)


# ---------------------------------------------------------------------- fault tolerance


def test_not_available_duration_table() -> None:
    s = MQFaultStrategy(True)
    assert [
        s.compute_not_available_duration(x) for x in (10, 50, 100, 549, 550, 1000, 2000, 3000, 15000, 30000)
    ] == [
        0,
        0,
        0,
        0,
        30000,
        60000,
        120000,
        180000,
        600000,
        600000,
    ]


def test_latency_fault_tolerance_avoids_a_failed_broker() -> None:
    info = topic_route_to_publish_info("T", _route())
    s = MQFaultStrategy(True)
    s.update_fault_item("b-a", 10, isolation=True)  # a failure: 10 minutes out
    s.update_fault_item("b-b", 5, isolation=False)
    assert all(s.select_one_message_queue(info, None).broker_name == "b-b" for _ in range(20))
    # Both out: the least bad one is still chosen, as a new queue object.
    s.update_fault_item("b-b", 700, isolation=False)
    mq = s.select_one_message_queue(info, None)
    assert mq.broker_name in ("b-a", "b-b")
    off = MQFaultStrategy(False)
    off.update_fault_item("b-a", 10, isolation=True)
    assert not off.fault_tolerance.items()


def test_pick_one_at_least_prefers_lower_latency() -> None:
    lft = LatencyFaultTolerance()
    lft.update_fault_item("x", 500, 60000)
    assert lft.pick_one_at_least() == "x"
    assert not lft.is_available("x") and lft.is_available("unknown")


# ---------------------------------------------------------------------- errors and config


def test_error_for_code_gives_typed_errors_with_context() -> None:
    e = error_for_code(2, "[TIMEOUT_CLEAN_QUEUE]broker busy", "127.0.0.1:10911")
    assert isinstance(e, SystemBusyError) and isinstance(e, MQBrokerError)
    assert e.code == 2 and e.addr == "127.0.0.1:10911"
    assert "SYSTEM_BUSY (2) from 127.0.0.1:10911" in str(e) and "broker busy" in str(e)
    assert type(error_for_code(17)) is TopicNotExistError
    assert type(error_for_code(12345, "x")) is MQBrokerError
    annotate(e, topic="T", brokers=["a", "b"], attempts=3)
    assert "topic=T, brokers=a,b, attempts=3" in str(e) and e.attempts == 3  # type: ignore[attr-defined]


def test_namesrv_addr_parsing_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_namesrv_addr(" a:1; b:2 ;a:1;") == ["a:1", "b:2"]
    with pytest.raises(MQClientError, match="bad NameServer address"):
        parse_namesrv_addr("nohost")
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.1:9876;10.0.0.2:9876")
    assert resolve_namesrv_addr(None) == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert resolve_namesrv_addr("1.2.3.4:5") == ["1.2.3.4:5"]
    monkeypatch.delenv("NAMESRV_ADDR")
    with pytest.raises(NoNameServerError, match="NAMESRV_ADDR"):
        resolve_namesrv_addr(None)


def test_client_id_is_ip_at_pid_hash() -> None:
    cfg = ClientConfig(namesrv_addr="127.0.0.1:9876", client_ip="10.9.8.7")
    cid = cfg.build_mq_client_id()
    ip, _, inst = cid.partition("@")
    assert ip == "10.9.8.7"
    pid, _, h = inst.partition("#")
    assert pid == str(os.getpid()) and len(h) == 8
    assert h == f"{zlib.crc32(b'127.0.0.1:9876') & 0xFFFFFFFF:08x}"
    other = ClientConfig(namesrv_addr="127.0.0.1:9877", client_ip="10.9.8.7")
    assert other.build_mq_client_id() != cid
    named = ClientConfig(
        namesrv_addr="127.0.0.1:9876", client_ip="10.9.8.7", instance_name="app1", unit_name="u"
    )
    assert named.build_mq_client_id() == "10.9.8.7@app1@u"
