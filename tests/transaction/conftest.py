"""Transaction test fixtures: real mqnamesrv + mqbroker subprocesses with fast check-back settings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from remoting.client import RemotingClient

from .helpers import FAST_CHECK, TxCluster, start_tx_cluster


@pytest.fixture(scope="module")
def tx_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxCluster]:
    """One NameServer + one broker for a test module; checks every 300 ms, transactionCheckMax=3."""
    ns, c = start_tx_cluster(tmp_path_factory.mktemp("tx"), {**FAST_CHECK, "transactionCheckMax": 3})
    try:
        yield c
    finally:
        c.broker_daemon.terminate()
        ns.terminate()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[TxCluster]:
    """A cluster for one test (restarts, producers coming and going); default transactionCheckMax (15)."""
    ns, c = start_tx_cluster(tmp_path, dict(FAST_CHECK))
    try:
        yield c
    finally:
        c.broker_daemon.terminate()
        ns.terminate()


@pytest.fixture
async def remoting() -> AsyncIterator[RemotingClient]:
    client = RemotingClient()
    try:
        yield client
    finally:
        await client.close()

