"""Delayed (scheduled) messages: ScheduleMessageService and the messageDelayLevel table."""

from broker.schedule.delay_level import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from broker.schedule.schedule_message_service import (
    PROPERTY_SCHEDULE_DELIVER_MS,
    SCHEDULE_TOPIC,
    ScheduleMessageService,
)

__all__ = [
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "PROPERTY_SCHEDULE_DELIVER_MS",
    "SCHEDULE_TOPIC",
    "ScheduleMessageService",
    "parse_delay_levels",
]
