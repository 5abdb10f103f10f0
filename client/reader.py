"""QueueReader: read one message queue from offset A to offset B, with no consumer-group membership.

This is the seam batch engines (the Spark connector, backfills, audits) read through. It knows
nothing of rebalancing or offset stores: the caller names the queue and the offsets, the reader
pulls them.

    async with await QueueReader.create("127.0.0.1:9876") as reader:
        for mq in await reader.fetch_queues("TopicTest"):
            lo, hi = await reader.min_offset(mq), await reader.max_offset(mq)
            async for msgs in reader.read_range(mq, lo, hi):
                ...  # list[MessageExt], bodies decompressed, in queue-offset order

    with BlockingQueueReader("127.0.0.1:9876") as reader:   # no event loop needed (executors, scripts)
        for msgs in reader.read_range(mq, lo, hi):
            ...

How a range is read:

- PULL_MESSAGE without the suspend flag (never long-polls) and with the subscription flag plus the
  tag expression (so the broker needs no registered consumer and filters tags by hash code; the
  reader re-checks the exact tag, as RocketMQ's clients do). `consumer_group` names the group in
  the request only; the broker auto-creates its subscription config when
  `autoCreateSubscriptionGroup` is on, else create the group first.
- Each pull asks for `pull_batch_size` messages; the broker caps what it returns
  (`maxTransferCountOnMessageInMemory`, 32 by default, and 256 KiB). The reader learns that cap
  from the first answer and then keeps `pipeline` pulls in flight at consecutive offsets, so a
  range streams at the connection's speed rather than one round trip per 32 messages. A pull that
  comes back short leaves a gap which is pulled before anything after it is delivered: batches
  always come out in offset order, without gaps or repeats.
- Reading stops at `end` (exclusive) or when the queue has nothing more (its max offset).
- A start below the queue's min offset (files cleaned) or above its max offset (queue reset)
  raises `OffsetOutOfRangeError` carrying the queue's min and max offsets, so the caller decides
  (e.g. Spark's failOnDataLoss) whether to fail or to continue from `min_offset`.

`read_range_raw` yields the broker's record bytes undecoded (`PulledChunk`) for callers with a
columnar decoder of their own; `read_range` decodes them (remoting.message.decode_messages,
zlib bodies decompressed when the COMPRESSED sysflag is set).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import PullMessageRequestHeader
from remoting.message import PermName, decode_messages

from .config import ClientConfig
from .consumer.filter import EXPRESSION_TYPE_SQL92, MessageSelector, build_subscription_data
from .errors import MQBrokerError, MQClientError, NoRouteError, SystemBusyError, error_for_code
from .instance import MQClientInstance, get_client_manager
from .message import MessageExt, MessageQueue, PullResult, PullStatus
from .mq_client_api import PullSysFlag
from .route import MASTER_ID

log = structlog.get_logger(__name__)

T = TypeVar("T")

DEFAULT_READER_GROUP = "CID_QUEUE_READER"
TAG_EXPRESSION_TYPE = "TAG"
# Transient answers (SYSTEM_BUSY, a timeout, PULL_RETRY_IMMEDIATELY without progress) are retried
# this many times per position before the error is raised.
MAX_PULL_RETRIES = 5

__all__ = [
    "BlockingQueueReader",
    "OffsetOutOfRangeError",
    "PulledChunk",
    "QueueReader",
    "TagExpression",
    "decode_chunk",
]


class OffsetOutOfRangeError(MQClientError):
    """The requested offset is not in the queue any more (below min: cleaned) or not yet/never
    (above max: the queue was reset). `min_offset`/`max_offset` are the queue's current bounds."""

    def __init__(self, mq: MessageQueue, requested: int, min_offset: int, max_offset: int) -> None:
        self.mq = mq
        self.requested = requested
        self.min_offset = min_offset
        self.max_offset = max_offset
        if requested < min_offset:
            why = f"below the queue's min offset {min_offset} (its messages were cleaned)"
        else:
            why = f"beyond the queue's max offset {max_offset} (the queue was reset or recreated)"
        super().__init__(
            f"offset {requested} of {mq.topic}/{mq.broker_name}/{mq.queue_id} is {why}; "
            f"the queue now holds offsets [{min_offset}, {max_offset})"
        )


