"""Message trace (RocketMQ's `enableMsgTrace`): who sent and consumed each message, when, how long it took.

A producer or consumer made with `enable_msg_trace=True` records a trace context per send (Pub), per
listener call or poll (SubBefore, then SubAfter) and per transaction outcome (EndTransaction), and an AsyncTraceDispatcher sends them in batches, in
RocketMQ's trace data format, to the trace topic (`RMQ_SYS_TRACE_TOPIC`, or `customized_trace_topic`),
keyed by the traced messages' ids and keys, through an internal producer. `mqadmin queryMsgTraceById`
and RocketMQ's dashboard read them back.

Tracing never slows or fails the traced call: contexts go to a bounded queue (2 048, as upstream's), the
dispatcher drops and counts what does not fit, and a trace send that fails is logged.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from remoting.message import MessageConst, MessageExt

if TYPE_CHECKING:
    from .config import ClientConfig
    from .message import Message, SendResult

log = structlog.get_logger(__name__)

RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
QUEUE_MAX = 2048  # upstream's traceContextQueue capacity
BATCH_CONTEXTS = 100  # contexts taken per flush round
MAX_TRACE_MESSAGE = 128_000  # upstream's maxMsgSize: a trace message's data is cut there
DEFAULT_REGION = "DefaultRegion"


class TraceType(enum.Enum):
    Pub = "Pub"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """Upstream's MessageType, written as its ordinal."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3


class ConsumeReturnType(enum.IntEnum):
    """A SubAfter's contextCode (upstream's ConsumeReturnType ordinal)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclass(slots=True)
class TraceBean:
    topic: str = ""
    msg_id: str = ""
    offset_msg_id: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    msg_type: int = MessageType.Normal_Msg
    retry_times: int = 0
    store_time: int = 0
    transaction_id: str = ""
    transaction_state: str = ""  # COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW
    from_transaction_check: bool = False


@dataclass(slots=True)
class TraceContext:
    trace_type: TraceType
    time_stamp: int = field(default_factory=lambda: int(time.time() * 1000))
    region_id: str = DEFAULT_REGION
    group_name: str = ""
    cost_time: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    trace_beans: list[TraceBean] = field(default_factory=list)


def _s(v: object) -> str:
    """Java's StringBuilder.append: null as "null", booleans lower case."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def encode_trace_context(ctx: TraceContext) -> tuple[str, set[str]]:
    """TraceDataEncoder.encoderFromContextBean: the context's trace data and the keys it is found by (each
    bean's message id and keys)."""
    c, f = CONTENT_SPLITOR, FIELD_SPLITOR
    parts: list[str] = []
    if ctx.trace_type is TraceType.Pub:
        b = ctx.trace_beans[0]
        parts.append(c.join(map(_s, (
            "Pub", ctx.time_stamp, ctx.region_id, ctx.group_name, b.topic, b.msg_id, b.tags or None,
            b.keys or None, b.store_host, b.body_length, ctx.cost_time, int(b.msg_type), b.offset_msg_id,
            ctx.success,
        ))) + f)
    elif ctx.trace_type is TraceType.SubBefore:
        for b in ctx.trace_beans:
            parts.append(c.join(map(_s, (
                "SubBefore", ctx.time_stamp, ctx.region_id, ctx.group_name, ctx.request_id, b.msg_id,
                b.retry_times, b.keys or None,
            ))) + f)
    elif ctx.trace_type is TraceType.EndTransaction:
        b = ctx.trace_beans[0]
        parts.append(c.join(map(_s, (
            "EndTransaction", ctx.time_stamp, ctx.region_id, ctx.group_name, b.topic, b.msg_id, b.tags or None,
            b.keys or None, b.store_host, int(b.msg_type), b.transaction_id or None, b.transaction_state,
            b.from_transaction_check,
        ))) + f)
    else:
        for b in ctx.trace_beans:
            parts.append(c.join(map(_s, (
                "SubAfter", ctx.request_id, b.msg_id, ctx.cost_time, ctx.success, b.keys or None,
                ctx.context_code, ctx.time_stamp, ctx.group_name,
            ))) + f)
    keys: set[str] = set()
    for b in ctx.trace_beans:
        keys.add(b.msg_id)
        if b.keys:
            keys.update(k for k in b.keys.split(" ") if k)
    return "".join(parts), keys


