"""RouteInfoManager as pure logic: no sockets, a fake clock."""

from __future__ import annotations

import pytest

from namesrv.route_info_manager import RouteInfoManager
from remoting.body import DataVersion, TopicConfig, TopicConfigSerializeWrapper

from .support import CLUSTER, wrapper

A0 = "10.0.0.1:10911"
A1 = "10.0.0.2:10911"
B0 = "10.0.0.3:10911"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rim(clock: Clock) -> RouteInfoManager:
    return RouteInfoManager(broker_channel_expired_time_ms=120_000, clock=clock)


def reg(
    rim: RouteInfoManager,
    name: str,
    addr: str,
    topics,
    *,
    bid: int = 0,
    version=(1000, 1),
    channel=None,
    ha=None,
    fs=None,
):
    return rim.register_broker(
        CLUSTER, addr, name, bid, ha or addr + "-ha", wrapper(topics, version), fs, channel
    )


def queues(rim: RouteInfoManager, topic: str) -> dict[str, tuple[int, int, int]]:
    route = rim.pickup_topic_route_data(topic)
    assert route is not None, f"no route for {topic}"
    return {q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas}


def test_register_master_builds_every_table(rim: RouteInfoManager) -> None:
    result = reg(rim, "broker-a", A0, {"T1": (4, 4, 6), "T2": (8, 2, 4)}, fs=["10.0.0.9:1"])
    assert result.master_addr is None and result.ha_server_addr is None
    route = rim.pickup_topic_route_data("T2")
    assert route is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 8, 2, 4)
    ]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        (CLUSTER, "broker-a", {0: A0})
    ]
    assert route.filter_server_table == {A0: ["10.0.0.9:1"]}
    info = rim.get_all_cluster_info()
    assert info.cluster_addr_table == {CLUSTER: ["broker-a"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: A0}
    assert sorted(rim.get_all_topic_list().topic_list) == ["T1", "T2"]
    assert rim.query_broker_topic_config(A0) == DataVersion(timestamp=1000, counter=1)


def test_unchanged_data_version_does_not_rewrite_queue_data(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, {"T": (4, 4, 6)}, version=(1000, 1))
    assert rim.wipe_write_perm_of_broker("broker-a") == 1
    # Same data version, different topic table: the NameServer keeps what it has.
    reg(rim, "broker-a", A0, {"T": (8, 8, 6), "NEW": (1, 1, 6)}, version=(1000, 1))
    assert queues(rim, "T") == {"broker-a": (4, 4, 4)}
    assert rim.pickup_topic_route_data("NEW") is None
    # A new data version is applied.
    reg(rim, "broker-a", A0, {"T": (8, 8, 6), "NEW": (1, 1, 6)}, version=(2000, 2))
    assert queues(rim, "T") == {"broker-a": (8, 8, 6)}
    assert queues(rim, "NEW") == {"broker-a": (1, 1, 6)}


def test_first_registration_applies_even_with_a_known_version(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, ["T"], version=(1000, 1))
    rim.unregister_broker(CLUSTER, A0, "broker-a", 0)
    assert rim.pickup_topic_route_data("T") is None
    reg(rim, "broker-a", A0, ["T"], version=(1000, 1))
    assert queues(rim, "T") == {"broker-a": (4, 4, 6)}


def test_slave_gets_master_and_ha_address_and_does_not_write_topics(rim: RouteInfoManager) -> None:
    # A slave before its master learns nothing.
    early = reg(rim, "broker-a", A1, ["T"], bid=1)
    assert early.master_addr is None and early.ha_server_addr is None
    assert rim.pickup_topic_route_data("T") is None  # slaves never create queue data

    reg(rim, "broker-a", A0, ["T"], ha="10.0.0.1:10912")
    result = reg(rim, "broker-a", A1, {"T": (16, 16, 6), "SLAVE_ONLY": (1, 1, 6)}, bid=1, version=(5, 5))
    assert result.master_addr == A0
    assert result.ha_server_addr == "10.0.0.1:10912"
    assert queues(rim, "T") == {"broker-a": (4, 4, 6)}
    assert rim.pickup_topic_route_data("SLAVE_ONLY") is None
    route = rim.pickup_topic_route_data("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: A0, 1: A1}


def test_same_address_under_new_broker_id_replaces_old_entry(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, ["T"], bid=1)
    reg(rim, "broker-a", A0, ["T"], bid=0)  # slave promoted to master at the same ip:port
    assert rim.get_all_cluster_info().broker_addr_table["broker-a"].broker_addrs == {0: A0}
    assert queues(rim, "T") == {"broker-a": (4, 4, 6)}


def test_expiry_drops_silent_broker_only_after_the_expiry_time(rim: RouteInfoManager, clock: Clock) -> None:
    chan = object()
    reg(rim, "broker-a", A0, ["T"], channel=chan)
    reg(rim, "broker-b", B0, ["T"])
    clock.now += 60_000
    reg(rim, "broker-b", B0, ["T"])  # broker-b keeps heartbeating
    clock.now += 60_000
    assert rim.scan_not_active_broker() == []  # exactly 120 s: not yet
    clock.now += 1
    expired = rim.scan_not_active_broker()
    assert [(addr, live.channel) for addr, live in expired] == [(A0, chan)]
    assert queues(rim, "T") == {"broker-b": (4, 4, 6)}
    assert "broker-a" not in rim.get_all_cluster_info().broker_addr_table
    assert A0 not in rim.broker_live_table


def test_master_expiry_keeps_routes_while_a_slave_lives(rim: RouteInfoManager, clock: Clock) -> None:
    reg(rim, "broker-a", A0, ["T"])
    reg(rim, "broker-a", A1, ["T"], bid=1)
    clock.now += 100_000
    reg(rim, "broker-a", A1, ["T"], bid=1)
    clock.now += 30_000
    assert [a for a, _ in rim.scan_not_active_broker()] == [A0]
    route = rim.pickup_topic_route_data("T")
    assert route is not None
    assert route.broker_datas[0].broker_addrs == {1: A1}
    assert rim.get_all_cluster_info().cluster_addr_table == {CLUSTER: ["broker-a"]}
    clock.now += 130_000
    assert [a for a, _ in rim.scan_not_active_broker()] == [A1]
    assert rim.pickup_topic_route_data("T") is None
    assert rim.get_all_cluster_info().cluster_addr_table == {}


def test_channel_destroy_finds_broker_by_connection(rim: RouteInfoManager) -> None:
    chan_a, chan_b, stranger = object(), object(), object()
    reg(rim, "broker-a", A0, ["T", "ONLY_A"], channel=chan_a)
    reg(rim, "broker-b", B0, ["T"], channel=chan_b)
    assert rim.on_channel_destroy("127.0.0.1:5555", stranger) is None
    assert set(queues(rim, "T")) == {"broker-a", "broker-b"}
    assert rim.on_channel_destroy("127.0.0.1:5556", chan_a) == A0
    assert set(queues(rim, "T")) == {"broker-b"}
    assert rim.pickup_topic_route_data("ONLY_A") is None


def test_channel_destroy_of_a_replaced_connection_keeps_broker(rim: RouteInfoManager) -> None:
    old, new = object(), object()
    reg(rim, "broker-a", A0, ["T"], channel=old)
    reg(rim, "broker-a", A0, ["T"], channel=new)  # broker reconnected and re-registered
    assert rim.on_channel_destroy("127.0.0.1:1", old) is None
    assert queues(rim, "T") == {"broker-a": (4, 4, 6)}


def test_unregister_removes_names_and_topics_only_when_last_address_goes(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, ["T"])
    reg(rim, "broker-a", A1, ["T"], bid=1)
    rim.unregister_broker(CLUSTER, A0, "broker-a", 0)
    assert queues(rim, "T") == {"broker-a": (4, 4, 6)}
    rim.unregister_broker(CLUSTER, A1, "broker-a", 1)
    assert rim.pickup_topic_route_data("T") is None
    info = rim.get_all_cluster_info()
    assert info.broker_addr_table == {} and info.cluster_addr_table == {}
    assert rim.broker_live_table == {}


def test_delete_topic_everywhere_or_per_cluster(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, ["T", "U"])
    rim.register_broker("OtherCluster", B0, "broker-b", 0, None, wrapper(["T"]), None, None)
    rim.delete_topic("T", "OtherCluster")
    assert set(queues(rim, "T")) == {"broker-a"}
    rim.delete_topic("T", "NoSuchCluster")
    assert set(queues(rim, "T")) == {"broker-a"}
    rim.delete_topic("T")
    assert rim.pickup_topic_route_data("T") is None
    assert rim.pickup_topic_route_data("U") is not None


def test_wipe_and_add_write_perm(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, {"T": (4, 4, 6), "U": (4, 4, 4)})
    reg(rim, "broker-b", B0, ["T"])
    assert rim.wipe_write_perm_of_broker("broker-a") == 2
    assert queues(rim, "T") == {"broker-a": (4, 4, 4), "broker-b": (4, 4, 6)}
    assert rim.wipe_write_perm_of_broker("no-such-broker") == 0
    assert rim.add_write_perm_of_broker("broker-a") == 2
    assert queues(rim, "U") == {"broker-a": (4, 4, 6)}


def test_topic_listings(rim: RouteInfoManager) -> None:
    t = TopicConfigSerializeWrapper(
        topic_config_table={
            "PLAIN": TopicConfig(topic_name="PLAIN"),
            "UNIT": TopicConfig(topic_name="UNIT", topic_sys_flag=1),
            "UNIT_SUB": TopicConfig(topic_name="UNIT_SUB", topic_sys_flag=2),
            "BOTH": TopicConfig(topic_name="BOTH", topic_sys_flag=3),
        },
        data_version=DataVersion(timestamp=1, counter=1),
    )
    rim.register_broker(CLUSTER, A0, "broker-a", 0, None, t, None, None)
    rim.register_broker("C2", B0, "broker-b", 0, None, wrapper(["OTHER"]), None, None)
    assert sorted(rim.get_topics_by_cluster(CLUSTER).topic_list) == ["BOTH", "PLAIN", "UNIT", "UNIT_SUB"]
    assert rim.get_topics_by_cluster("nope").topic_list == []
    assert sorted(rim.get_unit_topics().topic_list) == ["BOTH", "UNIT"]
    assert sorted(rim.get_has_unit_sub_topic_list().topic_list) == ["BOTH", "UNIT_SUB"]
    assert rim.get_has_unit_sub_ununit_topic_list().topic_list == ["UNIT_SUB"]
    system = rim.get_system_topic_list()
    assert sorted(system.topic_list) == sorted([CLUSTER, "broker-a", "C2", "broker-b"])
    assert system.broker_addr in (A0, B0)


def test_route_is_a_copy(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, ["T"])
    route = rim.pickup_topic_route_data("T")
    assert route is not None
    route.queue_datas[0].perm = 0
    route.broker_datas[0].broker_addrs[7] = "x:1"
    assert queues(rim, "T") == {"broker-a": (4, 4, 6)}
    assert rim.get_all_cluster_info().broker_addr_table["broker-a"].broker_addrs == {0: A0}


def test_filter_servers_empty_list_removes_entry(rim: RouteInfoManager) -> None:
    reg(rim, "broker-a", A0, ["T"], fs=["f:1"])
    reg(rim, "broker-a", A0, ["T"], fs=[])
    route = rim.pickup_topic_route_data("T")
    assert route is not None and route.filter_server_table == {}


def test_query_data_version_and_timestamp_refresh(rim: RouteInfoManager, clock: Clock) -> None:
    reg(rim, "broker-a", A0, ["T"], version=(7, 3))
    assert not rim.is_broker_topic_config_changed(A0, DataVersion(timestamp=7, counter=3))
    assert rim.is_broker_topic_config_changed(A0, DataVersion(timestamp=7, counter=4))
    assert rim.is_broker_topic_config_changed(B0, DataVersion(timestamp=7, counter=3))
    clock.now += 119_000
    rim.update_broker_info_update_timestamp(A0)
    clock.now += 119_000
    assert rim.scan_not_active_broker() == []
