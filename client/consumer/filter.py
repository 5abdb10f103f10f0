"""Tag expressions: `*` or `TagA || TagB` -> SubscriptionData (RocketMQ's FilterAPI).

The broker filters by the tags' hash codes (Java's String.hashCode, `java_string_hash`), which
can collide; the client checks the exact tag again on what it receives (`filter_messages`).
"""

from __future__ import annotations

from collections.abc import Iterable

from remoting.body import SubscriptionData
from remoting.message import MessageExt, java_string_hash

from ..errors import MQClientError

SUB_ALL = "*"
EXPRESSION_TYPE_TAG = "TAG"

__all__ = ["EXPRESSION_TYPE_TAG", "SUB_ALL", "build_subscription_data", "filter_messages", "is_sub_all", "parse_tags"]


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


def build_subscription_data(topic: str, expression: str | None = SUB_ALL) -> SubscriptionData:
    """FilterAPI.buildSubscriptionData: tags_set and code_set filled for a tag list."""
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
