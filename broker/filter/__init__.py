"""Tag filtering for pulls (RocketMQ's FilterAPI + ExpressionMessageFilter).

A subscription expression is `*` (everything) or tags joined by `||`. The consume queue holds each
message's tags code (Java String.hashCode of its TAGS, 0 when it has none); the broker matches codes
and the client re-checks the tag strings, because different tags can share a hash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from remoting.body import SubscriptionData
from remoting.message import java_string_hash

SUB_ALL = "*"
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"


class SubscriptionParseError(ValueError):
    pass


def is_tag_type(expression_type: str | None) -> bool:
    return expression_type is None or expression_type == "" or expression_type == EXPRESSION_TYPE_TAG


def build_subscription_data(topic: str, sub_string: str | None, expression_type: str | None = None) -> SubscriptionData:
    """FilterAPI.build: parse a tag expression into tags and their hash codes."""
    if not is_tag_type(expression_type):
        if not sub_string:
            raise SubscriptionParseError(f"expression can't be empty for type {expression_type}")
        return SubscriptionData(topic=topic, sub_string=sub_string, expression_type=expression_type or "")
    sd = SubscriptionData(topic=topic, sub_string=SUB_ALL, expression_type=EXPRESSION_TYPE_TAG)
    if sub_string is None or sub_string == "" or sub_string.strip() == SUB_ALL:
        return sd
    sd.sub_string = sub_string
    for tag in sub_string.split("||"):
        t = tag.strip()
        if t:
            sd.tags_set.append(t)
            sd.code_set.append(java_string_hash(t))
    if not sd.tags_set:
        raise SubscriptionParseError(f"no tag in subscription expression {sub_string!r}")
    return sd


class ExpressionMessageFilter:
    """Matches consume-queue entries by tags code against a tag subscription.

    Immutable and independent of the topic, so pulls share instances (see `parse`); building one
    does not touch pydantic (pulls are a hot path).
    """

    __slots__ = ("expression", "expression_type", "_codes", "matches_every_unit", "needs_commit_log_match")

    def __init__(self, expression: str | None, codes: Iterable[int] = (), expression_type: str | None = None) -> None:
        self.expression = expression if expression else SUB_ALL
        self.expression_type = expression_type or EXPRESSION_TYPE_TAG
        self._codes = frozenset(codes)
        # What the store reads (store.filter.MessageFilter): "*" accepts every consume queue unit (and non-tag
        # expressions, SQL92, are not evaluated on the consume queue here); a tag filter needs no commit log
        # stage (is_matched_by_commit_log always matches), so records are not decoded.
        self.needs_commit_log_match = not is_tag_type(expression_type)
        self.matches_every_unit = self.needs_commit_log_match or self.expression.strip() == SUB_ALL

    @classmethod
    def parse(cls, expression: str | None, expression_type: str | None = None) -> ExpressionMessageFilter:
        """From a pull's `subscription` header; SubscriptionParseError when it is not valid."""
        if not is_tag_type(expression_type):
            if not expression:
                raise SubscriptionParseError(f"expression can't be empty for type {expression_type}")
            return cls(expression, (), expression_type)
        if expression is None or expression.strip() in ("", SUB_ALL):
            return cls(SUB_ALL)
        tags = [t.strip() for t in expression.split("||") if t.strip()]
        if not tags:
            raise SubscriptionParseError(f"no tag in subscription expression {expression!r}")
        return cls(expression, (java_string_hash(t) for t in tags))

    @classmethod
    def from_subscription(cls, sd: SubscriptionData) -> ExpressionMessageFilter:
        """From a heartbeat's SubscriptionData. Codes are recomputed from the tag strings: some clients
        send a bogus codeSet (e.g. [0])."""
        if not is_tag_type(sd.expression_type):
            return cls(sd.sub_string, (), sd.expression_type)
        if sd.tags_set:
            return cls(sd.sub_string, (java_string_hash(t) for t in sd.tags_set))
        return cls(sd.sub_string, sd.code_set)

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        if self.matches_every_unit or tags_code is None:
            return True
        return tags_code in self._codes

    def is_matched_by_commit_log(self, msg_buffer: object, properties: Mapping[str, str] | None) -> bool:
        return True

    def __repr__(self) -> str:
        return f"ExpressionMessageFilter({self.expression!r})"
