"""MQClientInstance: the client runtime shared by every producer, consumer and admin of a process.

One instance per (NameServer set, event loop), found through `MQClientManager`. It owns:

- the RemotingClient (one connection per broker/NameServer) and its dispatcher, which serves the
  broker's calls back to us: NOTIFY_CONSUMER_IDS_CHANGED (-> rebalance now),
  CHECK_TRANSACTION_STATE (-> the producer of the message's group), RESET_CONSUMER_CLIENT_OFFSET,
  GET_CONSUMER_STATUS_FROM_CLIENT, GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY (-> the
  consumer of the group);
- the route cache (topic -> TopicRouteData / TopicPublishInfo) refreshed every
  pollNameServerInterval and on demand, and the broker address table built from it;
- the producer and consumer tables, from which heartbeats (every heartbeatBrokerInterval, and at
  once when a producer/consumer registers or a new broker appears) are built;
- background loops: route refresh, heartbeat + offline-broker cleanup, consumer offset
  persistence, and rebalance (every rebalance_interval or when woken).

Consumers plug in by implementing `MQConsumerInner` and calling `register_consumer`; producers
implement `MQProducerInner` (the transaction producer overrides `check_transaction_state`).
The instance is reference counted: `MQClientManager.acquire` / `release`, the last release shuts
it down (UNREGISTER_CLIENT to every broker, connections closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, runtime_checkable

import structlog

from remoting.body import (
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    GetConsumerStatusBody,
    HeartbeatData,
    ProducerData,
    ResetOffsetBody,
    SubscriptionData,
    TopicRouteData,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import DEFAULT_VERSION, RemotingCommand
from remoting.connection import RemotingConnection, RequestContext, RequestDispatcher
from remoting.errors import RemotingError
from remoting.headers import (
    CheckTransactionStateRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader,
    HeaderError,
    NotifyConsumerIdsChangedRequestHeader,
    ReplyMessageRequestHeader,
    ResetOffsetRequestHeader,
)
from remoting.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decode_message,
    decode_properties,
    uncompress_body,
)
from remoting.version import version_desc

from .config import ClientConfig
from .errors import MQBrokerError, MQClientError, NoNameServerError, NoRouteError, TopicNotExistError
from .message import MessageQueue
from .mq_client_api import MQClientAPIImpl, from_body_mq, to_body_mq
from .route import (
    MASTER_ID,
    TopicPublishInfo,
    limit_default_route,
    route_changed,
    topic_route_to_publish_info,
    topic_route_to_subscribe_info,
)

_get_ident = threading.get_ident
log = structlog.get_logger(__name__)

CLIENT_VERSION = version_desc(DEFAULT_VERSION)


@runtime_checkable
class MQProducerInner(Protocol):
    """What the instance needs from a producer."""

    @property
    def group(self) -> str: ...

    def check_transaction_state(
        self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> Awaitable[None] | None:
        """Called for CHECK_TRANSACTION_STATE of this group's half messages (transaction producers)."""
        ...


@runtime_checkable
class MQConsumerInner(Protocol):
    """What the instance needs from a consumer. Optional hooks are looked up with getattr:

    `update_topic_subscribe_info(topic, set[MessageQueue])`, `do_rebalance()`,
    `persist_consumer_offset()`, `reset_offset(topic, dict[MessageQueue, int])`,
    `consumer_status(topic) -> dict[MessageQueue, int]`, `consumer_running_info() -> dict` (the
    ConsumerRunningInfo fields it knows: `properties`, merged in, `mq_table`, `status_table`),
    `consume_message_directly(msg, broker_name) -> ConsumeMessageDirectlyResult`.
    Each may be a plain function or a coroutine function.
    """

    @property
    def group(self) -> str: ...

    def consumer_data(self) -> ConsumerData: ...

    def subscribed_topics(self) -> Iterable[str]: ...


