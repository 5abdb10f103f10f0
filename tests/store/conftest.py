"""Store test helpers: small files everywhere so rolling, blanks and cleanup happen with few messages."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from remoting.message import encode_properties
from store.config import MessageStoreConfig
from store.message import MessageExtBrokerInner
from store.message_store import DefaultMessageStore

STORE_HOST = ("10.0.0.2", 10911)
BORN_HOST = ("10.0.0.1", 50000)


def small_config(root: Path, **overrides: Any) -> MessageStoreConfig:
    values: dict[str, Any] = {
        "storePathRootDir": str(root),
        "mappedFileSizeCommitLog": 64 * 1024,
        "mappedFileSizeConsumeQueue": 1000 * 20,
        "maxHashSlotNum": 64,
        "maxIndexNum": 256,
        "flushIntervalCommitLog": 50,
        "flushIntervalConsumeQueue": 50,
        "cleanResourceInterval": 60_000,
    }
    values.update(overrides)
    return MessageStoreConfig(**values)


def make_msg(
    topic: str = "TopicTest",
    body: bytes = b"hello",
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    uniq: str | None = None,
    extra: dict[str, str] | None = None,
    sys_flag: int = 0,
    with_string: bool = True,
) -> MessageExtBrokerInner:
    props: dict[str, str] = {}
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        props["KEYS"] = keys
    if uniq is not None:
        props["UNIQ_KEY"] = uniq
    if extra:
        props.update(extra)
    return MessageExtBrokerInner(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties=props,
        properties_string=encode_properties(props) if with_string else "",
        sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000),
        born_host=BORN_HOST,
        store_host=STORE_HOST,
    )


@pytest.fixture
def make_store(tmp_path: Path) -> Callable[..., DefaultMessageStore]:
    """Factory for stores under tmp_path; every store made is shut down at teardown."""
    made: list[DefaultMessageStore] = []

    def factory(root: Path | None = None, **overrides: Any) -> DefaultMessageStore:
        store = DefaultMessageStore(small_config(root or tmp_path / "store", **overrides))
        made.append(store)
        return store

    factory.made = made  # type: ignore[attr-defined]
    return factory


@pytest.fixture
async def store(make_store: Callable[..., DefaultMessageStore]) -> AsyncIterator[DefaultMessageStore]:
    s = make_store()
    await s.start()
    try:
        yield s
    finally:
        await s.shutdown()


@pytest.fixture(autouse=True)
async def _shutdown_leftovers(make_store: Callable[..., DefaultMessageStore]) -> AsyncIterator[None]:
    yield
    for s in make_store.made:  # type: ignore[attr-defined]
        if not s.shutdown_flag:
            await s.shutdown()
