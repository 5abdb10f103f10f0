"""Consumer offset stores: where a group's progress lives.

- RemoteBrokerOffsetStore (clustering): offsets on the queue's master broker
  (QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET), cached here and pushed every
  persistConsumerOffsetInterval (5 s) and at shutdown.
- LocalFileOffsetStore (broadcasting): offsets in
  `<offset_store_dir>/<clientId>/<group>/offsets.json` (default dir `~/.rocketmq_offsets`),
  written atomically (temp file, fsync, rename; the previous version kept as `.bak`).

Offsets mean "the next offset to consume". `read_offset` answers -1 when the store has none and
-2 when it could not be asked (a broker error other than "not found"), as RocketMQ does.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog

from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from remoting.jsonutil import loads as lenient_loads

from ..errors import MQBrokerError, MQClientError
from ..message import MessageQueue
from ..route import MASTER_ID

if TYPE_CHECKING:
    from ..instance import MQClientInstance

log = structlog.get_logger(__name__)

DEFAULT_LOCAL_OFFSET_STORE_DIR = "~/.rocketmq_offsets"
LOCAL_OFFSET_STORE_DIR_ENV = "ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR"

__all__ = [
    "DEFAULT_LOCAL_OFFSET_STORE_DIR",
    "LocalFileOffsetStore",
    "OffsetStore",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
]


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]: ...

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = False) -> None: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.offset_table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        old = self.offset_table.get(mq)
        if old is None or not increase_only or offset > old:
            self.offset_table[mq] = int(offset)

    def remove_offset(self, mq: MessageQueue) -> None:
        self.offset_table.pop(mq, None)

    def read_offset_in_memory(self, mq: MessageQueue) -> int:
        """read_offset(mq, READ_FROM_MEMORY) without a coroutine (the push consumer's per-pull read)."""
        return self.offset_table.get(mq, -1)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return {mq: off for mq, off in self.offset_table.items() if not topic or mq.topic == topic}


class RemoteBrokerOffsetStore(_MemoryTable):
    """Offsets of a clustering group, kept on the brokers."""

    def __init__(self, instance: MQClientInstance, group: str, *, timeout_ms: float = 5000) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        self.timeout_ms = timeout_ms

    async def load(self) -> None:
        return None

    async def _master_addr(self, mq: MessageQueue) -> str:
        found = self.instance.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, True)
        if found is None:
            try:
                await self.instance.update_topic_route_info_from_name_server(mq.topic)
            except (MQBrokerError, MQClientError, RemotingError) as e:
                log.debug("offset_store_route_refresh_failed", topic=mq.topic, error=str(e))
            found = self.instance.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, False)
        if found is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return found[0]

    async def fetch_consume_offset_from_broker(self, mq: MessageQueue) -> int:
        addr = await self._master_addr(mq)
        return await self.instance.api.query_consumer_offset(
            addr, self.group, mq.topic, mq.queue_id, timeout_ms=self.timeout_ms
        )

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.offset_table.get(mq)
            if off is not None:
                return off
            if type_ is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        try:
            off = await self.fetch_consume_offset_from_broker(mq)
        except MQBrokerError as e:
            # QUERY_NOT_FOUND: the group never committed this queue.
            if e.code != ResponseCode.QUERY_NOT_FOUND:
                log.warning("fetch_consume_offset_failed", group=self.group, mq=str(mq), error=str(e))
                return -2
            return -1
        except (RemotingError, MQClientError) as e:
            log.warning("fetch_consume_offset_failed", group=self.group, mq=str(mq), error=str(e))
            return -2
        self.update_offset(mq, off, False)
        return off

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = False) -> None:
        addr = await self._master_addr(mq)
        api = self.instance.api
        if oneway:
            await api.update_consumer_offset_oneway(addr, self.group, mq.topic, mq.queue_id, offset)
        else:
            await api.update_consumer_offset(
                addr, self.group, mq.topic, mq.queue_id, offset, timeout_ms=self.timeout_ms
            )

    async def persist(self, mq: MessageQueue) -> None:
        off = self.offset_table.get(mq)
        if off is None:
            return
        try:
            await self.update_consume_offset_to_broker(mq, off)
            log.debug("offset_persisted", group=self.group, mq=str(mq), offset=off)
        except (MQBrokerError, MQClientError, RemotingError) as e:
            log.warning("update_consume_offset_failed", group=self.group, mq=str(mq), error=str(e))

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Push the offsets of `mqs`; forget cached offsets of queues not in it (no longer ours)."""
        keep = set(mqs)
        if not keep:
            return
        todo = [mq for mq in self.offset_table if mq in keep]
        for mq in [mq for mq in self.offset_table if mq not in keep]:
            del self.offset_table[mq]
            log.debug("offset_removed_unused", group=self.group, mq=str(mq))
        await asyncio.gather(*(self.persist(mq) for mq in todo))


def _encode_table(table: dict[MessageQueue, int]) -> str:
    items = [
        {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
        for mq, off in sorted(table.items())
    ]
    return json.dumps({"offsetTable": items}, indent=1)


def _decode_table(text: str) -> dict[MessageQueue, int]:
    """Our list form, or Java's fastjson form {"offsetTable":{{"brokerName":..}:12}} (lenient)."""
    data = lenient_loads(text)
    table = data.get("offsetTable") if isinstance(data, dict) else None
    out: dict[MessageQueue, int] = {}
    if isinstance(table, list):
        for it in table:
            out[MessageQueue(str(it["topic"]), str(it["brokerName"]), int(it["queueId"]))] = int(it["offset"])
    elif isinstance(table, dict):
        for k, v in table.items():
            key = lenient_loads(k) if isinstance(k, str) else k
            if isinstance(key, dict):
                out[MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"]))] = int(v)
    elif table is not None:
        raise ValueError("offsetTable is neither a list nor an object")
    return out


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        try:
            os.replace(path, bak)
        except OSError:
            pass
    os.replace(tmp, path)
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _read_file(path: Path) -> dict[MessageQueue, int] | None:
    """The table in `path` (falling back to `.bak` when the file is missing or unreadable)."""
    for p in (path, path.with_name(path.name + ".bak")):
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        try:
            return _decode_table(text)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("local_offset_file_unreadable", path=str(p), error=str(e))
    return None


class LocalFileOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer, in a local JSON file."""

    def __init__(self, client_id: str, group: str, offset_store_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        base = offset_store_dir or os.environ.get(LOCAL_OFFSET_STORE_DIR_ENV) or DEFAULT_LOCAL_OFFSET_STORE_DIR
        safe_cid = client_id.replace(os.sep, "_")
        self.group = group
        self.store_path = Path(base).expanduser() / safe_cid / group / "offsets.json"
        self._write_lock = asyncio.Lock()

    async def load(self) -> None:
        table = await asyncio.to_thread(_read_file, self.store_path)
        if table:
            self.offset_table.update(table)
            log.info("local_offsets_loaded", group=self.group, path=str(self.store_path), queues=len(table))

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.offset_table.get(mq)
            if off is not None:
                return off
            if type_ is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        try:
            table = await asyncio.to_thread(_read_file, self.store_path)
        except OSError as e:
            log.warning("local_offset_read_failed", path=str(self.store_path), error=str(e))
            return -2
        if table and mq in table:
            self.update_offset(mq, table[mq], False)
            return table[mq]
        return -1

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        keep = set(mqs)
        if not keep:
            return
        async with self._write_lock:
            # Keep what the file holds for queues we no longer consume (another run may want them).
            on_disk = await asyncio.to_thread(_read_file, self.store_path) or {}
            table = {**on_disk, **{mq: off for mq, off in self.offset_table.items() if mq in keep}}
            try:
                await asyncio.to_thread(_write_atomically, self.store_path, _encode_table(table))
            except OSError as e:
                log.warning("local_offset_write_failed", path=str(self.store_path), error=str(e))

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all([mq])

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = False) -> None:
        return None
