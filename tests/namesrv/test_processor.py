"""An in-process NamesrvController on port 0, driven over TCP by fake brokers and clients."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from namesrv import NamesrvController
from remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from remoting.body import ClusterInfo, DataVersion, KVTable, TopicList
from remoting.headers import RegisterBrokerResponseHeader

from .support import (
    CLUSTER,
    get_route,
    make_config,
    register_cmd,
    route_cmd,
    unregister_cmd,
    wait_until,
)

A0 = "127.0.0.1:10911"
A1 = "127.0.0.1:20911"
B0 = "127.0.0.1:30911"


async def ok(client: RemotingClient, addr: str, cmd: RemotingCommand) -> RemotingCommand:
    r = await client.invoke(addr, cmd, 3000)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return r


async def cluster_info(client: RemotingClient, addr: str) -> ClusterInfo:
    r = await ok(client, addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    return ClusterInfo.decode(r.body)


async def test_register_then_route(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    r = await ok(client, addr, register_cmd("broker-a", A0, {"TopicTest": (8, 4, 6)}))
    assert RegisterBrokerResponseHeader.decode(r.ext_fields) == RegisterBrokerResponseHeader()
    route = await get_route(client, addr, "TopicTest")
    assert route is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 8, 4, 6)
    ]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        (CLUSTER, "broker-a", {0: A0})
    ]
    raw = json.loads((await client.invoke(addr, route_cmd("TopicTest"))).body)
    assert raw["brokerDatas"][0]["brokerAddrs"] == {"0": A0}  # standard JSON out
    assert "orderTopicConf" not in raw  # null fields left out, as fastjson does
    info = await cluster_info(client, addr)
    assert info.cluster_addr_table == {CLUSTER: ["broker-a"]}
    r = await ok(client, addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert TopicList.decode(r.body).topic_list == ["TopicTest"]


async def test_unknown_topic_is_topic_not_exist(
    controller: NamesrvController, client: RemotingClient
) -> None:
    r = await client.invoke(controller.address, route_cmd("NoSuchTopic"))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    assert r.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")


async def test_reregistration_with_same_version_keeps_queue_data(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    await ok(client, addr, register_cmd("broker-a", A0, {"T": (4, 4, 6)}, version=(100, 1)))
    await ok(client, addr, register_cmd("broker-a", A0, {"T": (16, 16, 6)}, version=(100, 1)))
    route = await get_route(client, addr, "T")
    assert route is not None and route.queue_datas[0].read_queue_nums == 4
    await ok(client, addr, register_cmd("broker-a", A0, {"T": (16, 16, 6)}, version=(200, 2)))
    route = await get_route(client, addr, "T")
    assert route is not None and route.queue_datas[0].read_queue_nums == 16


async def test_slave_registration_gets_master_and_ha_address(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    await ok(client, addr, register_cmd("broker-a", A0, ["T"], ha_server_addr="127.0.0.1:10912"))
    r = await ok(client, addr, register_cmd("broker-a", A1, ["T"], broker_id=1))
    h = RegisterBrokerResponseHeader.decode(r.ext_fields)
    assert h.master_addr == A0
    assert h.ha_server_addr == "127.0.0.1:10912"
    route = await get_route(client, addr, "T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: A0, 1: A1}


async def test_compressed_and_legacy_bodies_register(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    await ok(client, addr, register_cmd("broker-a", A0, {"ZIPPED": (2, 2, 6)}, compressed=True))
    legacy = b'{"dataVersion":{"counter":1,"timestamp":1},"topicConfigTable":{"OLD":{"topicName":"OLD","readQueueNums":1,"writeQueueNums":1,"perm":6}}}'
    await ok(client, addr, register_cmd("broker-b", B0, body=legacy))
    z = await get_route(client, addr, "ZIPPED")
    assert z is not None and z.queue_datas[0].read_queue_nums == 2
    old = await get_route(client, addr, "OLD")
    assert old is not None and old.broker_datas[0].broker_addrs == {0: B0}


async def test_header_values_as_json_numbers_and_booleans(
    controller: NamesrvController, client: RemotingClient
) -> None:
    cmd = register_cmd("broker-a", A0, ["T"])
    assert cmd.ext_fields is not None
    cmd.ext_fields["brokerId"] = 0  # type: ignore[assignment]
    cmd.ext_fields["compressed"] = False  # type: ignore[assignment]
    cmd.ext_fields["bodyCrc32"] = int(cmd.ext_fields["bodyCrc32"])  # type: ignore[assignment]
    await ok(client, controller.address, cmd)
    assert await get_route(client, controller.address, "T") is not None


async def assert_tables_empty(client: RemotingClient, addr: str) -> None:
    assert await get_route(client, addr, "T") is None
    info = await cluster_info(client, addr)
    assert info.broker_addr_table == {} and info.cluster_addr_table == {}


async def test_wrong_crc_is_rejected_and_changes_nothing(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    good = register_cmd("broker-a", A0, ["T"])
    assert good.ext_fields is not None
    bad = register_cmd("broker-a", A0, ["T"], crc=(int(good.ext_fields["bodyCrc32"]) + 1) & 0x7FFFFFFF)
    r = await client.invoke(addr, bad)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert "crc32 not match" in r.remark
    await assert_tables_empty(client, addr)


async def test_malformed_json_body_is_rejected(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    r = await client.invoke(
        addr, register_cmd("broker-a", A0, body=b'{"topicConfigSerializeWrapper":{"topicConfigT')
    )
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert "REGISTER_BROKER body" in r.remark and "JSON" in r.remark
    r = await client.invoke(addr, register_cmd("broker-a", A0, body=b"\x00\x01garbage", compressed=True))
    assert r.code == ResponseCode.SYSTEM_ERROR and "inflate" in r.remark
    r = await client.invoke(
        addr,
        register_cmd(
            "broker-a", A0, body=b'{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":"many"}}}'
        ),
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "readQueueNums" in r.remark
    await assert_tables_empty(client, addr)


async def test_missing_or_bad_header_fields_are_rejected(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    for field, value, needle in [
        ("brokerAddr", None, "'brokerAddr'"),
        ("clusterName", None, "'clusterName'"),
        ("brokerId", "zero", "'brokerId'"),
        ("brokerId", "-1", "'brokerId'"),
        ("brokerAddr", "no-port", "'brokerAddr'"),
        ("brokerName", "  ", "'brokerName'"),
    ]:
        cmd = register_cmd("broker-a", A0, ["T"])
        assert cmd.ext_fields is not None
        if value is None:
            del cmd.ext_fields[field]
        else:
            cmd.ext_fields[field] = value
        r = await client.invoke(addr, cmd)
        assert r.code == ResponseCode.SYSTEM_ERROR, field
        assert needle in r.remark, (field, r.remark)
    r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {}))
    assert r.code == ResponseCode.SYSTEM_ERROR and "'topic'" in r.remark
    await assert_tables_empty(client, addr)


async def test_unknown_request_code(controller: NamesrvController, client: RemotingClient) -> None:
    r = await client.invoke(controller.address, RemotingCommand.request(99999))
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_unregister(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    await ok(client, addr, register_cmd("broker-a", A0, ["T"]))
    await ok(client, addr, unregister_cmd("broker-a", A0))
    await assert_tables_empty(client, addr)


async def test_connection_close_cleans_broker_at_once(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    broker = RemotingClient()
    try:
        await ok(broker, addr, register_cmd("broker-a", A0, ["T"]))
        await ok(client, addr, register_cmd("broker-b", B0, ["T"]))  # via another connection
    finally:
        await broker.close()

    async def only_b_left() -> bool:
        route = await get_route(client, addr, "T")
        return route is not None and [b.broker_name for b in route.broker_datas] == ["broker-b"]

    await wait_until(only_b_left, 5, "broker-a's routes to go after its connection closed")
    info = await cluster_info(client, addr)
    assert set(info.broker_addr_table) == {"broker-b"}


async def test_silent_broker_expires_and_its_connection_is_closed(
    tmp_path: Path, client: RemotingClient
) -> None:
    c = NamesrvController(
        make_config(tmp_path, scanNotActiveBrokerInterval=50, brokerChannelExpiredTime=1000)
    )
    await c.start()
    broker = RemotingClient()
    try:
        addr = c.address
        # Heartbeats every 100 ms keep it registered for 1.5 s, past the 1 s expiry time.
        await ok(broker, addr, register_cmd("broker-a", A0, ["T"]))
        for _ in range(15):
            await asyncio.sleep(0.1)
            assert await get_route(client, addr, "T") is not None, "dropped while heartbeating"
            await ok(broker, addr, register_cmd("broker-a", A0, ["T"]))
        # Then silence: dropped, and the NameServer closes its connection.

        async def gone() -> bool:
            return await get_route(client, addr, "T") is None

        await wait_until(gone, 10, "the silent broker to expire")

        async def closed() -> bool:
            return broker.connected_addrs() == []

        await wait_until(closed, 5, "the NameServer to close the expired broker's connection")
    finally:
        await broker.close()
        await c.stop()


async def test_query_data_version(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    await ok(client, addr, register_cmd("broker-a", A0, ["T"], version=(42, 7)))
    ext = {"brokerName": "broker-a", "brokerAddr": A0, "clusterName": CLUSTER, "brokerId": "0"}
    same = await ok(
        client,
        addr,
        RemotingCommand.request(
            RequestCode.QUERY_DATA_VERSION, ext, DataVersion(timestamp=42, counter=7).encode()
        ),
    )
    assert same.ext_fields is not None and same.ext_fields["changed"] == "false"
    assert DataVersion.decode(same.body) == DataVersion(timestamp=42, counter=7)
    other = await ok(
        client,
        addr,
        RemotingCommand.request(
            RequestCode.QUERY_DATA_VERSION, ext, DataVersion(timestamp=42, counter=8).encode()
        ),
    )
    assert other.ext_fields is not None and other.ext_fields["changed"] == "true"
    bad = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, ext, b"nope"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "DataVersion" in bad.remark


async def test_two_nameservers_converge_independently(tmp_path: Path, client: RemotingClient) -> None:
    ns1 = NamesrvController(make_config(tmp_path / "ns1"))
    ns2 = NamesrvController(make_config(tmp_path / "ns2"))
    await ns1.start()
    await ns2.start()
    broker = RemotingClient()
    try:
        await ok(broker, ns1.address, register_cmd("broker-a", A0, ["T"]))
        assert await get_route(client, ns1.address, "T") is not None
        assert await get_route(client, ns2.address, "T") is None  # NameServers never talk to each other
        await ok(broker, ns2.address, register_cmd("broker-a", A0, ["T"]))
        await ok(broker, ns1.address, register_cmd("broker-b", B0, ["T"]))
        await ok(broker, ns2.address, register_cmd("broker-b", B0, ["T"]))
        r1 = await get_route(client, ns1.address, "T")
        r2 = await get_route(client, ns2.address, "T")
        assert r1 is not None and r2 is not None
        key = lambda r: sorted((b.broker_name, tuple(b.broker_addrs.items())) for b in r.broker_datas)  # noqa: E731
        assert key(r1) == key(r2) == [("broker-a", ((0, A0),)), ("broker-b", ((0, B0),))]
        await ok(broker, ns1.address, unregister_cmd("broker-a", A0))
        r1 = await get_route(client, ns1.address, "T")
        r2 = await get_route(client, ns2.address, "T")
        assert r1 is not None and [b.broker_name for b in r1.broker_datas] == ["broker-b"]
        assert r2 is not None and len(r2.broker_datas) == 2
    finally:
        await broker.close()
        await ns1.stop()
        await ns2.stop()


async def test_concurrent_registrations_and_reads_stay_consistent(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    brokers = [RemotingClient() for _ in range(4)]
    try:

        async def churn(i: int, b: RemotingClient) -> None:
            name, baddr = f"broker-{i}", f"127.0.0.1:{40000 + i}"
            for n in range(15):
                await ok(b, addr, register_cmd(name, baddr, [f"T{k}" for k in range(20)], version=(n, n)))
                await ok(b, addr, unregister_cmd(name, baddr))

        async def read() -> None:
            for _ in range(60):
                route = await get_route(client, addr, "T7")
                if route is not None:
                    # A route never shows half a registration or half an unregistration.
                    names = {b.broker_name for b in route.broker_datas}
                    assert {q.broker_name for q in route.queue_datas} == names
                    for b in route.broker_datas:
                        assert len(b.broker_addrs) == 1, "a broker without addresses leaked into a route"

        await asyncio.gather(*(churn(i, b) for i, b in enumerate(brokers)), read(), read())
        await assert_tables_empty(client, addr)
    finally:
        for b in brokers:
            await b.close()


async def test_write_perm_and_delete_topic(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    await ok(client, addr, register_cmd("broker-a", A0, ["T", "U"]))
    r = await ok(
        client,
        addr,
        RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
    )
    assert r.ext_fields == {"wipeTopicCount": "2"}
    route = await get_route(client, addr, "T")
    assert route is not None and route.queue_datas[0].perm == 4
    r = await ok(
        client,
        addr,
        RemotingCommand.request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
    )
    assert r.ext_fields == {"addTopicCount": "2"}
    route = await get_route(client, addr, "T")
    assert route is not None and route.queue_datas[0].perm == 6
    await ok(client, addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"}))
    assert await get_route(client, addr, "T") is None
    assert await get_route(client, addr, "U") is not None


async def test_topic_list_queries(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    await ok(client, addr, register_cmd("broker-a", A0, ["T"]))
    r = await ok(
        client, addr, RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER})
    )
    assert TopicList.decode(r.body).topic_list == ["T"]
    r = await ok(client, addr, RemotingCommand.request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    system = TopicList.decode(r.body)
    assert sorted(system.topic_list) == sorted([CLUSTER, "broker-a"]) and system.broker_addr == A0
    for code in (
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    ):
        r = await ok(client, addr, RemotingCommand.request(code))
        assert TopicList.decode(r.body).topic_list == []


def kv(code: RequestCode, **ext: str) -> RemotingCommand:
    return RemotingCommand.request(code, dict(ext))


async def test_kv_config_persists_across_restart(tmp_path: Path, client: RemotingClient) -> None:
    cfg = make_config(tmp_path)
    c = NamesrvController(cfg)
    await c.start()
    try:
        addr = c.address
        await ok(client, addr, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key="k1", value="v1"))
        await ok(client, addr, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key="k2", value="v2"))
        await ok(client, addr, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key="k2", value="v2b"))
        await ok(client, addr, kv(RequestCode.PUT_KV_CONFIG, namespace="GONE", key="x", value="y"))
        await ok(client, addr, kv(RequestCode.DELETE_KV_CONFIG, namespace="GONE", key="x"))
        r = await ok(client, addr, kv(RequestCode.GET_KV_CONFIG, namespace="NS", key="k1"))
        assert r.ext_fields == {"value": "v1"}
    finally:
        await c.stop()
    on_disk = json.loads(Path(cfg.kvConfigPath).read_text())
    assert on_disk == {"configTable": {"NS": {"k1": "v1", "k2": "v2b"}}}
    assert [p.name for p in Path(cfg.kvConfigPath).parent.iterdir()] == [
        "kvConfig.json"
    ]  # no temp files left

    c2 = NamesrvController(cfg)
    await c2.start()
    try:
        addr = c2.address
        r = await ok(client, addr, kv(RequestCode.GET_KV_CONFIG, namespace="NS", key="k2"))
        assert r.ext_fields == {"value": "v2b"}
        r = await ok(client, addr, kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="NS"))
        assert KVTable.decode(r.body).table == {"k1": "v1", "k2": "v2b"}
        r = await client.invoke(addr, kv(RequestCode.GET_KV_CONFIG, namespace="GONE", key="x"))
        assert r.code == ResponseCode.QUERY_NOT_FOUND and "GONE" in r.remark
        r = await client.invoke(addr, kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="NOPE"))
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        r = await client.invoke(addr, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key="k"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "'value'" in r.remark
    finally:
        await c2.stop()


async def test_java_written_kv_file_loads(tmp_path: Path, client: RemotingClient) -> None:
    cfg = make_config(tmp_path)
    Path(cfg.kvConfigPath).parent.mkdir(parents=True)
    Path(cfg.kvConfigPath).write_text('{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"broker-a:4"}}}')
    c = NamesrvController(cfg)
    await c.start()
    try:
        r = await ok(
            client, c.address, kv(RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T")
        )
        assert r.ext_fields == {"value": "broker-a:4"}
    finally:
        await c.stop()


async def test_order_topic_conf(tmp_path: Path, client: RemotingClient) -> None:
    c = NamesrvController(make_config(tmp_path, orderMessageEnable=True))
    await c.start()
    try:
        addr = c.address
        await ok(
            client,
            addr,
            kv(RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T", value="broker-a:4"),
        )
        r = await ok(client, addr, register_cmd("broker-a", A0, ["T", "U"]))
        assert KVTable.decode(r.body).table == {"T": "broker-a:4"}  # brokers learn the order config
        route = await get_route(client, addr, "T")
        assert route is not None and route.order_topic_conf == "broker-a:4"
        route = await get_route(client, addr, "U")
        assert route is not None and route.order_topic_conf is None
    finally:
        await c.stop()


async def test_order_topic_conf_off_by_default(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    await ok(
        client,
        addr,
        kv(RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T", value="broker-a:4"),
    )
    await ok(client, addr, register_cmd("broker-a", A0, ["T"]))
    route = await get_route(client, addr, "T")
    assert route is not None and route.order_topic_conf is None


async def test_get_and_update_namesrv_config(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    r = await ok(client, addr, RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG))
    text = r.body.decode()
    assert "brokerChannelExpiredTime=120000" in text and "listenPort=0" in text

    upd = RemotingCommand.request(
        RequestCode.UPDATE_NAMESRV_CONFIG, body=b"brokerChannelExpiredTime=5000\norderMessageEnable=true\n"
    )
    await ok(client, addr, upd)
    assert controller.route_info_manager.broker_channel_expired_time_ms == 5000
    assert controller.config.orderMessageEnable is True
    r = await ok(client, addr, RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG))
    assert "brokerChannelExpiredTime=5000" in r.body.decode()
    persisted = Path(controller.config.configStorePath).read_text()
    assert "brokerChannelExpiredTime=5000" in persisted and "orderMessageEnable=true" in persisted

    for body, needle in [
        (b"noSuchKey=1\nbrokerChannelExpiredTime=7000\n", "noSuchKey"),
        (b"brokerChannelExpiredTime=soon\n", "brokerChannelExpiredTime"),
        (b"listenPort=70000\n", "listenPort"),
    ]:
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=body))
        assert r.code == ResponseCode.SYSTEM_ERROR and needle in r.remark, r.remark
    assert controller.config.brokerChannelExpiredTime == 5000  # a rejected update changes nothing


async def test_update_scan_interval_takes_effect(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    await ok(
        client,
        addr,
        RemotingCommand.request(
            RequestCode.UPDATE_NAMESRV_CONFIG,
            body=b"scanNotActiveBrokerInterval=50\nbrokerChannelExpiredTime=200\n",
        ),
    )
    broker = RemotingClient()
    try:
        await ok(broker, addr, register_cmd("broker-a", A0, ["T"]))

        async def gone() -> bool:
            return await get_route(client, addr, "T") is None

        await wait_until(gone, 5, "expiry with the updated interval")
    finally:
        await broker.close()


async def test_large_register_body(controller: NamesrvController, client: RemotingClient) -> None:
    addr = controller.address
    topics = [f"LargeBodyTopic-{i:05d}" for i in range(3000)]
    cmd = register_cmd("broker-a", A0, topics)
    assert cmd.body is not None and len(cmd.body) > 256 * 1024  # decoded off the event loop
    await ok(client, addr, cmd)
    assert await get_route(client, addr, "LargeBodyTopic-02999") is not None
    r = await ok(client, addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert len(TopicList.decode(r.body).topic_list) == 3000


async def test_concurrent_kv_puts_all_reach_the_file(
    controller: NamesrvController, client: RemotingClient
) -> None:
    addr = controller.address
    await asyncio.gather(
        *(
            ok(client, addr, kv(RequestCode.PUT_KV_CONFIG, namespace="NS", key=f"k{i}", value=str(i)))
            for i in range(40)
        )
    )
    on_disk = json.loads(Path(controller.config.kvConfigPath).read_text())
    assert on_disk["configTable"]["NS"] == {f"k{i}": str(i) for i in range(40)}
