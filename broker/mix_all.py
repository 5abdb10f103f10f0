"""Broker-wide constants and helpers (RocketMQ's MixAll, PullSysFlag, TopicSysFlag)."""

from __future__ import annotations

from typing import Final

MASTER_ID: Final = 0
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
SYS_CONSUMER_GROUP_PREFIX: Final = "CID_RMQ_SYS_"
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
# A QUERY_MESSAGE extField telling the broker the key is a UNIQ_KEY (query up to defaultQueryMaxNum).
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"

DEFAULT_PRODUCER_GROUP: Final = "DEFAULT_PRODUCER"
DEFAULT_CONSUMER_GROUP: Final = "DEFAULT_CONSUMER"
TOOLS_CONSUMER_GROUP: Final = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP: Final = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP: Final = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP: Final = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PERMISSION_GROUP: Final = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP: Final = "CID_ONSAPI_OWNER"
CID_ONSAPI_PULL_GROUP: Final = "CID_ONSAPI_PULL"

# Messages per %DLQ% topic: one queue (Java's DLQ_NUMS_PER_GROUP).
DLQ_NUMS_PER_GROUP: Final = 1


def get_retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def get_dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_sys_consumer_group(group: str) -> bool:
    return group.startswith(SYS_CONSUMER_GROUP_PREFIX)


class PullSysFlag:
    """Bits of PullMessageRequestHeader.sysFlag."""

    FLAG_COMMIT_OFFSET: Final = 0x1
    FLAG_SUSPEND: Final = 0x2
    FLAG_SUBSCRIPTION: Final = 0x4
    FLAG_CLASS_FILTER: Final = 0x8
    FLAG_LITE_PULL_MESSAGE: Final = 0x10

    @staticmethod
    def has_commit_offset_flag(sys_flag: int) -> bool:
        return bool(sys_flag & PullSysFlag.FLAG_COMMIT_OFFSET)

    @staticmethod
    def has_suspend_flag(sys_flag: int) -> bool:
        return bool(sys_flag & PullSysFlag.FLAG_SUSPEND)

    @staticmethod
    def has_subscription_flag(sys_flag: int) -> bool:
        return bool(sys_flag & PullSysFlag.FLAG_SUBSCRIPTION)

    @staticmethod
    def has_class_filter_flag(sys_flag: int) -> bool:
        return bool(sys_flag & PullSysFlag.FLAG_CLASS_FILTER)

    @staticmethod
    def build(commit_offset: bool, suspend: bool, subscription: bool, class_filter: bool = False) -> int:
        return (
            (PullSysFlag.FLAG_COMMIT_OFFSET if commit_offset else 0)
            | (PullSysFlag.FLAG_SUSPEND if suspend else 0)
            | (PullSysFlag.FLAG_SUBSCRIPTION if subscription else 0)
            | (PullSysFlag.FLAG_CLASS_FILTER if class_filter else 0)
        )


class TopicSysFlag:
    FLAG_UNIT: Final = 0x1
    FLAG_UNIT_SUB: Final = 0x2

    @staticmethod
    def build(unit: bool, has_unit_sub: bool) -> int:
        return (TopicSysFlag.FLAG_UNIT if unit else 0) | (TopicSysFlag.FLAG_UNIT_SUB if has_unit_sub else 0)
