"""NamesrvController: wires the route tables, the KV store, the request processor and the server.

A NameServer is stateless apart from its KV config: it never talks to other NameServers, and
several run side by side, each converging on its own from the brokers' registrations.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import structlog

from remoting import RemotingConnection, RemotingServer, RequestDispatcher
from remoting.properties import ConfigError, dump_properties

from .config import RUNTIME_KEYS, NamesrvConfig, merge_properties_text, updated_config
from .file_util import atomic_write, check_writable_file_path
from .kv_config_manager import KVConfigManager
from .processor import DefaultRequestProcessor
from .route_info_manager import RouteInfoManager

log = structlog.get_logger(__name__)

# Java schedules the first liveness scan 5 s after start.
SCAN_INITIAL_DELAY_S = 5.0

_WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


def _persist_config(config: NamesrvConfig, keys: list[str]) -> None:
    """Blocking: merge keys' current values into configStorePath (atomic replace)."""
    path = Path(config.configStorePath)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    atomic_write(path, merge_properties_text(text, config, keys).encode())


class NamesrvController:
    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.route_info_manager = RouteInfoManager(
            broker_channel_expired_time_ms=config.brokerChannelExpiredTime
        )
        self.kv_config_manager = KVConfigManager(config.kvConfigPath)
        self.dispatcher = RequestDispatcher()
        self.processor = DefaultRequestProcessor(self)
        self.processor.register(self.dispatcher)
        self.remoting_server = RemotingServer(
            self.dispatcher,
            host=config.listenAddr,
            port=config.listenPort,
            idle_timeout_s=float(config.serverChannelMaxIdleTimeSeconds),
            name="namesrv",
        )
        self.remoting_server.add_close_listener(self._on_channel_close)
        self._scan_task: asyncio.Task[None] | None = None
        self._config_lock = asyncio.Lock()
        self._bound: tuple[str, int] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> tuple[str, int]:
        """Load the KV config, listen, start the liveness scan. Raises ConfigError (one line
        naming the key or cause) when kvConfigPath is unusable or the port cannot be bound."""
        kv_path = self.config.kvConfigPath
        try:
            await asyncio.to_thread(check_writable_file_path, kv_path)
        except OSError as e:
            raise ConfigError(f"kvConfigPath: cannot write {kv_path}: {e.strerror or e}") from None
        await asyncio.to_thread(self.kv_config_manager.load)
        try:
            host, port = await self.remoting_server.start()
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            raise ConfigError(
                f"listenPort: cannot listen on {self.config.listenAddr}:{self.config.listenPort}: {reason}"
            ) from None
        self._bound = (host, port)
        self._start_scan(
            initial_delay_s=min(SCAN_INITIAL_DELAY_S, self.config.scanNotActiveBrokerInterval / 1000)
        )
        log.info("namesrv_listening", addr=f"{host}:{port}")
        return host, port

    async def stop(self) -> None:
        await self._stop_scan()
        await self.remoting_server.stop()
        if self._bound is not None:
            log.info("namesrv_stopped", **self.route_info_manager.stats())
            self._bound = None

    @property
    def address(self) -> str:
        """`ip:port` a client on this host can connect to (127.0.0.1 when bound to all interfaces)."""
        if self._bound is None:
            raise RuntimeError("NamesrvController is not started")
        host, port = self._bound
        if host in _WILDCARD_HOSTS:
            host = "127.0.0.1"
        return f"{host}:{port}"

    # ------------------------------------------------------------------ liveness

    def _start_scan(self, initial_delay_s: float) -> None:
        self._scan_task = asyncio.create_task(
            self._scan_loop(initial_delay_s), name="namesrv-scan-not-active-broker"
        )

    async def _stop_scan(self) -> None:
        task, self._scan_task = self._scan_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _scan_loop(self, initial_delay_s: float) -> None:
        delay = initial_delay_s
        while True:
            await asyncio.sleep(delay)
            try:
                self.scan_not_active_broker()
            except Exception:  # the scan must survive a bug in one round
                log.exception("scan_not_active_broker_failed")
            delay = self.config.scanNotActiveBrokerInterval / 1000

    def scan_not_active_broker(self) -> int:
        """One liveness round: drop silent brokers and close their connections."""
        expired = self.route_info_manager.scan_not_active_broker()
        for _addr, live in expired:
            if isinstance(live.channel, RemotingConnection):
                live.channel.close()
        return len(expired)

    def _on_channel_close(self, conn: RemotingConnection) -> None:
        # BrokerHousekeepingService: a closed (or idle-closed) broker connection cleans at once.
        self.route_info_manager.on_channel_destroy(conn.remote_addr, conn)

    # ------------------------------------------------------------------ config

    def config_text(self) -> str:
        return dump_properties(self.config)

    async def update_config(self, properties_text: str) -> None:
        """Apply UPDATE_NAMESRV_CONFIG: validate every key and value (ConfigError, nothing
        changes), apply what can change live, then persist all of the config to configStorePath
        as RocketMQ does (OSError if that write fails; the new values stay in force).

        Unlike Java, which rewrites the whole file, the changed keys are merged into the file in
        place, so the comments of a hand-written namesrv.conf survive."""
        async with self._config_lock:
            new, changes = updated_config(self.config, properties_text)
            old = self.config
            self.config = new
            self.route_info_manager.broker_channel_expired_time_ms = new.brokerChannelExpiredTime
            self.kv_config_manager.kv_config_path = Path(new.kvConfigPath)
            self.remoting_server.idle_timeout_s = float(new.serverChannelMaxIdleTimeSeconds)
            if (
                new.scanNotActiveBrokerInterval != old.scanNotActiveBrokerInterval
                and self._scan_task is not None
            ):
                await self._stop_scan()
                self._start_scan(initial_delay_s=new.scanNotActiveBrokerInterval / 1000)
            later = sorted(k for k in changes if k not in RUNTIME_KEYS)
            log.info("namesrv_config_updated", changes=changes, applies_at_restart=later or None)
            await asyncio.to_thread(_persist_config, new, sorted(changes))
