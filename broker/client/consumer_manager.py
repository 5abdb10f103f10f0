"""ConsumerManager: online consumer groups, their connections and subscriptions.

Membership changes (a client registers, unregisters, its connection closes, or it stops sending
heartbeats) fire a CHANGE event carrying the group's remaining connections; the broker answers it by
sending NOTIFY_CONSUMER_IDS_CHANGED to each so the clients rebalance at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from enum import Enum

import structlog

from broker.client.client_channel_info import ClientChannelInfo
from remoting.body import SubscriptionData
from remoting.connection import RemotingConnection

log = structlog.get_logger(__name__)


class ConsumerGroupEvent(Enum):
    CHANGE = "CHANGE"  # arg: list of the group's connections
    UNREGISTER = "UNREGISTER"  # the group has no member left
    REGISTER = "REGISTER"  # arg: the subscriptions registered


ConsumerIdsChangeListener = Callable[[ConsumerGroupEvent, str, object], None]


class ConsumerGroupInfo:
    __slots__ = (
        "group_name",
        "subscription_table",
        "channel_info_table",
        "consume_type",
        "message_model",
        "consume_from_where",
        "last_update_timestamp",
    )

    def __init__(self, group_name: str, consume_type: str, message_model: str, consume_from_where: str) -> None:
        self.group_name = group_name
        self.subscription_table: dict[str, SubscriptionData] = {}
        self.channel_info_table: dict[RemotingConnection, ClientChannelInfo] = {}
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.last_update_timestamp = int(time.time() * 1000)

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channel_info_table.values():
            if info.client_id == client_id:
                return info
        return None

    def all_channels(self) -> list[RemotingConnection]:
        return list(self.channel_info_table)

    def all_client_ids(self) -> list[str]:
        return [i.client_id for i in self.channel_info_table.values()]

    def unregister_channel(self, info: ClientChannelInfo) -> bool:
        old = self.channel_info_table.pop(info.conn, None)
        if old is not None:
            log.info("consumer_unregistered", group=self.group_name, client_id=old.client_id, peer=old.remote_addr)
        return old is not None

    def do_channel_close_event(self, conn: RemotingConnection) -> bool:
        info = self.channel_info_table.pop(conn, None)
        if info is not None:
            log.info("consumer_connection_closed", group=self.group_name, client_id=info.client_id,
                     peer=info.remote_addr)
        return info is not None

    def update_channel(
        self, info_new: ClientChannelInfo, consume_type: str, message_model: str, consume_from_where: str
    ) -> bool:
        """Register or refresh a member; True when it is new."""
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        updated = False
        info_old = self.channel_info_table.get(info_new.conn)
        if info_old is None:
            self.channel_info_table[info_new.conn] = info_new
            log.info("consumer_registered", group=self.group_name, client_id=info_new.client_id,
                     peer=info_new.remote_addr, model=message_model)
            updated = True
            info_old = info_new
        elif info_old.client_id != info_new.client_id:
            log.warning("consumer_client_id_changed_on_connection", group=self.group_name,
                        old=info_old.client_id, new=info_new.client_id)
            self.channel_info_table[info_new.conn] = info_new
            info_old = info_new
            updated = True
        info_old.touch()
        self.last_update_timestamp = int(time.time() * 1000)
        return updated

    def update_subscription(self, sub_list: Iterable[SubscriptionData]) -> bool:
        """Replace the subscriptions with sub_list; True when a topic was added or removed."""
        updated = False
        subs = list(sub_list)
        topics = set()
        for sub in subs:
            topics.add(sub.topic)
            old = self.subscription_table.get(sub.topic)
            if old is None:
                self.subscription_table[sub.topic] = sub
                updated = True
                log.info("subscription_added", group=self.group_name, topic=sub.topic, expression=sub.sub_string)
            elif sub.sub_version > old.sub_version:
                self.subscription_table[sub.topic] = sub
        for topic in [t for t in self.subscription_table if t not in topics]:
            del self.subscription_table[topic]
            updated = True
            log.info("subscription_removed", group=self.group_name, topic=topic)
        self.last_update_timestamp = int(time.time() * 1000)
        return updated

    def find_subscription_data(self, topic: str) -> SubscriptionData | None:
        return self.subscription_table.get(topic)


class ConsumerManager:
    def __init__(self, listener: ConsumerIdsChangeListener, channel_expired_timeout_ms: int = 120000) -> None:
        self.consumer_table: dict[str, ConsumerGroupInfo] = {}
        self._listener = listener
        self.channel_expired_timeout_ms = channel_expired_timeout_ms

    def _fire(self, event: ConsumerGroupEvent, group: str, arg: object = None) -> None:
        try:
            self._listener(event, group, arg)
        except Exception:
            log.exception("consumer_ids_change_listener_failed", group=group, event=event.value)

    def get_consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumer_table.get(group)

    def find_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        info = self.consumer_table.get(group)
        return info.find_channel(client_id) if info else None

    def find_subscription_data(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.consumer_table.get(group)
        return info.find_subscription_data(topic) if info else None

    def find_subscription_data_count(self, group: str) -> int:
        info = self.consumer_table.get(group)
        return len(info.subscription_table) if info else 0

    def register_consumer(
        self,
        group: str,
        info: ClientChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        sub_list: Iterable[SubscriptionData],
        notify_consumer_ids_changed: bool = True,
    ) -> bool:
        subs = list(sub_list)
        gi = self.consumer_table.get(group)
        if gi is None:
            gi = self.consumer_table[group] = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
        r1 = gi.update_channel(info, consume_type, message_model, consume_from_where)
        r2 = gi.update_subscription(subs)
        if (r1 or r2) and notify_consumer_ids_changed:
            self._fire(ConsumerGroupEvent.CHANGE, group, gi.all_channels())
        self._fire(ConsumerGroupEvent.REGISTER, group, subs)
        return r1 or r2

    def unregister_consumer(self, group: str, info: ClientChannelInfo, notify_consumer_ids_changed: bool = True) -> None:
        gi = self.consumer_table.get(group)
        if gi is None:
            return
        removed = gi.unregister_channel(info)
        if not gi.channel_info_table:
            del self.consumer_table[group]
            log.info("consumer_group_offline", group=group)
            self._fire(ConsumerGroupEvent.UNREGISTER, group)
        if removed and notify_consumer_ids_changed:
            self._fire(ConsumerGroupEvent.CHANGE, group, gi.all_channels())

    def do_channel_close_event(self, conn: RemotingConnection) -> None:
        for group, gi in list(self.consumer_table.items()):
            if gi.do_channel_close_event(conn):
                if not gi.channel_info_table:
                    self.consumer_table.pop(group, None)
                    log.info("consumer_group_offline", group=group)
                    self._fire(ConsumerGroupEvent.UNREGISTER, group)
                self._fire(ConsumerGroupEvent.CHANGE, group, gi.all_channels())

    def scan_not_active_channel(self, now: float | None = None) -> list[RemotingConnection]:
        """Drop members silent for longer than the expiry; returns their connections (to be closed)."""
        now = time.monotonic() if now is None else now
        limit = self.channel_expired_timeout_ms / 1000.0
        expired: list[RemotingConnection] = []
        for group, gi in list(self.consumer_table.items()):
            stale = [c for c, info in gi.channel_info_table.items() if now - info.last_update > limit]
            for conn in stale:
                info = gi.channel_info_table.pop(conn)
                log.warning("consumer_expired", group=group, client_id=info.client_id, peer=info.remote_addr)
                expired.append(conn)
            if stale:
                if not gi.channel_info_table:
                    del self.consumer_table[group]
                    log.info("consumer_group_offline", group=group)
                    self._fire(ConsumerGroupEvent.UNREGISTER, group)
                self._fire(ConsumerGroupEvent.CHANGE, group, gi.all_channels())
        return expired

    def query_topic_consume_by_who(self, topic: str) -> set[str]:
        return {g for g, gi in self.consumer_table.items() if topic in gi.subscription_table}

    def groups_of_connection(self, conn: RemotingConnection) -> list[str]:
        return [g for g, gi in self.consumer_table.items() if conn in gi.channel_info_table]