def decode_trace_data(data: str) -> list[TraceContext]:
    """TraceDataEncoder.decoderFromTraceDataString: the contexts of one trace message's body (fields it
    cannot read are left at their defaults; a record of an unknown type is skipped)."""
    out: list[TraceContext] = []
    for record in data.split(FIELD_SPLITOR):
        line = record.split(CONTENT_SPLITOR)
        kind = line[0]
        try:
            if kind == "Pub" and len(line) >= 13:
                bean = TraceBean(topic=line[4], msg_id=line[5], tags=_v(line[6]), keys=_v(line[7]),
                                 store_host=line[8], body_length=int(line[9]), msg_type=int(line[11]))
                ctx = TraceContext(TraceType.Pub, int(line[1]), line[2], line[3], cost_time=int(line[10]))
                if len(line) >= 14:
                    bean.offset_msg_id = line[12]
                    ctx.success = line[13] == "true"
                else:
                    ctx.success = line[12] == "true"
                ctx.trace_beans.append(bean)
            elif kind == "SubBefore" and len(line) >= 8:
                ctx = TraceContext(TraceType.SubBefore, int(line[1]), line[2], line[3], request_id=line[4])
                ctx.trace_beans.append(TraceBean(msg_id=line[5], retry_times=int(line[6]), keys=_v(line[7])))
            elif kind == "SubAfter" and len(line) >= 6:
                ctx = TraceContext(TraceType.SubAfter, 0, request_id=line[1], cost_time=int(line[3]),
                                   success=line[4] == "true")
                ctx.trace_beans.append(TraceBean(msg_id=line[2], keys=_v(line[5])))
                if len(line) >= 7 and line[6]:
                    ctx.context_code = int(line[6])
                if len(line) >= 9:
                    ctx.time_stamp = int(line[7])
                    ctx.group_name = line[8]
            elif kind == "EndTransaction" and len(line) >= 13:
                ctx = TraceContext(TraceType.EndTransaction, int(line[1]), line[2], line[3])
                ctx.trace_beans.append(TraceBean(
                    topic=line[4], msg_id=line[5], tags=_v(line[6]), keys=_v(line[7]), store_host=line[8],
                    msg_type=int(line[9]), transaction_id=_v(line[10]), transaction_state=line[11],
                    from_transaction_check=line[12] == "true",
                ))
            else:
                continue
        except ValueError:
            continue
        out.append(ctx)
    return out


def _v(s: str) -> str:
    return "" if s == "null" else s


