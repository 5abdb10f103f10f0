"""ConsumerFilterManager: the SQL92 expressions consumer groups register by heartbeat, compiled once.

A pull without the subscription flag (how RocketMQ's Java push consumer pulls) names only its group
and its subscription version; the broker filters it with what this manager holds for (topic, group),
FILTER_DATA_NOT_EXIST when nothing, FILTER_DATA_NOT_LATEST when the pull's version is newer. As
upstream, a group's expression outlives the group going offline by `filterDataCleanTimeSpan` (it is
marked dead, still answers pulls, and is dropped by `clean`), and a registration whose version is not
newer than the one held changes nothing. Not persisted: upstream keeps `consumerFilter.json` for its
bloom filter bit maps, which are not built here, and every consumer re-registers within one heartbeat.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

import structlog

from broker.filter.expression_message_filter import (
    ExpressionMessageFilter,
    SubscriptionParseError,
    compile_expression,
    is_tag_type,
)
from remoting.body import SubscriptionData

log = structlog.get_logger(__name__)


class ConsumerFilterData:
    __slots__ = (
        "topic", "consumer_group", "expression", "expression_type", "client_version", "born_time", "dead_time",
        "message_filter",
    )

    def __init__(
        self, topic: str, consumer_group: str, expression: str, expression_type: str, client_version: int,
        message_filter: ExpressionMessageFilter,
    ) -> None:
        self.topic = topic
        self.consumer_group = consumer_group
        self.expression = expression
        self.expression_type = expression_type
        self.client_version = client_version
        self.born_time = int(time.time() * 1000)
        self.dead_time = 0
        self.message_filter = message_filter

    @property
    def is_dead(self) -> bool:
        return self.dead_time >= self.born_time

    def to_json(self) -> str:
        """The JSON RocketMQ's broker shows of its ConsumerFilterData (QUERY_CONSUME_QUEUE's filterData):
        fastjson's pretty form, its fields by name, the compiled expression left out (transient) and no
        bloomFilterData (none is built here)."""
        fields = {
            "bornTime": self.born_time,
            "clientVersion": self.client_version,
            "consumerGroup": self.consumer_group,
            "dead": self.is_dead,
            "deadTime": self.dead_time,
            "expression": self.expression,
            "expressionType": self.expression_type,
            "topic": self.topic,
        }
        return json.dumps(fields, indent="\t", separators=(",", ":"), ensure_ascii=False)

    def __repr__(self) -> str:
        return (f"ConsumerFilterData({self.topic!r}, {self.consumer_group!r}, {self.expression!r}, "
                f"v{self.client_version}{', dead' if self.is_dead else ''})")


def build_consumer_filter_data(
    topic: str, group: str, expression: str | None, expression_type: str | None, client_version: int
) -> ConsumerFilterData:
    """ConsumerFilterManager.build: SubscriptionParseError when the expression does not compile."""
    assert expression_type is not None and not is_tag_type(expression_type)
    selector = compile_expression(expression, expression_type)
    assert expression is not None
    mf = ExpressionMessageFilter(expression, (), expression_type, selector)
    return ConsumerFilterData(topic, group, expression, expression_type, client_version, mf)


class ConsumerFilterManager:
    def __init__(self, clean_time_span_ms: int = 24 * 3600 * 1000) -> None:
        self.clean_time_span_ms = clean_time_span_ms
        self.filter_data_by_topic: dict[str, dict[str, ConsumerFilterData]] = {}

    def register(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """A heartbeat's subscriptions of `group`: register its SQL92 ones, and mark dead what it held
        for topics the group no longer subscribes."""
        topics = set()
        for sd in subscriptions:
            topics.add(sd.topic)
            self.register_one(sd.topic, group, sd.sub_string, sd.expression_type, sd.sub_version)
        if not self.filter_data_by_topic:  # (every heartbeat of every group comes here: most use tags)
            return
        now = int(time.time() * 1000)
        for topic, by_group in self.filter_data_by_topic.items():
            data = by_group.get(group)
            if data is not None and topic not in topics and not data.is_dead:
                data.dead_time = now
                log.info("consumer_filter_dead", group=group, topic=topic, reason="unsubscribed")

    def register_one(
        self, topic: str, group: str, expression: str | None, expression_type: str | None, client_version: int
    ) -> bool:
        """True when what is held for (topic, group) was added, replaced or revived."""
        if is_tag_type(expression_type) or not expression:
            return False
        assert expression_type is not None
        by_group = self.filter_data_by_topic.setdefault(topic, {})
        old = by_group.get(group)
        if old is not None and client_version <= old.client_version:
            if expression_type != old.expression_type or expression != old.expression:
                log.warning("consumer_filter_ignored", group=group, topic=topic, version=client_version,
                            held_version=old.client_version, expression=expression, held=old.expression)
            if client_version == old.client_version and old.is_dead:
                old.dead_time = 0
                return True
            return False
        if old is not None and expression == old.expression and expression_type == old.expression_type:
            old.client_version = client_version
            old.dead_time = 0
            return True
        try:
            data = build_consumer_filter_data(topic, group, expression, expression_type, client_version)
        except SubscriptionParseError as e:
            # Not held: the group's pulls get FILTER_DATA_NOT_EXIST, and CHECK_CLIENT_CONFIG tells its client why.
            by_group.pop(group, None)
            if not by_group:
                del self.filter_data_by_topic[topic]
            log.warning("consumer_filter_invalid", group=group, topic=topic, error=str(e))
            return False
        by_group[group] = data
        log.info("consumer_filter_registered", group=group, topic=topic, expression=expression,
                 version=client_version)
        return True

    def unregister(self, group: str) -> None:
        """The group's last member left: its expressions are dead (kept for `clean_time_span_ms`)."""
        now = int(time.time() * 1000)
        for by_group in self.filter_data_by_topic.values():
            data = by_group.get(group)
            if data is not None and not data.is_dead:
                data.dead_time = now

    def get(self, topic: str | None, group: str) -> ConsumerFilterData | None:
        by_group = self.filter_data_by_topic.get(topic) if topic is not None else None
        return by_group.get(group) if by_group else None

    def clean(self, now_ms: int | None = None) -> int:
        """Drop expressions dead for `clean_time_span_ms` or longer; returns how many."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        dropped = 0
        for topic in list(self.filter_data_by_topic):
            by_group = self.filter_data_by_topic[topic]
            for group in [g for g, d in by_group.items() if d.is_dead and now - d.dead_time >= self.clean_time_span_ms]:
                del by_group[group]
                dropped += 1
                log.info("consumer_filter_removed", group=group, topic=topic)
            if not by_group:
                del self.filter_data_by_topic[topic]
        return dropped
