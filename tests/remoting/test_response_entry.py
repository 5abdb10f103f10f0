"""RemotingConnection.invoke_entry_packed (and RemotingClient.invoke_entry_packed_nowait): a MSGPACK
request written from its code and pre-packed extFields, answered to the pending entry itself, with the
same contract as invoke_callback: one call each, typed time-outs, connection loss, bounds, and a
paused write buffer sends nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgpack
import pytest

from remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingConnectionClosedError,
    RemotingSendRequestError,
    RemotingServer,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
    RequestContext,
    RequestDispatcher,
    SerializeType,
)
from remoting.connection import ResponseEntry

ECHO, NEVER = 1, 2


class Entry(ResponseEntry):
    __slots__ = ("got", "done", "big")

    def __init__(self, done: asyncio.Event) -> None:
        self.got: list[tuple[RemotingCommand | None, BaseException | None]] = []
        self.done = done
        self.big: bytes | None = b"x" * 10

    def on_response(self, response: RemotingCommand | None, exc: BaseException | None) -> None:
        self.got.append((response, exc))
        self.big = None
        self.done.set()


def _ext(**kv: str) -> tuple[bytes, ...]:
    packed = msgpack.packb(kv)
    return (packed[:1], packed[1:])


@pytest.fixture
async def server() -> AsyncIterator[str]:
    d = RequestDispatcher()
    seen: list[RemotingCommand] = []

    def echo(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd)
        return cmd.response(ext_fields={"v": cmd.ext("v") or "", "body": (cmd.body or b"").decode()})

    def never(ctx: RequestContext, cmd: RemotingCommand) -> None:
        return None

    d.register(ECHO, echo)
    d.register(NEVER, never)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    _, port = await srv.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await srv.stop()


async def test_entries_are_answered_once_each_in_msgpack(server: str) -> None:
    c = RemotingClient()
    try:
        await c.invoke(server, RemotingCommand.request(ECHO, {"v": "warm"}))
        done = asyncio.Event()
        entries = [Entry(done) for _ in range(50)]
        for i, e in enumerate(entries):
            assert c.invoke_entry_packed_nowait(server, e, ECHO, _ext(v=str(i)), f"b{i}".encode(), 3000)
        while not all(e.got for e in entries):
            done.clear()
            await asyncio.wait_for(done.wait(), 5)
        for i, e in enumerate(entries):
            ((resp, exc),) = e.got
            assert exc is None and resp is not None and resp.serialize_type is SerializeType.MSGPACK
            assert resp.ext("v") == str(i) and resp.ext("body") == f"b{i}" and e.finished and e.big is None
        (conn,) = c._conns.values()
        assert conn.pending_count == 0
    finally:
        await c.close()


async def test_timeout_loss_bounds_and_paused_writes(server: str) -> None:
    c = RemotingClient(max_inflight_per_connection=3)
    try:
        await c.invoke(server, RemotingCommand.request(ECHO, {"v": "warm"}))
        conn = await c.get_connection(server)
        done = asyncio.Event()
        short = Entry(done)
        conn.invoke_entry_packed(short, NEVER, _ext(), b"", 100)
        await asyncio.wait_for(done.wait(), 5)
        ((resp, exc),) = short.got
        assert resp is None and isinstance(exc, RemotingTimeoutError) and exc.elapsed_ms >= 90
        assert server in str(exc) and conn.pending_count == 0

        hung = [Entry(asyncio.Event()) for _ in range(3)]
        for e in hung:
            conn.invoke_entry_packed(e, NEVER, _ext(), b"", 3000)
        with pytest.raises(RemotingTooMuchRequestError):
            conn.invoke_entry_packed(Entry(done), ECHO, _ext(), b"", 3000)
        assert conn.pending_count == 3

        conn.pause_writing()
        assert conn.write_paused and not c.invoke_entry_packed_nowait(server, Entry(done), ECHO, _ext(), b"", 3000)
        conn.resume_writing()
        assert not conn.write_paused

        conn.close()
        for e in hung:
            await asyncio.wait_for(e.done.wait(), 5)
            ((resp, exc),) = e.got
            assert resp is None and isinstance(exc, RemotingConnectionClosedError)
        late = Entry(asyncio.Event())
        with pytest.raises(RemotingSendRequestError):
            conn.invoke_entry_packed(late, ECHO, _ext(), b"", 3000)
        assert not late.got and conn.pending_count == 0
    finally:
        await c.close()


async def test_flush_now_writes_at_once_and_others_coalesce(server: str) -> None:
    """flush_now (a lone sync send) hands the frame to the transport in the call; without it the frames
    of one loop iteration go out in one coalesced write on the next iteration."""
    c = RemotingClient()
    try:
        await c.invoke(server, RemotingCommand.request(ECHO, {"v": "warm"}))
        conn = await c.get_connection(server)
        t = conn.transport
        assert t is not None
        writes: list[int] = []
        real = t.writelines

        def spy(bufs):  # type: ignore[no-untyped-def]
            writes.append(len(bufs))
            real(bufs)

        t.writelines = spy  # type: ignore[method-assign]
        done = asyncio.Event()
        now = Entry(done)
        assert c.invoke_entry_packed_nowait(server, now, ECHO, _ext(v="now"), b"x", 3000, True)
        assert writes == [2]  # head + body, written before the call returned
        later = [Entry(done) for _ in range(3)]
        for e in later:
            assert c.invoke_entry_packed_nowait(server, e, ECHO, _ext(v="later"), b"y", 3000)
        assert writes == [2]
        await asyncio.sleep(0)
        assert writes == [2, 6]  # the three pipelined sends in one write
        for e in [now, *later]:
            while not e.got:
                done.clear()
                await asyncio.wait_for(done.wait(), 5)
        assert now.got[0][0].ext("v") == "now" and all(e.got[0][0].ext("v") == "later" for e in later)
    finally:
        await c.close()


class AgainOnce(ResponseEntry):
    """Answered once, it sends itself again (a reused request state) to a peer that never answers."""

    __slots__ = ("got", "done", "again")

    def __init__(self, done: asyncio.Event, again: object) -> None:
        self.got: list[tuple[RemotingCommand | None, BaseException | None]] = []
        self.done = done
        self.again = again

    def on_response(self, response: RemotingCommand | None, exc: BaseException | None) -> None:
        self.got.append((response, exc))
        again, self.again = self.again, None
        if again is not None:
            again(self)  # type: ignore[operator]
        else:
            self.done.set()


async def test_an_entry_sent_again_from_its_answer_still_times_out(server: str) -> None:
    """The connection stops tracking an answered entry's time-out before calling it, so one that starts its
    next request from inside on_response is tracked for that one (not forgotten right after)."""
    c = RemotingClient()
    try:
        await c.invoke(server, RemotingCommand.request(ECHO, {"v": "warm"}))
        conn = await c.get_connection(server)
        done = asyncio.Event()
        # One time-out value for both: the second is tracked where the first was.
        e = AgainOnce(done, lambda entry: conn.invoke_entry_packed(entry, NEVER, _ext(), b"", 300))
        conn.invoke_entry_packed(e, ECHO, _ext(v="1"), b"", 300)
        await asyncio.wait_for(done.wait(), 5)
        (first, _), (resp, exc) = e.got
        assert first is not None and first.ext("v") == "1"
        assert resp is None and isinstance(exc, RemotingTimeoutError) and conn.pending_count == 0
    finally:
        await c.close()