def stack_dump() -> str:
    """Java's jstack for `consumerStatus -s`: every thread's stack, then every asyncio task's."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"Thread: {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame)))
    with contextlib.suppress(RuntimeError):
        for task in asyncio.all_tasks():
            stack = []  # the chain of coroutines the task awaits through, outermost first
            coro: Any = task.get_coro()
            while coro is not None and getattr(coro, "cr_frame", None) is not None:
                stack.append(coro.cr_frame)
                coro = coro.cr_await
            summary = traceback.StackSummary.extract((f, f.f_lineno) for f in stack)
            where = "".join(summary.format()) if stack else "  (no frames)\n"
            out.append(f"Task: {task.get_name()} {task.get_coro()!r}\n{where}")
    return "\n".join(out)


async def _maybe_await(v: Any) -> Any:
    if inspect.isawaitable(v):
        return await v
    return v


class MQClientInstance:
    """The shared client runtime. Create through MQClientManager, not directly (tests may)."""

    def __init__(self, config: ClientConfig, client_id: str | None = None) -> None:
        self.config = config
        self.namesrv_addrs = config.namesrv_addr_list()
        self.client_id = client_id or config.build_mq_client_id()
        self.dispatcher = RequestDispatcher()
        self.remoting = RemotingClient(
            self.dispatcher, connect_timeout_ms=config.connect_timeout, idle_poll_us=config.idle_poll_us
        )
        self.api = MQClientAPIImpl(
            self.remoting, self.namesrv_addrs, default_timeout_ms=config.mq_client_api_timeout
        )
        self.remoting.on_connect = self._heartbeat_new_connection
        self.producer_table: dict[str, list[MQProducerInner]] = {}
        self.consumer_table: dict[str, MQConsumerInner] = {}
        self.topic_route_table: dict[str, TopicRouteData] = {}
        self.publish_info_table: dict[str, TopicPublishInfo] = {}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        self.broker_version_table: dict[str, dict[str, int]] = {}
        self.rebalance_listeners: list[Callable[[], None]] = []
        # Producer.request()s waiting for their reply, by CORRELATION_ID (RocketMQ's RequestFutureHolder);
        # each leaves when answered or at its own timeout, so this holds only what is in flight.
        self.request_futures: dict[str, asyncio.Future[MessageExt]] = {}
        self.rebalance_interval_s = 20.0
        self.refcount = 0
        self.started = False
        self.start_timestamp = 0
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []
        self._bg: set[asyncio.Task[Any]] = set()
        self._route_inflight: dict[tuple[str, bool], asyncio.Future[bool]] = {}
        self._heartbeat_lock: asyncio.Lock | None = None
        self._heartbeat_pending = False
        self._rebalance_event: asyncio.Event | None = None
        self._rebalance_later: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None  # threading.get_ident() of the thread start() ran on
        self._register_processors()

    # ------------------------------------------------------------------ lifecycle
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def loop_if_current(self) -> asyncio.AbstractEventLoop | None:
        """The instance's loop when the caller runs on it (its thread, while it runs), else None. Cheaper
        than asyncio's running-loop look-up, which on CPython 3.11 makes a getpid() system call each time
        (~150 ns here), which a future made with loop= skips: a pipelined send made two."""
        loop = self._loop
        if loop is not None and self._loop_thread == _get_ident() and loop.is_running():
            return loop
        return None

    @property
    def closed(self) -> bool:
        return self._closed

    async def start(self) -> None:
        if self.started:
            return
        if self._closed:
            raise MQClientError(f"the client instance {self.client_id} was shut down")
        self._loop = asyncio.get_running_loop()
        self._loop_thread = _get_ident()
        self._heartbeat_lock = asyncio.Lock()
        self._rebalance_event = asyncio.Event()
        self.start_timestamp = int(time.time() * 1000)
        cfg = self.config
        self._tasks = [
            asyncio.create_task(
                self._every(cfg.poll_name_server_interval / 1000, self.update_all_topic_routes, initial=0.01),
                name=f"{self.client_id}-route-poll",
            ),
            asyncio.create_task(
                self._every(cfg.heartbeat_broker_interval / 1000, self._heartbeat_tick, initial=1.0),
                name=f"{self.client_id}-heartbeat",
            ),
            asyncio.create_task(
                self._every(
                    cfg.persist_consumer_offset_interval / 1000,
                    self.persist_all_consumer_offset,
                    initial=10.0,
                ),
                name=f"{self.client_id}-persist-offsets",
            ),
            asyncio.create_task(self._rebalance_loop(), name=f"{self.client_id}-rebalance"),
        ]
        self.started = True
        log.info("client_instance_started", client_id=self.client_id, namesrv=";".join(self.namesrv_addrs))

    async def shutdown(self) -> None:
        """Stop the loops, unregister every remaining group from every broker, close connections."""
        if self._closed:
            return
        self._closed = True
        if self._rebalance_later is not None:
            self._rebalance_later.cancel()
        for t in self._tasks:
            t.cancel()
        for t in list(self._bg):
            t.cancel()
        await asyncio.gather(*self._tasks, *self._bg, return_exceptions=True)
        self._tasks.clear()
        if self.started:
            groups_p = list(self.producer_table)
            groups_c = list(self.consumer_table)
            if groups_p or groups_c:
                await self._unregister_groups(groups_p, groups_c)
        await self.remoting.close()
        self.started = False
        log.info("client_instance_shutdown", client_id=self.client_id)

    async def _every(self, period_s: float, fn: Callable[[], Awaitable[Any]], *, initial: float) -> None:
        await asyncio.sleep(initial)
        while True:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a background loop must survive anything
                log.warning(
                    "scheduled_task_failed",
                    task=getattr(fn, "__name__", "?"),
                    error=f"{type(e).__name__}: {e}",
                )
            await asyncio.sleep(period_s)

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any] | None:
        if self._closed or self._loop is None:
            if inspect.iscoroutine(coro):
                coro.close()
            return None
        task = asyncio.ensure_future(coro)
        self._bg.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._bg.discard(t)
            if not t.cancelled() and t.exception() is not None:
                e = t.exception()
                log.warning("background_task_failed", task=name, error=f"{type(e).__name__}: {e}")

        task.add_done_callback(done)
        return task

    # ------------------------------------------------------------------ producer / consumer tables
    def register_producer(self, group: str, producer: MQProducerInner) -> None:
        """Several producers may share a group; the broker sees the group once per client."""
        lst = self.producer_table.setdefault(group, [])
        if producer not in lst:
            lst.append(producer)
        self.send_heartbeat_soon()

    async def unregister_producer(self, group: str, producer: MQProducerInner) -> None:
        lst = self.producer_table.get(group)
        if not lst or producer not in lst:
            return
        lst.remove(producer)
        if not lst:
            del self.producer_table[group]
            await self._unregister_groups([group], [])

    def select_producer(self, group: str) -> MQProducerInner | None:
        lst = self.producer_table.get(group)
        return lst[0] if lst else None

    def register_consumer(self, group: str, consumer: MQConsumerInner) -> None:
        """One consumer per group per client (like Java); raises MQClientError on a duplicate."""
        if group in self.consumer_table and self.consumer_table[group] is not consumer:
            raise MQClientError(
                f"the consumer group[{group}] has been created before, specify another name please."
            )
        self.consumer_table[group] = consumer
        self.send_heartbeat_soon()

    async def unregister_consumer(self, group: str) -> None:
        if self.consumer_table.pop(group, None) is not None:
            await self._unregister_groups([], [group])

    def select_consumer(self, group: str) -> MQConsumerInner | None:
        return self.consumer_table.get(group)

    async def _unregister_groups(self, producer_groups: list[str], consumer_groups: list[str]) -> None:
        addrs = {a for table in self.broker_addr_table.values() for a in table.values()}
        if not addrs:
            return
        timeout = min(self.config.mq_client_api_timeout, 3000)

        async def one(addr: str, pg: str | None, cg: str | None) -> None:
            try:
                await self.api.unregister_client(addr, self.client_id, pg, cg, timeout_ms=timeout)
                log.info(
                    "unregister_client_ok",
                    broker=addr,
                    client_id=self.client_id,
                    producer_group=pg,
                    consumer_group=cg,
                )
            except (RemotingError, MQBrokerError) as e:
                log.warning("unregister_client_failed", broker=addr, client_id=self.client_id, error=str(e))

        calls = [one(a, g, None) for a in addrs for g in producer_groups]
        calls += [one(a, None, g) for a in addrs for g in consumer_groups]
        await asyncio.gather(*calls)

    # ------------------------------------------------------------------ routes
    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        table = self.broker_addr_table.get(broker_name)
        return table.get(MASTER_ID) if table else None

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int = MASTER_ID, only_this_broker: bool = False
    ) -> tuple[str, bool] | None:
        """(address, is_slave) of broker_id, or of any broker of that name unless only_this_broker."""
        table = self.broker_addr_table.get(broker_name)
        if not table:
            return None
        addr = table.get(broker_id)
        if addr is not None:
            return addr, broker_id != MASTER_ID
        if only_this_broker:
            return None
        bid, addr = next(iter(sorted(table.items())))
        return addr, bid != MASTER_ID

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        route = self.topic_route_table.get(topic)
        if route is None or not route.broker_datas:
            return None
        return route.broker_datas[0].select_broker_addr()

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str]:
        """Client ids of the group's consumers: the union of what every broker of `topic` knows. Java's
        findConsumerIdList asks one broker, and one that has just restarted knows only the members whose
        heartbeat already reached it, so each of those took every queue and consumed the others' too
        until the rest had heartbeated. A broker that fails to answer is left out; if none answers,
        its error is raised."""
        route = self.topic_route_table.get(topic)
        if route is None or not route.broker_datas:
            with contextlib.suppress(TopicNotExistError):
                await self.update_topic_route_info_from_name_server(topic)
            route = self.topic_route_table.get(topic)
        addrs = [a for a in (bd.select_broker_addr() for bd in route.broker_datas) if a] if route else []
        if not addrs:
            return []
        timeout = self.config.mq_client_api_timeout
        answers = await asyncio.gather(
            *(self.api.get_consumer_id_list_by_group(a, group, timeout) for a in addrs), return_exceptions=True
        )
        ids: set[str] = set()
        errors = []
        for a in answers:
            if isinstance(a, BaseException):
                if not isinstance(a, Exception):
                    raise a
                errors.append(a)
            else:
                ids.update(a)
        if len(errors) == len(answers):
            raise errors[0]
        return sorted(ids)

    def find_broker_name_by_addr(self, addr: str) -> str | None:
        for name, table in self.broker_addr_table.items():
            if addr in table.values():
                return name
        return None

    def get_publish_info(self, topic: str) -> TopicPublishInfo | None:
        """The cached publish info, or None (hot path: no await)."""
        info = self.publish_info_table.get(topic)
        return info if info is not None and info.ok() else None

    async def find_topic_publish_info(
        self, topic: str, *, create_topic_key: str = "TBW102", default_topic_queue_nums: int = 4
    ) -> TopicPublishInfo:
        """tryToFindTopicPublishInfo: cache, else NameServer, else the auto-create template route.

        Raises NoRouteError when neither exists, NoNameServerError when no NameServer answers.
        """
        info = self.publish_info_table.get(topic)
        if info is not None and info.ok():
            return info
        try:
            await self.update_topic_route_info_from_name_server(topic)
        except TopicNotExistError:
            pass
        info = self.publish_info_table.get(topic)
        if info is not None and info.ok():
            return info
        if info is not None and info.have_topic_router_info:
            raise NoRouteError(topic, "the topic has no writable queue on a broker with a master")
        try:
            await self.update_topic_route_info_from_name_server(
                topic,
                is_default=True,
                create_topic_key=create_topic_key,
                default_topic_queue_nums=default_topic_queue_nums,
            )
        except TopicNotExistError as e:
            raise NoRouteError(
                topic, f"NameServer {e.addr} knows neither {topic} nor {create_topic_key}"
            ) from None
        info = self.publish_info_table.get(topic)
        if info is not None and info.ok():
            return info
        raise NoRouteError(topic, "no writable queue on a broker with a master")

    async def update_topic_route_info_from_name_server(
        self,
        topic: str,
        *,
        is_default: bool = False,
        create_topic_key: str = "TBW102",
        default_topic_queue_nums: int = 4,
    ) -> bool:
        """Fetch a topic's route; concurrent calls for one topic share one request. True if it changed."""
        key = (topic, is_default)
        fut = self._route_inflight.get(key)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        self._route_inflight[key] = fut
        try:
            changed = await self._update_route(topic, is_default, create_topic_key, default_topic_queue_nums)
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: waiters may be absent
            raise
        finally:
            self._route_inflight.pop(key, None)
        fut.set_result(changed)
        return changed

    async def _update_route(
        self, topic: str, is_default: bool, create_topic_key: str, default_topic_queue_nums: int
    ) -> bool:
        timeout = self.config.mq_client_api_timeout
        if is_default:
            route = await self.api.get_topic_route_info_from_name_server(create_topic_key, timeout)
            route = limit_default_route(route, default_topic_queue_nums)
        else:
            route = await self.api.get_topic_route_info_from_name_server(topic, timeout)
        old = self.topic_route_table.get(topic)
        changed = route_changed(old, route)
        if not changed:
            info = self.publish_info_table.get(topic)
            changed = info is None or not info.ok()
            if not changed:
                for c in self.consumer_table.values():
                    need = getattr(c, "is_subscribe_topic_need_update", None)
                    if need is not None and need(topic):
                        changed = True
                        break
        if not changed:
            return False
        new_brokers = False
        for bd in route.broker_datas:
            prev = self.broker_addr_table.get(bd.broker_name)
            addrs = dict(bd.broker_addrs)
            if prev != addrs:
                if prev is None or set(addrs.values()) - set(prev.values()):
                    new_brokers = True
                self.broker_addr_table[bd.broker_name] = addrs
        info = topic_route_to_publish_info(topic, route)
        info.have_topic_router_info = not is_default
        self.publish_info_table[topic] = info
        if self.consumer_table:
            sub = topic_route_to_subscribe_info(topic, route)
            for c in list(self.consumer_table.values()):
                fn = getattr(c, "update_topic_subscribe_info", None)
                if fn is not None and topic in set(c.subscribed_topics()):
                    try:
                        await _maybe_await(fn(topic, sub))
                    except Exception as e:
                        log.warning("update_subscribe_info_failed", topic=topic, group=c.group, error=str(e))
        self.topic_route_table[topic] = route
        log.info(
            "topic_route_updated",
            topic=topic,
            default_route=is_default,
            brokers=[bd.broker_name for bd in route.broker_datas],
            queues=len(info.message_queues),
        )
        if new_brokers:
            self.send_heartbeat_soon()
        return True

    async def update_all_topic_routes(self) -> None:
        """The periodic refresh: every topic a producer sent to or a consumer subscribes."""
        topics = set(self.publish_info_table)
        for c in list(self.consumer_table.values()):
            topics.update(c.subscribed_topics())
        for topic in sorted(topics):
            try:
                await self.update_topic_route_info_from_name_server(topic)
            except TopicNotExistError:
                log.debug("route_refresh_topic_not_exist", topic=topic)
            except NoNameServerError as e:
                log.warning("route_refresh_failed", topic=topic, error=str(e))
                return  # no point asking about the other topics now
            except (RemotingError, MQBrokerError, ValueError) as e:
                log.warning("route_refresh_failed", topic=topic, error=str(e))

    def clean_offline_broker(self) -> None:
        """Forget broker addresses that no cached route mentions any more."""
        live = {
            (bd.broker_name, addr)
            for r in self.topic_route_table.values()
            for bd in r.broker_datas
            for addr in bd.broker_addrs.values()
        }
        for name in list(self.broker_addr_table):
            table = self.broker_addr_table[name]
            kept = {bid: a for bid, a in table.items() if (name, a) in live}
            if not kept:
                del self.broker_addr_table[name]
                log.info("broker_removed_offline", broker=name)
            elif kept != table:
                self.broker_addr_table[name] = kept

    # ------------------------------------------------------------------ heartbeat
    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(group_name=g) for g in self.producer_table],
            consumer_data_set=[c.consumer_data() for c in self.consumer_table.values()],
        )

    def send_heartbeat_soon(self) -> None:
        """Heartbeat to every known broker without waiting (coalesced)."""
        if self._heartbeat_pending or not self.started:
            return
        self._heartbeat_pending = True

        async def run() -> None:
            await asyncio.sleep(0)
            self._heartbeat_pending = False
            await self.send_heartbeat_to_all_brokers()

        if self._spawn(run(), "heartbeat") is None:
            self._heartbeat_pending = False

    async def _heartbeat_new_connection(self, addr: str, conn: RemotingConnection) -> None:
        """Heartbeat on a new connection to a broker before any other request uses it (the remoting
        client's on_connect), so the broker's answer, which says what header formats it reads, decides the
        format of the first requests too. Before, they went out as JSON until a heartbeat answer came
        back: the whole first burst of a producer that starts and sends at once; every request for up to
        heartbeat_broker_interval after a reconnect, as the format is forgotten with the connection
        (pipelined sends then cost the client 12.6-13.2 us each against 8.8-9.4 in MSGPACK); and always for a
        client with no group (a QueueReader, Admin), which never heartbeats: its heartbeat here names no
        group and registers nothing. Bounded by the API timeout; a failure leaves the connection in JSON
        (until the next heartbeat, for a client with groups)."""
        if not self.started:
            return
        if addr in self.api.namesrv_addrs:
            return  # NameServers read JSON (and take no heartbeat); everything else a client dials is a broker
        try:
            version = await self.api.send_heartbeat(addr, self.heartbeat_data(), self.config.mq_client_api_timeout, conn)
        except (RemotingError, MQBrokerError) as e:
            log.warning("heartbeat_on_connect_failed", addr=addr, error=str(e))
            return
        for name, table in self.broker_addr_table.items():
            if addr in table.values():
                self.broker_version_table.setdefault(name, {})[addr] = version

    async def _heartbeat_tick(self) -> None:
        self.clean_offline_broker()
        await self.send_heartbeat_to_all_brokers()

    async def check_client_in_broker(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """CHECK_CLIENT_CONFIG for each non-TAG (SQL92) subscription with every master of its topic, as
        RocketMQ's consumers do when they start: MQClientError when a broker refuses it (the
        expression does not compile, or the broker runs without enablePropertyFilter). A broker that
        cannot be reached is skipped (logged): its answer comes with the first pull."""
        timeout = self.config.mq_client_api_timeout
        for sd in list(subscriptions):
            if sd.expression_type in ("", "TAG"):
                continue
            route = self.topic_route_table.get(sd.topic)
            for bd in route.broker_datas if route else ():
                addr = bd.broker_addrs.get(MASTER_ID)
                if not addr:
                    continue
                try:
                    await self.api.check_client_in_broker(addr, group, self.client_id, sd, timeout)
                except MQBrokerError as e:
                    raise MQClientError(
                        f"broker {bd.broker_name} ({addr}) refuses the {sd.expression_type} subscription "
                        f"{sd.sub_string!r} of group {group} to topic {sd.topic}: {e}"
                    ) from e
                except RemotingError as e:
                    log.warning("check_client_in_broker_failed", broker=bd.broker_name, addr=addr, group=group,
                                topic=sd.topic, error=str(e))

    async def check_subscription_soft(self, group: str, sd: SubscriptionData | None) -> None:
        """check_client_in_broker for a subscription made while running: a refusal is logged (the
        consumer keeps its other subscriptions; the pulls of this one get the broker's error)."""
        if sd is None:
            return
        try:
            await self.check_client_in_broker(group, (sd,))
        except MQClientError as e:
            log.error("subscription_refused", group=group, topic=sd.topic, error=str(e))

    async def send_heartbeat_to_all_brokers(self) -> int:
        """Returns how many brokers took the heartbeat."""
        if not self.producer_table and not self.consumer_table:
            return 0
        assert self._heartbeat_lock is not None
        async with self._heartbeat_lock:
            hb = self.heartbeat_data()
            consumers = bool(hb.consumer_data_set)
            targets = [
                (name, bid, addr)
                for name, table in list(self.broker_addr_table.items())
                for bid, addr in table.items()
                if consumers or bid == MASTER_ID
            ]
            if not targets:
                return 0
            timeout = self.config.mq_client_api_timeout

            async def one(name: str, addr: str) -> bool:
                try:
                    version = await self.api.send_heartbeat(addr, hb, timeout)
                except (RemotingError, MQBrokerError) as e:
                    log.warning("heartbeat_failed", broker=name, addr=addr, error=str(e))
                    return False
                self.broker_version_table.setdefault(name, {})[addr] = version
                return True

            results = await asyncio.gather(*(one(n, a) for n, _b, a in targets))
            return sum(results)

    # ------------------------------------------------------------------ consumers: rebalance and offsets
    def rebalance_immediately(self) -> None:
        """Wake the rebalance loop (NOTIFY_CONSUMER_IDS_CHANGED does this) and tell the listeners."""
        if self._rebalance_event is not None:
            self._rebalance_event.set()
        for cb in list(self.rebalance_listeners):
            try:
                cb()
            except Exception as e:
                log.warning("rebalance_listener_failed", error=str(e))

    def rebalance_later(self, delay_s: float) -> None:
        """Wake the rebalance loop in delay_s (one wake-up pending at a time): a rebalance that could
        not lock or release every queue it should tries again soon, as upstream's client does, not
        at the next periodic round."""
        ev = self._rebalance_event
        if ev is None or self._closed or self._rebalance_later is not None:
            return

        def wake() -> None:
            self._rebalance_later = None
            ev.set()

        self._rebalance_later = asyncio.get_running_loop().call_later(delay_s, wake)

    async def do_rebalance(self) -> None:
        for c in list(self.consumer_table.values()):
            fn = getattr(c, "do_rebalance", None)
            if fn is None:
                continue
            try:
                await _maybe_await(fn())
            except Exception as e:
                log.warning("rebalance_failed", group=c.group, error=f"{type(e).__name__}: {e}")

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_event is not None
        ev = self._rebalance_event
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands in the
            # same loop turn as the event being set, and shutdown() would then wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.rebalance_interval_s):
                    await ev.wait()
            ev.clear()
            if self.consumer_table:
                await self.do_rebalance()

    async def persist_all_consumer_offset(self) -> None:
        for c in list(self.consumer_table.values()):
            fn = getattr(c, "persist_consumer_offset", None)
            if fn is None:
                continue
            try:
                await _maybe_await(fn())
            except Exception as e:
                log.warning("persist_offset_failed", group=c.group, error=f"{type(e).__name__}: {e}")

    # ------------------------------------------------------------------ server -> client requests
    def _register_processors(self) -> None:
        d = self.dispatcher
        d.add_group("client", concurrency=16, max_pending=1000)
        d.register(RequestCode.CHECK_TRANSACTION_STATE, self._check_transaction_state, group="client")
        d.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._notify_consumer_ids_changed, group="client")
        d.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._reset_offset, group="client")
        d.register(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, self._get_consumer_status, group="client")
        d.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._get_consumer_running_info, group="client")
        d.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._consume_message_directly, group="client")
        d.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, self._receive_reply_message, group="client")

    async def _check_transaction_state(self, ctx: RequestContext, cmd: RemotingCommand) -> None:
        try:
            header = CheckTransactionStateRequestHeader.decode(cmd.ext_fields)
            msg, _ = decode_message(cmd.body_bytes(), decompress_body=True)
        except (HeaderError, ValueError) as e:
            log.warning("check_transaction_state_bad_request", broker=ctx.remote_addr, error=str(e))
            return None
        group = msg.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP)
        producer = self.select_producer(group) if group else None
        if producer is None:
            log.debug("check_transaction_state_no_producer", group=group, broker=ctx.remote_addr)
            return None
        try:
            await _maybe_await(producer.check_transaction_state(ctx.remote_addr, msg, header))
        except Exception as e:
            log.warning("check_transaction_state_failed", group=group, error=f"{type(e).__name__}: {e}")
        return None

    def _notify_consumer_ids_changed(self, ctx: RequestContext, cmd: RemotingCommand) -> None:
        try:
            group = NotifyConsumerIdsChangedRequestHeader.decode(cmd.ext_fields).consumer_group
        except HeaderError:
            group = None
        log.info("consumer_ids_changed", broker=ctx.remote_addr, group=group)
        self.rebalance_immediately()
        return None

    async def _reset_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            header = ResetOffsetRequestHeader.decode(cmd.ext_fields)
            table = (
                {from_body_mq(mq): int(v) for mq, v in ResetOffsetBody.decode(cmd.body).offset_table.items()}
                if cmd.body
                else {}
            )
        except (HeaderError, ValueError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad reset offset request: {e}")
        log.info(
            "reset_offset_requested",
            broker=ctx.remote_addr,
            topic=header.topic,
            group=header.group,
            queues=len(table),
        )
        consumer = self.select_consumer(header.group)
        fn = getattr(consumer, "reset_offset", None) if consumer is not None else None
        if fn is not None:
            await _maybe_await(fn(header.topic, table))
        return cmd.response()

    async def _get_consumer_status(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_STATUS_FROM_CLIENT (a broker relaying `mqadmin getConsumerStatus`): the group's
        offsets of the topic as this client holds them; an empty table for a group it does not run."""
        try:
            header = GetConsumerStatusRequestHeader.decode(cmd.ext_fields)
        except HeaderError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        consumer = self.select_consumer(header.group)
        fn = getattr(consumer, "consumer_status", None) if consumer is not None else None
        table: dict[MessageQueue, int] = {}
        if fn is not None:
            table = dict(await _maybe_await(fn(header.topic)))
        body = GetConsumerStatusBody(message_queue_table={to_body_mq(mq): int(off) for mq, off in table.items()})
        return cmd.response(body=body.encode())

    async def _get_consumer_running_info(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            header = GetConsumerRunningInfoRequestHeader.decode(cmd.ext_fields)
        except HeaderError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        consumer = self.select_consumer(header.consumer_group)
        if consumer is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{header.consumer_group}> not exist in this consumer",
            )
        info = self.consumer_running_info(consumer)
        fn = getattr(consumer, "consumer_running_info", None)
        if fn is not None:
            extra = await _maybe_await(fn())
            for k, v in dict(extra or {}).items():
                if k == "properties" and isinstance(v, dict):
                    info.properties.update({str(a): str(b) for a, b in v.items()})
                else:
                    setattr(info, k, v)
        if header.jstack_enable:
            info.jstack = stack_dump()
        return cmd.response(body=info.encode())

    def consumer_running_info(self, consumer: MQConsumerInner) -> ConsumerRunningInfo:
        """The default ConsumerRunningInfo: properties and subscriptions (Java's field names)."""
        data = consumer.consumer_data()
        return ConsumerRunningInfo(
            properties={
                "PROP_NAMESERVER_ADDR": ";".join(self.namesrv_addrs),
                "PROP_CONSUME_TYPE": data.consume_type,
                # ConsumerRunningInfo.PROP_CONSUME_ORDERLY's value, as RocketMQ spells it
                "PROP_CONSUMEORDERLY": str(bool(getattr(consumer, "consume_orderly", False))).lower(),
                "PROP_THREADPOOL_CORE_SIZE": str(getattr(consumer, "consume_thread_max", 1)),
                "PROP_CLIENT_VERSION": CLIENT_VERSION,
                "PROP_CONSUMER_START_TIMESTAMP": str(self.start_timestamp),
                "PROP_CLIENT_ID": self.client_id,
                "PROP_LANGUAGE": "PYTHON",
            },
            subscription_set=list(data.subscription_data_set),
        )

    async def _consume_message_directly(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        group = str(ext.get("consumerGroup", ""))
        broker_name = ext.get("brokerName")
        consumer = self.select_consumer(group)
        fn = getattr(consumer, "consume_message_directly", None) if consumer is not None else None
        if fn is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer"
            )
        try:
            msg, _ = decode_message(cmd.body_bytes(), decompress_body=True)
        except ValueError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad message: {e}")
        result = await _maybe_await(fn(msg, None if broker_name is None else str(broker_name)))
        if isinstance(result, ConsumeMessageDirectlyResult):
            return cmd.response(body=result.encode())
        return cmd.response(body=json.dumps(result, default=str).encode())


    def _receive_reply_message(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: a reply to one of this client's Producer.request()s (matched by
        CORRELATION_ID; a reply nobody waits for any more, its request timed out, is logged and dropped)."""
        try:
            h = ReplyMessageRequestHeader.decode(cmd.ext_fields)
        except HeaderError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad reply message: {e}")
        body = cmd.body_bytes()
        if h.sys_flag & MessageSysFlag.COMPRESSED_FLAG:
            try:
                body = uncompress_body(body, h.sys_flag)
            except ValueError as e:
                log.warning("reply_body_not_decompressed", broker=ctx.remote_addr, error=str(e))
        props = decode_properties(h.properties)
        props[MessageConst.PROPERTY_REPLY_MESSAGE_ARRIVE_TIME] = str(int(time.time() * 1000))
        msg = MessageExt(
            topic=h.topic, body=body, flag=h.flag, properties=props, queue_id=h.queue_id, sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp, born_host=_host_port(h.born_host), store_timestamp=h.store_timestamp,
            store_host=_host_port(h.store_host), reconsume_times=h.reconsume_times or 0,
        )
        correlation_id = props.get(MessageConst.PROPERTY_CORRELATION_ID)
        fut = self.request_futures.pop(correlation_id, None) if correlation_id else None
        if fut is None:
            log.warning("reply_not_matched", correlation_id=correlation_id, broker=ctx.remote_addr, born=h.born_host)
        elif not fut.done():
            fut.set_result(msg)
        return cmd.response()


def _host_port(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return s, 0


class MQClientManager:
    """The process-wide registry: one MQClientInstance per client id and event loop, reference counted."""

    def __init__(self) -> None:
        self._instances: dict[tuple[str, asyncio.AbstractEventLoop], MQClientInstance] = {}

    def _prune(self) -> None:
        for key, inst in list(self._instances.items()):
            if inst.closed or key[1].is_closed():
                del self._instances[key]

    async def acquire(self, config: ClientConfig) -> MQClientInstance:
        """The shared instance for this config on the running loop (started), with its refcount raised."""
        loop = asyncio.get_running_loop()
        self._prune()
        base_id = config.build_mq_client_id()
        key = (base_id, loop)
        inst = self._instances.get(key)
        if inst is None:
            # Another loop of this process may own base_id already: the broker must see distinct ids.
            taken = {i.client_id for i in self._instances.values()}
            cid, n = base_id, 1
            while cid in taken:
                n += 1
                cid = f"{base_id}-{n}"
            inst = MQClientInstance(config, cid)
            self._instances[key] = inst
        inst.refcount += 1
        try:
            await inst.start()
        except BaseException:
            inst.refcount -= 1
            raise
        return inst

    async def release(self, inst: MQClientInstance) -> None:
        inst.refcount -= 1
        if inst.refcount > 0:
            return
        for key, v in list(self._instances.items()):
            if v is inst:
                del self._instances[key]
        await inst.shutdown()

    def instances(self) -> list[MQClientInstance]:
        self._prune()
        return list(self._instances.values())


_manager = MQClientManager()


def get_client_manager() -> MQClientManager:
    return _manager
