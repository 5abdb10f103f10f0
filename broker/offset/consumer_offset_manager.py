"""ConsumerOffsetManager: committed offsets per topic@group and queue, persisted to config/consumerOffset.json.

File shape (RocketMQ's): {"offsetTable": {"<topic>@<group>": {"0": 12, "1": 7}}}.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import structlog

from broker.config import BrokerConfig
from broker.config_manager import ConfigManager
from remoting import jsonutil
from remoting.loop import in_slices

log = structlog.get_logger(__name__)

TOPIC_GROUP_SEPARATOR = "@"
ENCODE_SLICE = 256  # keys encoded per loop turn by the background persist (~0.5-1 ms)


def _offsets_entry(item: tuple[str, dict[int, int]]) -> str:
    key, table = item
    return f"\n    {json.dumps(key)}: {json.dumps({str(q): o for q, o in sorted(table.items())})}"


def _offsets_document(entries: list[str]) -> str:
    """The file as RocketMQ writes it, a key a line: {"offsetTable": {"<topic>@<group>": {"0": 12}, ...}}."""
    return '{\n  "offsetTable": {' + ",".join(entries) + "\n  }\n}\n"


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_offset_key(key: str) -> tuple[str, str] | None:
    # Topic and group names cannot contain '@', so there is exactly one separator.
    topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
    if not sep or not topic or not group or TOPIC_GROUP_SEPARATOR in group:
        return None
    return topic, group


class ConsumerOffsetManager(ConfigManager):
    def __init__(self, broker_config: BrokerConfig) -> None:
        super().__init__()
        self.broker_config = broker_config
        self.offset_table: dict[str, dict[int, int]] = {}
        self._dirty = False

    @property
    def dirty(self) -> bool:
        return self._dirty

    # ------------------------------------------------------------------ commit and query

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = offset_key(topic, group)
        table = self.offset_table.get(key)
        if table is None:
            table = self.offset_table[key] = {}
        old = table.get(queue_id)
        table[queue_id] = offset
        if old != offset:
            self._dirty = True
            if old is not None and offset < old:
                log.debug("consumer_offset_moved_back", client=client_host, key=key, queue_id=queue_id,
                          old=old, new=offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the queue was never committed."""
        table = self.offset_table.get(offset_key(topic, group))
        if table is None:
            return -1
        return table.get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int] | None:
        return self.offset_table.get(offset_key(topic, group))

    def which_topic_by_consumer(self, group: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            tg = split_offset_key(key)
            if tg is not None and tg[1] == group:
                out.add(tg[0])
        return out

    def which_group_by_topic(self, topic: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            tg = split_offset_key(key)
            if tg is not None and tg[0] == topic:
                out.add(tg[1])
        return out

    def clone_offset(self, src_group: str, dest_group: str, topic: str) -> bool:
        """Replace dest_group's offsets of the topic by a copy of src_group's; False if src has none."""
        src = self.offset_table.get(offset_key(topic, src_group))
        if src is None:
            return False
        self.offset_table[offset_key(topic, dest_group)] = dict(src)
        self._dirty = True
        return True

    def remove_offset(self, group: str) -> None:
        """Forget every offset of a consumer group."""
        for key in list(self.offset_table):
            tg = split_offset_key(key)
            if tg is not None and tg[1] == group:
                del self.offset_table[key]
                self._dirty = True
                log.info("consumer_offsets_removed", key=key)

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of a (deleted) topic."""
        for key in list(self.offset_table):
            tg = split_offset_key(key)
            if tg is not None and tg[0] == topic:
                del self.offset_table[key]
                self._dirty = True
                log.info("consumer_offsets_removed", key=key)

    def query_min_offset_in_all_group(
        self, topic: str, filter_groups: str | None, min_offset_of: Callable[[str, int], int]
    ) -> dict[int, int]:
        """Per queue, the smallest committed offset over every group (skipping filter_groups)."""
        skip = {g for g in (filter_groups or "").split(",") if g}
        out: dict[int, int] = {}
        for key, table in self.offset_table.items():
            tg = split_offset_key(key)
            if tg is None or tg[0] != topic or tg[1] in skip:
                continue
            for qid, off in table.items():
                if off >= min_offset_of(topic, qid):
                    out[qid] = min(off, out.get(qid, off))
        return out

    # ------------------------------------------------------------------ persistence

    def config_file_path(self) -> Path:
        return Path(self.broker_config.store_config.storePathRootDir) / "config" / "consumerOffset.json"

    def encode(self) -> str:
        self._dirty = False
        return self.encode_snapshot()

    def encode_snapshot(self) -> str:
        """The table as JSON without marking it persisted (admin reads)."""
        return _offsets_document(list(map(_offsets_entry, self.offset_table.items())))

    async def encode_on_loop(self) -> str:
        """encode(), a slice of ENCODE_SLICE keys per loop turn: the table grows with topics x groups (4 000
        keys of 4 queues: 17 ms as one json.dumps with indent, on the loop every flushConsumerOffsetInterval).
        Offsets that move meanwhile are written as they are when their slice is encoded."""
        self._dirty = False
        entries: list[str] = []
        async for part in in_slices(list(self.offset_table.items()), ENCODE_SLICE):
            entries.extend(map(_offsets_entry, part))
        return _offsets_document(entries)

    def decode(self, text: str) -> None:
        data = jsonutil.loads(text)
        if not isinstance(data, dict):
            raise ValueError("consumer offset file is not a JSON object")
        raw = data.get("offsetTable") or {}
        if not isinstance(raw, dict):
            raise ValueError("offsetTable is not a JSON object")
        table: dict[str, dict[int, int]] = {}
        for key, queues in raw.items():
            if not isinstance(queues, dict):
                raise ValueError(f"offsets of {key!r} are not a JSON object")
            table[str(key)] = {int(q): int(o) for q, o in queues.items()}
        self.offset_table = table

    async def persist_if_dirty(self) -> None:
        if self._dirty:
            await self.persist()
