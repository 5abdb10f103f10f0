"""BrokerController: builds the broker's parts, wires them together, and runs start()/stop().

Start: check the store path, load topics/groups/offsets, start the message store, listen, register
with every NameServer, then log `broker_listening addr=<ip:port>` and run the periodic jobs
(re-register every registerNameServerPeriod and at once when topics change, persist offsets every
flushConsumerOffsetInterval, expire silent clients, re-check held pulls).
Stop: unregister from every NameServer, stop listening, persist offsets, topics and groups, shut
the store down (flush).

Extension points for features built on the core (broker/schedule, broker/transaction, ...):
- `send_message_processor.add_message_transformer(fn)`: rewrite or refuse a message before it is
  stored (DELAY -> SCHEDULE_TOPIC_XXXX, PREPARED -> RMQ_SYS_TRANS_HALF_TOPIC);
- `register_processor(codes, processor, group=...)`: new request codes (END_TRANSACTION in the
  "end_transaction" group);
- `admin_broker_processor.register_handler(code, fn)`: new admin codes;
- `delay_offset_provider`: the text GET_ALL_DELAY_OFFSET answers (delayOffset.json);
- `message_store` (pass one built with a `tags_code_hook` to the constructor), `producer_manager`
  (`get_available_channel(group)` for transaction checks), `broker2client.call_client`, `spawn`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import socket
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from broker.client.broker2client import Broker2Client
from broker.client.client_housekeeping_service import ClientHousekeepingService
from broker.client.consumer_manager import ConsumerGroupEvent, ConsumerManager
from broker.client.producer_manager import ProducerManager
from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.config import BrokerConfig, format_value
from broker.config_manager import atomic_write_text
from broker.filter import ConsumerFilterManager
from broker.longpolling.pull_request_hold_service import PullRequestHoldService
from broker.offset.consumer_offset_manager import ConsumerOffsetManager
from broker.out.broker_outer_api import BrokerOuterAPI
from broker.processor.admin_broker_processor import AdminBrokerProcessor
from broker.processor.client_manage_processor import ClientManageProcessor
from broker.processor.consumer_manage_processor import ConsumerManageProcessor
from broker.processor.pull_message_processor import PullMessageProcessor
from broker.processor.query_message_processor import QueryMessageProcessor
from broker.processor.reply_message_processor import REPLY_CODES, ReplyMessageProcessor
from broker.processor.send_message_processor import SendMessageProcessor
from broker.schedule import ScheduleMessageService
from broker.stats import BrokerStatsManager
from broker.subscription.subscription_group_manager import SubscriptionGroupManager
from broker.topic.topic_config_manager import TopicConfigManager
from broker.transaction import (
    EndTransactionProcessor,
    TransactionalMessageCheckService,
    TransactionalMessageService,
)
from remoting.body import DataVersion
from remoting.codes import RequestCode
from remoting.connection import Processor, RequestDispatcher
from remoting.message import MessageConst, PermName
from remoting.properties import ConfigError, parse_properties
from remoting.server import RemotingServer
from store.config import MessageStoreConfig
from store.message_store import DefaultMessageStore

log = structlog.get_logger(__name__)

SEND_CODES = (
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.CONSUMER_SEND_MSG_BACK,
)
QUERY_CODES = (RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID)
CLIENT_MANAGE_CODES = (RequestCode.UNREGISTER_CLIENT, RequestCode.CHECK_CLIENT_CONFIG)
CONSUMER_MANAGE_CODES = (
    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
    RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.QUERY_CONSUMER_OFFSET,
)


def _prove_writable_dir(key: str, path: str) -> None:
    """Blocking: create directory `path` (and its parents) and write a file in it; ConfigError names `key`."""
    try:
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"{key} {path!r} is not writable: {e.strerror or e}") from None


def check_store_path_writable(store: MessageStoreConfig) -> None:
    """Blocking: create the store root and its config dir, and every store path set on its own
    (storePathCommitLog, storePathConsumeQueue, storePathIndex; the directories of storeCheckpoint and
    abortFile), and prove each writable: a bad one exits at start naming its key, not on first use."""
    _prove_writable_dir("storePathRootDir", os.path.join(store.storePathRootDir, "config"))
    for key in ("storePathCommitLog", "storePathConsumeQueue", "storePathIndex"):
        path = getattr(store, key)
        if path:
            _prove_writable_dir(key, path)
    for key in ("storeCheckpoint", "abortFile"):
        path = getattr(store, key)
        if path:
            if os.path.isdir(path):
                raise ConfigError(f"{key} {path!r} is a directory, not a file")
            _prove_writable_dir(key, os.path.dirname(os.path.abspath(path)))


def probe_listen_port(host: str, port: int) -> None:
    """Blocking: fail early (before the store starts) when the listen port is taken."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ConfigError(f"listenPort {port}: cannot listen on {host}: {e.strerror or e}") from None