@dataclass(frozen=True, slots=True)
class TagExpression:
    """`*` or `TagA || TagB`; `matches(tag)` is the exact client-side check. Or an SQL92 selector
    (`MessageSelector.by_sql`), which the broker applies exactly (needs enablePropertyFilter): no tags
    to check here."""

    expression: str
    tags: frozenset[str] | None
    expression_type: str = TAG_EXPRESSION_TYPE

    @classmethod
    def parse(cls, expression: str | MessageSelector | None) -> TagExpression:
        if isinstance(expression, MessageSelector):
            if expression.expression_type == EXPRESSION_TYPE_SQL92:
                sql = (expression.expression or "").strip()
                if not sql:
                    raise MQClientError("empty SQL92 expression")
                return cls(sql, None, EXPRESSION_TYPE_SQL92)
            expression = expression.expression
        expr = (expression or "*").strip()
        if not expr or expr == "*":
            return cls("*", None)
        tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
        if not tags:
            raise MQClientError(f"bad tag expression {expression!r}: use '*' or 'TagA || TagB'")
        return cls(" || ".join(sorted(tags)), tags)

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)


@dataclass(slots=True)
class PulledChunk:
    """One pull's records, undecoded: keep only records with lo <= queue offset < hi (earlier
    offsets were delivered by a previous chunk; later ones are past the requested end) and, when
    `tags` is not None, whose TAGS property is one of them. The range has been read up to
    `next_offset` (exclusive) once this chunk is consumed; `body` may be empty (offsets skipped
    because no message there matched the tags)."""

    mq: MessageQueue
    body: bytes
    lo: int
    hi: int
    next_offset: int
    min_offset: int
    max_offset: int
    tags: frozenset[str] | None = None


def _retrieve(f: asyncio.Future[Any]) -> None:
    if not f.cancelled():
        f.exception()


