"""ClientConfig: what every producer, consumer and admin shares (RocketMQ's ClientConfig)."""

from __future__ import annotations

import functools
import os
import socket
import zlib

from pydantic import BaseModel, ConfigDict, field_validator

from .errors import MQClientError, NoNameServerError

NAMESRV_ADDR_ENV = "NAMESRV_ADDR"
DEFAULT_INSTANCE_NAME = "DEFAULT"


def parse_namesrv_addr(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """'a:p;b:p' (or a list) -> ['a:p', 'b:p'], validated; duplicates dropped, order kept."""
    if value is None:
        return []
    items = value.split(";") if isinstance(value, str) else list(value)
    out: list[str] = []
    for raw in items:
        addr = raw.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise MQClientError(
                f"bad NameServer address {addr!r}: expected ip:port (several separated by ';')"
            )
        if addr not in out:
            out.append(addr)
    return out


def resolve_namesrv_addr(explicit: str | list[str] | None) -> list[str]:
    """The argument if given, else $NAMESRV_ADDR; raises NoNameServerError when neither is set."""
    addrs = parse_namesrv_addr(explicit)
    if not addrs:
        addrs = parse_namesrv_addr(os.environ.get(NAMESRV_ADDR_ENV))
    if not addrs:
        raise NoNameServerError(f"no NameServer address: pass namesrv_addr or set {NAMESRV_ADDR_ENV}")
    return addrs


@functools.cache
def local_ip() -> str:
    """This host's outbound IPv4 address (like RemotingUtil.getLocalAddress), loopback as a last resort."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; this only picks a route
            ip = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    try:
        ip = socket.gethostbyname(socket.gethostname())
        if ip:
            return ip
    except OSError:
        pass
    return "127.0.0.1"


class ClientConfig(BaseModel):
    """Settings of one client runtime (MQClientInstance). Times in milliseconds, RocketMQ's defaults.

    `namesrv_addr`: 'ip:port;ip:port', else $NAMESRV_ADDR. `instance_name`: left at DEFAULT it
    becomes '<pid>#<hash of the NameServer set>', so one process shares one client instance per
    NameServer set, and the client id is '<ip>@<pid>#<hash>' (RocketMQ's buildMQClientId).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    namesrv_addr: str | None = None
    instance_name: str = DEFAULT_INSTANCE_NAME
    unit_name: str | None = None
    client_ip: str | None = None
    poll_name_server_interval: int = 30_000
    heartbeat_broker_interval: int = 30_000
    persist_consumer_offset_interval: int = 5_000
    pull_time_delay_mills_when_exception: int = 1_000
    mq_client_api_timeout: int = 3_000
    connect_timeout: int = 3_000
    vip_channel_enabled: bool = False
    unit_mode: bool = False
    # Not in RocketMQ: after a read or write on a broker or NameServer connection, keep the event loop
    # polling for up to this many microseconds before it sleeps (remoting.idle_poll: a ceiling, the window
    # adapts to the gaps between answers), so an answer is read without waking a sleeping process:
    # one-at-a-time sync sends go ~1.7x as fast on a VM. Burns up to that much of the loop's CPU after
    # each exchange, so off (0) by default; meant for an asyncio application whose loop is the client's
    # (with client.sync the loop thread would contend for the GIL). Off by itself on fewer than 2 CPUs.
    idle_poll_us: int = 0

    @field_validator(
        "poll_name_server_interval",
        "heartbeat_broker_interval",
        "persist_consumer_offset_interval",
        "mq_client_api_timeout",
        "connect_timeout",
    )
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be > 0")
        return v

    @field_validator("idle_poll_us")
    @classmethod
    def _idle_poll(cls, v: int) -> int:
        if not 0 <= v <= 100_000:
            raise ValueError("must be 0 (off) .. 100000 us")
        return v

    @classmethod
    def derive(
        cls, base: ClientConfig | None, namesrv_addr: str | None = None, instance_name: str | None = None
    ) -> ClientConfig:
        """A copy of `base` (or the defaults) with the constructor-level overrides applied."""
        cfg = base.model_copy() if base is not None else cls()
        if namesrv_addr is not None:
            cfg.namesrv_addr = namesrv_addr
        if instance_name is not None:
            cfg.instance_name = instance_name
        return cfg

    def namesrv_addr_list(self) -> list[str]:
        return resolve_namesrv_addr(self.namesrv_addr)

    def resolved_client_ip(self) -> str:
        return self.client_ip or local_ip()

    def resolved_instance_name(self) -> str:
        if self.instance_name != DEFAULT_INSTANCE_NAME:
            return self.instance_name
        key = ";".join(sorted(self.namesrv_addr_list()))
        return f"{os.getpid()}#{zlib.crc32(key.encode()) & 0xFFFFFFFF:08x}"

    def build_mq_client_id(self) -> str:
        """'<ip>@<instance>[@<unit>]' like ClientConfig.buildMQClientId."""
        cid = f"{self.resolved_client_ip()}@{self.resolved_instance_name()}"
        if self.unit_name:
            cid += f"@{self.unit_name}"
        return cid
