"""Queue allocation strategies for clustering consumers (RocketMQ's AllocateMessageQueueStrategy).

Every member of a group runs the same strategy over the same *sorted* queue and consumer-id
lists, so each computes its own share and together they cover every queue exactly once.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence
from typing import Protocol

from ..message import MessageQueue


class AllocateMessageQueueStrategy(Protocol):
    name: str

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]: ...


def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    if not current_cid:
        raise ValueError("current consumer id is empty")
    # A consumer not (yet) known to the broker gets nothing rather than a share that overlaps.
    return bool(mq_all) and bool(cid_all) and current_cid in cid_all


class AllocateMessageQueueAveragely:
    """Contiguous blocks; the first `len(mq) % len(cid)` consumers get one more (the default)."""

    name = "AVG"

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        n_mq, n_cid = len(mq_all), len(cid_all)
        index = cid_all.index(current_cid)
        mod = n_mq % n_cid
        if n_mq <= n_cid:
            average = 1
        elif mod > 0 and index < mod:
            average = n_mq // n_cid + 1
        else:
            average = n_mq // n_cid
        start = index * average if mod > 0 and index < mod else index * average + mod
        count = min(average, n_mq - start)
        return list(mq_all[start : start + count]) if count > 0 else []


class AllocateMessageQueueAveragelyByCircle:
    """Round robin: consumer i gets queues i, i + n, i + 2n, ..."""

    name = "AVG_BY_CIRCLE"

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        return list(mq_all[index :: len(cid_all)])


def md5_hash(key: str) -> int:
    """RocketMQ's ConsistentHashRouter.MD5Hash: the first 4 digest bytes as an unsigned int."""
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


class AllocateMessageQueueConsistentHash:
    """A hash ring of `virtual_node_cnt` virtual nodes per consumer; few queues move on change."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_cnt: int = 10, hash_func: Callable[[str], int] = md5_hash) -> None:
        if virtual_node_cnt < 0:
            raise ValueError(f"virtual_node_cnt must be >= 0, got {virtual_node_cnt}")
        self.virtual_node_cnt = virtual_node_cnt
        self.hash_func = hash_func

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        ring: dict[int, str] = {}
        for cid in cid_all:
            for i in range(self.virtual_node_cnt):
                # Same key as VirtualNode.getKey(): "<clientId>-<replica index>".
                ring[self.hash_func(f"{cid}-{i}")] = cid
        if not ring:
            return []
        points = sorted(ring)
        out = []
        for mq in mq_all:
            # Owner = first virtual node at or after the queue's hash, wrapping round.
            pos = bisect.bisect_left(points, self.hash_func(str(mq)))
            owner = ring[points[pos % len(points)]]
            if owner == current_cid:
                out.append(mq)
        return out


class AllocateMessageQueueByConfig:
    """A fixed list of queues chosen by the user, whatever the group looks like."""

    name = "CONFIG"

    def __init__(self, message_queues: Sequence[MessageQueue]) -> None:
        self.message_queues = list(message_queues)

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        return list(self.message_queues)


class AllocateMessageQueueByMachineRoom:
    """Queues of brokers named `<room>@<name>` in the consumer's data centres, spread evenly.

    Consumer i takes `len // n` contiguous queues, and one of the remainder if i < len % n.
    """

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Sequence[str]) -> None:
        self.consumer_idcs = set(consumer_idcs)

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        pre = []
        for mq in mq_all:
            parts = mq.broker_name.split("@")
            if len(parts) == 2 and parts[0] in self.consumer_idcs:
                pre.append(mq)
        mod, rem = divmod(len(pre), len(cid_all))
        out = pre[mod * index : mod * index + mod]
        if rem > index:
            out.append(pre[index + mod * len(cid_all)])
        return out


STRATEGIES: dict[str, Callable[[], AllocateMessageQueueStrategy]] = {
    "AVG": AllocateMessageQueueAveragely,
    "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
    "CONSISTENT_HASH": AllocateMessageQueueConsistentHash,
}
