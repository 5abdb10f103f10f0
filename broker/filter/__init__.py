"""Message filtering for pulls: tag subscriptions, SQL92 selectors (`sql92`), and the SQL92 expressions
consumer groups register by heartbeat (`ConsumerFilterManager`)."""

from broker.filter.consumer_filter_manager import ConsumerFilterData, ConsumerFilterManager
from broker.filter.expression_message_filter import (
    EXPRESSION_TYPE_SQL92,
    EXPRESSION_TYPE_TAG,
    SUB_ALL,
    ExpressionForRetryMessageFilter,
    ExpressionMessageFilter,
    SubscriptionParseError,
    build_subscription_data,
    compile_expression,
    is_tag_type,
)

__all__ = [
    "EXPRESSION_TYPE_SQL92",
    "EXPRESSION_TYPE_TAG",
    "SUB_ALL",
    "ConsumerFilterData",
    "ConsumerFilterManager",
    "ExpressionForRetryMessageFilter",
    "ExpressionMessageFilter",
    "SubscriptionParseError",
    "build_subscription_data",
    "compile_expression",
    "is_tag_type",
]
