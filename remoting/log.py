"""structlog set-up shared by every daemon and tool: key=value to stderr, JSON on request."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure_logging(*, json_logs: bool | None = None, level: str | int | None = None) -> None:
    """Configure structlog once per process. RMQ_LOG_JSON=1 / RMQ_LOG_LEVEL=DEBUG override."""
    if json_logs is None:
        json_logs = os.environ.get("RMQ_LOG_JSON", "").lower() in ("1", "true", "yes")
    if level is None:
        level = os.environ.get("RMQ_LOG_LEVEL", "INFO")
    lvl = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(lvl, int):
        lvl = logging.INFO
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_logs else structlog.processors.LogfmtRenderer(key_order=["event"])
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
