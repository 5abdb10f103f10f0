"""BrokerConfig: RocketMQ's broker keys (camelCase field names, as in broker.conf) with 4.9.4 defaults.

A broker.conf mixes broker keys and store keys (RocketMQ reads both from the same file). BrokerConfig
holds the broker keys and carries a MessageStoreConfig built from the store keys of the same file:
`BrokerConfig.from_values(values)` sorts the keys, rejects any key neither knows (one line naming it),
and validates each side. `get_value`/`update_values` work across both (GET/UPDATE_BROKER_CONFIG).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from broker.schedule.delay_level import parse_delay_levels
from remoting.properties import ConfigError, build_config
from store.config import MessageStoreConfig


def default_broker_ip() -> str:
    """The host's primary IPv4 address (no packet is sent), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def default_broker_name() -> str:
    """RocketMQ defaults brokerName to the host name."""
    try:
        name = socket.gethostname().split(".")[0]
    except OSError:
        name = ""
    cleaned = "".join(c if (c.isalnum() and c.isascii()) or c in "-_" else "-" for c in name)
    return cleaned or "broker-a"


class BrokerConfig(BaseModel):
    """Broker keys. Store keys live in `store_config` (a MessageStoreConfig)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # ------------------------------------------------------------------ identity and network
    rocketmqHome: str = Field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME", ""))
    namesrvAddr: str | None = None
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = Field(default_factory=default_broker_name)
    brokerId: int = Field(default=0, ge=0)
    brokerIP1: str = Field(default_factory=default_broker_ip)
    brokerIP2: str | None = None
    listenPort: int = Field(default=10911, ge=0, le=65535)
    haListenPort: int | None = Field(default=None, ge=0, le=65535)
    # Not in RocketMQ (which binds every interface): where to bind. Unset = 127.0.0.1 when brokerIP1 is a
    # loopback address (nobody else could reach such a broker), else 0.0.0.0.
    bindAddress: str | None = None
    brokerPermission: int = Field(default=6, ge=0, le=15)
    regionId: str = "DefaultRegion"
    traceOn: bool = True
    fetchNamesrvAddrByAddressServer: bool = False
    serverChannelMaxIdleTimeSeconds: int = Field(default=120, ge=1)
    # Not in RocketMQ: after a client connection's last read or write, keep the event loop polling for this
    # many microseconds instead of sleeping (remoting.idle_poll), so that a request following an answer
    # (a sync sender, a consumer's next pull) is read without the wake-up of a sleeping process, which on a
    # virtual machine is most of a small request's round trip. 0 = off; off by itself with a single CPU
    # (affinity, or a cgroup CPU quota under 2 CPUs).
    # Costs up to that much CPU after each burst of traffic (an idle broker still sleeps). A ceiling: the
    # window in use adapts to the gaps between requests (0 after a gap past it, doubling after shorter ones).
    serverIdlePollMicros: int = Field(default=200, ge=0, le=100_000)

    # ------------------------------------------------------------------ topics and groups
    defaultTopicQueueNums: int = Field(default=4, ge=1, le=1024)
    autoCreateTopicEnable: bool = True
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    traceTopicEnable: bool = False
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    messageStorePlugIn: str = ""

    # ------------------------------------------------------------------ request processing
    # In this implementation the *ThreadPoolNums keys bound how many requests of a family run at once
    # and the *QueueCapacity keys how many may wait; beyond that the broker answers SYSTEM_BUSY.
    sendMessageThreadPoolNums: int = Field(default=64, ge=1)
    pullMessageThreadPoolNums: int = Field(default=256, ge=1)
    queryMessageThreadPoolNums: int = Field(default=32, ge=1)
    adminBrokerThreadPoolNums: int = Field(default=16, ge=1)
    clientManageThreadPoolNums: int = Field(default=32, ge=1)
    consumerManageThreadPoolNums: int = Field(default=32, ge=1)
    heartbeatThreadPoolNums: int = Field(default=32, ge=1)
    endTransactionThreadPoolNums: int = Field(default=64, ge=1)
    # Replies wait for the requester to take their push (up to 10 s): their own family, so a slow
    # requester never holds up sends.
    processReplyMessageThreadPoolNums: int = Field(default=20, ge=1)
    sendThreadPoolQueueCapacity: int = Field(default=10000, ge=1)
    replyThreadPoolQueueCapacity: int = Field(default=10000, ge=1)
    pullThreadPoolQueueCapacity: int = Field(default=100000, ge=1)
    queryThreadPoolQueueCapacity: int = Field(default=20000, ge=1)
    clientManagerThreadPoolQueueCapacity: int = Field(default=1000000, ge=1)
    consumerManagerThreadPoolQueueCapacity: int = Field(default=1000000, ge=1)
    heartbeatThreadPoolQueueCapacity: int = Field(default=50000, ge=1)
    endTransactionPoolQueueCapacity: int = Field(default=100000, ge=1)
    brokerFastFailureEnable: bool = True
    waitTimeMillsInSendQueue: int = Field(default=200, ge=0)
    waitTimeMillsInPullQueue: int = Field(default=5000, ge=0)
    waitTimeMillsInHeartbeatQueue: int = Field(default=31000, ge=0)
    waitTimeMillsInTransactionQueue: int = Field(default=3000, ge=0)
    startAcceptSendRequestTimeStamp: int = 0
    transferMsgByHeap: bool = True

    # ------------------------------------------------------------------ consume
    longPollingEnable: bool = True
    shortPollingTimeMills: int = Field(default=1000, ge=1)
    # Not in RocketMQ: the most pull requests held at once (long polling); more get SYSTEM_BUSY.
    maxHeldPullRequests: int = Field(default=100000, ge=1)
    notifyConsumerIdsChangedEnable: bool = True
    slaveReadEnable: bool = False
    disableConsumeIfConsumerReadSlowly: bool = False
    consumerFallbehindThreshold: int = 1024 * 1024 * 1024 * 16
    enablePropertyFilter: bool = False
    enableCalcFilterBitMap: bool = False
    filterSupportRetry: bool = False
    expectConsumerNumUseFilter: int = 32
    maxErrorRateOfBloomFilter: int = 20
    filterDataCleanTimeSpan: int = 24 * 3600 * 1000
    flushConsumerOffsetInterval: int = Field(default=5000, ge=100)
    flushConsumerOffsetHistoryInterval: int = 60000
    channelExpiredTimeout: int = Field(default=120000, ge=1000)
    maxDelayTime: int = 40

    # ------------------------------------------------------------------ name server
    registerNameServerPeriod: int = 30000
    registerBrokerTimeoutMills: int = Field(default=6000, ge=100)
    compressedRegister: bool = False
    forceRegister: bool = True

    # ------------------------------------------------------------------ transactions (broker/transaction)
    rejectTransactionMessage: bool = False
    transactionTimeOut: int = Field(default=6000, ge=0)
    transactionCheckMax: int = Field(default=15, ge=0)
    transactionCheckInterval: int = Field(default=60000, ge=1)

    # ------------------------------------------------------------------ later features (accepted now)
    aclEnable: bool = False
    metricsPort: int = Field(default=0, ge=0, le=65535)
    storeReplyMessageEnable: bool = True
    autoDeleteUnusedStats: bool = False

    _store_config: MessageStoreConfig = PrivateAttr(default_factory=MessageStoreConfig)

    @field_validator("registerNameServerPeriod", mode="after")
    @classmethod
    def _clamp_register_period(cls, v: int) -> int:
        # RocketMQ clamps the period to [10 s, 60 s].
        return max(10000, min(v, 60000))

    @field_validator("brokerIP1", "brokerIP2", mode="after")
    @classmethod
    def _ip(cls, v: str | None) -> str | None:
        if v is None:
            return v
        v = v.strip()
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"not an IP address: {v!r}") from None
        return v

    @field_validator("namesrvAddr", mode="after")
    @classmethod
    def _namesrv(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        for addr in split_namesrv_addr(v):
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"bad name server address {addr!r}: expected ip:port[;ip:port...]")
        return v.strip()

    # ------------------------------------------------------------------ store side

    @property
    def store_config(self) -> MessageStoreConfig:
        return self._store_config

    @property
    def broker_addr(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.brokerIP2 or self.brokerIP1}:{self.ha_listen_port}"

    @property
    def ha_listen_port(self) -> int:
        return self.haListenPort if self.haListenPort is not None else self.listenPort + 1

    @property
    def bind_host(self) -> str:
        if self.bindAddress:
            return self.bindAddress
        try:
            if ipaddress.ip_address(self.brokerIP1).is_loopback:
                return self.brokerIP1
        except ValueError:
            pass
        return "0.0.0.0"

    @property
    def namesrv_addr_list(self) -> list[str]:
        return split_namesrv_addr(self.namesrvAddr)

    # ------------------------------------------------------------------ key/value access

    @classmethod
    def known_keys(cls) -> set[str]:
        return set(cls.model_fields) | set(MessageStoreConfig.model_fields)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], *, source: str = "config") -> BrokerConfig:
        """Validate a broker.conf key/value dict (broker and store keys); ConfigError names the bad key."""
        values = dict(values)
        unknown = sorted(k for k in values if k not in cls.known_keys())
        if unknown:
            raise ConfigError(f"{source}: unknown configuration key '{unknown[0]}'")
        if isinstance(values.get("storePathRootDir"), str):
            values["storePathRootDir"] = os.path.expanduser(values["storePathRootDir"].strip())
        # `key=` (empty) on an optional key means "use the default", as -p prints unset optional keys.
        for k in [k for k, v in values.items() if v == ""]:
            field = cls.model_fields.get(k) or MessageStoreConfig.model_fields.get(k)
            if field is not None and field.default is None:
                del values[k]
        broker_vals = {k: v for k, v in values.items() if k in cls.model_fields}
        store_vals = {k: v for k, v in values.items() if k in MessageStoreConfig.model_fields}
        cfg = build_config(cls, broker_vals, source=source)
        cfg._store_config = build_config(MessageStoreConfig, store_vals, source=source)
        try:
            parse_delay_levels(cfg._store_config.messageDelayLevel)
        except ValueError as e:
            raise ConfigError(
                f"{source}: bad value {cfg._store_config.messageDelayLevel!r} for key 'messageDelayLevel': {e}"
            ) from None
        return cfg

    def get_value(self, key: str) -> Any:
        if key in type(self).model_fields:
            return getattr(self, key)
        if key in MessageStoreConfig.model_fields:
            return getattr(self._store_config, key)
        raise KeyError(key)

    def update_values(self, values: Mapping[str, Any], *, source: str = "update") -> dict[str, Any]:
        """Validate then apply updates to both sides, all or nothing. Returns the applied changes."""
        unknown = sorted(k for k in values if k not in self.known_keys())
        if unknown:
            raise ConfigError(f"{source}: unknown configuration key '{unknown[0]}'")
        merged = self.to_values()
        merged.update(values)
        candidate = BrokerConfig.from_values(merged, source=source)
        changed: dict[str, Any] = {}
        for k in values:
            new = candidate.get_value(k)
            if new != self.get_value(k):
                changed[k] = new
        try:
            for k, v in changed.items():
                target = self if k in type(self).model_fields else self._store_config
                setattr(target, k, v)
        except ValidationError as e:  # pragma: no cover - candidate validated already
            raise ConfigError(f"{source}: {e.errors()[0]['msg']}") from None
        return changed

    def to_values(self) -> dict[str, Any]:
        """Every key of both sides with its effective value (broker keys first)."""
        out: dict[str, Any] = dict(self.model_dump())
        out["haListenPort"] = self.ha_listen_port
        out["brokerIP2"] = self.brokerIP2 or self.brokerIP1
        for k, v in self._store_config.model_dump().items():
            out.setdefault(k, v)
        return out

    def to_properties(self) -> str:
        """The effective config as properties text (`-p`, GET_BROKER_CONFIG)."""
        lines = []
        for k, v in self.to_values().items():
            lines.append(f"{k}={format_value(v)}")
        return "\n".join(lines) + "\n"


def format_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    value = getattr(v, "value", v)  # enums
    return str(value)


def split_namesrv_addr(addrs: str | None) -> list[str]:
    if not addrs:
        return []
    return [a.strip() for a in addrs.replace(",", ";").split(";") if a.strip()]
