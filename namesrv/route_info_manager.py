"""RouteInfoManager: the NameServer's route tables and the rules that change them. No I/O.

Lock discipline. Java guards five HashMaps with one ReentrantReadWriteLock because request
threads run in parallel. Here every caller runs on the one asyncio event loop thread, and every
public method is plain synchronous code with no `await` inside: a method runs to completion
before any other coroutine can run, so each mutation is atomic and each read sees one
consistent state, with no lock at all. Readers get copies (never the live objects), so a
caller may hold or serialize a result while later registrations change the tables.
Do not call this class from other threads (asyncio.to_thread and the like); if that is ever
needed, put a threading.Lock around every public method.

Connections ("channels") are opaque here: the manager stores whatever the caller passes and
compares by identity. Closing them is the caller's job (see scan_not_active_broker).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from remoting.body import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)

log = structlog.get_logger(__name__)

MASTER_ID = 0
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS = 120_000

# PermName bits (RocketMQ's values; kept here so the NameServer needs no message codec).
PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1

# TopicSysFlag bits.
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_timestamp: int  # ms on the manager's clock
    data_version: DataVersion
    channel: object | None
    ha_server_addr: str | None


@dataclass(slots=True)
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


class RouteInfoManager:
    def __init__(
        self,
        *,
        broker_channel_expired_time_ms: int = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS,
        clock: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self.broker_channel_expired_time_ms = broker_channel_expired_time_ms
        self._clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}  # topic -> brokerName -> QueueData
        self.broker_addr_table: dict[str, BrokerData] = {}  # brokerName -> BrokerData
        self.cluster_addr_table: dict[str, set[str]] = {}  # clusterName -> brokerNames
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}  # brokerAddr -> BrokerLiveInfo
        self.filter_server_table: dict[str, list[str]] = {}  # brokerAddr -> filter servers

    # ------------------------------------------------------------------ registration

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str | None,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: list[str] | None,
        channel: object | None,
    ) -> RegisterBrokerResult:
        result = RegisterBrokerResult()

        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)

        register_first = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            register_first = True
            broker_data = BrokerData(cluster=cluster_name, broker_name=broker_name, broker_addrs={})
            self.broker_addr_table[broker_name] = broker_data
        addrs = broker_data.broker_addrs
        # One address has one role: a slave promoted to master at the same ip:port first loses
        # its old <brokerId, addr> entry.
        for bid in [bid for bid, addr in addrs.items() if addr == broker_addr and bid != broker_id]:
            del addrs[bid]
        old_addr = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID and old_addr != broker_addr:
            log.info(
                "master_address_changed",
                cluster=broker_data.cluster,
                broker_name=broker_name,
                old=old_addr,
                new=broker_addr,
            )
        register_first = register_first or old_addr is None

        data_version = (
            topic_config_wrapper.data_version.model_copy()
            if topic_config_wrapper is not None
            else DataVersion(timestamp=0, counter=0)
        )
        # Only a master's topics make routes, and only when its data version moved (or it is new).
        if topic_config_wrapper is not None and broker_id == MASTER_ID:
            if register_first or self.is_broker_topic_config_changed(broker_addr, data_version):
                for tc in topic_config_wrapper.topic_config_table.values():
                    self._create_and_update_queue_data(broker_name, tc)

        prev = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            last_update_timestamp=self._clock(),
            data_version=data_version,
            channel=channel,
            ha_server_addr=ha_server_addr,
        )
        if prev is None:
            log.info("new_broker_registered", broker_addr=broker_addr, ha_server=ha_server_addr)

        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.broker_live_table.get(master_addr)
                if master_live is not None:
                    result.ha_server_addr = master_live.ha_server_addr
                    result.master_addr = master_addr
        return result

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion | None) -> bool:
        prev = self.query_broker_topic_config(broker_addr)
        return prev is None or not prev.same(data_version)

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return live.data_version.model_copy() if live is not None else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_timestamp = self._clock()

    def _create_and_update_queue_data(self, broker_name: str, tc: TopicConfig) -> None:
        qd = QueueData(
            broker_name=broker_name,
            read_queue_nums=tc.read_queue_nums,
            write_queue_nums=tc.write_queue_nums,
            perm=tc.perm,
            topic_sys_flag=tc.topic_sys_flag,
        )
        per_broker = self.topic_queue_table.get(tc.topic_name)
        if per_broker is None:
            self.topic_queue_table[tc.topic_name] = {broker_name: qd}
            log.info("new_topic_registered", topic=tc.topic_name, broker_name=broker_name)
            return
        old = per_broker.get(broker_name)
        per_broker[broker_name] = qd
        if old is not None and old != qd:
            log.info("topic_changed", topic=tc.topic_name, old=old.model_dump(), new=qd.model_dump())

    def unregister_broker(
        self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        removed_live = self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        log.info(
            "unregister_broker",
            broker_addr=broker_addr,
            broker_name=broker_name,
            found=removed_live is not None,
        )

        remove_broker_name = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            broker_data.broker_addrs.pop(broker_id, None)
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                remove_broker_name = True

        if remove_broker_name:
            names = self.cluster_addr_table.get(cluster_name)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster_name]
            self._remove_topic_by_broker_name(broker_name)

    def _remove_topic_by_broker_name(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            per_broker = self.topic_queue_table[topic]
            if per_broker.pop(broker_name, None) is not None:
                log.info("remove_topic_of_broker", topic=topic, broker_name=broker_name)
            if not per_broker:
                del self.topic_queue_table[topic]

    # ------------------------------------------------------------------ liveness

    def scan_not_active_broker(self) -> list[tuple[str, BrokerLiveInfo]]:
        """Drop brokers silent for longer than the expiry; returns them so the caller can close
        their connections."""
        now = self._clock()
        expired = [
            (addr, live)
            for addr, live in self.broker_live_table.items()
            if live.last_update_timestamp + self.broker_channel_expired_time_ms < now
        ]
        for addr, live in expired:
            log.warning(
                "broker_channel_expired",
                broker_addr=addr,
                silent_ms=now - live.last_update_timestamp,
                expiry_ms=self.broker_channel_expired_time_ms,
            )
            self.broker_live_table.pop(addr, None)
            self._remove_broker_addr(addr)
        return expired

    def on_channel_destroy(self, remote_addr: str | None, channel: object | None) -> str | None:
        """A connection closed: clean the broker registered through it at once.

        The broker is found by its connection; failing that, by remote_addr (as Java does).
        Returns the broker address cleaned, or None when the connection was not a broker's.
        """
        found: str | None = None
        if channel is not None:
            for addr, live in self.broker_live_table.items():
                if live.channel is channel:
                    found = addr
                    break
        if found is None:
            if not remote_addr or remote_addr not in self.broker_live_table:
                return None
            found = remote_addr
        log.info("broker_channel_destroyed", broker_addr=found)
        self._remove_broker_addr(found)
        return found

    def _remove_broker_addr(self, broker_addr: str) -> None:
        """Remove one broker address from every table; queue data of its brokerName goes only
        when no address of that name is left (a surviving slave keeps the routes readable)."""
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        broker_name_found: str | None = None
        remove_broker_name = False
        for name, bd in list(self.broker_addr_table.items()):
            ids = [bid for bid, addr in bd.broker_addrs.items() if addr == broker_addr]
            if not ids:
                continue
            for bid in ids:
                del bd.broker_addrs[bid]
            broker_name_found = name
            log.info("remove_broker_addr", broker_name=name, broker_id=ids[0], broker_addr=broker_addr)
            if not bd.broker_addrs:
                del self.broker_addr_table[name]
                remove_broker_name = True
                log.info("remove_broker_name", broker_name=name)
            break

        if broker_name_found is not None and remove_broker_name:
            for cluster, names in list(self.cluster_addr_table.items()):
                if broker_name_found in names:
                    names.discard(broker_name_found)
                    if not names:
                        del self.cluster_addr_table[cluster]
                        log.info("remove_cluster", cluster=cluster)
                    break
            self._remove_topic_by_broker_name(broker_name_found)

    # ------------------------------------------------------------------ queries

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        per_broker = self.topic_queue_table.get(topic)
        if not per_broker:
            return None
        queue_datas = [qd.model_copy() for qd in per_broker.values()]
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for name in per_broker:
            bd = self.broker_addr_table.get(name)
            if bd is None:
                continue
            clone = BrokerData(
                cluster=bd.cluster, broker_name=bd.broker_name, broker_addrs=dict(bd.broker_addrs)
            )
            broker_datas.append(clone)
            if self.filter_server_table:
                for addr in clone.broker_addrs.values():
                    fs = self.filter_server_table.get(addr)
                    if fs is not None:
                        filter_servers[addr] = list(fs)
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=queue_datas, broker_datas=broker_datas, filter_server_table=filter_servers
        )

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={
                name: BrokerData(
                    cluster=bd.cluster, broker_name=bd.broker_name, broker_addrs=dict(bd.broker_addrs)
                )
                for name, bd in self.broker_addr_table.items()
            },
            cluster_addr_table={c: sorted(names) for c, names in self.cluster_addr_table.items()},
        )

    def get_all_topic_list(self) -> TopicList:
        return TopicList(topic_list=list(self.topic_queue_table))

    def get_topics_by_cluster(self, cluster: str) -> TopicList:
        names = self.cluster_addr_table.get(cluster, set())
        topics = [t for t, per_broker in self.topic_queue_table.items() if not names.isdisjoint(per_broker)]
        return TopicList(topic_list=topics)

    def get_system_topic_list(self) -> TopicList:
        """Java's quirk kept: cluster names and broker names (each is a system topic on its
        brokers), plus one broker address for the caller to ask about the rest."""
        topics: list[str] = []
        for cluster, names in self.cluster_addr_table.items():
            topics.append(cluster)
            topics.extend(sorted(names))
        broker_addr = None
        for bd in self.broker_addr_table.values():
            if bd.broker_addrs:
                broker_addr = next(iter(bd.broker_addrs.values()))
                break
        return TopicList(topic_list=list(dict.fromkeys(topics)), broker_addr=broker_addr)

    def _topics_where(self, pick: Callable[[QueueData], bool]) -> TopicList:
        # As in Java, the first queue data of a topic decides.
        return TopicList(
            topic_list=[
                t
                for t, per_broker in self.topic_queue_table.items()
                if per_broker and pick(next(iter(per_broker.values())))
            ]
        )

    def get_unit_topics(self) -> TopicList:
        return self._topics_where(lambda qd: bool(qd.topic_sys_flag & FLAG_UNIT))

    def get_has_unit_sub_topic_list(self) -> TopicList:
        return self._topics_where(lambda qd: bool(qd.topic_sys_flag & FLAG_UNIT_SUB))

    def get_has_unit_sub_ununit_topic_list(self) -> TopicList:
        return self._topics_where(
            lambda qd: not (qd.topic_sys_flag & FLAG_UNIT) and bool(qd.topic_sys_flag & FLAG_UNIT_SUB)
        )

    # ------------------------------------------------------------------ admin

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """Remove a topic's routes: everywhere, or only on the brokers of cluster_name."""
        if not cluster_name:
            if self.topic_queue_table.pop(topic, None) is not None:
                log.info("delete_topic", topic=topic)
            return
        names = self.cluster_addr_table.get(cluster_name)
        per_broker = self.topic_queue_table.get(topic)
        if not names or per_broker is None:
            return
        for name in names:
            if per_broker.pop(name, None) is not None:
                log.info("delete_topic_of_broker", topic=topic, broker_name=name, cluster=cluster_name)
        if not per_broker:
            del self.topic_queue_table[topic]

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Clear the write bit of every topic on broker_name; returns how many topics it touched."""
        return self._operate_write_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """Give every topic on broker_name read+write again; returns how many topics it touched."""
        return self._operate_write_perm(broker_name, lambda _perm: PERM_READ | PERM_WRITE)

    def _operate_write_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        count = 0
        for per_broker in self.topic_queue_table.values():
            qd = per_broker.get(broker_name)
            if qd is not None:
                qd.perm = change(qd.perm)
                count += 1
        return count

    # ------------------------------------------------------------------ stats

    def stats(self) -> dict[str, int]:
        return {
            "clusters": len(self.cluster_addr_table),
            "broker_names": len(self.broker_addr_table),
            "live_brokers": len(self.broker_live_table),
            "topics": len(self.topic_queue_table),
        }
