"""Route data on the client: TopicPublishInfo (where a producer may write) and subscribe sets.

Built from the NameServer's TopicRouteData exactly as MQClientInstance.topicRouteData2TopicPublishInfo
does: an ordered topic's `orderTopicConf` ('brokerA:4;brokerB:4') wins; otherwise every writable
QueueData whose broker has a master (brokerId 0) contributes `writeQueueNums` queues, brokers
sorted by name.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from remoting.body import BrokerData, QueueData, TopicRouteData
from remoting.message import PermName

from .message import MessageQueue

MASTER_ID = 0

__all__ = [
    "MASTER_ID",
    "TopicPublishInfo",
    "route_brokers",
    "route_changed",
    "topic_route_to_publish_info",
    "topic_route_to_subscribe_info",
]


class TopicPublishInfo:
    """The queues a producer may write to, and the round-robin position over them."""

    __slots__ = ("topic", "order_topic", "have_topic_router_info", "message_queues", "route", "_index")

    def __init__(
        self,
        topic: str,
        message_queues: list[MessageQueue] | None = None,
        *,
        order_topic: bool = False,
        route: TopicRouteData | None = None,
        have_topic_router_info: bool = False,
    ) -> None:
        self.topic = topic
        self.order_topic = order_topic
        self.have_topic_router_info = have_topic_router_info
        self.message_queues: list[MessageQueue] = message_queues or []
        self.route = route
        # Java seeds its ThreadLocalIndex randomly so producers do not all start on queue 0.
        self._index = random.randrange(1 << 16)

    def ok(self) -> bool:
        return bool(self.message_queues)

    def next_index(self) -> int:
        self._index = (self._index + 1) & 0x7FFFFFFF
        return self._index

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        """Round robin; on a retry skip the broker that just failed if another one has queues."""
        queues = self.message_queues
        n = len(queues)
        if last_broker_name is None:
            return queues[self.next_index() % n]
        for _ in range(n):
            mq = queues[self.next_index() % n]
            if mq.broker_name != last_broker_name:
                return mq
        return queues[self.next_index() % n]

    def queue_nums_of_broker(self, broker_name: str) -> int:
        """Write queue count of a broker in this route (Java's getQueueIdByBroker), -1 if absent."""
        if self.route is not None:
            for qd in self.route.queue_datas:
                if qd.broker_name == broker_name:
                    return qd.write_queue_nums
        return -1

    def broker_names(self) -> list[str]:
        seen: dict[str, None] = {}
        for mq in self.message_queues:
            seen.setdefault(mq.broker_name, None)
        return list(seen)

    def __repr__(self) -> str:
        return (
            f"TopicPublishInfo(topic={self.topic!r}, order={self.order_topic}, "
            f"queues={len(self.message_queues)}, brokers={self.broker_names()})"
        )


def _broker_data(route: TopicRouteData, broker_name: str) -> BrokerData | None:
    for bd in route.broker_datas:
        if bd.broker_name == broker_name:
            return bd
    return None


def topic_route_to_publish_info(topic: str, route: TopicRouteData) -> TopicPublishInfo:
    queues: list[MessageQueue] = []
    if route.order_topic_conf:
        for item in route.order_topic_conf.split(";"):
            name, sep, nums = item.strip().partition(":")
            if not sep or not nums.strip().lstrip("-").isdigit():
                continue
            queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return TopicPublishInfo(topic, queues, order_topic=True, route=route, have_topic_router_info=True)
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not PermName.is_writeable(qd.perm):
            continue
        bd = _broker_data(route, qd.broker_name)
        if bd is None or MASTER_ID not in bd.broker_addrs:
            continue
        queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return TopicPublishInfo(topic, queues, order_topic=False, route=route, have_topic_router_info=True)


def topic_route_to_subscribe_info(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """Readable queues of a topic (what consumers rebalance over)."""
    out: set[MessageQueue] = set()
    for qd in route.queue_datas:
        if PermName.is_readable(qd.perm):
            out.update(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return out


def _route_key(route: TopicRouteData) -> tuple[object, ...]:
    qds = tuple(
        sorted(
            (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
            for q in route.queue_datas
        )
    )
    bds = tuple(
        sorted((b.broker_name, b.cluster, tuple(sorted(b.broker_addrs.items()))) for b in route.broker_datas)
    )
    return (route.order_topic_conf or "", qds, bds)


def route_changed(old: TopicRouteData | None, new: TopicRouteData | None) -> bool:
    """True when the two routes differ in anything a client uses (order of lists ignored)."""
    if old is None or new is None:
        return old is not new
    return _route_key(old) != _route_key(new)


def route_brokers(route: TopicRouteData) -> dict[str, dict[int, str]]:
    return {bd.broker_name: dict(bd.broker_addrs) for bd in route.broker_datas}


def limit_default_route(route: TopicRouteData, default_topic_queue_nums: int) -> TopicRouteData:
    """The auto-create template route trimmed to the producer's defaultTopicQueueNums (Java does the same)."""
    qds: Iterable[QueueData] = route.queue_datas
    trimmed = [
        q.model_copy(
            update={
                "read_queue_nums": min(default_topic_queue_nums, q.read_queue_nums),
                "write_queue_nums": min(default_topic_queue_nums, q.read_queue_nums),
            }
        )
        for q in qds
    ]
    return route.model_copy(update={"queue_datas": trimmed})
