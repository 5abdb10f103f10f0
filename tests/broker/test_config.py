"""BrokerConfig: defaults, store keys, one-line errors, live updates."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller import update_properties_file
from remoting.properties import ConfigError, parse_properties
from store.config import FlushDiskType


def test_defaults_follow_rocketmq() -> None:
    c = BrokerConfig.from_values({})
    assert c.brokerClusterName == "DefaultCluster"
    assert c.brokerId == 0
    assert c.listenPort == 10911
    assert c.ha_listen_port == 10912
    assert c.autoCreateTopicEnable and c.autoCreateSubscriptionGroup
    assert c.defaultTopicQueueNums == 4
    assert c.longPollingEnable and c.shortPollingTimeMills == 1000
    assert c.registerNameServerPeriod == 30000
    assert c.waitTimeMillsInSendQueue == 200
    assert c.flushConsumerOffsetInterval == 5000
    assert c.channelExpiredTimeout == 120000
    assert c.transactionCheckInterval == 60000 and c.transactionCheckMax == 15 and c.transactionTimeOut == 6000
    assert c.brokerPermission == 6 and not c.aclEnable and c.metricsPort == 0
    assert c.serverIdlePollMicros == 200  # ours (remoting.idle_poll)
    sc = c.store_config
    assert sc.maxMessageSize == 4 * 1024 * 1024
    assert sc.mappedFileSizeCommitLog == 1024**3
    assert sc.flushDiskType == FlushDiskType.ASYNC_FLUSH
    assert sc.messageDelayLevel.split()[0] == "1s" and len(sc.messageDelayLevel.split()) == 18


def test_store_and_broker_keys_from_one_file() -> None:
    c = BrokerConfig.from_values(
        {
            "listenPort": "20911",
            "haListenPort": "30000",
            "autoCreateTopicEnable": "false",
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": "1048576",
            "deleteWhen": "04",
            "fileReservedTime": "48",
            "storePathRootDir": "~/somewhere",
            "namesrvAddr": "127.0.0.1:9876;127.0.0.1:9877",
        }
    )
    assert c.listenPort == 20911 and c.ha_listen_port == 30000
    assert c.autoCreateTopicEnable is False
    assert c.store_config.flushDiskType == FlushDiskType.SYNC_FLUSH
    assert c.store_config.mappedFileSizeCommitLog == 1048576
    assert c.store_config.fileReservedTime == 48
    assert "~" not in c.store_config.storePathRootDir
    assert c.namesrv_addr_list == ["127.0.0.1:9876", "127.0.0.1:9877"]


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"listenPot": "1"}, "'listenPot'"),
        ({"listenPort": "abc"}, "'listenPort'"),
        ({"listenPort": "70000"}, "'listenPort'"),
        ({"flushDiskType": "SOMETIMES"}, "'flushDiskType'"),
        ({"autoCreateTopicEnable": "maybe"}, "'autoCreateTopicEnable'"),
        ({"brokerIP1": "not-an-ip"}, "'brokerIP1'"),
        ({"namesrvAddr": "localhost"}, "'namesrvAddr'"),
        ({"maxMessageSize": "x"}, "'maxMessageSize'"),
        ({"serverIdlePollMicros": "-1"}, "'serverIdlePollMicros'"),
        ({"serverIdlePollMicros": "1000000"}, "'serverIdlePollMicros'"),
        # Values the store cannot work with (before, a broker started and failed every send, or divided by 0)
        ({"mappedFileSizeCommitLog": "0"}, "'mappedFileSizeCommitLog'"),
        ({"mappedFileSizeConsumeQueue": "0"}, "'mappedFileSizeConsumeQueue'"),
        ({"maxMessageSize": "0"}, "'maxMessageSize'"),
        ({"maxHashSlotNum": "0"}, "'maxHashSlotNum'"),
        ({"maxIndexNum": "-1"}, "'maxIndexNum'"),
        # An index file over 2 GiB (Java's int overflows; here start would make a file that size)
        ({"maxHashSlotNum": "2147483647"}, "'maxHashSlotNum'"),
        ({"maxIndexNum": "200000000"}, "'maxIndexNum'"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(values: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as ei:
        BrokerConfig.from_values(values, source="broker.conf")
    msg = str(ei.value)
    assert needle in msg and "\n" not in msg and msg.startswith("broker.conf")


def test_register_period_is_clamped() -> None:
    assert BrokerConfig.from_values({"registerNameServerPeriod": "1000"}).registerNameServerPeriod == 10000
    assert BrokerConfig.from_values({"registerNameServerPeriod": "600000"}).registerNameServerPeriod == 60000


def test_printed_config_loads_back_unchanged() -> None:
    c = BrokerConfig.from_values({"brokerName": "b1", "brokerIP1": "10.0.0.1", "listenPort": "1234"})
    again = BrokerConfig.from_values(parse_properties(c.to_properties()))
    assert again.to_values() == c.to_values()


def test_update_values_is_validated_and_all_or_nothing() -> None:
    c = BrokerConfig.from_values({})
    with pytest.raises(ConfigError, match="'defaultTopicQueueNums'"):
        c.update_values({"autoCreateTopicEnable": "false", "defaultTopicQueueNums": "zero"})
    assert c.autoCreateTopicEnable is True
    with pytest.raises(ConfigError, match="'noSuchKey'"):
        c.update_values({"noSuchKey": "1"})
    changed = c.update_values({"autoCreateTopicEnable": "false", "maxMessageSize": "1024", "brokerId": "0"})
    assert changed == {"autoCreateTopicEnable": False, "maxMessageSize": 1024}
    assert c.store_config.maxMessageSize == 1024


def test_update_properties_file_keeps_comments_and_other_keys(tmp_path: Path) -> None:
    p = tmp_path / "broker.conf"
    p.write_text("# my broker\nbrokerName=b1\nautoCreateTopicEnable = true\n")
    update_properties_file(p, {"autoCreateTopicEnable": False, "defaultTopicQueueNums": 8})
    text = p.read_text()
    assert text.startswith("# my broker\nbrokerName=b1\n")
    assert parse_properties(text) == {"brokerName": "b1", "autoCreateTopicEnable": "false", "defaultTopicQueueNums": "8"}
