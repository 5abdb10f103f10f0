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
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection, RequestContext

log = structlog.get_logger(__name__)

LONG_POLLING_CHECK_INTERVAL_S = 5.0
_COMPACT_MIN = 4096  # a timeout FIFO's length worth compacting (answered pulls behind a held head)


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
        "done",
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
        self.done = False
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
    ) -> None:
        self._wake = wake
        self._max_offset = max_offset_in_queue
        self._long_polling_enable = long_polling_enable
        self._short_polling_time_mills = short_polling_time_mills
        self.max_held = max_held
        self.pull_request_table: dict[tuple[str, int], list[PullRequest]] = {}
        self._by_conn: dict[RemotingConnection, set[PullRequest]] = {}
        self.held = 0
        # Held pulls per timeout value, in suspend order (so by deadline); answered ones are dropped
        # from the head lazily and by compaction. One timer at the earliest pending deadline.
        self._expiry: dict[int, deque[PullRequest]] = {}
        self._compact_at: dict[int, int] = {}
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._expiry_due = 0.0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.woken_total = 0
        self.expired_total = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name="pull-request-hold")

    async def stop(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # Answer whatever is still held (PULL_NOT_FOUND or messages) rather than leave clients waiting.
        for reqs in list(self.pull_request_table.values()):
            for req in list(reqs):
                self._fire(req)
        self.pull_request_table.clear()
        self._by_conn.clear()
        self._expiry.clear()
        self._compact_at.clear()
        self.held = 0

    async def _run(self) -> None:
        while True:
            if self._long_polling_enable():
                await asyncio.sleep(LONG_POLLING_CHECK_INTERVAL_S)
            else:
                await asyncio.sleep(self._short_polling_time_mills() / 1000.0)
            try:
                self.check_hold_request()
            except Exception:
                log.exception("check_hold_request_failed")

    # ------------------------------------------------------------------ holding

    def suspend_pull_request(self, req: PullRequest) -> bool:
        """Hold req until a matching message arrives or its timeout; False when too many are held."""
        if self.held >= self.max_held:
            return False
        loop = self._loop or asyncio.get_running_loop()
        self.pull_request_table.setdefault((req.topic, req.queue_id), []).append(req)
        self._by_conn.setdefault(req.ctx.conn, set()).add(req)
        self.held += 1
        key = req.timeout_millis
        dq = self._expiry.get(key)
        if dq is None:
            dq = self._expiry[key] = deque()
        else:
            while dq and dq[0].done:  # amortised O(1): the FIFO stays about as long as what is held
                dq.popleft()
            if len(dq) >= self._compact_at.get(key, _COMPACT_MIN):
                dq = self._expiry[key] = deque(r for r in dq if not r.done)
                self._compact_at[key] = max(_COMPACT_MIN, 2 * len(dq))
        dq.append(req)
        deadline = req.deadline
        if self._expiry_timer is None or deadline < self._expiry_due:
            self._arm(loop, deadline)
        return True

    def _arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._expiry_due = due
        # call_at takes loop.time(); deadlines are time.monotonic() (one clock on Linux; convert anyway).
        self._expiry_timer = loop.call_at(loop.time() + max(0.0, due - time.monotonic()), self._expire_due)

    def _expire_due(self) -> None:
        """Answer every held pull whose suspend timeout has passed; re-arm at the next deadline."""
        self._expiry_timer = None
        now = time.monotonic() + 0.001  # the loop's clock has ms resolution: do not re-arm for a sliver
        due = float("inf")
        expired: list[PullRequest] = []
        for key in list(self._expiry):
            dq = self._expiry[key]
            while dq:
                req = dq[0]
                if req.done:
                    dq.popleft()
                elif req.deadline <= now:
                    dq.popleft()
                    expired.append(req)
                else:
                    due = min(due, req.deadline)
                    break
            if not dq:
                del self._expiry[key]
                self._compact_at.pop(key, None)
        for req in expired:
            self._expire(req)
        if due != float("inf") and self._expiry_timer is None:
            self._arm(self._loop or asyncio.get_running_loop(), due)

    def _remove(self, req: PullRequest) -> bool:
        """Take req out of the tables; False when it was already gone."""
        if req.done:
            return False
        req.done = True  # its timeout FIFO entry is dropped lazily
        key = (req.topic, req.queue_id)
        lst = self.pull_request_table.get(key)
        if lst is not None:
            with contextlib.suppress(ValueError):
                lst.remove(req)
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
        if not self._remove(req):
            return
        if req.ctx.conn.closed:
            return
        try:
            self._wake(req)
        except Exception:
            log.exception("pull_wakeup_failed", topic=req.topic, queue_id=req.queue_id)

    def _expire(self, req: PullRequest) -> None:
        if not req.done:
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
        loop = self._loop or asyncio.get_running_loop()
        for req in woken:
            self._remove(req)
            self.woken_total += 1
            # Answer on a fresh loop turn: the caller is the store's dispatcher, which must not wait on us.
            loop.call_soon(self._wake_if_open, req)

    def _wake_if_open(self, req: PullRequest) -> None:
        if req.ctx.conn.closed:
            return
        try:
            self._wake(req)
        except Exception:
            log.exception("pull_wakeup_failed", topic=req.topic, queue_id=req.queue_id)

    def check_hold_request(self) -> None:
        """Safety net: re-check every held queue against the store's max offset."""
        for topic, queue_id in list(self.pull_request_table):
            self.notify_message_arriving(topic, queue_id, self._max_offset(topic, queue_id))

    def on_channel_close(self, conn: RemotingConnection) -> None:
        for req in list(self._by_conn.get(conn, ())):
            self._remove(req)