class AsyncTraceDispatcher:
    """Sends trace contexts, in batches, to the trace topic through an internal producer. `append` may be
    called from any thread (listeners run in consume threads)."""

    def __init__(self, host_group: str, client_config: ClientConfig | None, trace_topic: str | None = None) -> None:
        from .producer.producer import Producer

        self.host_group = host_group
        self.trace_topic = trace_topic or RMQ_SYS_TRACE_TOPIC
        self.discarded = 0
        self._queue: collections.deque[TraceContext] = collections.deque()
        # (the host's client config: the same NameServers, and the same client instance)
        self._producer = Producer(f"{TRACE_PRODUCER_GROUP_PREFIX}-{self.trace_topic}", client_config=client_config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        await self._producer.start()
        self._task = self._loop.create_task(self._run(), name=f"trace-{self.host_group}")

    def append(self, ctx: TraceContext) -> bool:
        if len(self._queue) >= QUEUE_MAX:
            self.discarded += 1
            if self.discarded % 1000 == 1:
                log.warning("trace_contexts_discarded", group=self.host_group, discarded=self.discarded)
            return False
        self._queue.append(ctx)
        wake, loop = self._wake, self._loop
        if wake is not None and loop is not None:
            if threading.get_ident() == self._loop_thread:
                wake.set()
            else:
                loop.call_soon_threadsafe(wake.set)
        return True

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0.005)  # a few more contexts per trace message (upstream polls every 5 ms)
            await self.flush()

    async def flush(self) -> None:
        """Send every queued context (in rounds of up to BATCH_CONTEXTS)."""
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(BATCH_CONTEXTS, len(self._queue)))]
            by_topic: dict[str, list[tuple[str, set[str]]]] = {}
            for ctx in batch:
                if ctx.trace_beans:
                    by_topic.setdefault(ctx.trace_beans[0].topic, []).append(encode_trace_context(ctx))
            for encoded in by_topic.values():
                await self._send_chunks(encoded)

    async def _send_chunks(self, encoded: Iterable[tuple[str, set[str]]]) -> None:
        from .message import Message

        data: list[str] = []
        size = 0
        keys: set[str] = set()
        chunks: list[tuple[str, set[str]]] = []
        for text, k in encoded:
            data.append(text)
            size += len(text)
            keys |= k
            if size >= MAX_TRACE_MESSAGE:
                chunks.append(("".join(data), keys))
                data, size, keys = [], 0, set()
        if data:
            chunks.append(("".join(data), keys))
        for text, k in chunks:
            msg = Message(self.trace_topic, text.encode("utf-8"), keys=sorted(k))
            try:
                await self._producer.send(msg)
            except Exception as e:  # noqa: BLE001 - a trace that cannot be sent must not disturb the host
                log.warning("trace_send_failed", topic=self.trace_topic, group=self.host_group, error=str(e))

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush()
        await self._producer.shutdown()

    # ------------------------------------------------------------------ what the hooks record

    def pub(self, group: str, msg: Message, result: SendResult, broker_addr: str | None, begin_ms: int) -> None:
        """SendMessageTraceHookImpl: a send answered (any status; a send that raised is not traced)."""
        if msg.topic == self.trace_topic or not result.trace_on:
            return
        props = msg.properties
        if props.get(MessageConst.PROPERTY_TRANSACTION_PREPARED) == "true":
            mtype = MessageType.Trans_Msg_Half
        elif props.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL):
            mtype = MessageType.Delay_Msg
        else:
            mtype = MessageType.Normal_Msg
        now = int(time.time() * 1000)
        bean = TraceBean(
            topic=msg.topic, msg_id=result.msg_id, offset_msg_id=result.offset_msg_id, tags=msg.tags or "",
            keys=msg.keys or "", store_host=broker_addr or "", body_length=len(msg.body), msg_type=mtype,
        )
        self.append(TraceContext(
            TraceType.Pub, begin_ms, result.region_id or DEFAULT_REGION, group, cost_time=now - begin_ms,
            success=result.status.value == "SEND_OK", trace_beans=[bean],
        ))

    def end_transaction(
        self, group: str, msg: Message | MessageExt, msg_id: str, broker_addr: str | None, transaction_id: str | None,
        state: str, from_check: bool,
    ) -> None:
        """EndTransactionTraceHookImpl: a transaction's outcome told to the broker (after the local
        transaction, or answering the broker's check-back)."""
        if msg.topic == self.trace_topic:
            return
        self.append(TraceContext(TraceType.EndTransaction, group_name=group, trace_beans=[TraceBean(
            topic=msg.topic, msg_id=msg_id, tags=msg.tags or "", keys=msg.keys or "", store_host=broker_addr or "",
            msg_type=MessageType.Trans_msg_Commit, transaction_id=transaction_id or "", transaction_state=state,
            from_transaction_check=from_check,
        )]))

    def sub_before(self, group: str, msgs: list[MessageExt]) -> TraceContext | None:
        """ConsumeMessageTraceHookImpl.consumeMessageBefore: None when no message is traced."""
        beans: list[TraceBean] = []
        region = DEFAULT_REGION
        for m in msgs:
            props = m.properties
            if props.get(MessageConst.PROPERTY_TRACE_SWITCH) == "false":
                continue
            region = props.get(MessageConst.PROPERTY_MSG_REGION) or region
            beans.append(TraceBean(
                topic=m.topic, msg_id=m.uniq_key or m.msg_id, tags=m.tags or "", keys=m.keys or "",
                store_time=m.store_timestamp, body_length=m.store_size, retry_times=m.reconsume_times,
            ))
        if not beans:
            return None
        ctx = TraceContext(TraceType.SubBefore, region_id=region, group_name=group, request_id=str(uuid.uuid4()),
                           trace_beans=beans)
        self.append(ctx)
        return ctx

    def sub_after(self, before: TraceContext | None, n_msgs: int, success: bool, code: ConsumeReturnType) -> None:
        if before is None:
            return
        now = int(time.time() * 1000)
        self.append(TraceContext(
            TraceType.SubAfter, now, before.region_id, before.group_name,
            cost_time=(now - before.time_stamp) // max(n_msgs, 1), success=success, request_id=before.request_id,
            context_code=int(code), trace_beans=before.trace_beans,
        ))


def traced_listener(fn: Callable[..., Any], dispatcher: AsyncTraceDispatcher, group: str, ok: Callable[[Any], bool],
                    is_async: bool) -> Callable[..., Any]:
    """The listener, recording SubBefore and SubAfter around each call (sync or async as the listener is,
    so the consume service runs it where it ran the listener)."""

    def verdict(status: Any) -> tuple[bool, ConsumeReturnType]:
        if status is None:
            return False, ConsumeReturnType.RETURNNULL
        return (True, ConsumeReturnType.SUCCESS) if ok(status) else (False, ConsumeReturnType.FAILED)

    if is_async:
        async def traced_async(msgs: list[MessageExt], context: Any) -> Any:
            before = dispatcher.sub_before(group, msgs)
            try:
                status = await fn(msgs, context)
            except BaseException:
                dispatcher.sub_after(before, len(msgs), False, ConsumeReturnType.EXCEPTION)
                raise
            dispatcher.sub_after(before, len(msgs), *verdict(status))
            return status

        return traced_async

    def traced(msgs: list[MessageExt], context: Any) -> Any:
        before = dispatcher.sub_before(group, msgs)
        try:
            status = fn(msgs, context)
        except BaseException:
            dispatcher.sub_after(before, len(msgs), False, ConsumeReturnType.EXCEPTION)
            raise
        dispatcher.sub_after(before, len(msgs), *verdict(status))
        return status

    return traced
