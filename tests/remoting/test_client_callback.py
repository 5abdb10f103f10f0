"""RemotingConnection.invoke_callback (and RemotingClient.invoke_callback_nowait on top of it): pipelined
requests answered through a callback run from the read path, with time-outs from one scan per connection
instead of a timer per request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

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
    ResponseCode,
)

ECHO, NEVER = 1, 2


@pytest.fixture
async def server() -> AsyncIterator[tuple[RemotingServer, str]]:
    d = RequestDispatcher()
    d.register(ECHO, lambda ctx, cmd: cmd.response(ext_fields={"v": cmd.ext("v")}))

    def never(ctx: RequestContext, cmd: RemotingCommand) -> None:
        return None  # answered never: the client must time out

    d.register(NEVER, never)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    _, port = await srv.start()
    try:
        yield srv, f"127.0.0.1:{port}"
    finally:
        await srv.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    try:
        yield c
    finally:
        await c.close()


class Outcomes:
    def __init__(self) -> None:
        self.got: list[tuple[RemotingCommand | None, BaseException | None, float]] = []
        self.event = asyncio.Event()

    def __call__(self, resp: RemotingCommand | None, exc: BaseException | None) -> None:
        self.got.append((resp, exc, time.monotonic()))
        self.event.set()

    async def wait(self, n: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < n:
            assert time.monotonic() < deadline, f"only {len(self.got)} of {n} callbacks"
            self.event.clear()
            try:
                await asyncio.wait_for(self.event.wait(), 0.1)
            except TimeoutError:
                pass


async def test_not_connected_sends_nothing(server, client) -> None:
    _, addr = server
    out = Outcomes()
    assert client.invoke_callback_nowait(addr, RemotingCommand.request(ECHO, {"v": "x"}), 1000, out) is False
    await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))
    assert client.invoke_callback_nowait(addr, RemotingCommand.request(ECHO, {"v": "x"}), 1000, out) is True
    await out.wait(1)
    resp, exc, _ = out.got[0]
    assert exc is None and resp is not None and resp.code == ResponseCode.SUCCESS and resp.ext("v") == "x"


async def test_many_pipelined_each_called_once_with_its_answer(server, client) -> None:
    _, addr = server
    await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))
    seen: dict[str, int] = {}

    def cb_for(v: str):  # type: ignore[no-untyped-def]
        def cb(resp: RemotingCommand | None, exc: BaseException | None) -> None:
            assert exc is None and resp is not None and resp.ext("v") == v
            seen[v] = seen.get(v, 0) + 1

        return cb

    for i in range(500):
        assert client.invoke_callback_nowait(addr, RemotingCommand.request(ECHO, {"v": str(i)}), 3000, cb_for(str(i)))
    deadline = time.monotonic() + 5
    while len(seen) < 500 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert seen == {str(i): 1 for i in range(500)}
    (conn,) = client._conns.values()
    assert conn.pending_count == 0


async def test_timeout_names_address_code_and_elapsed_and_a_short_one_is_not_held_up(server, client) -> None:
    _, addr = server
    await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))
    long, short = Outcomes(), Outcomes()
    t0 = time.monotonic()
    # The long time-out goes first: the shorter one behind it must still fire on its own time.
    assert client.invoke_callback_nowait(addr, RemotingCommand.request(NEVER), 2000, long)
    assert client.invoke_callback_nowait(addr, RemotingCommand.request(NEVER), 150, short)
    await short.wait(1)
    resp, exc, at = short.got[0]
    assert resp is None and isinstance(exc, RemotingTimeoutError)
    assert 0.14 <= at - t0 < 1.5, at - t0
    assert addr in str(exc) and "timed out after" in str(exc) and exc.code == NEVER and exc.timeout_ms == 150
    assert exc.elapsed_ms >= 140
    assert not long.got  # still waiting
    (conn,) = client._conns.values()
    assert conn.pending_count == 1  # the expired one left the table
    # An answer still works on the same connection meanwhile.
    r = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "alive"}))
    assert r.ext("v") == "alive"
    await long.wait(1, timeout=5)
    assert isinstance(long.got[0][1], RemotingTimeoutError) and long.got[0][2] - t0 >= 1.9


async def test_connection_loss_fails_callbacks_at_once(server, client) -> None:
    srv, addr = server
    await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))
    out = Outcomes()
    for _ in range(3):
        assert client.invoke_callback_nowait(addr, RemotingCommand.request(NEVER), 30000, out)
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    await srv.stop()
    await out.wait(3)
    assert all(isinstance(e, RemotingConnectionClosedError) and r is None for r, e, _ in out.got)
    assert time.monotonic() - t0 < 3


async def test_a_raising_callback_does_not_break_the_connection(server, client) -> None:
    _, addr = server
    await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))

    def bad(resp: RemotingCommand | None, exc: BaseException | None) -> None:
        raise RuntimeError("callback bug")

    out = Outcomes()
    assert client.invoke_callback_nowait(addr, RemotingCommand.request(ECHO, {"v": "1"}), 3000, bad)
    assert client.invoke_callback_nowait(addr, RemotingCommand.request(ECHO, {"v": "2"}), 3000, out)
    await out.wait(1)
    assert out.got[0][0] is not None and out.got[0][0].ext("v") == "2"


async def test_answered_requests_behind_an_unanswered_one_are_not_kept(server, client) -> None:
    _, addr = server
    await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))
    hung = Outcomes()
    assert client.invoke_callback_nowait(addr, RemotingCommand.request(NEVER), 3000, hung)
    done = Outcomes()
    for i in range(10):
        for _ in range(1000):
            assert client.invoke_callback_nowait(addr, RemotingCommand.request(ECHO, {"v": "x"}), 3000, done)
        await done.wait(1000 * (i + 1))
    (conn,) = client._conns.values()
    assert len(conn._timeouts) == 1 and not hung.got  # only the unanswered one


async def test_connection_invoke_callback_is_public_and_bounded(server) -> None:
    """The connection-level API: it registers its own pending entry, bounds the in-flight count and
    fails at once, without calling back, when nothing could be sent."""
    _, addr = server
    c = RemotingClient(max_inflight_per_connection=2)
    try:
        await c.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))
        conn = await c.get_connection(addr)
        hung = Outcomes()
        conn.invoke_callback(RemotingCommand.request(NEVER), 3000, hung)
        conn.invoke_callback(RemotingCommand.request(NEVER), 3000, hung)
        assert conn.pending_count == 2
        with pytest.raises(RemotingTooMuchRequestError):
            conn.invoke_callback(RemotingCommand.request(ECHO, {"v": "x"}), 3000, hung)
        assert conn.pending_count == 2
        conn.close()
        await hung.wait(2)
        assert all(isinstance(e, RemotingConnectionClosedError) for _, e, _ in hung.got)
        assert conn.pending_count == 0
        out = Outcomes()
        with pytest.raises(RemotingSendRequestError):
            conn.invoke_callback(RemotingCommand.request(ECHO, {"v": "y"}), 3000, out)
        assert conn.pending_count == 0 and not out.got
    finally:
        await c.close()


async def test_connection_invoke_callback_answers_with_its_own_response(server, client) -> None:
    _, addr = server
    await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "warm"}))
    conn = await client.get_connection(addr)
    out = Outcomes()
    for v in ("a", "b", "c"):
        conn.invoke_callback(RemotingCommand.request(ECHO, {"v": v}), 3000, out)
    await out.wait(3)
    assert [r.ext("v") for r, e, _ in out.got if r is not None] == ["a", "b", "c"]
    assert conn.pending_count == 0
