from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import Daemon, start_broker, start_namesrv


@pytest.fixture
def namesrv(tmp_path: Path) -> Iterator[str]:
    """A real mqnamesrv subprocess; yields its address."""
    d, addr = start_namesrv(tmp_path)
    try:
        yield addr
    finally:
        d.terminate()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, str, Daemon]]:
    """A real NameServer and one real broker: (namesrv_addr, broker_addr, broker daemon)."""
    ns, ns_addr = start_namesrv(tmp_path)
    try:
        br, br_addr = start_broker(tmp_path, ns_addr)
        try:
            yield ns_addr, br_addr, br
        finally:
            br.terminate()
    finally:
        ns.terminate()
