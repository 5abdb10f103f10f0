from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from namesrv import NamesrvController
from remoting import RemotingClient

from .support import make_config


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[NamesrvController]:
    c = NamesrvController(make_config(tmp_path))
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    try:
        yield c
    finally:
        await c.close()
