"""Fixtures for the interop suite: one real NameServer + broker per test module (the scenarios use
distinct topics and groups, so they share it), a scratch HOME for the real client, unique names."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.daemons import Daemon, start_broker, start_namesrv

# One second per level, so a RECONSUME_LATER comes back quickly via %RETRY% (levels 1..18).
SHORT_DELAY_LEVELS = " ".join(["1s"] * 18)


@dataclass
class InteropCluster:
    namesrv: str
    broker: str
    broker_daemon: Daemon
    root: Path


def start_cluster(root: Path, **broker_conf: object) -> Iterator[InteropCluster]:
    ns_d, ns = start_namesrv(root)
    try:
        br_d, br = start_broker(root, ns, extra={"messageDelayLevel": SHORT_DELAY_LEVELS, **broker_conf})
        try:
            yield InteropCluster(ns, br, br_d, root)
        finally:
            assert br_d.terminate() == 0, br_d.output()[-3000:]
    finally:
        ns_d.terminate()


@pytest.fixture(scope="module")
def interop_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InteropCluster]:
    """NameServer + broker (auto-create on, 1 s delay levels) shared by one test module."""
    yield from start_cluster(tmp_path_factory.mktemp("interop"))


@pytest.fixture
def cpp_home(tmp_path: Path) -> Path:
    """A scratch HOME for the real client's subprocesses (it logs under $HOME/logs/rocketmq-cpp)."""
    home = tmp_path / "cpp-home"
    home.mkdir()
    return home


_counter = itertools.count()


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """names("T") -> a topic/group name unique to this test."""
    n = next(_counter)
    base = "".join(ch for ch in request.node.name if ch.isalnum())[:40]

    def make(prefix: str) -> str:
        return f"{prefix}_{base}_{n}"

    return make
