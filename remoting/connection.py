"""The asyncio shell around the sans-I/O codec: one RemotingConnection per TCP connection.

Both ends use the same class: a connection carries requests both ways (the broker calls
producers back with CHECK_TRANSACTION_STATE and consumers with NOTIFY_CONSUMER_IDS_CHANGED),
so each has a response-correlation table (opaque -> future) and a RequestDispatcher.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import struct
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgpack
import structlog

from .codec import (
    MAX_FRAME_SIZE,
    FrameDecoder,
    decode_json_header,
    decode_rocketmq_header,
    encode_msgpack_request_head,
    encode_parts,
    rocketmq_i32,
)
from .codes import LanguageCode, RemotingFlag, ResponseCode, SerializeType, code_name
from .command import OpaqueGenerator, RemotingCommand
from .deadlines import DeadlineFifos
from .errors import (
    ProtocolError,
    RemotingConnectionClosedError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
)
from .idle_poll import IdlePoller

log = structlog.get_logger(__name__)

_RPC_TYPE = int(RemotingFlag.RPC_TYPE)
_RPC_ONEWAY = int(RemotingFlag.RPC_ONEWAY)
_MSGPACK = SerializeType.MSGPACK
_MSGPACK_BITS = int(SerializeType.MSGPACK) << 24
_msgpack_pack = msgpack.Packer(use_bin_type=True).pack
_pack_prefix = struct.Struct(">II").pack

ProcessorResult = RemotingCommand | None | Awaitable[RemotingCommand | None]
Processor = Callable[["RequestContext", RemotingCommand], ProcessorResult]
GroupProcessor = Callable[
    ["RequestContext", list[RemotingCommand]],
    list[Any] | Awaitable[list[Any]],  # each: a RemotingCommand, a PackedResponse or None
]
F = TypeVar("F", bound=Callable[..., Any])

# Most requests of one read handed to a group function at once. Measured (pipelined 1 KiB sends): most
# of the gain is there by ~8; past ~16 the run's working set (several KB of objects per request) costs
# more in cache misses than the shared per-run work saves.
MAX_GROUP_SIZE = 16
# A run ends once its frames reach this many bytes (four 32-message batches of 1 KiB), and the answers so
# far are written before the next run of the same read is handled -- as they are once FLUSH_FRAMES requests
# of the read are answered. A producer with several batches, or a few hundred sends, in flight then gets
# its first answers, and sends more, while the broker works through the rest of the read. With all of a
# read's answers in one write at its end, the loop waited for the producer 10-15% of the time: batch A/B
# 201k -> 233k and 187k -> 225k msgs/s, pipelined single sends 63.8k -> 76.3k and 66.2k -> 76.7k, at the
# same CPU per message. Smaller values cost CPU in writes (64 KiB: +14%; 16 frames: +4%).
GROUP_BYTES = 128 * 1024
FLUSH_FRAMES = 32

# Java's NettyRemotingAbstract wording, which clients may log or match on.
OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"


class _PackedAnswer:
    """A bodiless answer whose header is already encoded but for the opaque: `lead` before it, `tail` after.
    A group processor returns one in place of a RemotingCommand (the pipelined send answers: no command
    object, no extFields dict and no encoder call per answer); send_responses splices the request's opaque
    in, giving the bytes encode_parts gives for the equal command. `command()` is that command (for a
    request of another serialize type, and for callers that read the fields)."""

    __slots__ = ("lead", "tail")
    serialize_type: SerializeType  # of the requests it answers as it stands

    def __init__(self, lead: bytes, tail: bytes) -> None:
        self.lead = lead
        self.tail = tail

    def header(self, opaque: int) -> bytes:
        """The whole header, with this opaque."""
        raise NotImplementedError

    def command(self) -> RemotingCommand:
        raise NotImplementedError

    @property
    def code(self) -> int:
        return self.command().code

    @property
    def remark(self) -> str | None:
        return self.command().remark

    @property
    def ext_fields(self) -> dict[str, str] | None:
        return self.command().ext_fields


class PackedResponse(_PackedAnswer):
    """The answer to a MSGPACK request: `lead` is fixarray 7, code, language and version; `tail` the flag
    (RPC_TYPE set), remark and extFields map."""

    __slots__ = ()
    serialize_type = SerializeType.MSGPACK  # (send_responses splices its opaque inline: the pipelined sends' path)

    def command(self) -> RemotingCommand:
        code, language, version, _opaque, flag, remark, ext = msgpack.unpackb(
            self.lead + b"\x00" + self.tail, raw=False, strict_map_key=False
        )
        return RemotingCommand(
            code, 0, flag, remark, ext, None, LanguageCode(language), version, SerializeType.MSGPACK
        )


class PackedJsonResponse(_PackedAnswer):
    """The answer to a JSON request (what RocketMQ's own clients send): the JSON header up to the opaque's
    value (codec.json_answer_lead) and after it."""

    __slots__ = ()
    serialize_type = SerializeType.JSON

    def header(self, opaque: int) -> bytes:
        return b"%b%d%b" % (self.lead, opaque, self.tail)

    def command(self) -> RemotingCommand:
        return decode_json_header(self.lead + b"0" + self.tail)


class PackedRocketmqResponse(_PackedAnswer):
    """The answer to a ROCKETMQ (binary) request: code, language and version (codec.rocketmq_answer_lead),
    then, after the 4-byte opaque, the flag, remark and extFields."""

    __slots__ = ()
    serialize_type = SerializeType.ROCKETMQ

    def header(self, opaque: int) -> bytes:
        return b"".join((self.lead, rocketmq_i32(opaque), self.tail))

    def command(self) -> RemotingCommand:
        return decode_rocketmq_header(self.lead + b"\x00\x00\x00\x00" + self.tail)


def packed_response_lead(code: int, language: int, version: int) -> bytes:
    """PackedResponse.lead for an answer of this code, language and version."""
    return b"\x97" + _msgpack_pack((int(code), int(language), int(version)))[1:]


class RequestContext:
    """What a processor knows about the request besides the command itself."""

    __slots__ = ("conn", "received_at", "started_at")

    def __init__(self, conn: RemotingConnection, received_at: float) -> None:
        self.conn = conn
        self.received_at = received_at
        self.started_at = received_at

    @property
    def remote_addr(self) -> str:
        return self.conn.remote_addr

    def queued_ms(self) -> float:
        """How long the request waited for a processing slot."""
        return (self.started_at - self.received_at) * 1000.0

    def send_response(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """Answer later (long polling): safe to call after the processor returned None."""
        if request.is_oneway or self.conn.closed:
            return
        _prepare_response(request, response)
        try:
            self.conn.send(response)
        except RemotingSendRequestError:
            pass


def _prepare_response(request: RemotingCommand, response: RemotingCommand) -> None:
    response.opaque = request.opaque
    response.flag |= RemotingFlag.RPC_TYPE
    response.serialize_type = request.serialize_type


@dataclass(slots=True)
class ProcessorGroup:
    """A concurrency bound shared by a family of request codes, with a bounded waiting line."""

    name: str
    concurrency: int
    max_pending: int
    inflight: int = 0
    draining: bool = False
    pending: deque[tuple[RequestContext, RemotingCommand, Processor]] = field(default_factory=deque)
    rejected: int = 0

    def head_wait_ms(self, now: float) -> int:
        """How long the oldest waiting request has waited (RocketMQ's headSlowTimeMills); 0 when none waits."""
        return max(0, int((now - self.pending[0][0].received_at) * 1000)) if self.pending else 0


class RequestDispatcher:
    """Routes incoming requests to processors registered per code, each within its group's bound."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[Processor, ProcessorGroup]] = {}
        # Processors that can also take a run of pipelined requests at once (see `groupable`).
        self._group_fns: dict[int, GroupProcessor] = {}
        self._default: tuple[Processor, ProcessorGroup] | None = None
        self._groups: dict[str, ProcessorGroup] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.add_group("default", concurrency=64, max_pending=10000)

    def add_group(self, name: str, *, concurrency: int, max_pending: int) -> ProcessorGroup:
        g = self._groups.get(name)
        if g is None:
            g = self._groups[name] = ProcessorGroup(name, concurrency, max_pending)
        else:
            g.concurrency, g.max_pending = concurrency, max_pending
        return g

    def group(self, name: str) -> ProcessorGroup:
        return self._groups[name]

    def register(self, codes: int | Iterable[int], processor: Processor, *, group: str = "default") -> None:
        g = self._groups[group]
        group_fn = _group_fn_of(processor)
        for code in [codes] if isinstance(codes, int) else codes:
            self._table[int(code)] = (processor, g)
            if group_fn is not None:
                self._group_fns[int(code)] = group_fn
            else:
                self._group_fns.pop(int(code), None)

    def register_default(self, processor: Processor, *, group: str = "default") -> None:
        self._default = (processor, self._groups[group])

    def dispatch(self, conn: RemotingConnection, cmd: RemotingCommand, now: float) -> None:
        entry = self._table.get(cmd.code) or self._default
        ctx = RequestContext(conn, now)
        if entry is None:
            ctx.send_response(
                cmd,
                RemotingCommand(
                    code=ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f" request type {cmd.code} not supported",
                ),
            )
            return
        processor, g = entry
        if g.inflight < g.concurrency:
            self._start(ctx, cmd, processor, g)
        elif len(g.pending) < g.max_pending:
            g.pending.append((ctx, cmd, processor))
        else:
            g.rejected += 1
            ctx.send_response(cmd, RemotingCommand(code=ResponseCode.SYSTEM_BUSY, remark=OVERLOAD_REMARK))

    def dispatch_many(self, conn: RemotingConnection, cmds: list[RemotingCommand], now: float) -> None:
        """Dispatch the requests one read brought, in order. A run of consecutive requests whose processor
        is `groupable` (a lone one too: the group function is that processor's fast path) goes to its group
        function in one call (one store round) when its group has a free slot; everything else is
        dispatched one by one. The answers go out in one write per read, or sooner in a long read: after a
        run of GROUP_BYTES of frames and after every FLUSH_FRAMES answered requests."""
        table = self._table
        group_fns = self._group_fns
        i = 0
        n = len(cmds)
        unflushed = 0
        while i < n:
            cmd = cmds[i]
            group_fn = group_fns.get(cmd.code)
            if group_fn is None:
                self.dispatch(conn, cmd, now)
                i += 1
                continue
            g = table[cmd.code][1]
            j = i + 1
            limit = min(n, i + MAX_GROUP_SIZE)
            size = cmd.frame_size
            while j < limit and size < GROUP_BYTES and group_fns.get(cmds[j].code) is group_fn:
                size += cmds[j].frame_size
                j += 1
            if g.inflight >= g.concurrency:
                for k in range(i, j):
                    self.dispatch(conn, cmds[k], now)
            else:
                self._start_group(RequestContext(conn, now), cmds[i:j], group_fn, g)
                unflushed += j - i
                if (size >= GROUP_BYTES or unflushed >= FLUSH_FRAMES) and j < n:
                    conn._flush()
                    unflushed = 0
            i = j

    def _start_group(
        self, ctx: RequestContext, cmds: list[RemotingCommand], group_fn: GroupProcessor, g: ProcessorGroup
    ) -> None:
        # The run is one job: it takes one slot of the group's concurrency, as one worker would.
        g.inflight += 1
        ctx.started_at = time.monotonic()
        try:
            result = group_fn(ctx, cmds)
            if type(result) is types.CoroutineType:
                # As in _start: most groups complete without suspending and need no Task.
                try:
                    first = result.send(None)
                except StopIteration as stop:
                    result = stop.value
                else:
                    task = asyncio.ensure_future(self._run_group(ctx, cmds, _resume(result, first), g))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                    return
        except Exception as e:  # a processor bug must not take the connection down
            for cmd in cmds:
                self._failed(ctx, cmd, e)
            self._release(g)
            return
        self._finish_group(ctx, cmds, result, g)  # type: ignore[arg-type]

    async def _run_group(
        self,
        ctx: RequestContext,
        cmds: list[RemotingCommand],
        aw: Awaitable[list[RemotingCommand | None]],
        g: ProcessorGroup,
    ) -> None:
        try:
            results = await aw
        except asyncio.CancelledError:
            self._release(g)
            raise
        except Exception as e:
            for cmd in cmds:
                self._failed(ctx, cmd, e)
            self._release(g)
            return
        self._finish_group(ctx, cmds, results, g)

    def _finish_group(
        self, ctx: RequestContext, cmds: list[RemotingCommand], results: list[RemotingCommand | None], g: ProcessorGroup
    ) -> None:
        try:
            ctx.conn.send_responses(cmds, results)
        finally:
            self._release(g)

    def _start(self, ctx: RequestContext, cmd: RemotingCommand, processor: Processor, g: ProcessorGroup) -> None:
        g.inflight += 1
        ctx.started_at = time.monotonic()
        try:
            result = processor(ctx, cmd)
        except Exception as e:  # a processor bug must not take the connection down
            self._failed(ctx, cmd, e)
            self._release(g)
            return
        if type(result) is types.CoroutineType and getattr(processor, "inline_first_step", False):
            # Run the coroutine's first step inline: most sends (to an ASYNC_FLUSH store) complete
            # without ever suspending, and then need no Task and no extra loop turn.
            try:
                first = result.send(None)
            except StopIteration as stop:
                self._finish(ctx, cmd, stop.value, g)
                return
            except Exception as e:
                self._failed(ctx, cmd, e)
                self._release(g)
                return
            result = _resume(result, first)
        if result is None or result.__class__ is RemotingCommand:  # the usual answers, without the ABC check
            self._finish(ctx, cmd, result, g)
        elif inspect.isawaitable(result):
            task = asyncio.ensure_future(self._run(ctx, cmd, result, g))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._finish(ctx, cmd, result, g)

    async def _run(
        self,
        ctx: RequestContext,
        cmd: RemotingCommand,
        aw: Awaitable[RemotingCommand | None],
        g: ProcessorGroup,
    ) -> None:
        try:
            result = await aw
        except asyncio.CancelledError:
            self._release(g)
            raise
        except Exception as e:
            self._failed(ctx, cmd, e)
            self._release(g)
            return
        self._finish(ctx, cmd, result, g)

    def _finish(
        self, ctx: RequestContext, cmd: RemotingCommand, result: RemotingCommand | None, g: ProcessorGroup
    ) -> None:
        if result is not None:
            ctx.send_response(cmd, result)
        self._release(g)

    def _failed(self, ctx: RequestContext, cmd: RemotingCommand, e: BaseException) -> None:
        log.warning(
            "processor_failed",
            code=code_name(cmd.code, response=False),
            peer=ctx.remote_addr,
            error=f"{type(e).__name__}: {e}",
        )
        ctx.send_response(cmd, RemotingCommand(code=ResponseCode.SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}"))

    def _release(self, g: ProcessorGroup) -> None:
        g.inflight -= 1
        if not g.pending or g.draining:
            return
        g.draining = True
        try:
            while g.pending and g.inflight < g.concurrency:
                ctx, cmd, processor = g.pending.popleft()
                if ctx.conn.closed:
                    continue
                self._start(ctx, cmd, processor, g)
        finally:
            g.draining = False

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def inline_first_step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a coroutine processor whose first step may run inside the dispatcher, before any Task
    exists (a Task drives the rest if it suspends). Only for code that does not need
    asyncio.current_task() before its first suspension (asyncio.timeout and TaskGroup do)."""
    fn.inline_first_step = True  # type: ignore[attr-defined]
    return fn


def groupable(group_method: str) -> Callable[[F], F]:
    """Mark a processor method whose owner can also process a run of pipelined requests at once:
    `owner.<group_method>(ctx, cmds)` returns (or, as a coroutine, resolves to) one answer (or None) per
    request, in order. Its first step runs inline like `inline_first_step`."""

    def mark(fn: F) -> F:
        fn.group_method = group_method  # type: ignore[attr-defined]
        return fn

    return mark


def _group_fn_of(processor: Processor) -> GroupProcessor | None:
    name = getattr(processor, "group_method", None)
    owner = getattr(processor, "__self__", None)
    if name is None or owner is None:
        return None
    fn: GroupProcessor | None = getattr(owner, name, None)
    return fn


@types.coroutine
def _resume(coro: Any, first: Any) -> Any:
    """Continue a coroutine whose first step already ran and yielded `first` (what it awaits), so a
    Task can drive the rest exactly as if it had run it from the start."""
    try:
        yield first
    except BaseException as e:  # cancellation (or a thrown error) goes to the coroutine
        try:
            nxt = coro.throw(e)
        except StopIteration as stop:
            return stop.value
        return (yield from _resume(coro, nxt))
    return (yield from coro)


ResponseCallback = Callable[[RemotingCommand | None, BaseException | None], None]


def _noop_callback(response: RemotingCommand | None, exc: BaseException | None) -> None:
    return None


class _Pending:
    """A request waiting for its response in a connection's table: the connection calls resolve() or
    fail() once, after taking the entry out of the table."""

    __slots__ = ("code", "started", "timeout_ms")

    code: int
    started: float
    timeout_ms: float

    def resolve(self, response: RemotingCommand) -> None:
        raise NotImplementedError

    def fail(self, exc: BaseException) -> None:
        raise NotImplementedError


class _FuturePending(_Pending):
    """invoke_future's entry: a Future and its own time-out timer."""

    __slots__ = ("future", "timer")

    def __init__(self, future: asyncio.Future[RemotingCommand], code: int, started: float, timeout_ms: float):
        self.future = future
        self.code = code
        self.started = started
        self.timeout_ms = timeout_ms
        self.timer: asyncio.TimerHandle | None = None

    def resolve(self, response: RemotingCommand) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if not self.future.done():
            self.future.set_result(response)

    def fail(self, exc: BaseException) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if not self.future.done():
            self.future.set_exception(exc)


class _CallbackPending(_Pending):
    """invoke_callback's entry: the response callback runs right inside data_received (or
    connection_lost), so a pipelined request costs no Future, no scheduled done-callback and no timer
    of its own; its time-out comes from the connection's DeadlineFifos."""

    __slots__ = ("callback", "conn", "opaque", "deadline", "finished")

    def __init__(
        self, callback: ResponseCallback, conn: RemotingConnection, opaque: int, code: int, started: float,
        timeout_ms: float,
    ) -> None:
        self.code = code
        self.started = started
        self.timeout_ms = timeout_ms
        self.callback = callback
        self.conn = conn
        self.opaque = opaque
        self.deadline = started + timeout_ms / 1000.0
        self.finished = False

    def resolve(self, response: RemotingCommand) -> None:
        self._finish(response, None)

    def fail(self, exc: BaseException) -> None:
        self._finish(None, exc)

    def _finish(self, response: RemotingCommand | None, exc: BaseException | None) -> None:
        if self.finished:
            return
        self.finished = True
        callback = self.callback
        self.callback = _noop_callback  # called once: let go of the request's state
        try:
            callback(response, exc)
        except Exception:  # runs inside data_received: never let it break the read loop
            log.exception("response_callback_failed", peer=self.conn.remote_addr, opaque=self.opaque)

    def expire(self, now: float) -> None:
        pending = self.conn._pending
        if pending.get(self.opaque) is self:
            del pending[self.opaque]
        self._finish(None, RemotingTimeoutError(
            self.conn.remote_addr, self.code, (now - self.started) * 1000.0, self.timeout_ms
        ))


class ResponseEntry(_Pending):
    """A pipelined request that is its own response handler (RemotingConnection.invoke_entry_packed):
    a subclass adds its request state and implements on_response(response, exc), called exactly once,
    synchronously from the read path (or the time-out scan, or connection_lost), like invoke_callback's
    callback. One object per request instead of a callback object plus a _CallbackPending. The connection
    stops tracking its time-out before on_response runs, and fills code, started, timeout_ms and the slots
    here."""

    __slots__ = ("conn", "opaque", "deadline", "finished")

    conn: RemotingConnection
    opaque: int
    deadline: float
    finished: bool

    def on_response(self, response: RemotingCommand | None, exc: BaseException | None) -> None:
        raise NotImplementedError

    def resolve(self, response: RemotingCommand) -> None:
        if self.finished:
            return
        self.finished = True
        try:
            self.on_response(response, None)
        except Exception:  # runs inside data_received: never let it break the read loop
            log.exception("response_callback_failed", peer=self.conn.remote_addr, opaque=self.opaque)

    def fail(self, exc: BaseException) -> None:
        if self.finished:
            return
        self.finished = True
        try:
            self.on_response(None, exc)
        except Exception:
            log.exception("response_callback_failed", peer=self.conn.remote_addr, opaque=self.opaque)

    def expire(self, now: float) -> None:
        pending = self.conn._pending
        if pending.get(self.opaque) is self:
            del pending[self.opaque]
        self.fail(RemotingTimeoutError(self.conn.remote_addr, self.code, (now - self.started) * 1000.0, self.timeout_ms))


def _expire_entries(entries: list[_CallbackPending | ResponseEntry], now: float) -> None:
    for entry in entries:
        entry.expire(now)


class RemotingConnection(asyncio.Protocol):
    """One TCP connection speaking RemotingCommand frames, in either direction."""

    def __init__(
        self,
        dispatcher: RequestDispatcher | None,
        *,
        opaque: OpaqueGenerator | None = None,
        on_close: Callable[[RemotingConnection], None] | None = None,
        max_frame_size: int = MAX_FRAME_SIZE,
        max_inflight: int = 65535,
        role: str = "server",
        idle_poller: IdlePoller | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: dict[int, _Pending] = {}
        # invoke_callback's time-outs (one timer for all), made on first use
        self._timeouts: DeadlineFifos[_CallbackPending | ResponseEntry] | None = None
        self._opaque = opaque or OpaqueGenerator()
        self._on_close = on_close
        self._max_inflight = max_inflight
        self._role = role
        # Told of every read and write (IdlePoller.touch_read / touch): the loop keeps polling for a while
        # after them.
        self._touch = idle_poller.touch if idle_poller is not None else None
        self._touch_read = idle_poller.touch_read if idle_poller is not None else None
        self._loop = asyncio.get_running_loop()
        self._write_ok = asyncio.Event()
        self._write_ok.set()
        # pause_writing/resume_writing state as a plain attribute: the per-request nowait paths read it
        # (Event.is_set through a property costs two calls).
        self.write_paused = False
        self._out: list[bytes | bytearray | memoryview] = []
        self._flush_scheduled = False
        self.transport: asyncio.Transport | None = None
        self.remote_addr = "?"
        self.local_addr = "?"
        self.closed = False
        self.last_active = time.monotonic()
        self.connected = self._loop.create_future()
        # Free-form slot for the owner (e.g. the broker's client channel info).
        self.attachment: Any = None

    # -------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.remote_addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.local_addr = f"{sock[0]}:{sock[1]}" if sock else "?"
        s = transport.get_extra_info("socket")
        if s is not None:
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if not self.connected.done():
            self.connected.set_result(None)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.last_active = now
        if self._touch_read is not None:
            self._touch_read()
        try:
            cmds = self._decoder.feed(data)
        except ProtocolError as e:
            log.warning("bad_frame_closing_connection", peer=self.remote_addr, role=self._role, reason=str(e))
            self.abort()
            return
        if len(cmds) != 1 or self._flush_scheduled:
            # Answers go out in one coalesced write later in this loop iteration (see send).
            self._handle(cmds, now)
            return
        # A read of one frame (a sync send, a lone pull): what handling it produces is written as soon as
        # it is done, before the work it woke (the dispatch of what was stored) runs, and with no wait for
        # another loop turn. Until then senders see a flush as already scheduled and only append.
        self._flush_scheduled = True
        try:
            self._handle(cmds, now)
        finally:
            self._flush()

    def _handle(self, cmds: list[RemotingCommand], now: float) -> None:
        requests: list[RemotingCommand] = []
        for cmd in cmds:
            if cmd.flag & RemotingFlag.RPC_TYPE:
                p = self._pending.pop(cmd.opaque, None)
                if p is None:
                    log.debug("response_without_request", peer=self.remote_addr, opaque=cmd.opaque)
                    continue
                timeouts = self._timeouts
                if timeouts is not None:
                    # Before resolve: an entry tracked again from inside it (a reused request state) stays.
                    timeouts.discard(p.timeout_ms, p)
                p.resolve(cmd)
            else:
                requests.append(cmd)
        if not requests:
            return
        dispatcher = self._dispatcher
        if dispatcher is None:
            for cmd in requests:
                log.debug("request_ignored_no_dispatcher", peer=self.remote_addr, code=cmd.code)
        else:
            dispatcher.dispatch_many(self, requests, now)

    def eof_received(self) -> bool | None:
        try:
            self._decoder.at_eof()
        except ProtocolError as e:
            log.warning("truncated_frame", peer=self.remote_addr, role=self._role, reason=str(e))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._write_ok.set()
        self.write_paused = False
        if not self.connected.done():
            self.connected.set_exception(
                RemotingConnectionClosedError(self.remote_addr, reason="connection lost before it was ready")
            )
        if self._timeouts is not None:
            self._timeouts.clear()
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.fail(RemotingConnectionClosedError(self.remote_addr, p.code))
        if self._on_close is not None:
            try:
                self._on_close(self)
            except Exception:  # a listener must not break the transport
                log.exception("close_listener_failed", peer=self.remote_addr)

    def pause_writing(self) -> None:
        # Backpressure: stop reading requests from a peer that is not reading our answers.
        self._write_ok.clear()
        self.write_paused = True
        if self.transport is not None and self._role == "server":
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_ok.set()
        self.write_paused = False
        if self.transport is not None and self._role == "server" and not self.closed:
            self.transport.resume_reading()

    # -------------------------------------------------------------- sending
    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def send(self, cmd: RemotingCommand) -> None:
        t = self.transport
        if t is None or self.closed or t.is_closing():
            raise RemotingSendRequestError(self.remote_addr, "connection is closed")
        head, body = encode_parts(cmd)
        # Coalesce frames produced in one loop iteration into one write: with many requests in
        # flight this turns a syscall per frame into a syscall per batch.
        out = self._out
        out.append(head)
        if body is not None:
            out.append(body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def send_responses(
        self, requests: list[RemotingCommand], responses: list[RemotingCommand | _PackedAnswer | None]
    ) -> None:
        """Answer a run of requests (None: no answer now), as RequestContext.send_response would each, with
        the connection checked once and every frame in one coalesced write."""
        t = self.transport
        if t is None or self.closed or t.is_closing():
            return
        out = self._out
        add = out.append
        for request, response in zip(requests, responses, strict=True):
            if response is None or request.flag & _RPC_ONEWAY:
                continue
            if response.__class__ is PackedResponse:
                if request.serialize_type is _MSGPACK:
                    header = b"".join((response.lead, _msgpack_pack(request.opaque), response.tail))  # type: ignore[union-attr]
                    hlen = len(header)
                    if hlen + 4 <= MAX_FRAME_SIZE:
                        add(_pack_prefix(hlen + 4, _MSGPACK_BITS | hlen) + header)
                        continue
                response = response.command()  # type: ignore[union-attr]
            elif isinstance(response, _PackedAnswer):  # a JSON or ROCKETMQ request's (MSGPACK's inline above)
                if request.serialize_type is response.serialize_type:
                    header = response.header(request.opaque)
                    hlen = len(header)
                    if hlen + 4 <= MAX_FRAME_SIZE:
                        add(_pack_prefix(hlen + 4, response.serialize_type << 24 | hlen) + header)
                        continue
                response = response.command()
            opaque = response.opaque = request.opaque
            flag = response.flag = response.flag | _RPC_TYPE
            st = response.serialize_type = request.serialize_type
            if st is _MSGPACK and response.body is None and response.packed_ext is None:
                # A bodiless MSGPACK answer (every send's): encode_parts' bytes without its calls.
                header = _msgpack_pack((response.code, response.language, response.version, opaque, flag,
                                        response.remark, response.ext_fields))
                hlen = len(header)
                if hlen + 4 <= MAX_FRAME_SIZE:
                    add(_pack_prefix(hlen + 4, _MSGPACK_BITS | hlen) + header)
                    continue
            head, body = encode_parts(response)
            add(head)
            if body is not None:
                add(body)
        if out and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def flush(self) -> None:
        """Write what is queued now instead of at the end of this loop turn (one write)."""
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        t = self.transport
        if out and t is not None and not t.is_closing():
            t.writelines(out)
            if self._touch is not None:
                self._touch()  # the peer's next request may follow its answer: poll for it

    @property
    def is_writable(self) -> bool:
        """False while the transport's write buffer is over its high-water mark."""
        return self._write_ok.is_set()

    async def writable(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if not self._write_ok.is_set():
            await self._write_ok.wait()

    def invoke_future(self, cmd: RemotingCommand, timeout_ms: float) -> asyncio.Future[RemotingCommand]:
        """Send a request; the future resolves with the response or a typed RemotingError."""
        if len(self._pending) >= self._max_inflight:
            raise RemotingTooMuchRequestError(
                f"{len(self._pending)} requests already in flight to {self.remote_addr}"
            )
        cmd.opaque = self._opaque.next()
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()
        p = _FuturePending(fut, cmd.code, time.monotonic(), timeout_ms)
        self._pending[cmd.opaque] = p
        try:
            self.send(cmd)
        except Exception:
            self._pending.pop(cmd.opaque, None)
            raise
        p.timer = self._loop.call_later(timeout_ms / 1000.0, self._expire, cmd.opaque)
        return fut

    def _expire(self, opaque: int) -> None:
        p = self._pending.pop(opaque, None)
        if p is not None:
            elapsed = (time.monotonic() - p.started) * 1000.0
            p.fail(RemotingTimeoutError(self.remote_addr, p.code, elapsed, p.timeout_ms))

    def invoke_callback(self, cmd: RemotingCommand, timeout_ms: float, callback: ResponseCallback) -> None:
        """The cheapest pipelined request: send now, then call callback(response, None) or
        callback(None, error) (RemotingTimeoutError naming the peer, code and elapsed ms, or
        RemotingConnectionClosedError) exactly once, synchronously from the read path (or the
        connection's time-out scan). No Future and no timer per request. The callback must not raise
        (it is logged) and must not block. Raises RemotingTooMuchRequestError or
        RemotingSendRequestError (nothing sent, callback not called)."""
        pending = self._pending
        if len(pending) >= self._max_inflight:
            raise RemotingTooMuchRequestError(f"{len(pending)} requests already in flight to {self.remote_addr}")
        opaque = cmd.opaque = self._opaque.next()
        entry = _CallbackPending(callback, self, opaque, cmd.code, time.monotonic(), timeout_ms)
        pending[opaque] = entry
        try:
            self.send(cmd)
        except Exception:
            pending.pop(opaque, None)
            raise
        timeouts = self._timeouts
        if timeouts is None:
            timeouts = self._timeouts = DeadlineFifos(_expire_entries)
        timeouts.add(entry.timeout_ms, entry)

    def invoke_entry_packed(
        self,
        entry: ResponseEntry,
        code: int,
        ext_parts: tuple[bytes, ...],
        body: bytes | bytearray | memoryview,
        timeout_ms: float,
        flush_now: bool = False,
    ) -> None:
        """invoke_callback for a MSGPACK request given as its code, its extFields map already packed (as
        pieces to concatenate) and its body, answered to `entry.on_response`: the frame's head is built
        straight from them (the bytes encode_parts gives for the equivalent RemotingCommand), with no
        command object and no callback object. Same contract as invoke_callback."""
        pending = self._pending
        if len(pending) >= self._max_inflight:
            raise RemotingTooMuchRequestError(f"{len(pending)} requests already in flight to {self.remote_addr}")
        t = self.transport
        if t is None or self.closed or t.is_closing():
            raise RemotingSendRequestError(self.remote_addr, "connection is closed")
        opaque = self._opaque.next()
        head = encode_msgpack_request_head(code, opaque, ext_parts, len(body))
        started = time.monotonic()
        entry.code = code
        entry.started = started
        entry.timeout_ms = timeout_ms
        entry.conn = self
        entry.opaque = opaque
        entry.deadline = started + timeout_ms / 1000.0
        entry.finished = False
        pending[opaque] = entry
        out = self._out
        out.append(head)
        if body:
            out.append(body)
        if not self._flush_scheduled:
            if flush_now:
                # A lone (sync) send: nothing to coalesce with, so write now rather than one loop
                # iteration later (saves an iteration and an epoll wait per send).
                self._flush()
            else:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
        timeouts = self._timeouts
        if timeouts is None:
            timeouts = self._timeouts = DeadlineFifos(_expire_entries)
        timeouts.add(entry.timeout_ms, entry)

    async def invoke(self, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        return await self.invoke_future(cmd, timeout_ms)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.mark_oneway()
        cmd.opaque = self._opaque.next()
        self.send(cmd)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
