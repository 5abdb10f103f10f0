"""NamesrvConfig: the NameServer's configuration, RocketMQ's key names as field names.

One model holds what Java splits over NamesrvConfig and NettyServerConfig, so a RocketMQ
`namesrv.conf` loads unchanged. Keys Java accepts but this implementation has no use for
(thread counts, Netty buffer knobs) are accepted and shown by `-p`, and otherwise ignored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from remoting.properties import ConfigError, build_config, load_properties_file, parse_properties

# RocketMQ 5.x calls the bind host `bindAddress`; the issue names it listenAddr. Both load.
_KEY_ALIASES = {"bindAddress": "listenAddr"}

# Keys whose new value takes effect on a running NameServer (UPDATE_NAMESRV_CONFIG); the
# others are stored and persisted, and apply at the next start.
RUNTIME_KEYS = frozenset(
    {
        "kvConfigPath",
        "configStorePath",
        "orderMessageEnable",
        "scanNotActiveBrokerInterval",
        "brokerChannelExpiredTime",
        "serverChannelMaxIdleTimeSeconds",
        "productEnvName",
        "clusterTest",
        "rocketmqHome",
    }
)


def _home_path(*parts: str) -> str:
    return str(Path.home().joinpath(*parts))


class NamesrvConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # ---- RocketMQ NamesrvConfig
    rocketmqHome: str | None = Field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME"))
    kvConfigPath: str = Field(default_factory=lambda: _home_path("namesrv", "kvConfig.json"))
    configStorePath: str = Field(default_factory=lambda: _home_path("namesrv", "namesrv.properties"))
    productEnvName: str = "center"
    clusterTest: bool = False
    orderMessageEnable: bool = False
    scanNotActiveBrokerInterval: int = Field(default=10_000, gt=0, description="ms between liveness scans")
    brokerChannelExpiredTime: int = Field(
        default=120_000, gt=0, description="ms of silence before a broker is dropped"
    )

    # ---- RocketMQ NettyServerConfig (the NameServer overrides listenPort to 9876)
    listenPort: int = Field(default=9876, ge=0, le=65535)
    listenAddr: str = "0.0.0.0"
    serverWorkerThreads: int = Field(default=8, gt=0)
    serverCallbackExecutorThreads: int = Field(default=0, ge=0)
    serverSelectorThreads: int = Field(default=3, gt=0)
    serverOnewaySemaphoreValue: int = Field(default=256, gt=0)
    serverAsyncSemaphoreValue: int = Field(default=64, gt=0)
    serverChannelMaxIdleTimeSeconds: int = Field(default=120, gt=0)
    serverSocketSndBufSize: int = Field(default=65535, ge=0)
    serverSocketRcvBufSize: int = Field(default=65535, ge=0)
    writeBufferHighWaterMark: int = Field(default=0, ge=0)
    writeBufferLowWaterMark: int = Field(default=0, ge=0)
    serverSocketBacklog: int = Field(default=1024, gt=0)
    serverPooledByteBufAllocatorEnable: bool = True
    useEpollNativeSelector: bool = False

    @field_validator("kvConfigPath", "configStorePath")
    @classmethod
    def _expand_user(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return os.path.expanduser(v.strip())

    @field_validator("listenAddr")
    @classmethod
    def _non_empty_host(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v.strip()


def _canonical_keys(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        out[_KEY_ALIASES.get(k, k)] = v
    return out


def load_namesrv_config(
    config_file: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> NamesrvConfig:
    """Build the effective config: defaults <- properties file (-c) <- overrides.

    As in RocketMQ, when a file is given and does not set configStorePath itself, the file is
    where UPDATE_NAMESRV_CONFIG persists. Raises ConfigError naming the key or file at fault.
    """
    values: dict[str, Any] = {}
    source = "config"
    if config_file is not None:
        source = str(config_file)
        values.update(_canonical_keys(load_properties_file(config_file)))
        values.setdefault("configStorePath", str(Path(config_file).resolve()))
    values.update(_canonical_keys(overrides or {}))
    return build_config(NamesrvConfig, values, source=source)


def _format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)


def merge_properties_text(text: str, config: NamesrvConfig, keys: list[str]) -> str:
    """Write the current values of keys into properties text, keeping its comments and layout.

    Lines setting one of keys get the new value; keys not in the text are appended.
    """
    values = {k: _format_value(getattr(config, k)) for k in keys}
    out: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and stripped[0] not in "#!":
            seps = [i for i in (stripped.find("="), stripped.find(":")) if i >= 0]
            key = stripped[: min(seps)].strip() if seps else stripped
            key = _KEY_ALIASES.get(key, key)
            if key in values:
                out.append(f"{key}={values[key]}")
                seen.add(key)
                continue
        out.append(line)
    out.extend(f"{k}={v}" for k, v in values.items() if k not in seen)
    return "\n".join(out) + "\n"


def updated_config(config: NamesrvConfig, properties_text: str) -> tuple[NamesrvConfig, dict[str, str]]:
    """Validate an UPDATE_NAMESRV_CONFIG body (properties text) against config.

    Returns (new config, the changed keys with their new text values). Every key must be
    known and every value valid, or ConfigError is raised and nothing changes.
    """
    changes = _canonical_keys(parse_properties(properties_text))
    if not changes:
        raise ConfigError("update: the body holds no key=value pair")
    merged = config.model_dump()
    merged.update(changes)
    new = build_config(NamesrvConfig, merged, source="update")
    return new, {k: str(v) for k, v in changes.items()}
