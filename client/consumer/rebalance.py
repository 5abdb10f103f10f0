"""RebalanceImpl: which queues this consumer owns, and the process queue of each.

Per subscribed topic (RocketMQ 4.9.4's RebalanceImpl.rebalanceByTopic):

- BROADCASTING: every readable queue of the topic.
- CLUSTERING: the topic's queues and the group's consumer ids (asked of a broker), both sorted,
  through the allocation strategy; every member computes the same split.

`update_process_queue_table_in_rebalance` then drops queues no longer ours (their pending offsets
persisted first; an orderly consumer also releases the broker lock) and adds new ones, each
starting at `compute_pull_from_where` (the stored offset, else per ConsumeFromWhere). Orderly
consumers only take a queue once the broker granted its lock (LOCK_BATCH_MQ).

Subclasses: RebalancePushImpl (PushConsumer) and RebalanceLitePullImpl (LitePullConsumer).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from remoting.body import SubscriptionData
from remoting.errors import RemotingError

from ..errors import MQBrokerError, MQClientError, TopicNotExistError
from ..message import MessageQueue
from ..route import MASTER_ID
from ..validators import RETRY_GROUP_TOPIC_PREFIX
from .allocate import AllocateMessageQueueStrategy
from .listener import ConsumeFromWhere, ConsumeType, MessageModel
from .offset_store import OffsetStore, ReadOffsetType
from .process_queue import ProcessQueue, now_ms
from .pull_service import PullRequest

if TYPE_CHECKING:
    from ..instance import MQClientInstance

log = structlog.get_logger(__name__)

UNLOCK_DELAY_TIME_MS = 20_000
REBALANCE_RETRY_S = 0.5  # upstream's rebalanceLater(500) after a queue could not be locked

__all__ = [
    "RebalanceImpl",
    "RebalanceLitePullImpl",
    "RebalancePushImpl",
    "compute_pull_from_where",
    "parse_consume_timestamp",
]


def parse_consume_timestamp(value: str) -> int:
    """'yyyyMMddHHmmss' (local time, like Java's UtilAll.parseDate) -> epoch ms."""
    try:
        return int(time.mktime(time.strptime(value, "%Y%m%d%H%M%S")) * 1000)
    except (ValueError, OverflowError, TypeError):
        raise MQClientError(
            f"consumeTimestamp is invalid, the valid format is yyyyMMddHHmmss, but received {value!r}"
        ) from None


def default_consume_timestamp() -> str:
    """Half an hour ago, as DefaultMQPushConsumer's consumeTimestamp."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(time.time() - 30 * 60))


async def master_addr(instance: MQClientInstance, mq: MessageQueue) -> str:
    """The queue's master (MQAdminImpl's findBrokerAddressInPublish, refreshing the route once)."""
    addr = instance.find_broker_address_in_publish(mq.broker_name)
    if addr is None:
        with contextlib.suppress(TopicNotExistError):
            await instance.update_topic_route_info_from_name_server(mq.topic)
        addr = instance.find_broker_address_in_publish(mq.broker_name)
    if addr is None:
        raise MQClientError(f"The broker[{mq.broker_name}] not exist")
    return addr


async def max_offset(instance: MQClientInstance, mq: MessageQueue) -> int:
    return await instance.api.get_max_offset(await master_addr(instance, mq), mq.topic, mq.queue_id)


async def min_offset(instance: MQClientInstance, mq: MessageQueue) -> int:
    return await instance.api.get_min_offset(await master_addr(instance, mq), mq.topic, mq.queue_id)


async def search_offset(instance: MQClientInstance, mq: MessageQueue, timestamp_ms: int) -> int:
    return await instance.api.search_offset(await master_addr(instance, mq), mq.topic, mq.queue_id, timestamp_ms)


async def compute_pull_from_where(
    instance: MQClientInstance,
    offset_store: OffsetStore,
    mq: MessageQueue,
    consume_from_where: ConsumeFromWhere,
    consume_timestamp: str,
) -> int:
    """RebalancePushImpl.computePullFromWhereWithException of 4.9.4.

    A stored offset (>= 0) wins. With none (-1): LAST_OFFSET -> 0 for a retry topic, else the
    queue's max offset (note: the broker answers QUERY_CONSUMER_OFFSET of a never-consumed queue
    whose first message is still in memory with 0, which is then "stored"); FIRST_OFFSET -> 0;
    TIMESTAMP -> the max offset for a retry topic, else the offset at consume_timestamp.
    -1 means "could not tell" (the store could not be read); errors asking the broker raise.
    """
    cfw = consume_from_where
    last = await offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
    if last >= 0:
        return last
    if last != -1:
        return -1
    is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    if cfw is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    if cfw is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        if is_retry:
            return await max_offset(instance, mq)
        return await search_offset(instance, mq, parse_consume_timestamp(consume_timestamp))
    # CONSUME_FROM_LAST_OFFSET and its deprecated aliases
    if is_retry:
        return 0
    return await max_offset(instance, mq)


class SubscriptionInfoHooks:
    """The route-refresh hooks MQClientInstance calls on every consumer (push and lite pull alike).

    Needs `_subscriptions` (topic -> subscription) and `rebalance` (a RebalanceImpl or None).
    """

    _subscriptions: dict[str, Any]
    rebalance: RebalanceImpl | None

    def subscribed_topics(self) -> Iterable[str]:
        return list(self._subscriptions)

    def update_topic_subscribe_info(self, topic: str, info: set[MessageQueue]) -> None:
        if topic in self._subscriptions and self.rebalance is not None:
            self.rebalance.topic_subscribe_info_table[topic] = set(info)

    def is_subscribe_topic_need_update(self, topic: str) -> bool:
        if topic in self._subscriptions and self.rebalance is not None:
            return topic not in self.rebalance.topic_subscribe_info_table
        return False


class RebalanceOwner(Protocol):
    """What a rebalance needs from its consumer."""

    offset_store: OffsetStore
    consume_from_where: ConsumeFromWhere
    consume_timestamp: str


class RebalanceImpl:
    """Queue assignment of one consumer (see the module doc). Subclasses fill in the hooks."""

    def __init__(
        self,
        group: str,
        message_model: MessageModel,
        strategy: AllocateMessageQueueStrategy,
        instance: MQClientInstance,
        owner: Any,
    ) -> None:
        self.consumer_group = group
        self.message_model = message_model
        self.allocate_message_queue_strategy = strategy
        self.instance = instance
        self.owner = owner
        self.log = log.bind(group=group, client_id=instance.client_id)  # (one process may run several members)
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self.topic_subscribe_info_table: dict[str, set[MessageQueue]] = {}
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self._lock = asyncio.Lock()
        self._stopped = False
        self.rebalance_count = 0

    # ------------------------------------------------------------------ broker locks (orderly)
    def _by_broker(self, mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        out: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            out.setdefault(mq.broker_name, []).append(mq)
        return out

    def _master(self, broker_name: str) -> str | None:
        found = self.instance.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
        return found[0] if found else None

    async def lock(self, mq: MessageQueue) -> bool:
        """LOCK_BATCH_MQ for one queue; marks every granted queue's ProcessQueue locked."""
        addr = self._master(mq.broker_name)
        if addr is None:
            return False
        try:
            granted = await self.instance.api.lock_batch_mq(
                addr, self.consumer_group, self.instance.client_id, [mq], timeout_ms=1000
            )
        except (RemotingError, MQBrokerError) as e:
            self.log.warning("lock_batch_mq_failed", mq=str(mq), error=str(e))
            return False
        for g in granted:
            pq = self.process_queue_table.get(g)
            if pq is not None:
                pq.set_locked(True)
        ok = mq in granted
        self.log.info("message_queue_lock", ok=ok, mq=str(mq))
        return ok

    async def lock_all(self) -> None:
        """Renew the broker locks of every queue we hold (every 20 s)."""
        for broker, mqs in self._by_broker(list(self.process_queue_table)).items():
            addr = self._master(broker)
            if addr is None:
                continue
            try:
                granted = await self.instance.api.lock_batch_mq(
                    addr, self.consumer_group, self.instance.client_id, mqs, timeout_ms=1000
                )
            except (RemotingError, MQBrokerError) as e:
                self.log.warning("lock_batch_mq_failed", broker=broker, error=str(e))
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in granted:
                    if not pq.locked:
                        self.log.info("message_queue_locked", mq=str(mq))
                    pq.set_locked(True)
                else:
                    if pq.locked:
                        self.log.warning("message_queue_lock_lost", mq=str(mq))
                    pq.set_locked(False)

    async def unlock(self, mq: MessageQueue, oneway: bool) -> None:
        addr = self._master(mq.broker_name)
        if addr is None:
            return
        try:
            await self.instance.api.unlock_batch_mq(
                addr, self.consumer_group, self.instance.client_id, [mq], oneway=oneway, timeout_ms=1000
            )
            self.log.info("message_queue_unlocked", mq=str(mq))
        except (RemotingError, MQBrokerError) as e:
            self.log.warning("unlock_batch_mq_failed", mq=str(mq), error=str(e))

    async def unlock_all(self, oneway: bool) -> None:
        for broker, mqs in self._by_broker(list(self.process_queue_table)).items():
            addr = self._master(broker)
            if addr is None:
                continue
            try:
                await self.instance.api.unlock_batch_mq(
                    addr, self.consumer_group, self.instance.client_id, mqs, oneway=oneway, timeout_ms=1000
                )
            except (RemotingError, MQBrokerError) as e:
                self.log.warning("unlock_batch_mq_failed", broker=broker, error=str(e))
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.set_locked(False)

    # ------------------------------------------------------------------ rebalance
    async def do_rebalance(self, is_order: bool) -> None:
        async with self._lock:
            if self._stopped:
                return
            self.rebalance_count += 1
            for topic in list(self.subscription_inner):
                try:
                    await self.rebalance_by_topic(topic, is_order)
                except (RemotingError, MQBrokerError, MQClientError) as e:
                    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                        self.log.warning("rebalance_by_topic_failed", topic=topic, error=str(e))
            await self.truncate_message_queue_not_my_topic()

    async def _subscribe_info(self, topic: str) -> set[MessageQueue] | None:
        mq_set = self.topic_subscribe_info_table.get(topic)
        if mq_set is None:
            # Not routed yet (a new retry topic, a topic created after start): ask now, not in 30 s.
            with contextlib.suppress(TopicNotExistError, MQClientError, RemotingError, MQBrokerError):
                await self.instance.update_topic_route_info_from_name_server(topic)
            mq_set = self.topic_subscribe_info_table.get(topic)
        return mq_set

    async def rebalance_by_topic(self, topic: str, is_order: bool) -> None:
        mq_set = await self._subscribe_info(topic)
        if self.message_model is MessageModel.BROADCASTING:
            if mq_set is None:
                self.log.debug("rebalance_topic_not_exist", topic=topic)
                return
            if await self.update_process_queue_table_in_rebalance(topic, set(mq_set), is_order):
                await self.message_queue_changed(topic, set(mq_set), set(mq_set))
            return
        cid_all = await self.instance.find_consumer_id_list(topic, self.consumer_group)
        if mq_set is None:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                self.log.warning("rebalance_topic_not_exist", topic=topic)
            return
        if not cid_all:
            self.log.warning("rebalance_no_consumer_ids", topic=topic)
            return
        mq_all = sorted(mq_set)
        cids = sorted(cid_all)
        strategy = self.allocate_message_queue_strategy
        try:
            result = strategy.allocate(self.consumer_group, self.instance.client_id, mq_all, cids)
        except Exception as e:  # a user strategy must not kill the rebalance loop
            self.log.error("allocate_failed", strategy=getattr(strategy, "name", "?"), error=f"{type(e).__name__}: {e}")
            return
        allocated = set(result or [])
        if await self.update_process_queue_table_in_rebalance(topic, allocated, is_order):
            self.log.info(
                "rebalance_result_changed",
                strategy=getattr(strategy, "name", type(strategy).__name__),
                topic=topic,
                mq_all=len(mq_set),
                cid_all=len(cids),
                result=sorted(f"{m.broker_name}:{m.queue_id}" for m in allocated),
            )
            await self.message_queue_changed(topic, set(mq_set), allocated)

    async def truncate_message_queue_not_my_topic(self) -> None:
        for mq in list(self.process_queue_table):
            if mq.topic not in self.subscription_inner:
                pq = self.process_queue_table.pop(mq, None)
                if pq is not None:
                    pq.dropped = True
                    self.on_process_queue_dropped(mq, pq)
                    self.log.info("rebalance_truncate_queue", mq=str(mq))

    async def update_process_queue_table_in_rebalance(
        self, topic: str, mq_set: set[MessageQueue], is_order: bool
    ) -> bool:
        changed = False
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set:
                pq.dropped = True
                self.on_process_queue_dropped(mq, pq)
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    self.log.info("rebalance_remove_queue", mq=str(mq))
                else:  # (an orderly queue whose listener call still runs: released on a retry)
                    self.instance.rebalance_later(REBALANCE_RETRY_S)
            elif pq.is_pull_expired() and self.consume_type() is ConsumeType.CONSUME_PASSIVELY:
                pq.dropped = True
                self.on_process_queue_dropped(mq, pq)
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    self.log.error("rebalance_remove_stalled_queue", mq=str(mq))

        requests: list[PullRequest] = []
        for mq in sorted(mq_set):
            cur = self.process_queue_table.get(mq)
            if cur is not None and not cur.dropped:
                continue
            if cur is not None:  # dropped earlier but not released (orderly lock busy); ours again
                self.process_queue_table.pop(mq, None)
            if is_order and not await self.lock(mq):
                self.log.warning("rebalance_add_queue_lock_failed", mq=str(mq))
                self.instance.rebalance_later(REBALANCE_RETRY_S)  # (its last owner releases it soon)
                continue
            self.remove_dirty_offset(mq)
            pq = ProcessQueue()
            if is_order:
                pq.set_locked(True)
            try:
                next_offset = await self.compute_pull_from_where(mq)
            except (RemotingError, MQBrokerError, MQClientError) as e:
                self.log.info("rebalance_compute_offset_failed", mq=str(mq), error=str(e))
                continue
            if next_offset < 0:
                self.log.warning("rebalance_add_queue_failed", mq=str(mq))
                continue
            if mq in self.process_queue_table:
                continue
            self.process_queue_table[mq] = pq
            requests.append(PullRequest(self.consumer_group, mq, pq, next_offset))
            changed = True
            self.log.info("rebalance_add_queue", mq=str(mq), offset=next_offset)
        self.dispatch_pull_request(requests)
        return changed

    async def remove_process_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queue_table.pop(mq, None)
        if pq is not None:
            was = pq.dropped
            pq.dropped = True
            self.on_process_queue_dropped(mq, pq)
            await self.remove_unnecessary_message_queue(mq, pq)
            self.log.info("rebalance_fix_offset_remove_queue", mq=str(mq), dropped=was)

    async def stop(self) -> None:
        """No rebalance starts after this; waits for one under way (its requests have timeouts). A
        consumer shutting down calls it first, so what that rebalance locks or adds is seen by the
        shutdown's unlock and offset commit instead of outliving the consumer."""
        self._stopped = True
        async with self._lock:
            pass

    def destroy(self) -> None:
        for mq, pq in list(self.process_queue_table.items()):
            pq.dropped = True
            self.on_process_queue_dropped(mq, pq)
        self.process_queue_table.clear()

    # ------------------------------------------------------------------ hooks
    def on_process_queue_dropped(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """The queue's ProcessQueue was marked dropped (stop pulling it)."""

    async def message_queue_changed(
        self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]
    ) -> None:
        raise NotImplementedError

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        raise NotImplementedError

    def consume_type(self) -> ConsumeType:
        raise NotImplementedError

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        self.owner.offset_store.remove_offset(mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        o = self.owner
        return await compute_pull_from_where(self.instance, o.offset_store, mq, o.consume_from_where, o.consume_timestamp)

    def dispatch_pull_request(self, requests: list[PullRequest]) -> None:
        raise NotImplementedError


class RebalancePushImpl(RebalanceImpl):
    """Rebalance of a PushConsumer (`owner`)."""

    def on_process_queue_dropped(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.owner.on_process_queue_dropped(mq, pq)

    async def message_queue_changed(
        self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]
    ) -> None:
        sd = self.subscription_inner.get(topic)
        if sd is not None:
            sd.sub_version = int(time.time() * 1000)
        self.owner.adjust_thresholds_for_topic(len(self.process_queue_table))
        await self.instance.send_heartbeat_to_all_brokers()

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        store = self.owner.offset_store
        orderly = self.owner.consume_orderly and self.message_model is MessageModel.CLUSTERING
        if orderly:  # (set with pq.dropped, before any await: see ProcessQueue.releasing)
            pq.releasing = True
        await store.persist(mq)  # (otherwise pq is dropped: a listener call still running commits nothing more)
        if orderly and not await self._unlock_when_not_consuming(mq, pq):
            return False
        store.remove_offset(mq)
        return True

    async def _unlock_when_not_consuming(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Unlock a dropped orderly queue at the broker as soon as no listener call holds it, as upstream's
        client does since 5.x (4.x waited another 20 s when the queue still cached messages, so the next
        owner idled that long), with what the call in flight committed persisted first. A call that keeps
        it past UNLOCK_DELAY_TIME_MS after our last lock does not hold it any longer (nor commits). False:
        still busy; the rebalance is retried in REBALANCE_RETRY_S."""
        force = pq.dropped and now_ms() > pq.last_lock_timestamp + UNLOCK_DELAY_TIME_MS
        lock = pq.consume_lock
        if not force:
            try:
                async with asyncio.timeout(0.5):
                    await lock.acquire()
            except TimeoutError:
                pq.try_unlock_times += 1
                self.log.warning("unlock_queue_busy_consuming", mq=str(mq), try_unlock_times=pq.try_unlock_times)
                return False
        try:
            pq.releasing = False
            await self.owner.offset_store.persist(mq)  # what the call that just ended committed
            pq.set_locked(False)
            await self.unlock(mq, True)
            return True
        finally:
            if not force:
                lock.release()

    def consume_type(self) -> ConsumeType:
        return ConsumeType.CONSUME_PASSIVELY

    def dispatch_pull_request(self, requests: list[PullRequest]) -> None:
        for req in requests:
            self.owner.execute_pull_request_immediately(req)


class RebalanceLitePullImpl(RebalanceImpl):
    """Rebalance of a LitePullConsumer (`owner`) in subscribe mode."""

    def on_process_queue_dropped(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.owner.on_process_queue_dropped(mq, pq)

    async def message_queue_changed(
        self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]
    ) -> None:
        await self.instance.send_heartbeat_to_all_brokers()

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        store = self.owner.offset_store
        await store.persist(mq)
        store.remove_offset(mq)
        return True

    def consume_type(self) -> ConsumeType:
        return ConsumeType.CONSUME_ACTIVELY

    def dispatch_pull_request(self, requests: list[PullRequest]) -> None:
        for req in requests:
            self.owner.start_queue(req)
