"""Broker fixtures: an in-process BrokerController (real store, real TCP on loopback, no NameServer)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller import BrokerController
from remoting.client import RemotingClient
from remoting.command import RemotingCommand

SMALL_STORE = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 3000 * 20,
    "maxHashSlotNum": 5000,
    "maxIndexNum": 20000,
}


def broker_config(store_dir: Path, **overrides: object) -> BrokerConfig:
    values: dict[str, object] = {
        "brokerName": "broker-t",
        "brokerIP1": "127.0.0.1",
        "listenPort": 0,
        "storePathRootDir": str(store_dir),
        **SMALL_STORE,
    }
    values.update(overrides)
    return BrokerConfig.from_values(values)


@dataclass
class BrokerHarness:
    controller: BrokerController
    addr: str
    client: RemotingClient

    async def call(self, cmd: RemotingCommand, timeout_ms: float = 5000) -> RemotingCommand:
        return await self.client.invoke(self.addr, cmd, timeout_ms)


@contextlib.asynccontextmanager
async def running_broker(store_dir: Path, **overrides: object) -> AsyncIterator[BrokerHarness]:
    controller = BrokerController(broker_config(store_dir, **overrides))
    await controller.start()
    client = RemotingClient()
    try:
        yield BrokerHarness(controller, controller.listen_addr, client)
    finally:
        await client.close()
        await controller.stop()


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[BrokerHarness]:
    async with running_broker(tmp_path / "store") as h:
        yield h
