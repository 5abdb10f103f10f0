"""Fixtures: a real NameServer + broker (subprocesses) with short delay levels, and a Wire to drive them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.broker_delivery.support import DELAY_LEVELS, Wire
from tests.support.daemons import Daemon, start_broker, start_namesrv


@dataclass
class DeliveryCluster:
    namesrv_addr: str
    broker_addr: str
    broker: Daemon
    store_dir: Path


@pytest.fixture(scope="module")
def delivery_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeliveryCluster]:
    """One NameServer and one broker (messageDelayLevel = DELAY_LEVELS) shared by a test module."""
    tmp = tmp_path_factory.mktemp("delivery")
    ns, ns_addr = start_namesrv(tmp)
    try:
        store = tmp / "store"
        br, br_addr = start_broker(tmp, ns_addr, extra={"messageDelayLevel": DELAY_LEVELS}, store_dir=store)
        try:
            yield DeliveryCluster(ns_addr, br_addr, br, store)
        finally:
            br.terminate()
    finally:
        ns.terminate()


@pytest.fixture
async def wire(delivery_cluster: DeliveryCluster) -> AsyncIterator[Wire]:
    w = Wire(delivery_cluster.broker_addr, delivery_cluster.namesrv_addr)
    try:
        yield w
    finally:
        await w.close()
