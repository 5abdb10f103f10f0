"""Errors the connector raises on the driver or in executors (all name what was wrong)."""

from __future__ import annotations


class RocketMQSparkError(Exception):
    """Base class of the connector's errors."""


class OptionError(RocketMQSparkError, ValueError):
    """A data source option is missing, unknown in this context, or has a bad value."""


class DataLossError(RocketMQSparkError):
    """Offsets the query needs are gone (cleaned from the broker, or the queue was reset).

    Raised only when `failOnDataLoss` is true (the default); with `failOnDataLoss=false` the
    connector logs the loss and skips ahead instead.
    """
