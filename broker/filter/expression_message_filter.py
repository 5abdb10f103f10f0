"""Message filters for pulls (RocketMQ's FilterAPI, ExpressionMessageFilter and its retry variant).

A TAG subscription is `*` (everything) or tags joined by `||`. The consume queue holds each message's
tags code (Java String.hashCode of its TAGS, 0 when it has none); the broker matches codes and the
client re-checks the tag strings, because different tags can share a hash.

An SQL92 subscription (`broker.filter.sql92`, with `enablePropertyFilter=true`) is evaluated on each
record's properties: every consume queue unit passes the first stage and the store decodes the
properties of each record for the second. (Upstream can also pre-compute a bloom filter bit map per
unit, `enableCalcFilterBitMap`, off by default; not done here.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from broker.filter.sql92 import Selector, SelectorParseError, compile_selector
from remoting.body import SubscriptionData
from remoting.message import MessageConst, decode_record_properties, java_string_hash

if TYPE_CHECKING:
    from broker.filter.consumer_filter_manager import ConsumerFilterManager

SUB_ALL = "*"
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"


class SubscriptionParseError(ValueError):
    pass


def is_tag_type(expression_type: str | None) -> bool:
    return expression_type is None or expression_type == "" or expression_type == EXPRESSION_TYPE_TAG


def compile_expression(expression: str | None, expression_type: str | None) -> Selector:
    """FilterFactory.get(type).compile(expression) for a non-TAG type: SubscriptionParseError when
    the type is unknown, the expression empty or not valid."""
    if expression_type != EXPRESSION_TYPE_SQL92:
        raise SubscriptionParseError(f"unknown expression type {expression_type!r}: use TAG or SQL92")
    if not expression or not expression.strip():
        raise SubscriptionParseError(f"expression can't be empty for type {expression_type}")
    try:
        return compile_selector(expression)
    except SelectorParseError as e:
        raise SubscriptionParseError(f"invalid SQL92 expression {expression!r}: {e}") from None


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
    """Matches consume-queue entries by tags code against a tag subscription, or records by their
    properties against an SQL92 selector.

    Immutable and independent of the topic, so pulls share instances (see `parse`); building one
    does not touch pydantic (pulls are a hot path).
    """

    __slots__ = ("expression", "expression_type", "_codes", "selector", "matches_every_unit", "needs_commit_log_match")

    def __init__(
        self, expression: str | None, codes: Iterable[int] = (), expression_type: str | None = None,
        selector: Selector | None = None,
    ) -> None:
        self.expression = expression if expression else SUB_ALL
        self.expression_type = expression_type or EXPRESSION_TYPE_TAG
        self._codes = frozenset(codes)
        self.selector = selector
        # What the store reads (store.filter.MessageFilter): "*" accepts every consume queue unit, and so
        # does an SQL92 selector (it sees properties, which the units lack); a tag filter needs no commit
        # log stage (is_matched_by_commit_log always matches), so records are not decoded.
        self.needs_commit_log_match = selector is not None
        self.matches_every_unit = not is_tag_type(expression_type) or self.expression.strip() == SUB_ALL

    @classmethod
    def parse(cls, expression: str | None, expression_type: str | None = None) -> ExpressionMessageFilter:
        """From a pull's `subscription` header; SubscriptionParseError when it is not valid."""
        if not is_tag_type(expression_type):
            return cls(expression, (), expression_type, compile_expression(expression, expression_type))
        if expression is None or expression.strip() in ("", SUB_ALL):
            return cls(SUB_ALL)
        tags = [t.strip() for t in expression.split("||") if t.strip()]
        if not tags:
            raise SubscriptionParseError(f"no tag in subscription expression {expression!r}")
        return cls(expression, (java_string_hash(t) for t in tags))

    @classmethod
    def from_subscription(cls, sd: SubscriptionData) -> ExpressionMessageFilter:
        """From a heartbeat's TAG SubscriptionData. Codes are recomputed from the tag strings: some
        clients send a bogus codeSet (e.g. [0])."""
        if sd.tags_set:
            return cls(sd.sub_string, (java_string_hash(t) for t in sd.tags_set))
        return cls(sd.sub_string, sd.code_set)

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        if self.matches_every_unit or tags_code is None:
            return True
        return tags_code in self._codes

    def is_matched_by_commit_log(self, msg_buffer: object, properties: Mapping[str, str] | None) -> bool:
        selector = self.selector
        if selector is None:
            return True
        if properties is None and msg_buffer is not None:
            properties = _properties_of(msg_buffer)
        return selector.matches(properties)

    def __repr__(self) -> str:
        return f"ExpressionMessageFilter({self.expression!r}, {self.expression_type!r})"


class ExpressionForRetryMessageFilter:
    """`filterSupportRetry=true`: a pull of a group's %RETRY% topic (subscribed with `*`) selects each
    message by the SQL92 expression the group registered for the message's original topic (its
    RETRY_TOPIC property), so a message that failed once is not redelivered against the filter.
    Messages whose topic has no registered expression pass."""

    __slots__ = ("_inner", "_group", "_filters", "matches_every_unit", "needs_commit_log_match", "expression_type")

    def __init__(self, inner: ExpressionMessageFilter, group: str, filters: ConsumerFilterManager) -> None:
        self._inner = inner
        self._group = group
        self._filters = filters
        self.matches_every_unit = inner.matches_every_unit
        self.needs_commit_log_match = True
        self.expression_type = inner.expression_type

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        return self._inner.is_matched_by_consume_queue(tags_code)

    def is_matched_by_commit_log(self, msg_buffer: object, properties: Mapping[str, str] | None) -> bool:
        if properties is None and msg_buffer is not None:
            properties = _properties_of(msg_buffer)
        real_topic = properties.get(MessageConst.PROPERTY_RETRY_TOPIC) if properties else None
        data = self._filters.get(real_topic, self._group) if real_topic else None
        selector = data.message_filter.selector if data is not None else self._inner.selector
        return True if selector is None else selector.matches(properties)


def _properties_of(msg_buffer: object) -> dict[str, str] | None:
    try:
        return decode_record_properties(msg_buffer)  # type: ignore[arg-type]
    except ValueError:
        return None