class QueueReader:
    """Reads ranges of message queues (async). Create with `await QueueReader.create(addr)` (owns a
    shared MQClientInstance, released by `close()`), or `QueueReader(instance)` on one you own."""

    def __init__(
        self,
        instance: MQClientInstance,
        *,
        consumer_group: str = DEFAULT_READER_GROUP,
        pull_batch_size: int = 1024,
        pipeline: int = 8,
        pull_timeout_ms: float = 10_000,
        timeout_ms: float | None = None,
        owns_instance: bool = False,
    ) -> None:
        if pull_batch_size < 1 or pipeline < 1:
            raise MQClientError("pull_batch_size and pipeline must be >= 1")
        self.instance = instance
        self.api = instance.api
        self.consumer_group = consumer_group
        self.pull_batch_size = pull_batch_size
        self.pipeline = pipeline
        self.pull_timeout_ms = pull_timeout_ms
        self.timeout_ms = timeout_ms or instance.config.mq_client_api_timeout
        self._owns_instance = owns_instance
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._closed = False

    @classmethod
    async def create(
        cls, namesrv_addr: str | None = None, *, config: ClientConfig | None = None, **kwargs: Any
    ) -> QueueReader:
        """A reader on the process's shared client instance for this NameServer set."""
        cfg = config or ClientConfig(namesrv_addr=namesrv_addr)
        inst = await get_client_manager().acquire(cfg)
        return cls(inst, owns_instance=True, **kwargs)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_instance:
            await get_client_manager().release(self.instance)

    async def __aenter__(self) -> QueueReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ routes and offsets
    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of a topic from the NameServer (fresh, not cached): readQueueNums per broker.

        Raises TopicNotExistError when the NameServer knows no such topic.
        """
        route = await self.api.get_topic_route_info_from_name_server(topic, self.timeout_ms)
        for bd in route.broker_datas:
            self._broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
        queues: list[MessageQueue] = []
        for qd in route.queue_datas:
            if PermName.is_readable(qd.perm) and self._broker_addrs.get(qd.broker_name):
                queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
        return sorted(queues)

    async def check_selector(self, topic: str, selector: str | MessageSelector) -> None:
        """For an SQL92 selector: CHECK_CLIENT_CONFIG with every master of the topic (as a consumer does when
        it starts), so a broker without enablePropertyFilter, or an expression it cannot compile, fails
        here, naming the broker, instead of at the first pull. Tag expressions need no check."""
        expr = TagExpression.parse(selector)
        if expr.expression_type != EXPRESSION_TYPE_SQL92:
            return
        sd = build_subscription_data(topic, MessageSelector.by_sql(expr.expression))
        route = await self.api.get_topic_route_info_from_name_server(topic, self.timeout_ms)
        for bd in route.broker_datas:
            addr = bd.broker_addrs.get(MASTER_ID)
            if not addr:
                continue
            try:
                await self.api.check_client_in_broker(addr, self.consumer_group, self.instance.client_id, sd,
                                                      self.timeout_ms)
            except MQBrokerError as e:
                raise MQClientError(f"broker {bd.broker_name} ({addr}) refuses the SQL92 expression "
                                    f"{expr.expression!r} for topic {topic}: {e}") from e

    async def broker_addr(self, broker_name: str, topic: str | None = None, *, master: bool = False) -> str:
        """The master's address (any broker of that name for reads when no master is up)."""
        table = self._broker_addrs.get(broker_name)
        if not table and topic is not None:
            await self.fetch_queues(topic)
            table = self._broker_addrs.get(broker_name)
        if not table:
            table = self.instance.broker_addr_table.get(broker_name)
        if not table:
            raise NoRouteError(topic or "?", f"broker {broker_name} is not in any route the reader has seen")
        addr = table.get(MASTER_ID)
        if addr is None:
            if master:
                raise NoRouteError(topic or "?", f"broker {broker_name} has no master online")
            addr = table[min(table)]
        return addr

    async def min_offset(self, mq: MessageQueue) -> int:
        addr = await self.broker_addr(mq.broker_name, mq.topic)
        # A queue that never held a message may answer -1 (no consume queue yet): it starts at 0.
        return max(0, await self.api.get_min_offset(addr, mq.topic, mq.queue_id, self.timeout_ms))

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the next message of the queue will get (exclusive end of what is there)."""
        addr = await self.broker_addr(mq.broker_name, mq.topic)
        return max(0, await self.api.get_max_offset(addr, mq.topic, mq.queue_id, self.timeout_ms))

    async def offset_range(self, mq: MessageQueue) -> tuple[int, int]:
        """(min offset, max offset) of the queue."""
        lo, hi = await asyncio.gather(self.min_offset(mq), self.max_offset(mq))
        return lo, hi

    async def offset_ranges(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
        """offset_range of many queues, asked concurrently."""
        mqs = list(mqs)
        got = await asyncio.gather(*(self.offset_range(mq) for mq in mqs))
        return dict(zip(mqs, got, strict=True))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the offset of the first message stored at or after the time
        (the broker's answer; the max offset when every message is older)."""
        addr = await self.broker_addr(mq.broker_name, mq.topic)
        return await self.api.search_offset(addr, mq.topic, mq.queue_id, int(timestamp_ms), self.timeout_ms)

    async def committed_offset(self, group: str, mq: MessageQueue) -> int | None:
        """The group's committed offset of the queue on the broker, None when it has none."""
        addr = await self.broker_addr(mq.broker_name, mq.topic, master=True)
        try:
            return await self.api.query_consumer_offset(addr, group, mq.topic, mq.queue_id, self.timeout_ms)
        except MQBrokerError as e:
            if e.code == ResponseCode.QUERY_NOT_FOUND:
                return None
            raise

    async def commit_offset(self, group: str, mq: MessageQueue, offset: int) -> bool:
        """UPDATE_CONSUMER_OFFSET on the queue's master, best effort: False (logged) on failure."""
        try:
            addr = await self.broker_addr(mq.broker_name, mq.topic, master=True)
            await self.api.update_consumer_offset(addr, group, mq.topic, mq.queue_id, int(offset), self.timeout_ms)
            return True
        except (MQClientError, MQBrokerError, RemotingError) as e:
            log.warning("commit_offset_failed", group=group, mq=str(mq), offset=offset, error=str(e))
            return False

    async def commit_offsets(self, group: str, offsets: dict[MessageQueue, int]) -> int:
        """commit_offset for many queues concurrently; returns how many succeeded."""
        done = await asyncio.gather(*(self.commit_offset(group, mq, off) for mq, off in offsets.items()))
        return sum(done)

    # ------------------------------------------------------------------ reading
    async def read_range(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        sub_expression: str | MessageSelector = "*",
        max_batch: int | None = None,
    ) -> AsyncIterator[list[MessageExt]]:
        """Messages of `mq` with start <= queue offset < end, in order, one list per pull (empty
        lists are not yielded). Stops early when the queue ends before `end`."""
        async for chunk in self.read_range_raw(mq, start, end, sub_expression=sub_expression, max_batch=max_batch):
            msgs = decode_chunk(chunk)
            if msgs:
                yield msgs

    async def read_range_raw(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        sub_expression: str | MessageSelector = "*",
        max_batch: int | None = None,
        pipeline: int | None = None,
    ) -> AsyncIterator[PulledChunk]:
        """The records of [start, end) as the broker sends them, in order (see PulledChunk)."""
        if end <= start:
            return
        if start < 0:
            raise MQClientError(f"start offset must be >= 0, got {start}")
        expr = TagExpression.parse(sub_expression)
        batch = max_batch or self.pull_batch_size
        depth = pipeline or self.pipeline
        addr = await self.broker_addr(mq.broker_name, mq.topic)
        tpl = self._pull_ext(mq, expr)
        pos = start
        step = 0  # offsets one pull returns (learned from the first capped answer); 0 = not yet known
        next_req = start
        retries = 0
        inflight: collections.deque[tuple[int, int, asyncio.Future[RemotingCommand]]] = collections.deque()
        try:
            while pos < end:
                if not inflight:
                    next_req = pos
                try:
                    window = depth if step else 1
                    while len(inflight) < window and next_req < end:
                        n = min(step or batch, end - next_req)
                        inflight.append((next_req, n, await self._send_pull(addr, mq, next_req, n, expr, tpl)))
                        next_req += n
                    if inflight[0][0] > pos:
                        # A gap [pos, first in-flight offset) left by a short answer: pull it first.
                        n = min(batch, inflight[0][0] - pos)
                        inflight.appendleft((pos, n, await self._send_pull(addr, mq, pos, n, expr, tpl)))
                    req_off, asked, fut = inflight.popleft()
                    resp = await fut
                    result = self.api.process_pull_response(resp, addr, decode=False)
                except (RemotingError, SystemBusyError) as e:
                    retries += 1
                    if retries > MAX_PULL_RETRIES:
                        raise
                    log.info("pull_retry", mq=str(mq), offset=pos, error=str(e), attempt=retries)
                    self._drop(inflight)
                    await asyncio.sleep(min(0.05 * retries, 0.5))
                    if isinstance(e, RemotingError):
                        # The broker may have moved (restarted elsewhere): ask the NameServer again.
                        with contextlib.suppress(MQClientError, MQBrokerError, RemotingError):
                            await self.fetch_queues(mq.topic)
                        addr = await self.broker_addr(mq.broker_name, mq.topic)
                    continue
                status = result.status
                nb = result.next_begin_offset
                if status is PullStatus.FOUND:
                    retries = 0
                    if nb < result.max_offset and nb > req_off:
                        # What one pull covers for messages like these (the broker's count/byte cap,
                        # or more offsets than asked when tags are filtered): stride the pipeline by it.
                        step = nb - req_off
                    elif not step:
                        step = batch
                    if nb > pos:
                        yield PulledChunk(
                            mq, resp.body or b"", pos, end, nb, result.min_offset, result.max_offset, expr.tags
                        )
                        pos = nb
                elif status is PullStatus.OFFSET_ILLEGAL:
                    if pos < result.min_offset or pos > result.max_offset:
                        raise OffsetOutOfRangeError(mq, pos, result.min_offset, result.max_offset)
                    if pos >= result.max_offset:
                        return  # a pipelined pull past the queue's end, and we are at the end
                    if req_off < pos:
                        continue  # a stale answer for offsets already delivered
                    retries += 1
                    if retries > MAX_PULL_RETRIES:
                        raise OffsetOutOfRangeError(mq, pos, result.min_offset, result.max_offset)
                    self._drop(inflight)
                else:  # NO_NEW_MSG / NO_MATCHED_MSG
                    if nb > pos and nb > req_off:
                        # Nothing matched the tags there, or a hole in the CommitLog: skip ahead
                        # (an empty chunk tells the caller how far the range has been read).
                        retries = 0
                        yield PulledChunk(mq, b"", pos, end, nb, result.min_offset, result.max_offset, expr.tags)
                        pos = nb
                        step = step or batch
                        continue
                    if req_off < pos:
                        continue
                    if status is PullStatus.NO_NEW_MSG or pos >= result.max_offset:
                        return  # the queue has nothing more
                    retries += 1  # PULL_RETRY_IMMEDIATELY without progress (a file being removed)
                    if retries > MAX_PULL_RETRIES:
                        raise error_for_code(
                            ResponseCode.PULL_RETRY_IMMEDIATELY, f"no progress at offset {pos} of {mq}", addr
                        )
                    self._drop(inflight)
                    await asyncio.sleep(0.01 * retries)
        finally:
            self._drop(inflight)

    @staticmethod
    def _drop(inflight: collections.deque[tuple[int, int, asyncio.Future[RemotingCommand]]]) -> None:
        for _, _, f in inflight:
            if f.done():
                _retrieve(f)
            else:
                f.add_done_callback(_retrieve)
        inflight.clear()

    def _pull_ext(self, mq: MessageQueue, expr: TagExpression) -> dict[str, str]:
        """The PULL_MESSAGE header fields that do not change along a range (built once per range)."""
        return PullMessageRequestHeader(
            consumer_group=self.consumer_group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=0,
            max_msg_nums=1,
            sys_flag=PullSysFlag.build(commit_offset=False, suspend=False, subscription=True),
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription=expr.expression,
            sub_version=0,
            expression_type=expr.expression_type,
        ).encode()

    async def _send_pull(
        self,
        addr: str,
        mq: MessageQueue,
        offset: int,
        n: int,
        expr: TagExpression,
        template: dict[str, str] | None = None,
    ) -> asyncio.Future[RemotingCommand]:
        ext = dict(template or self._pull_ext(mq, expr))
        ext["queueOffset"] = str(offset)
        ext["maxMsgNums"] = str(n)
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
        return await self.api.remoting.invoke_future(addr, cmd, self.pull_timeout_ms)

    async def pull_once(
        self, mq: MessageQueue, offset: int, max_nums: int | None = None, *, sub_expression: str | MessageSelector = "*"
    ) -> PullResult:
        """One PULL_MESSAGE at `offset` (no suspend), decoded. For tools and tests."""
        expr = TagExpression.parse(sub_expression)
        addr = await self.broker_addr(mq.broker_name, mq.topic)
        resp = await (await self._send_pull(addr, mq, offset, max_nums or self.pull_batch_size, expr))
        result = self.api.process_pull_response(resp, addr, decode=True)
        if expr.tags is not None:
            result.messages = [m for m in result.messages if expr.matches(m.tags)]
        return result


