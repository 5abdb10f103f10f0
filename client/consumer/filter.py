"""Subscriptions: tag expressions (`*` or `TagA || TagB`) and SQL92 selectors -> SubscriptionData
(RocketMQ's FilterAPI and MessageSelector).

For tags the broker filters by the tags' hash codes (Java's String.hashCode, `java_string_hash`),
which can collide; the client checks the exact tag again on what it receives (`filter_messages`).
An SQL92 selector (`MessageSelector.by_sql("a > 5 AND TAGS IN ('A', 'B')")`) is evaluated by the
broker on each message's properties; the broker must run with `enablePropertyFilter=true`, and a
consumer checks that (and the expression) with each broker when it starts.
"""

from __future__ import annotations

from collections.abc import Iterable

from remoting.body import SubscriptionData
from remoting.message import MessageExt, java_string_hash

from ..errors import MQClientError

SUB_ALL = "*"
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"

__all__ = [
    "EXPRESSION_TYPE_SQL92",
    "EXPRESSION_TYPE_TAG",
    "SUB_ALL",
    "MessageSelector",
    "build_subscription_data",
    "filter_messages",
    "is_sub_all",
    "parse_tags",
]


class MessageSelector:
    """What a consumer subscribes a topic with: `MessageSelector.by_tag("TagA || TagB")` (the same as
    passing the string) or `MessageSelector.by_sql("price > 100 AND region = 'eu'")`, RocketMQ's
    SQL92 subset over message properties (TAGS and KEYS included)."""

    __slots__ = ("expression", "expression_type")

    def __init__(self, expression_type: str, expression: str | None) -> None:
        if expression_type not in (EXPRESSION_TYPE_TAG, EXPRESSION_TYPE_SQL92):
            raise MQClientError(f"unknown expression type {expression_type!r}: use TAG or SQL92")
        self.expression_type = expression_type
        self.expression = expression

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        return cls(EXPRESSION_TYPE_SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None) -> MessageSelector:
        return cls(EXPRESSION_TYPE_TAG, tag)

    def __repr__(self) -> str:
        return f"MessageSelector.by_{'sql' if self.expression_type == EXPRESSION_TYPE_SQL92 else 'tag'}({self.expression!r})"


def is_sub_all(expression: str | None) -> bool:
    return expression is None or expression.strip() in ("", SUB_ALL)


def parse_tags(expression: str | None) -> list[str]:
    """The tags of an expression in order, [] for `*`. Raises MQClientError on an empty alternative."""
    if is_sub_all(expression):
        return []
    assert expression is not None
    tags: list[str] = []
    for part in expression.split("||"):
        tag = part.strip()
        if not tag:
            raise MQClientError(f"bad tag expression {expression!r}: use '*' or 'TagA || TagB'")
        if tag not in tags:
            tags.append(tag)
    return tags


def build_subscription_data(topic: str, expression: str | MessageSelector | None = SUB_ALL) -> SubscriptionData:
    """FilterAPI.build: tags_set and code_set filled for a tag list; an SQL92 selector as it is."""
    if isinstance(expression, MessageSelector):
        if expression.expression_type == EXPRESSION_TYPE_SQL92:
            sql = expression.expression
            if not sql or not sql.strip():
                raise MQClientError(f"empty SQL92 expression for topic {topic}")
            return SubscriptionData(topic=topic, sub_string=sql, expression_type=EXPRESSION_TYPE_SQL92)
        expression = expression.expression
    tags = parse_tags(expression)
    return SubscriptionData(
        topic=topic,
        sub_string=SUB_ALL if not tags else (expression or SUB_ALL).strip(),
        tags_set=tags,
        code_set=[java_string_hash(t) for t in tags],
        expression_type=EXPRESSION_TYPE_TAG,
    )


def filter_messages(sd: SubscriptionData, msgs: Iterable[MessageExt]) -> list[MessageExt]:
    """Keep the messages whose tag is one of the subscription's (all of them for `*`)."""
    if not sd.tags_set or sd.class_filter_mode:
        return list(msgs)
    wanted = set(sd.tags_set)
    return [m for m in msgs if m.tags is not None and m.tags in wanted]
