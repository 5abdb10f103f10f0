"""Helpers for the NameServer tests: fake-broker requests and polling."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from namesrv import NamesrvConfig
from remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from remoting.body import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    encode_register_broker_body,
)
from remoting.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader

CLUSTER = "DefaultCluster"


def java_crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def topic_table(topics: dict[str, tuple[int, int, int]] | list[str]) -> dict[str, TopicConfig]:
    """{name: (read, write, perm)} or [names] (4 queues, perm 6)."""
    if isinstance(topics, list):
        topics = {t: (4, 4, 6) for t in topics}
    return {
        name: TopicConfig(topic_name=name, read_queue_nums=r, write_queue_nums=w, perm=p)
        for name, (r, w, p) in topics.items()
    }


def wrapper(
    topics: dict[str, tuple[int, int, int]] | list[str], version: tuple[int, int] = (1000, 1)
) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        topic_config_table=topic_table(topics),
        data_version=DataVersion(timestamp=version[0], counter=version[1]),
    )


def register_cmd(
    broker_name: str,
    broker_addr: str,
    topics: dict[str, tuple[int, int, int]] | list[str] = (),  # type: ignore[assignment]
    *,
    cluster: str = CLUSTER,
    broker_id: int = 0,
    ha_server_addr: str | None = None,
    version: tuple[int, int] = (1000, 1),
    compressed: bool = False,
    crc: int | None = None,
    filter_servers: list[str] | None = None,
    body: bytes | None = None,
) -> RemotingCommand:
    if body is None:
        reg = RegisterBrokerBody(
            topic_config_serialize_wrapper=wrapper(
                list(topics) if not isinstance(topics, dict) else topics, version
            ),
            filter_server_list=filter_servers or [],
        )
        body = encode_register_broker_body(reg, compressed)
    host, _, port = broker_addr.rpartition(":")
    h = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr=broker_addr,
        cluster_name=cluster,
        ha_server_addr=ha_server_addr or f"{host}:{int(port) + 1}",
        broker_id=broker_id,
        compressed=compressed,
        body_crc32=java_crc32(body) if crc is None else crc,
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, h.encode(), body)


def unregister_cmd(
    broker_name: str, broker_addr: str, *, cluster: str = CLUSTER, broker_id: int = 0
) -> RemotingCommand:
    h = UnRegisterBrokerRequestHeader(
        broker_name=broker_name, broker_addr=broker_addr, cluster_name=cluster, broker_id=broker_id
    )
    return RemotingCommand.request(RequestCode.UNREGISTER_BROKER, h.encode())


def route_cmd(topic: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


async def get_route(client: RemotingClient, addr: str, topic: str) -> TopicRouteData | None:
    r = await client.invoke(addr, route_cmd(topic), 3000)
    if r.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert r.code == ResponseCode.SUCCESS, r.remark
    return TopicRouteData.decode(r.body)


async def wait_until(
    pred: Callable[[], Awaitable[bool]], timeout: float = 5.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if await pred():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def make_config(tmp_path: Path, **overrides: Any) -> NamesrvConfig:
    values: dict[str, Any] = {
        "listenPort": 0,
        "listenAddr": "127.0.0.1",
        "kvConfigPath": str(tmp_path / "kv" / "kvConfig.json"),
        "configStorePath": str(tmp_path / "namesrv.properties"),
    }
    values.update(overrides)
    return NamesrvConfig(**values)