def decode_chunk(chunk: PulledChunk) -> list[MessageExt]:
    """The chunk's messages within [lo, hi) and matching its tags, bodies decompressed."""
    if not chunk.body:
        return []
    msgs = decode_messages(chunk.body, decompress_body=True)
    lo, hi, tags = chunk.lo, chunk.hi, chunk.tags
    return [
        m for m in msgs if lo <= m.queue_offset < hi and (tags is None or m.properties.get("TAGS") in tags)
    ]


# ------------------------------------------------------------------------------------------ blocking twin


class BlockingQueueReader:
    """QueueReader for blocking code (Spark executors, scripts): same methods, no event loop needed.

    Runs on the process's client loop thread (client.sync.get_loop_thread), on the shared client
    instance of that loop; `close()` (or the context manager) releases the instance. Any thread
    may call it; an iterator returned by `read_range*` belongs to the thread consuming it, and
    closing it early (break) stops its pulls.
    """

    def __init__(self, namesrv_addr: str | None = None, *, config: ClientConfig | None = None, **kwargs: Any) -> None:
        from .sync import get_loop_thread

        self._thread = get_loop_thread()
        self._timeout_s = float(kwargs.get("pull_timeout_ms", 10_000)) / 1000 * (MAX_PULL_RETRIES + 2) + 10
        self.reader: QueueReader = self._thread.run(QueueReader.create(namesrv_addr, config=config, **kwargs), 30)
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread.thread.is_alive() and not self._thread.loop.is_closed():
            with contextlib.suppress(Exception):
                self._thread.run(self.reader.close(), 15)

    def __enter__(self) -> BlockingQueueReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._thread.run(coro, self._timeout_s)

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return self._call(self.reader.fetch_queues(topic))

    def check_selector(self, topic: str, selector: str | MessageSelector) -> None:
        self._call(self.reader.check_selector(topic, selector))

    def min_offset(self, mq: MessageQueue) -> int:
        return self._call(self.reader.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._call(self.reader.max_offset(mq))

    def offset_range(self, mq: MessageQueue) -> tuple[int, int]:
        return self._call(self.reader.offset_range(mq))

    def offset_ranges(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
        return self._call(self.reader.offset_ranges(list(mqs)))

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._call(self.reader.offset_for_timestamp(mq, timestamp_ms))

    def committed_offset(self, group: str, mq: MessageQueue) -> int | None:
        return self._call(self.reader.committed_offset(group, mq))

    def commit_offset(self, group: str, mq: MessageQueue, offset: int) -> bool:
        return self._call(self.reader.commit_offset(group, mq, offset))

    def commit_offsets(self, group: str, offsets: dict[MessageQueue, int]) -> int:
        return self._call(self.reader.commit_offsets(group, offsets))

    def pull_once(self, mq: MessageQueue, offset: int, max_nums: int | None = None, *, sub_expression: str | MessageSelector = "*") -> PullResult:
        return self._call(self.reader.pull_once(mq, offset, max_nums, sub_expression=sub_expression))

    def read_range(
        self, mq: MessageQueue, start: int, end: int, *, sub_expression: str | MessageSelector = "*", max_batch: int | None = None
    ) -> Iterator[list[MessageExt]]:
        for chunk in self.read_range_raw(mq, start, end, sub_expression=sub_expression, max_batch=max_batch):
            msgs = decode_chunk(chunk)
            if msgs:
                yield msgs

    def read_range_raw(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        sub_expression: str | MessageSelector = "*",
        max_batch: int | None = None,
        pipeline: int | None = None,
    ) -> Iterator[PulledChunk]:
        """Blocking iterator over QueueReader.read_range_raw. Chunks already received are handed
        over together, so the loop thread keeps pulls in flight while the caller decodes."""
        agen = self.reader.read_range_raw(
            mq, start, end, sub_expression=sub_expression, max_batch=max_batch, pipeline=pipeline
        )
        box: _ChunkBox = _ChunkBox()
        task_fut = asyncio.run_coroutine_threadsafe(box.fill(agen), self._thread.loop)
        try:
            while True:
                items, done = box.take(self._timeout_s)
                yield from items
                if done:
                    break
            task_fut.result(self._timeout_s)  # raises the reader's error, if any
        finally:
            if not task_fut.done():
                task_fut.cancel()
                with contextlib.suppress(BaseException):
                    task_fut.result(10)


class _ChunkBox:
    """Hands chunks from the loop thread to the caller's thread: at most `limit` waiting (the
    producer pauses beyond that), all waiting ones taken at once."""

    def __init__(self, limit: int = 32) -> None:
        self.limit = limit
        self._items: list[PulledChunk] = []
        self._done = False
        self._cond = threading.Condition()
        self._space: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def fill(self, agen: AsyncIterator[PulledChunk]) -> None:
        self._loop = asyncio.get_running_loop()
        self._space = asyncio.Event()
        try:
            async for chunk in agen:
                while True:
                    with self._cond:
                        if len(self._items) < self.limit:
                            self._items.append(chunk)
                            self._cond.notify()
                            break
                        self._space.clear()
                    await self._space.wait()
        finally:
            with contextlib.suppress(Exception):
                await agen.aclose()  # type: ignore[attr-defined]
            with self._cond:
                self._done = True
                self._cond.notify()

    def take(self, timeout: float) -> tuple[list[PulledChunk], bool]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._items and not self._done:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no data from the queue reader within {timeout:.0f}s")
                self._cond.wait(left)
            items, self._items = self._items, []
            done = self._done
        if items and self._loop is not None and self._space is not None:
            self._loop.call_soon_threadsafe(self._space.set)
        return items, done
