"""PullRequestHoldService: long polling.

A pull that finds nothing new is parked here (per topic@queue) instead of being answered. It is
answered as soon as a matching message arrives: the store's arrival listener calls
`notify_message_arriving` when its dispatcher has indexed a message. Each held pull is also answered
when its own suspend timeout passes (exactly: one FIFO per timeout value, whose deadlines only grow,
and one loop timer at the earliest -- no timer per pull); a safety re-check of every held queue runs
every 5 s (long polling) or every shortPollingTimeMills (short polling). On wake-up or timeout the pull is processed again
without permission to suspend, so it is answered with messages or PULL_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection, RequestContext
from remoting.deadlines import DeadlineFifos
from remoting.loop import cancel_and_wait, in_slices

log = structlog.get_logger(__name__)

LONG_POLLING_CHECK_INTERVAL_S = 5.0
CHECK_SLICE = 512  # held queues re-checked per loop turn by the safety net


class PullRequest:
    """One held pull: the request to re-run, where to answer, and what would wake it."""

    __slots__ = (
        "ctx",
        "request",
        "topic",
        "queue_id",
        "pull_from_this_offset",
        "message_filter",
        "suspend_timestamp",
        "timeout_millis",
        "finished",
        "header",
    )

    def __init__(
        self,
        ctx: RequestContext,
        request: RemotingCommand,
        topic: str,
        queue_id: int,
        pull_from_this_offset: int,
        message_filter: Any,
        timeout_millis: int,
        header: Any = None,
    ) -> None:
        self.ctx = ctx
        self.request = request
        self.topic = topic
        self.queue_id = queue_id
        self.pull_from_this_offset = pull_from_this_offset
        self.message_filter = message_filter
        self.suspend_timestamp = time.monotonic()
        self.timeout_millis = timeout_millis
        self.finished = False
        # The request's decoded header: the wake-up re-run skips decoding it again.
        self.header = header

    @property
    def deadline(self) -> float:
        return self.suspend_timestamp + self.timeout_millis / 1000.0

    def matches(self, tags_code: int | None, properties: Mapping[str, str] | None) -> bool:
        f = self.message_filter
        if f is None:
            return True
        if not f.is_matched_by_consume_queue(tags_code):
            return False
        if properties is not None:
            check = getattr(f, "is_matched_by_commit_log", None)
            if check is not None:
                return bool(check(None, properties))
        return True


WakeCallback = Callable[[PullRequest], None]
MaxOffsetFn = Callable[[str, int], int]


class PullRequestHoldService:
    def __init__(
        self,
        wake: WakeCallback,
        max_offset_in_queue: MaxOffsetFn,
        *,
        long_polling_enable: Callable[[], bool] = lambda: True,
        short_polling_time_mills: Callable[[], int] = lambda: 1000,
        max_held: int = 100000,
        on_first_held: Callable[[str, int], None] = lambda _topic, _queue_id: None,
    ) -> None:
        self._wake = wake
        # Told when a queue gets its first held pull: has_held turned true (the store keeps its answers).
        self._on_first_held = on_first_held
        self._max_offset = max_offset_in_queue
        self._long_polling_enable = long_polling_enable
        self._short_polling_time_mills = short_polling_time_mills
        self.max_held = max_held
        self.pull_request_table: dict[tuple[str, int], list[PullRequest]] = {}
        self._by_conn: dict[RemotingConnection, set[PullRequest]] = {}
        self.held = 0
        # Held pulls' suspend timeouts: one loop timer for all (an answered pull leaves them in _remove).
        self._expiry: DeadlineFifos[PullRequest] = DeadlineFifos(self._expire_all, slack=0.001)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.woken_total = 0
        self.expired_total = 0
        self._to_wake: list[PullRequest] = []  # woken, to be answered on the next loop turn (_wake_batch)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name="pull-request-hold")

    async def stop(self) -> None:
        self._expiry.clear()
        await cancel_and_wait(self._task)
        self._task = None
        # Answer whatever is still held (PULL_NOT_FOUND or messages) rather than leave clients waiting.
        for reqs in list(self.pull_request_table.values()):
            for req in list(reqs):
                self._fire(req)
        self.pull_request_table.clear()
        self._by_conn.clear()
        self._expiry.clear()
        self.held = 0

    async def _run(self) -> None:
        while True:
            if self._long_polling_enable():
                await asyncio.sleep(LONG_POLLING_CHECK_INTERVAL_S)
            else:
                await asyncio.sleep(self._short_polling_time_mills() / 1000.0)
            try:
                await self.check_hold_request()
            except Exception:
                log.exception("check_hold_request_failed")

    # ------------------------------------------------------------------ holding

    def suspend_pull_request(self, req: PullRequest) -> bool:
        """Hold req until a matching message arrives or its timeout; False when too many are held."""
        if self.held >= self.max_held:
            return False
        lst = self.pull_request_table.get((req.topic, req.queue_id))
        if lst is None:
            lst = self.pull_request_table[(req.topic, req.queue_id)] = []
            self._on_first_held(req.topic, req.queue_id)
        lst.append(req)
        self._by_conn.setdefault(req.ctx.conn, set()).add(req)
        self.held += 1
        self._expiry.add(req.timeout_millis, req)
        return True

    def has_held(self, topic: str, queue_id: int) -> bool:
        """Whether a pull is held on the queue (the store's per-batch filter for notify_message_arriving)."""
        return (topic, queue_id) in self.pull_request_table

    def _expire_all(self, reqs: list[PullRequest], _now: float) -> None:
        """Answer every held pull whose suspend timeout has passed."""
        for req in reqs:
            self._expire(req)

    def _remove(self, req: PullRequest) -> bool:
        """Take req out of the tables; False when it was already gone."""
        if req.finished:
            return False
        req.finished = True
        self._expiry.discard(req.timeout_millis, req)
        key = (req.topic, req.queue_id)
        lst = self.pull_request_table.get(key)
        if lst is not None:
            try:  # (not contextlib.suppress: an object and two calls for every answered pull)
                lst.remove(req)
            except ValueError:
                pass
            if not lst:
                del self.pull_request_table[key]
        conns = self._by_conn.get(req.ctx.conn)
        if conns is not None:
            conns.discard(req)
            if not conns:
                del self._by_conn[req.ctx.conn]
        self.held -= 1
        return True

    def _fire(self, req: PullRequest) -> None:
        if self._remove(req):
            self._answer(req)

    def _answer(self, req: PullRequest) -> None:
        """Run a pull taken out of the tables again and answer it (not on a closed connection; a failure
        is logged, and stays this pull's)."""
        if req.ctx.conn.closed:
            return
        try:
            self._wake(req)
        except Exception:
            log.exception("pull_wakeup_failed", topic=req.topic, queue_id=req.queue_id)

    def _expire(self, req: PullRequest) -> None:
        if not req.finished:
            self.expired_total += 1
            self._fire(req)

    # ------------------------------------------------------------------ waking

    def notify_message_arriving(
        self,
        topic: str,
        queue_id: int,
        max_offset: int,
        tags_code: int | None = None,
        store_timestamp: int = 0,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """A message reached topic/queue_id and the queue now ends at max_offset: wake matching pulls."""
        lst = self.pull_request_table.get((topic, queue_id))
        if not lst:
            return
        newest_from_store: int | None = None
        woken: list[PullRequest] = []
        for req in lst:
            newest = max_offset
            if newest <= req.pull_from_this_offset:
                if newest_from_store is None:
                    newest_from_store = self._max_offset(topic, queue_id)
                newest = newest_from_store
            if newest > req.pull_from_this_offset and req.matches(tags_code, properties):
                woken.append(req)
        if not woken:
            return
        for req in woken:
            self._remove(req)
            self.woken_total += 1
        # Answer on a fresh loop turn: the caller is the store's dispatcher, which must not wait on us. One
        # turn for every pull woken meanwhile (a dispatch pass wakes one per queue it fed), not one each.
        batch = self._to_wake
        if not batch:
            (self._loop or asyncio.get_running_loop()).call_soon(self._wake_batch)
        batch += woken

    def _wake_batch(self) -> list[PullRequest]:
        """Answer every pull woken since the last call; returns them."""
        batch, self._to_wake = self._to_wake, []
        for req in batch:
            self._answer(req)
        return batch

    # ------------------------------------------------------------------ the store's inline dispatch
    # (store.reput.InlineDispatchListener: a put to a queue with a pull held on it is dispatched before it
    # is answered, and the pulls it woke are answered first)

    def any_waiting(self) -> bool:
        return self.held > 0

    def wants_inline(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self.pull_request_table

    def dispatched_inline(self) -> None:
        """Answer the pulls the put's dispatch woke now (not on the next loop turn), each connection's in one
        write: they go out before the put's own answer."""
        for conn in dict.fromkeys(req.ctx.conn for req in self._wake_batch()):  # (each once, in order)
            if not conn.closed:
                conn.flush()

    async def check_hold_request(self) -> None:
        """Safety net: re-check every held queue against the store's max offset, CHECK_SLICE queues per loop
        turn: a consumer group on 4 000 topics holds a pull on each of 16 000 queues, and one pass over them
        held the loop for ~11 ms every 5 s."""
        async for part in in_slices(list(self.pull_request_table), CHECK_SLICE):
            for topic, queue_id in part:
                if (topic, queue_id) in self.pull_request_table:
                    self.notify_message_arriving(topic, queue_id, self._max_offset(topic, queue_id))

    def on_channel_close(self, conn: RemotingConnection) -> None:
        for req in list(self._by_conn.get(conn, ())):
            self._remove(req)
