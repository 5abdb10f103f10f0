"""Client fixtures: a real NameServer + two real brokers, shared by a test module (unique topics per test)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.daemons import Daemon, start_broker, start_namesrv

_topic_seq = itertools.count(1)


@dataclass
class RealCluster:
    namesrv_addr: str
    brokers: dict[str, str]  # broker name -> address
    daemons: dict[str, Daemon]


def _cluster(tmp: Path) -> Iterator[RealCluster]:
    """mqnamesrv + broker-a + broker-b (cluster DefaultCluster) as subprocesses, stopped by PID afterwards."""
    started: list[Daemon] = []
    try:
        ns, ns_addr = start_namesrv(tmp)
        started.append(ns)
        brokers = {}
        daemons = {"namesrv": ns}
        for name in ("broker-a", "broker-b"):
            d, addr = start_broker(tmp, ns_addr, name=name)
            started.append(d)
            brokers[name] = addr
            daemons[name] = d
        yield RealCluster(ns_addr, brokers, daemons)
    finally:
        for d in reversed(started):
            d.terminate()


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The cluster of _cluster for the whole module."""
    yield from _cluster(tmp_path_factory.mktemp("client-cluster"))


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[RealCluster]:
    """The cluster of _cluster for one test (one that kills a broker)."""
    yield from _cluster(tmp_path)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test."""
    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:60]
    return f"T_{base}_{next(_topic_seq)}"