def update_properties_file(path: Path, changes: Mapping[str, Any]) -> None:
    """Blocking: rewrite the `key=value` lines of changed keys in a properties file (append new keys)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    todo = {k: format_value(v) for k, v in changes.items()}
    out = []
    for line in lines:
        stripped = line.strip()
        if stripped and stripped[0] not in "#!":
            key = next(iter(parse_properties(stripped)), None)
            if key in todo:
                out.append(f"{key}={todo.pop(key)}")
                continue
        out.append(line)
    out.extend(f"{k}={v}" for k, v in todo.items())
    atomic_write_text(path, "\n".join(out) + "\n")


class BrokerController:
    def __init__(
        self,
        broker_config: BrokerConfig,
        *,
        config_file: str | Path | None = None,
        message_store: DefaultMessageStore | None = None,
    ) -> None:
        self.broker_config = broker_config
        self.store_config = broker_config.store_config
        self.config_file = Path(config_file) if config_file else None
        self.config_data_version = DataVersion()
        self.boot_timestamp = time.time()

        bc = broker_config
        self.topic_config_manager = TopicConfigManager(bc)
        self.subscription_group_manager = SubscriptionGroupManager(bc)
        self.consumer_offset_manager = ConsumerOffsetManager(bc)
        self.broker_stats = BrokerStatsManager()
        self.broker_stats.cluster_name = broker_config.brokerClusterName
        self.consumer_filter_manager = ConsumerFilterManager(bc.filterDataCleanTimeSpan)
        self.consumer_manager = ConsumerManager(self._on_consumer_group_event, bc.channelExpiredTimeout)
        self.producer_manager = ProducerManager(bc.channelExpiredTimeout)
        self.rebalance_lock_manager = RebalanceLockManager()
        self.broker2client = Broker2Client(self)
        self.client_housekeeping_service = ClientHousekeepingService(self)
        self.broker_outer_api = BrokerOuterAPI(bc.namesrvAddr)
        self.message_store = message_store if message_store is not None else DefaultMessageStore(self.store_config)
        # Features (schedule) may replace this with a function returning delayOffset.json text.
        self.delay_offset_provider: Callable[[], str] | None = None

        self.store_host: tuple[str, int] = (bc.brokerIP1, bc.listenPort)
        self.dispatcher = RequestDispatcher()
        self.send_message_processor = SendMessageProcessor(self)
        self.reply_message_processor = ReplyMessageProcessor(self, self.send_message_processor)
        # Delayed messages: DELAY -> SCHEDULE_TOPIC_XXXX on send, re-put to the real topic when due.
        self.schedule_message_service = ScheduleMessageService(
            self.message_store, self.store_config,
            on_delivered=lambda m, r: self.broker_stats.inc_put(m.topic, 1, r.append_result.wrote_bytes),
        )
        self.schedule_message_service.install_tags_code_hook(self.message_store)
        self.send_message_processor.add_message_transformer(
            self.schedule_message_service.transform, triggers=(MessageConst.PROPERTY_DELAY_TIME_LEVEL,)
        )
        self.delay_offset_provider = self.schedule_message_service.encode
        self.pull_message_processor = PullMessageProcessor(self)
        self.query_message_processor = QueryMessageProcessor(self)
        self.client_manage_processor = ClientManageProcessor(self)
        self.consumer_manage_processor = ConsumerManageProcessor(self)
        self.admin_broker_processor = AdminBrokerProcessor(self)
        self.pull_request_hold_service = PullRequestHoldService(
            self.pull_message_processor.execute_request_when_wakeup,
            self.message_store.get_max_offset_in_queue,
            long_polling_enable=lambda: self.broker_config.longPollingEnable,
            short_polling_time_mills=lambda: self.broker_config.shortPollingTimeMills,
            max_held=bc.maxHeldPullRequests,
            on_first_held=self.message_store.arrival_interest_changed,
        )
        self.remoting_server = RemotingServer(
            self.dispatcher,
            host=bc.bind_host,
            port=bc.listenPort,
            idle_timeout_s=bc.serverChannelMaxIdleTimeSeconds,
            name="broker",
            idle_poll_us=bc.serverIdlePollMicros,
        )
        # RocketMQ's "VIP channel" (fastRemotingServer): the same requests on listenPort - 2, where Java
        # clients 4.0-4.5.0 send everything but pulls by default (vipChannelEnabled=true). Its port is known
        # once the main one is (listenPort=0 picks one); see _start_vip_channel.
        self.fast_remoting_server: RemotingServer | None = None
        self._register_processors()
        # Transactional messages: PREPARED -> RMQ_SYS_TRANS_HALF_TOPIC on send, END_TRANSACTION, check-back.
        self.transactional_message_service = TransactionalMessageService(self)
        self.transactional_message_check_service = TransactionalMessageCheckService(
            self, self.transactional_message_service
        )
        self.end_transaction_processor = EndTransactionProcessor(self, self.transactional_message_service)
        self.send_message_processor.add_message_transformer(
            self.transactional_message_service.prepare_message,
            triggers=(MessageConst.PROPERTY_TRANSACTION_PREPARED,),
        )
        self.register_processor(
            RequestCode.END_TRANSACTION, self.end_transaction_processor.process_request, group="end_transaction"
        )

        self._tasks: set[asyncio.Task[Any]] = set()
        self._periodic: list[asyncio.Task[Any]] = []
        self._register_wakeup: asyncio.Event | None = None
        # Registration rounds started / finished, so an admin answer can wait for one that began
        # after its change (see register_and_wait).
        self._register_rounds_started = 0
        self._register_rounds_done = 0
        self._register_done: asyncio.Condition | None = None
        self._loaded = False
        self._started = False
        self._stopping = False
        self.listen_addr = ""

    # ------------------------------------------------------------------ wiring

    def _register_processors(self) -> None:
        bc = self.broker_config
        d = self.dispatcher
        d.add_group("send", concurrency=bc.sendMessageThreadPoolNums, max_pending=bc.sendThreadPoolQueueCapacity)
        d.add_group("pull", concurrency=bc.pullMessageThreadPoolNums, max_pending=bc.pullThreadPoolQueueCapacity)
        d.add_group("query", concurrency=bc.queryMessageThreadPoolNums, max_pending=bc.queryThreadPoolQueueCapacity)
        d.add_group("admin", concurrency=bc.adminBrokerThreadPoolNums, max_pending=10000)
        d.add_group("client_manage", concurrency=bc.clientManageThreadPoolNums,
                    max_pending=min(bc.clientManagerThreadPoolQueueCapacity, 100000))
        d.add_group("consumer_manage", concurrency=bc.consumerManageThreadPoolNums,
                    max_pending=min(bc.consumerManagerThreadPoolQueueCapacity, 100000))
        d.add_group("heartbeat", concurrency=bc.heartbeatThreadPoolNums, max_pending=bc.heartbeatThreadPoolQueueCapacity)
        d.add_group("reply", concurrency=bc.processReplyMessageThreadPoolNums,
                    max_pending=bc.replyThreadPoolQueueCapacity)
        d.add_group("end_transaction", concurrency=bc.endTransactionThreadPoolNums,
                    max_pending=bc.endTransactionPoolQueueCapacity)
        d.register(SEND_CODES, self.send_message_processor.process_request, group="send")
        d.register(REPLY_CODES, self.reply_message_processor.process_request, group="reply")
        d.register(RequestCode.PULL_MESSAGE, self.pull_message_processor.process_request, group="pull")
        d.register(QUERY_CODES, self.query_message_processor.process_request, group="query")
        d.register(RequestCode.HEART_BEAT, self.client_manage_processor.process_request, group="heartbeat")
        d.register(CLIENT_MANAGE_CODES, self.client_manage_processor.process_request, group="client_manage")
        d.register(CONSUMER_MANAGE_CODES, self.consumer_manage_processor.process_request, group="consumer_manage")
        d.register(self.admin_broker_processor.codes, self.admin_broker_processor.process_request, group="admin")
        d.register_default(self.admin_broker_processor.process_request, group="admin")
        self.send_message_processor.queue_size = lambda: self.pending_in_group("send")
        self.remoting_server.add_close_listener(self.client_housekeeping_service.on_channel_close)
        self.topic_config_manager.add_change_listener(self._on_topic_changed)

    def register_processor(self, codes: int | Iterable[int], processor: Processor, *, group: str = "admin") -> None:
        """For features (transactions, ...): route request codes to a processor within a group."""
        self.dispatcher.register(codes, processor, group=group)

    async def _start_vip_channel(self, port: int) -> None:
        """Listen on the VIP port too, sharing the dispatcher. Unlike RocketMQ, whose broker fails to start
        when it cannot bind it, a taken port only costs the old clients that use it (logged): the main port,
        which every client of 4.5.1+ uses, matters more than refusing to start."""
        if port <= 0:
            return
        bc = self.broker_config
        server = RemotingServer(
            self.dispatcher,
            host=bc.bind_host,
            port=port,
            idle_timeout_s=bc.serverChannelMaxIdleTimeSeconds,
            name="broker-vip",
            idle_poll_us=bc.serverIdlePollMicros,
        )
        server.add_close_listener(self.client_housekeeping_service.on_channel_close)
        try:
            await server.start()
        except OSError as e:
            log.warning("vip_channel_not_listening", port=port, listen_port=bc.listenPort, error=e.strerror or str(e),
                        hint="Java clients before 4.5.1 send on listenPort - 2 unless vipChannelEnabled=false")
            return
        self.fast_remoting_server = server

    def pending_in_group(self, name: str) -> int:
        try:
            return len(self.dispatcher.group(name).pending)
        except KeyError:
            return 0

    def head_wait_in_group(self, name: str) -> int:
        """Milliseconds the oldest request waiting in a family has waited (0 when none waits)."""
        try:
            return self.dispatcher.group(name).head_wait_ms(time.monotonic())
        except KeyError:
            return 0

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]:
        """Run a background job whose failure is logged, and which stop() waits for."""
        task = asyncio.get_running_loop().create_task(coro)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("background_job_failed", job=what, error=repr(t.exception()))

        self._tasks.add(task)
        task.add_done_callback(done)
        return task

    # ------------------------------------------------------------------ events

    def _on_consumer_group_event(self, event: ConsumerGroupEvent, group: str, arg: object) -> None:
        if event is ConsumerGroupEvent.CHANGE and self.broker_config.notifyConsumerIdsChangedEnable:
            for conn in arg or ():  # type: ignore[attr-defined]
                self.broker2client.notify_consumer_ids_changed(conn, group)
        elif event is ConsumerGroupEvent.REGISTER:
            self.consumer_filter_manager.register(group, arg)  # type: ignore[arg-type]
        elif event is ConsumerGroupEvent.UNREGISTER:
            self.consumer_filter_manager.unregister(group)

    def _on_topic_changed(self, topic: str) -> None:
        self.request_register()

    def request_register(self) -> None:
        """Re-register with the NameServers soon (coalesced), e.g. after a topic change."""
        if self._register_wakeup is not None:
            self._register_wakeup.set()

    async def register_and_wait(self) -> None:
        """Ask for a registration and wait, at most registerBrokerTimeoutMills, for one that started
        after this call to finish. Java's updateAndCreateTopic registers before it answers, so a
        client that creates a topic and then asks the NameServer for its route finds it."""
        if self._register_wakeup is None or self._register_done is None:
            return
        if not self.broker_outer_api.namesrv_addr_list:
            return
        want = self._register_rounds_started + 1
        self._register_wakeup.set()
        done = self._register_done
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.broker_config.registerBrokerTimeoutMills / 1000.0), done:
                await done.wait_for(lambda: self._register_rounds_done >= want)

    # ------------------------------------------------------------------ name server

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_config.brokerIP1}:{self.broker_config.listenPort}"

    async def register_broker_all(self) -> int:
        bc = self.broker_config
        perm_override = None
        if not (PermName.is_writeable(bc.brokerPermission) and PermName.is_readable(bc.brokerPermission)):
            perm_override = bc.brokerPermission
        wrapper = self.topic_config_manager.build_serialize_wrapper(perm_override)
        results = await self.broker_outer_api.register_broker_all(
            bc.brokerClusterName,
            self.broker_addr,
            bc.brokerName,
            bc.brokerId,
            bc.ha_server_addr,
            wrapper,
            [],
            oneway=False,
            timeout_ms=bc.registerBrokerTimeoutMills,
            compressed=bc.compressedRegister,
        )
        return len(results)

    async def _register_loop(self, all_ok: bool) -> None:
        """Re-register every period, at once when asked, and sooner (backing off) after a failure."""
        assert self._register_wakeup is not None
        retry_s = 1.0
        while True:
            period_s = self.broker_config.registerNameServerPeriod / 1000.0
            wait_s = period_s if all_ok else min(retry_s, period_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._register_wakeup.wait(), wait_s)
            self._register_wakeup.clear()
            self._register_rounds_started += 1
            round_no = self._register_rounds_started
            try:
                ok = await self.register_broker_all()
            except Exception:
                log.exception("register_broker_all_failed")
                ok = 0
            self._register_rounds_done = round_no
            if self._register_done is not None:
                async with self._register_done:
                    self._register_done.notify_all()
            all_ok = ok >= len(self.broker_outer_api.namesrv_addr_list)
            retry_s = 1.0 if all_ok else min(retry_s * 2, period_s)

    async def _persist_offsets_loop(self) -> None:
        while True:
            await asyncio.sleep(self.broker_config.flushConsumerOffsetInterval / 1000.0)
            try:
                await self.consumer_offset_manager.persist_if_dirty()
            except Exception:
                log.exception("persist_consumer_offsets_failed")
            # (upstream cleans its consumer filters when it persists them, in this same task)
            self.consumer_filter_manager.clean()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        bc = self.broker_config
        await asyncio.to_thread(check_store_path_writable, self.store_config)
        await asyncio.to_thread(probe_listen_port, bc.bind_host, bc.listenPort)
        for mgr in (self.topic_config_manager, self.subscription_group_manager, self.consumer_offset_manager):
            ok = await asyncio.to_thread(mgr.load)
            if not ok:
                raise ConfigError(f"cannot load {mgr.config_file_path()}: the file is corrupt (see the log)")
        self.topic_config_manager.after_load()
        self._loaded = True

        await self.message_store.start()
        await self.schedule_message_service.start()
        await self.transactional_message_service.load()
        # The hold service's method itself: a wrapper would cost a call per dispatched record.
        hold = self.pull_request_hold_service
        self.message_store.add_arrival_listener(hold.notify_message_arriving, hold.has_held)
        self.message_store.inline_dispatch_listener = hold
        try:
            host, port = await self.remoting_server.start()
        except OSError as e:
            await self.schedule_message_service.shutdown()
            await self.message_store.shutdown()
            raise ConfigError(f"listenPort {bc.listenPort}: cannot listen on {bc.bind_host}: {e.strerror or e}") from None
        if bc.listenPort == 0:
            bc.listenPort = port
        self.store_host = (bc.brokerIP1, bc.listenPort)
        await self._start_vip_channel(bc.listenPort - 2)
        self._started = True

        self.pull_request_hold_service.start()
        self.transactional_message_check_service.start()
        self.client_housekeeping_service.start()
        self.broker_stats.start()
        self._register_wakeup = asyncio.Event()
        self._register_done = asyncio.Condition()
        registered = 0
        if self.broker_outer_api.namesrv_addr_list:
            registered = await self.register_broker_all()
        loop = asyncio.get_running_loop()
        all_ok = registered >= len(self.broker_outer_api.namesrv_addr_list)
        self._periodic.append(loop.create_task(self._register_loop(all_ok), name="register-broker"))
        self._periodic.append(loop.create_task(self._persist_offsets_loop(), name="persist-offsets"))
        self.listen_addr = f"{bc.brokerIP1}:{bc.listenPort}"
        log.info(
            "broker_listening",
            addr=self.listen_addr,
            bind=f"{host}:{port}",
            cluster=bc.brokerClusterName,
            broker_name=bc.brokerName,
            broker_id=bc.brokerId,
            vip_port=self.fast_remoting_server.port if self.fast_remoting_server is not None else None,
            namesrv=";".join(self.broker_outer_api.namesrv_addr_list) or None,
            registered=registered,
            store=self.store_config.storePathRootDir,
        )

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        bc = self.broker_config
        for t in self._periodic:
            t.cancel()
        for t in self._periodic:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._periodic.clear()
        if self._started and self.broker_outer_api.namesrv_addr_list:
            try:
                await asyncio.wait_for(
                    self.broker_outer_api.unregister_broker_all(
                        bc.brokerClusterName, self.broker_addr, bc.brokerName, bc.brokerId
                    ),
                    3.0,
                )
            except TimeoutError:
                log.warning("unregister_broker_timed_out")
        await self.transactional_message_check_service.stop()
        await self.client_housekeeping_service.stop()
        await self.broker_stats.stop()
        await self._drain_in_flight(1.5)
        await self.pull_request_hold_service.stop()
        if self.fast_remoting_server is not None:
            await self.fast_remoting_server.stop()
        await self.remoting_server.stop()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        # No request can change state any more: save offsets and configs before the (slower) store flush.
        if self._loaded:
            for mgr in (self.consumer_offset_manager, self.topic_config_manager, self.subscription_group_manager):
                try:
                    await mgr.persist()
                except Exception:
                    log.exception("persist_on_shutdown_failed", path=str(mgr.config_file_path()))
        if self._started:
            await self.schedule_message_service.shutdown()
            self.message_store.remove_arrival_listener(self.pull_request_hold_service.notify_message_arriving)
            self.message_store.inline_dispatch_listener = None
            await self.message_store.shutdown()
        await self.broker_outer_api.shutdown()
        if self._started:
            log.info("broker_stopped", addr=self.listen_addr or self.broker_addr)
        self._started = False

    async def _drain_in_flight(self, timeout_s: float) -> None:
        """Let sends already being stored finish before their connections are closed."""
        deadline = time.monotonic() + timeout_s
        groups = [self.dispatcher.group(n) for n in ("send", "end_transaction")]
        while any(g.inflight > 0 for g in groups) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    # ------------------------------------------------------------------ admin operations

    async def delete_topic(self, topic: str) -> None:
        """Forget a topic: its config, its queues in the store and every group's offsets of it."""
        self.topic_config_manager.delete_topic_config(topic)
        deleted = self.message_store.delete_topics({topic})
        if inspect.isawaitable(deleted):
            await deleted
        self.consumer_offset_manager.remove_topic(topic)
        self.broker_stats.forget_topic(topic)
        await self.consumer_offset_manager.persist()

    async def update_config(self, values: Mapping[str, str]) -> dict[str, Any]:
        """UPDATE_BROKER_CONFIG: validate and apply; persist to the -c file when there is one."""
        bc = self.broker_config
        changed = bc.update_values(values, source="UPDATE_BROKER_CONFIG")
        if not changed:
            return changed
        self.config_data_version.next_version()
        log.info("broker_config_updated", changes={k: format_value(v) for k, v in changed.items()})
        if "autoCreateTopicEnable" in changed:
            self.topic_config_manager.set_auto_create_topic_enable(bc.autoCreateTopicEnable)
        if "brokerPermission" in changed:
            self.topic_config_manager.data_version.next_version()
            self.request_register()
        if "namesrvAddr" in changed:
            self.broker_outer_api.update_name_server_address_list(bc.namesrvAddr)
            self.request_register()
        if "channelExpiredTimeout" in changed:
            self.consumer_manager.channel_expired_timeout_ms = bc.channelExpiredTimeout
            self.producer_manager.channel_expired_timeout_ms = bc.channelExpiredTimeout
        if "filterDataCleanTimeSpan" in changed:
            self.consumer_filter_manager.clean_time_span_ms = bc.filterDataCleanTimeSpan
        if "maxHeldPullRequests" in changed:
            self.pull_request_hold_service.max_held = bc.maxHeldPullRequests
        if "serverIdlePollMicros" in changed:
            self.remoting_server.idle_poll_us = bc.serverIdlePollMicros
            if self.fast_remoting_server is not None:
                self.fast_remoting_server.idle_poll_us = bc.serverIdlePollMicros
        if "registerNameServerPeriod" in changed:
            self.request_register()
        if self.config_file is not None:
            try:
                await asyncio.to_thread(update_properties_file, self.config_file, changed)
            except OSError as e:
                log.error("broker_config_persist_failed", path=str(self.config_file), error=str(e))
        return changed
