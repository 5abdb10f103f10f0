"""Mutated NameServer requests (brokers' registrations, plain and compressed, and what clients and mqadmin ask
for; JSON, MSGPACK and ROCKETMQ headers), each on a connection of its own: every one the frame decoder takes is
answered, none by a processor's exception, and afterwards the NameServer still registers and routes."""

from __future__ import annotations

import random

import pytest

from namesrv import NamesrvController
from remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from remoting.codec import encode
from remoting.codes import SerializeType
from tests.support.fuzz import fuzz_requests, spy_processor_failures

from .support import get_route, register_cmd, route_cmd, unregister_cmd

A0 = "127.0.0.1:10911"


def namesrv_request_frames() -> list[bytes]:
    cmds = [
        register_cmd("broker-a", A0, {"FuzzT": (4, 4, 6), "Other": (8, 8, 6)}),
        register_cmd("broker-b", "127.0.0.1:20911", ["FuzzT"], compressed=True, broker_id=1),
        unregister_cmd("broker-a", A0),
        route_cmd("FuzzT"),
        RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO),
        RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "FuzzT",
                                                           "value": "broker-a:4"}),
        RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "FuzzT"}),
        RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "FuzzT"}),
        RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}),
        RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}),
        RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
        RemotingCommand.request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
        RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Other"}),
        RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG),
        RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, {
            "brokerName": "broker-a", "brokerAddr": A0, "clusterName": "DefaultCluster", "brokerId": "0"},
            b'{"timestamp":1000,"counter":1}'),
    ]
    frames = []
    for cmd in cmds:
        for st in (SerializeType.JSON, SerializeType.MSGPACK, SerializeType.ROCKETMQ):
            cmd.serialize_type = st
            frames.append(encode(cmd))
    return frames


async def test_mutated_requests_are_answered_and_the_namesrv_keeps_working(
    controller: NamesrvController, client: RemotingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = spy_processor_failures(monkeypatch)
    rnd = random.Random(20261124)
    seeds = namesrv_request_frames()
    requests, unanswered = await fuzz_requests(controller.address, seeds, rnd, 2000)
    assert requests > 300
    assert not failed, failed[:5]
    assert not unanswered, unanswered[:3]
    # Still a NameServer: a registration gives a route.
    r = await client.invoke(controller.address, register_cmd("broker-z", "127.0.0.1:30911", ["After"]), 3000)
    assert r.code == ResponseCode.SUCCESS, r.remark
    route = await get_route(client, controller.address, "After")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: "127.0.0.1:30911"}
