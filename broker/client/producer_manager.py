"""ProducerManager: online producer groups and their connections (for admin and transaction checks)."""

from __future__ import annotations

import random
import time

import structlog

from broker.client.client_channel_info import ClientChannelInfo
from remoting.body import ProducerInfo, ProducerTableInfo
from remoting.connection import RemotingConnection

log = structlog.get_logger(__name__)


class ProducerManager:
    def __init__(self, channel_expired_timeout_ms: int = 120000) -> None:
        self.group_channel_table: dict[str, dict[RemotingConnection, ClientChannelInfo]] = {}
        self.channel_expired_timeout_ms = channel_expired_timeout_ms

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        table = self.group_channel_table.setdefault(group, {})
        old = table.get(info.conn)
        if old is None:
            table[info.conn] = info
            log.info("producer_registered", group=group, client_id=info.client_id, peer=info.remote_addr)
            old = info
        old.touch()

    def unregister_producer(self, group: str, info: ClientChannelInfo) -> None:
        table = self.group_channel_table.get(group)
        if not table:
            return
        old = table.pop(info.conn, None)
        if old is not None:
            log.info("producer_unregistered", group=group, client_id=old.client_id, peer=old.remote_addr)
        if not table:
            del self.group_channel_table[group]

    def do_channel_close_event(self, conn: RemotingConnection) -> None:
        for group, table in list(self.group_channel_table.items()):
            info = table.pop(conn, None)
            if info is not None:
                log.info("producer_connection_closed", group=group, client_id=info.client_id, peer=info.remote_addr)
            if not table:
                del self.group_channel_table[group]

    def scan_not_active_channel(self, now: float | None = None) -> list[RemotingConnection]:
        now = time.monotonic() if now is None else now
        limit = self.channel_expired_timeout_ms / 1000.0
        expired: list[RemotingConnection] = []
        for group, table in list(self.group_channel_table.items()):
            for conn, info in list(table.items()):
                if now - info.last_update > limit:
                    del table[conn]
                    log.warning("producer_expired", group=group, client_id=info.client_id, peer=info.remote_addr)
                    expired.append(conn)
            if not table:
                del self.group_channel_table[group]
        return expired

    def get_group_channels(self, group: str) -> dict[RemotingConnection, ClientChannelInfo]:
        return self.group_channel_table.get(group, {})

    def get_producer_table(self) -> ProducerTableInfo:
        """Every group's producer connections (GET_ALL_PRODUCER_INFO, `mqadmin producer`)."""
        return ProducerTableInfo(
            data={
                group: [
                    ProducerInfo(
                        client_id=info.client_id,
                        # Java writes the channel's SocketAddress.toString(): "/ip:port"
                        remote_ip=f"/{info.remote_addr}",
                        language=info.language.name,
                        version=info.version,
                        last_update_timestamp=info.last_update_timestamp,
                    )
                    for info in table.values()
                ]
                for group, table in self.group_channel_table.items()
            }
        )

    def get_available_channel(self, group: str) -> RemotingConnection | None:
        """A live connection of the group (transaction state checks ask one producer)."""
        conns = [c for c in self.group_channel_table.get(group, {}) if not c.closed]
        return random.choice(conns) if conns else None

    def find_channel(self, client_id: str) -> RemotingConnection | None:
        for table in self.group_channel_table.values():
            for conn, info in table.items():
                if info.client_id == client_id and not conn.closed:
                    return conn
        return None
