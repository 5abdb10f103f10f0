"""SubscriptionGroupManager: consumer group settings, persisted to config/subscriptionGroup.json."""

from __future__ import annotations

from pathlib import Path

import structlog

from broker import mix_all
from broker.config import BrokerConfig
from broker.config_manager import ConfigManager
from remoting.body import DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper

log = structlog.get_logger(__name__)


class SubscriptionGroupManager(ConfigManager):
    def __init__(self, broker_config: BrokerConfig) -> None:
        super().__init__()
        self.broker_config = broker_config
        self.subscription_group_table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        for name in (mix_all.TOOLS_CONSUMER_GROUP, mix_all.FILTERSRV_CONSUMER_GROUP, mix_all.SELF_TEST_CONSUMER_GROUP):
            self.subscription_group_table[name] = SubscriptionGroupConfig(group_name=name)
        for name in (
            mix_all.ONS_HTTP_PROXY_GROUP,
            mix_all.CID_ONSAPI_PULL_GROUP,
            mix_all.CID_ONSAPI_PERMISSION_GROUP,
            mix_all.CID_ONSAPI_OWNER_GROUP,
        ):
            self.subscription_group_table[name] = SubscriptionGroupConfig(group_name=name, consume_broadcast_enable=True)

    def find_subscription_group_config(self, group: str, *, create: bool = True) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created (and persisted) when autoCreateSubscriptionGroup is on."""
        cfg = self.subscription_group_table.get(group)
        if cfg is None and create and (
            self.broker_config.autoCreateSubscriptionGroup or mix_all.is_sys_consumer_group(group)
        ):
            cfg = SubscriptionGroupConfig(group_name=group)
            self.subscription_group_table[group] = cfg
            log.info("subscription_group_auto_created", group=group)
            self._changed()
        return cfg

    def update_subscription_group_config(self, cfg: SubscriptionGroupConfig) -> None:
        old = self.subscription_group_table.get(cfg.group_name)
        self.subscription_group_table[cfg.group_name] = cfg
        log.info("subscription_group_updated" if old else "subscription_group_created", group=cfg.group_name)
        self._changed()

    def disable_consume(self, group: str) -> None:
        cfg = self.subscription_group_table.get(group)
        if cfg is not None:
            cfg.consume_enable = False
            self._changed()

    def delete_subscription_group_config(self, group: str) -> bool:
        old = self.subscription_group_table.pop(group, None)
        if old is None:
            log.warning("subscription_group_delete_unknown", group=group)
            return False
        log.info("subscription_group_deleted", group=group)
        self._changed()
        return True

    def _changed(self) -> None:
        self.data_version.next_version()
        self.request_persist()

    # ------------------------------------------------------------------ persistence

    def config_file_path(self) -> Path:
        return Path(self.broker_config.store_config.storePathRootDir) / "config" / "subscriptionGroup.json"

    def wrapper(self) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper(
            subscription_group_table=self.subscription_group_table, data_version=self.data_version
        )

    def encode(self) -> str:
        return self.wrapper().model_dump_json(by_alias=True, indent=2)

    def decode(self, text: str) -> None:
        w = SubscriptionGroupWrapper.decode(text)
        self.subscription_group_table.update(w.subscription_group_table)
        self.data_version = w.data_version
