"""RemotingServer + RemotingClient over real loopback sockets."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import AsyncIterator

import pytest

from remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingServer,
    RemotingTimeoutError,
    RequestContext,
    RequestDispatcher,
    ResponseCode,
    SerializeType,
    encode,
)

ECHO, SLOW, BOOM, HOLD, ONEWAY_SINK, CALLBACK = 1, 2, 3, 4, 5, 6


class App:
    def __init__(self) -> None:
        self.oneway_seen: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.release = asyncio.Event()
        self.held: list[tuple[RequestContext, RemotingCommand]] = []

    def echo(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ext_fields={"v": cmd.ext("v")}, body=cmd.body)

    async def slow(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(float(cmd.ext("delay") or "0.2"))
        return cmd.response(ext_fields={"v": cmd.ext("v")})

    def boom(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("kaboom")

    async def hold(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        await self.release.wait()
        return cmd.response()

    def sink(self, ctx: RequestContext, cmd: RemotingCommand) -> None:
        self.oneway_seen.put_nowait(cmd)
        return cmd.response()  # must be dropped: oneway requests get no answer

    def later(self, ctx: RequestContext, cmd: RemotingCommand) -> None:
        self.held.append((ctx, cmd))
        return None


@pytest.fixture
async def server() -> AsyncIterator[tuple[RemotingServer, App, str]]:
    app = App()
    d = RequestDispatcher()
    d.add_group("hold", concurrency=2, max_pending=2)
    d.register(ECHO, app.echo)
    d.register(SLOW, app.slow)
    d.register(BOOM, app.boom)
    d.register(HOLD, app.hold, group="hold")
    d.register(ONEWAY_SINK, app.sink)
    d.register(CALLBACK, app.later)
    srv = RemotingServer(d, host="127.0.0.1", port=0, idle_timeout_s=120)
    _, port = await srv.start()
    try:
        yield srv, app, f"127.0.0.1:{port}"
    finally:
        app.release.set()
        await srv.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    try:
        yield c
    finally:
        await c.close()


async def test_sync_invoke_and_connection_reuse(server, client) -> None:
    _, _, addr = server
    r1 = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "a"}, b"body"))
    r2 = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "b"}))
    assert r1.code == ResponseCode.SUCCESS and r1.ext("v") == "a" and r1.body == b"body"
    assert r2.ext("v") == "b" and r1.opaque != r2.opaque
    assert client.connected_addrs() == [addr]


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.MSGPACK])
async def test_server_answers_in_request_type(server, stype) -> None:
    _, _, addr = server
    c = RemotingClient(serialize_type=stype)
    try:
        r = await c.invoke(addr, RemotingCommand.request(ECHO, {"v": "x"}))
        assert r.serialize_type is stype and r.ext("v") == "x"
    finally:
        await c.close()


async def test_async_callback_and_out_of_order_responses(server, client) -> None:
    _, _, addr = server
    got: list[str] = []
    done = asyncio.Event()

    def cb(resp, exc) -> None:
        assert exc is None
        got.append(resp.ext("v"))
        if len(got) == 3:
            done.set()

    await client.invoke_async(addr, RemotingCommand.request(SLOW, {"v": "slow", "delay": "0.3"}), 3000, cb)
    await client.invoke_async(addr, RemotingCommand.request(SLOW, {"v": "mid", "delay": "0.1"}), 3000, cb)
    await client.invoke_async(addr, RemotingCommand.request(ECHO, {"v": "fast"}), 3000, cb)
    await asyncio.wait_for(done.wait(), 5)
    assert got == ["fast", "mid", "slow"]


async def test_many_concurrent_calls_match_their_responses(server, client) -> None:
    _, _, addr = server
    futs = [await client.invoke_future(addr, RemotingCommand.request(ECHO, {"v": str(i)})) for i in range(500)]
    resps = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert [r.ext("v") for r in resps] == [str(i) for i in range(500)]


async def test_oneway_gets_no_answer(server, client) -> None:
    _, app, addr = server
    await client.invoke_oneway(addr, RemotingCommand.request(ONEWAY_SINK, {"v": "1"}))
    seen = await asyncio.wait_for(app.oneway_seen.get(), 5)
    assert seen.is_oneway and seen.ext("v") == "1"
    conn = await client.get_connection(addr)
    # A normal call afterwards still gets its own answer, not a stray oneway response.
    r = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "after"}))
    assert r.ext("v") == "after" and conn.pending_count == 0


async def test_timeout_names_address_code_and_elapsed(server, client) -> None:
    _, _, addr = server
    t0 = time.monotonic()
    with pytest.raises(RemotingTimeoutError) as ei:
        await client.invoke(addr, RemotingCommand.request(SLOW, {"delay": "2"}), timeout_ms=100)
    elapsed = time.monotonic() - t0
    assert 0.09 <= elapsed < 1.5
    assert addr in str(ei.value) and "timed out after" in str(ei.value) and ei.value.code == SLOW


async def test_processor_error_becomes_system_error_and_connection_survives(server, client) -> None:
    _, _, addr = server
    r = await client.invoke(addr, RemotingCommand.request(BOOM))
    assert r.code == ResponseCode.SYSTEM_ERROR and "kaboom" in (r.remark or "")
    r = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "still"}))
    assert r.ext("v") == "still"


async def test_unknown_code_not_supported(server, client) -> None:
    _, _, addr = server
    r = await client.invoke(addr, RemotingCommand.request(9999))
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in (r.remark or "")


async def test_deferred_response(server, client) -> None:
    _, app, addr = server
    fut = await client.invoke_future(addr, RemotingCommand.request(CALLBACK, {"v": "x"}))
    for _ in range(100):
        if app.held:
            break
        await asyncio.sleep(0.01)
    ctx, cmd = app.held[0]
    assert not fut.done()
    ctx.send_response(cmd, cmd.response(remark="later"))
    r = await asyncio.wait_for(fut, 5)
    assert r.remark == "later"


async def test_group_bound_rejects_overflow_and_does_not_starve_others(server, client) -> None:
    _, app, addr = server
    # 2 running + 2 waiting fill the "hold" group; the 5th is refused at once.
    held = [await client.invoke_future(addr, RemotingCommand.request(HOLD), 10000) for _ in range(4)]
    r = await client.invoke(addr, RemotingCommand.request(HOLD), 3000)
    assert r.code == ResponseCode.SYSTEM_BUSY and "OVERLOAD" in (r.remark or "")
    # Another group is unaffected while "hold" is saturated.
    r = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "free"}), 3000)
    assert r.ext("v") == "free"
    app.release.set()
    resps = await asyncio.wait_for(asyncio.gather(*held), 5)
    assert all(x.code == ResponseCode.SUCCESS for x in resps)


async def test_connection_loss_fails_pending_calls_at_once(client) -> None:
    async def never(ctx, cmd):
        await asyncio.sleep(3600)

    d = RequestDispatcher()
    d.register(SLOW, never)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    _, port = await srv.start()
    addr = f"127.0.0.1:{port}"
    fut = await client.invoke_future(addr, RemotingCommand.request(SLOW), 30000)
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    await srv.stop()
    with pytest.raises(RemotingConnectionClosedError) as ei:
        await asyncio.wait_for(fut, 5)
    assert time.monotonic() - t0 < 3 and addr in str(ei.value)


async def test_connect_refused_is_typed(client) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RemotingConnectError, match=str(port)):
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), 1000)


async def _raw_conn(addr: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = addr.split(":")
    return await asyncio.open_connection(host, int(port))


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">I", 17 * 1024 * 1024) + b"x" * 64,  # over 16 MiB
        struct.pack(">II", 8, (7 << 24) | 4) + b"abcd",  # bad serialize type
        struct.pack(">II", 12, 8) + b"{garbage",  # undecodable JSON header
    ],
    ids=["oversized", "bad-serialize-type", "bad-header"],
)
async def test_bad_frame_closes_only_that_connection(server, client, garbage: bytes) -> None:
    _, _, addr = server
    r = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "before"}))
    assert r.ext("v") == "before"
    reader, writer = await _raw_conn(addr)
    writer.write(garbage)
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # server closed it
    writer.close()
    r = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "after"}))
    assert r.ext("v") == "after"


async def test_truncated_frame_then_close_keeps_server_up(server, client) -> None:
    _, _, addr = server
    reader, writer = await _raw_conn(addr)
    writer.write(encode(RemotingCommand(code=ECHO))[:-5])
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    r = await client.invoke(addr, RemotingCommand.request(ECHO, {"v": "ok"}))
    assert r.ext("v") == "ok"


async def test_raw_socket_client_gets_json_response(server) -> None:
    _, _, addr = server
    reader, writer = await _raw_conn(addr)
    writer.write(encode(RemotingCommand(code=ECHO, opaque=42, ext_fields={"v": "raw"})))
    await writer.drain()
    (length,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 5))
    frame = await reader.readexactly(length)
    writer.close()
    from remoting import decode_frame

    resp = decode_frame(frame)
    assert resp.opaque == 42 and resp.is_response and resp.ext("v") == "raw"


async def test_idle_connection_closed() -> None:
    srv = RemotingServer(RequestDispatcher(), host="127.0.0.1", port=0, idle_timeout_s=0.5)
    _, port = await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await srv.stop()


async def test_server_can_call_the_client_back(server, client) -> None:
    srv, _, addr = server
    client.dispatcher.register(777, lambda ctx, cmd: cmd.response(remark="from-client"))
    await client.invoke(addr, RemotingCommand.request(ECHO))
    (conn,) = srv.connections
    r = await conn.invoke(RemotingCommand.request(777), 3000)
    assert r.remark == "from-client"
