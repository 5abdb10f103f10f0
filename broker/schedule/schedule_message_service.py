"""ScheduleMessageService: delayed messages (RocketMQ's store/schedule/ScheduleMessageService).

Send side (`transform`, a SendMessageProcessor message transformer): a message with property DELAY
= level (1..max; higher levels are clamped to the max) that is not a prepared/rolled-back
transactional message is stored in SCHEDULE_TOPIC_XXXX, queue level - 1, with its real topic and
queue in REAL_TOPIC / REAL_QID. The consume-queue tags code of such an entry is its delivery time
(`tags_code_hook`), so deciding whether the head of a level is due needs no CommitLog read.

Delivery: one asyncio task per level walks that level's consume queue in order. When the head is
not due the task sleeps until it is (woken early only when a message that is due sooner arrives; it
looks again at least every 5 s in case the wall clock was stepped), and when the queue is drained it
sleeps until the store's arrival listener reports a new entry: an idle broker does no periodic work
here besides the 10 s offset persist check. A due entry is read from
the CommitLog and re-put to its real topic/queue with its original properties (less DELAY) and a
fresh store time (`message_time_up`). Entries whose time passed while the broker was down are
delivered at once at start-up.

Progress: `offset_table` {level: next queue offset}, advanced only after a successful re-put;
written to `<storePathRootDir>/config/delayOffset.json` ({"offsetTable":{"1":N,...}}) every 10 s when
changed and at shutdown, and kept crash-safe in between by DelayOffsetCheckpoint (see there), so a
restart after SIGTERM or SIGKILL neither loses nor repeats a delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import structlog

from broker.config_manager import ConfigManager
from broker.processor.common import reply
from broker.schedule.delay_level import parse_delay_levels
from broker.schedule.delay_offset_checkpoint import NO_PENDING, DelayOffsetCheckpoint
from broker.topic import topic_validator as tv
from remoting import jsonutil
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.message import MessageConst, MessageExt, MessageSysFlag, decode_message, encode_properties
from remoting.properties import ConfigError
from store.message import MessageExtBrokerInner
from store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.message_store import DefaultMessageStore

log = structlog.get_logger(__name__)

SCHEDULE_TOPIC: Final = tv.RMQ_SYS_SCHEDULE_TOPIC
# Not in RocketMQ: the delivery time (ms) of a SCHEDULE_TOPIC_XXXX entry, fixed when it is rewritten,
# so the consume-queue tags code is the same whether built at put time or rebuilt from the CommitLog
# after a crash. Removed again on delivery.
PROPERTY_SCHEDULE_DELIVER_MS: Final = "__SCHEDULE_DELIVER_MS"

FLUSH_DELAY_OFFSET_INTERVAL_S: Final = 10.0  # Java's flushDelayOffsetInterval
DELAY_FOR_A_PERIOD_S: Final = 10.0  # after an unexpected error (Java's DELAY_FOR_A_PERIOD)
_MAX_SLEEP_S: Final = 5.0  # re-check at least this often while waiting on a head (wall-clock steps)
_RETRY_MIN_S: Final = 0.1  # first retry after a failed re-put (Java's DELAY_FOR_A_WHILE), doubling
_RETRY_MAX_S: Final = 5.0
_SKEW_LIMIT_MS: Final = 1000  # see _due_exactly
_YIELD_EVERY: Final = 64  # deliveries between explicit yields to the loop
_VERIFY_MAX_RECORDS: Final = 100_000
_VERIFY_WINDOW_MS: Final = 60_000

_DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
_REAL_TOPIC = MessageConst.PROPERTY_REAL_TOPIC
_REAL_QID = MessageConst.PROPERTY_REAL_QUEUE_ID
_WAIT = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_TRAN_PREPARED = MessageConst.PROPERTY_TRANSACTION_PREPARED
_DELAYABLE_TRAN_TYPES: Final = (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE)


def now_ms() -> int:
    return int(time.time() * 1000)


class ScheduleMessageService(ConfigManager):
    def __init__(
        self,
        message_store: DefaultMessageStore,
        store_config: MessageStoreConfig,
        *,
        on_delivered: Callable[[MessageExtBrokerInner, PutMessageResult], None] | None = None,
    ) -> None:
        super().__init__()
        self.message_store = message_store
        self.store_config = store_config
        self.on_delivered = on_delivered
        self.delay_level_table: dict[int, int] = parse_delay_levels(store_config.messageDelayLevel)
        self.max_delay_level = max(self.delay_level_table)
        self.offset_table: dict[int, int] = {}
        self.checkpoint = DelayOffsetCheckpoint(str(self._config_dir() / "delayOffset.ckpt"))
        self.delivered_count = 0
        self.wakeups = 0  # level-task iterations (tests check an idle broker stays idle)
        self._pending: dict[int, tuple[int, int, int]] = {}  # from the checkpoint, verified at start
        self._events: dict[int, asyncio.Event] = {}
        self._next_wake_ms: dict[int, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._offset_flush_task: asyncio.Task[None] | None = None
        self._running = False
        self._dirty = False
        self._retry_s: dict[int, float] = {}

    # ------------------------------------------------------------------ levels

    def delay_ms(self, level: int) -> int:
        return self.delay_level_table.get(level, 1000)

    def compute_deliver_timestamp(self, level: int, store_timestamp: int) -> int:
        """Java's computeDeliverTimestamp: storeTimestamp + the level's delay (1 s for an unknown level)."""
        return store_timestamp + self.delay_ms(level)

    def _level_of(self, raw: str | None) -> int | None:
        if raw is None:
            return None
        try:
            level = int(raw)
        except ValueError:
            return None
        if level <= 0:
            return None
        return min(level, self.max_delay_level)

    # ------------------------------------------------------------------ send side

    def install_tags_code_hook(self, store: DefaultMessageStore) -> None:
        """Make `store` compute SCHEDULE_TOPIC_XXXX tags codes with tags_code_hook (chained before any
        hook the store already has)."""
        previous = store.tags_code_hook
        if previous is None:
            store.tags_code_hook = self.tags_code_hook
            store.tags_code_hook_topics = frozenset((SCHEDULE_TOPIC,))
            return
        store.tags_code_hook_topics = None  # the earlier hook may answer for any topic

        def chained(topic: str, properties: dict[str, str]) -> int | None:
            v = self.tags_code_hook(topic, properties)
            return v if v is not None else previous(topic, properties)

        store.tags_code_hook = chained

    def tags_code_hook(self, topic: str, properties: dict[str, str]) -> int | None:
        """DefaultMessageStore hook: the delivery time is the tags code of a SCHEDULE_TOPIC_XXXX entry."""
        if topic != SCHEDULE_TOPIC:
            return None
        fixed = properties.get(PROPERTY_SCHEDULE_DELIVER_MS)
        if fixed is not None:
            with contextlib.suppress(ValueError):
                return int(fixed)
        level = self._level_of(properties.get(_DELAY))
        if level is None:
            return None
        return self.compute_deliver_timestamp(level, now_ms())

    def transform(self, msg: MessageExtBrokerInner, send_ctx: Any = None) -> RemotingCommand | None:
        """SendMessageProcessor message transformer: DELAY -> SCHEDULE_TOPIC_XXXX (or refuse a bad DELAY)."""
        raw = msg.properties.get(_DELAY)
        if raw is None:
            return None
        try:
            level = int(raw)
        except ValueError:
            return reply(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the DELAY property must be a delay level number (1..{self.max_delay_level}), got {raw!r}",
            )
        if level <= 0:
            return None
        self.apply_delay(msg)
        return None

    def apply_delay(self, msg: MessageExtBrokerInner) -> bool:
        """Rewrite a message whose DELAY level is > 0 to SCHEDULE_TOPIC_XXXX, as CommitLog.putMessage does
        (for any put path: sends, send-backs, committed transactional messages). Prepared / rolled-back
        transactional messages and half messages are left alone. True when rewritten."""
        props = msg.properties
        level = self._level_of(props.get(_DELAY))
        if level is None:
            return False
        if MessageSysFlag.get_transaction_value(msg.sys_flag) not in _DELAYABLE_TRAN_TYPES:
            return False
        if (
            msg.topic in (SCHEDULE_TOPIC, tv.RMQ_SYS_TRANS_HALF_TOPIC)
            or props.get(_TRAN_PREPARED, "").lower() == "true"
        ):
            return False
        wait = props.pop(_WAIT, None)  # for the broker only: not stored (as the send path does)
        props[_DELAY] = str(level)
        props[_REAL_TOPIC] = msg.topic
        props[_REAL_QID] = str(msg.queue_id)
        props[PROPERTY_SCHEDULE_DELIVER_MS] = str(self.compute_deliver_timestamp(level, now_ms()))
        msg.properties_string = encode_properties(props)
        if wait is not None:
            props[_WAIT] = wait
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        return True

    # ------------------------------------------------------------------ delivery side

    def message_time_up(self, m: MessageExt) -> MessageExtBrokerInner | None:
        """The message to re-put for a due SCHEDULE_TOPIC_XXXX record (None if it names no real queue)."""
        props = dict(m.properties)
        topic = props.get(_REAL_TOPIC)
        try:
            queue_id = int(props.get(_REAL_QID, ""))
        except ValueError:
            return None
        if not topic or queue_id < 0:
            return None
        props.pop(_DELAY, None)
        props.pop(PROPERTY_SCHEDULE_DELIVER_MS, None)
        props.pop(_WAIT, None)
        ps = encode_properties(props)
        props[_WAIT] = "false"  # as Java: do not hold the deliverer on a sync flush; not stored
        return MessageExtBrokerInner(
            topic=topic,
            body=m.body,
            queue_id=queue_id,
            flag=m.flag,
            properties=props,
            properties_string=ps,
            sys_flag=m.sys_flag,
            born_timestamp=m.born_timestamp,
            born_host=m.born_host,
            store_host=m.store_host,
            reconsume_times=m.reconsume_times,
            body_crc=m.body_crc,
        )

    def on_message_arriving(
        self,
        topic: str,
        queue_id: int,
        logic_offset_after: int,
        tags_code: int,
        store_timestamp: int,
        properties: dict[str, str] | None,
    ) -> None:
        """Store arrival listener: wake a level's task when a new entry is due before its next wake."""
        if topic != SCHEDULE_TOPIC:
            return
        level = queue_id + 1
        ev = self._events.get(level)
        if ev is not None and tags_code < self._next_wake_ms.get(level, math.inf):
            ev.set()

    async def _level_loop(self, level: int) -> None:
        ev = self._events[level]
        while self._running:
            ev.clear()
            self.wakeups += 1
            # Busy (or about to wait for an arrival): any arrival means "look again". While it sleeps on
            # a head that is not due, only an arrival due before that wake-up time matters.
            self._next_wake_ms[level] = math.inf
            try:
                wait_s = await self._deliver_level(level)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("schedule_deliver_failed", level=level, offset=self.offset_table.get(level, 0))
                wait_s = DELAY_FOR_A_PERIOD_S
            if not self._running:
                break
            if wait_s is None:
                await ev.wait()
            elif wait_s > 0:
                self._next_wake_ms[level] = now_ms() + wait_s * 1000
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), min(wait_s, _MAX_SLEEP_S))

    def _set_offset(self, level: int, offset: int) -> None:
        self.offset_table[level] = offset
        self.checkpoint.set_offset(level, offset)
        self._dirty = True

    def _due_exactly(self, level: int, due: int, m: MessageExt, now: int) -> int:
        """The tags code is fixed when the message is rewritten, a moment before the store stamps it;
        never deliver before storeTimestamp + delay. (A gap beyond _SKEW_LIMIT_MS means the level's
        delay was changed since: keep the planned time, as Java does.)"""
        exact = m.store_timestamp + self.delay_ms(level)
        if due < exact <= due + _SKEW_LIMIT_MS and exact > now:
            return exact
        return due

    async def _deliver_level(self, level: int) -> float | None:
        """Deliver what is due at this level. Returns None when the level is drained, else seconds
        until it should be looked at again."""
        store = self.message_store
        cq = store.get_consume_queue(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return None
        delay = self.delay_ms(level)
        offset = self.offset_table.get(level, 0)
        min_off = cq.get_min_offset_in_queue()
        max_off = cq.get_max_offset_in_queue()
        if offset < min_off or offset > max_off:
            corrected = min_off if offset < min_off else max_off
            log.error("schedule_offset_corrected", level=level, offset=offset, corrected=corrected,
                      cq_min=min_off, cq_max=max_off)
            offset = corrected
            self._set_offset(level, offset)
        done = 0
        while self._running:
            if offset >= cq.get_max_offset_in_queue():
                self._retry_s.pop(level, None)
                return None
            unit = cq.get_unit(offset)
            if unit is None:
                min_off = cq.get_min_offset_in_queue()
                if offset < min_off:
                    offset = min_off
                    self._set_offset(level, offset)
                    continue
                return _RETRY_MIN_S
            phy, size, tags_code = unit
            now = now_ms()
            due = tags_code if tags_code <= now + delay else now  # clock went back: deliver now (Java)
            if due > now:
                return (due - now) / 1000.0
            m = store.look_message_by_offset(phy, size)
            if m is None:
                log.warning("schedule_message_missing", level=level, offset=offset, commit_log_offset=phy)
                offset += 1
                self._set_offset(level, offset)
                continue
            exact = self._due_exactly(level, due, m, now)
            if exact > now:
                return (exact - now) / 1000.0
            inner = self.message_time_up(m)
            if inner is None or inner.topic == tv.RMQ_SYS_TRANS_HALF_TOPIC:
                log.error("schedule_message_discarded", level=level, offset=offset, msg_id=m.msg_id,
                          real_topic=m.properties.get(_REAL_TOPIC), real_qid=m.properties.get(_REAL_QID))
                offset += 1
                self._set_offset(level, offset)
                continue
            self.checkpoint.set_pending(level, offset, store.get_commit_log_max_offset(), now)
            try:
                result = await store.put_message(inner)
            except Exception:
                self.checkpoint.clear_pending(level)
                raise
            if result is None or result.status != PutMessageStatus.PUT_OK:
                self.checkpoint.clear_pending(level)
                retry = self._retry_s.get(level, _RETRY_MIN_S / 2) * 2
                self._retry_s[level] = min(retry, _RETRY_MAX_S)
                log.warning("schedule_deliver_put_failed", level=level, offset=offset, topic=inner.topic,
                            status=None if result is None else result.status.value,
                            remark=None if result is None else result.remark, retry_s=self._retry_s[level])
                return self._retry_s[level]
            self._retry_s.pop(level, None)
            offset += 1
            self._set_offset(level, offset)
            self.delivered_count += 1
            if self.on_delivered is not None:
                try:
                    self.on_delivered(inner, result)
                except Exception:
                    log.exception("schedule_on_delivered_failed")
            done += 1
            if done % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return None

    # ------------------------------------------------------------------ start-up reconciliation

    def _verify_pending(self) -> None:
        """For each level whose re-put was in flight at a crash: if the re-put record made it into the
        CommitLog, count it as delivered (so it is not delivered twice)."""
        for level, (pending, start_cl, pending_ms) in self._pending.items():
            if pending != self.offset_table.get(level, 0):
                continue
            cq = self.message_store.get_consume_queue(SCHEDULE_TOPIC, level - 1)
            unit = cq.get_unit(pending) if cq is not None else None
            m = self.message_store.look_message_by_offset(unit[0], unit[1]) if unit is not None else None
            expect = self.message_time_up(m) if m is not None else None
            if expect is None:
                continue
            if self._find_delivered(expect, start_cl, pending_ms):
                log.info("schedule_in_flight_delivery_found", level=level, offset=pending)
                self._set_offset(level, pending + 1)
            else:
                log.info("schedule_in_flight_delivery_redo", level=level, offset=pending)
        self._pending.clear()

    def _find_delivered(self, expect: MessageExtBrokerInner, start: int, started_ms: int) -> bool:
        cl = self.message_store.commit_log
        off = max(start, cl.get_min_offset())
        end = cl.get_max_offset()
        uniq = expect.properties.get(_UNIQ)
        seen = 0
        while off < end and seen < _VERIFY_MAX_RECORDS:
            data = cl.get_data(off)
            if data is None:
                off = cl.roll_next_file(off)
                continue
            mv = data[0]
            pos = 0
            while pos < len(mv):
                try:
                    m, nxt = decode_message(mv, pos, read_body=False)
                except ValueError:
                    break  # end-of-file blank (or a torn tail): next file
                seen += 1
                if (
                    m.topic == expect.topic
                    and m.queue_id == expect.queue_id
                    and m.born_timestamp == expect.born_timestamp
                    and m.body_crc == expect.body_crc
                    and m.reconsume_times == expect.reconsume_times
                    and m.properties.get(_UNIQ) == uniq
                ):
                    return True
                if m.store_timestamp > started_ms + _VERIFY_WINDOW_MS:
                    return False
                pos = nxt
            off = cl.roll_next_file(off)
        return False

    # ------------------------------------------------------------------ lifecycle

    def _config_dir(self) -> Path:
        return Path(self.store_config.storePathRootDir) / "config"

    def _load_blocking(self) -> bool:
        ok = self.load()
        slots = self.checkpoint.open_blocking()
        for level, (offset, pending, pending_cl, pending_ms) in slots.items():
            if level not in self.delay_level_table:
                continue
            if offset > self.offset_table.get(level, 0):
                self.offset_table[level] = offset
            if pending != NO_PENDING:
                self._pending[level] = (pending, pending_cl, pending_ms)
        return ok

    async def start(self) -> None:
        """Load progress (after the store has recovered), then start one task per level. Call on the loop."""
        if self._running:
            return
        if not await asyncio.to_thread(self._load_blocking):
            raise ConfigError(f"cannot load {self.config_file_path()}: the file is corrupt (see the log)")
        self._verify_pending()
        for level in self.delay_level_table:
            self.checkpoint.set_offset(level, self.offset_table.get(level, 0))
        if self.store_config.brokerRole.value == "SLAVE":
            # As Java: only a master delivers (a slave's store refuses puts; it replicates the master's).
            log.info("schedule_message_service_idle_on_slave")
            return
        self._running = True
        self.message_store.add_arrival_listener(self.on_message_arriving, _is_schedule_topic)
        loop = asyncio.get_running_loop()
        for level in sorted(self.delay_level_table):
            self._events[level] = asyncio.Event()
            self._next_wake_ms[level] = math.inf
            self._tasks.append(loop.create_task(self._level_loop(level), name=f"ScheduleMessageTimer_{level}"))
        self._offset_flush_task = loop.create_task(self._flush_offsets_loop(), name="ScheduleMessagePersist")
        log.info("schedule_message_service_started", levels=len(self.delay_level_table),
                 offsets={str(k): v for k, v in sorted(self.offset_table.items()) if v})

    async def shutdown(self, timeout_s: float = 3.0) -> None:
        """Stop delivering (a re-put in flight completes), then persist delayOffset.json."""
        if not self._running and not self._tasks:
            await asyncio.to_thread(self.checkpoint.close_blocking)
            return
        self._running = False
        self.message_store.remove_arrival_listener(self.on_message_arriving)
        for ev in self._events.values():
            ev.set()
        if self._offset_flush_task is not None:
            self._offset_flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._offset_flush_task
            self._offset_flush_task = None
        tasks, self._tasks = self._tasks, []
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for t in pending:
                t.cancel()
            for t in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        try:
            await self.persist()
        except Exception:
            log.exception("persist_delay_offset_failed", path=str(self.config_file_path()))
        await asyncio.to_thread(self.checkpoint.close_blocking)
        log.info("schedule_message_service_stopped", delivered=self.delivered_count)

    async def _flush_offsets_loop(self) -> None:
        while self._running:
            await asyncio.sleep(FLUSH_DELAY_OFFSET_INTERVAL_S)
            if not self._dirty:
                continue
            self._dirty = False
            try:
                await self.persist()
                await asyncio.to_thread(self.checkpoint.flush_blocking)
            except Exception:
                log.exception("persist_delay_offset_failed", path=str(self.config_file_path()))

    # ------------------------------------------------------------------ delayOffset.json (ConfigManager)

    def config_file_path(self) -> Path:
        return self._config_dir() / "delayOffset.json"

    def encode(self) -> str:
        table = {str(level): offset for level, offset in sorted(self.offset_table.items())}
        return json.dumps({"offsetTable": table}, separators=(",", ":"))

    def decode(self, text: str) -> None:
        raw = jsonutil.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        table = raw.get("offsetTable") or {}
        if not isinstance(table, dict):
            raise ValueError("offsetTable is not an object")
        for k, v in table.items():
            self.offset_table[int(k)] = int(v)

    # ------------------------------------------------------------------ admin

    def runtime_info(self) -> dict[str, str]:
        """Java's scheduleMessageOffset_<level> = "<delivered offset>,<max offset>" (GET_BROKER_RUNTIME_INFO)."""
        out: dict[str, str] = {}
        for level in sorted(self.delay_level_table):
            max_off = self.message_store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            out[f"scheduleMessageOffset_{level}"] = f"{self.offset_table.get(level, 0)},{max_off}"
        return out


def _is_schedule_topic(topic: str, _queue_id: int) -> bool:
    return topic == SCHEDULE_TOPIC
