"""The dispatcher runs a coroutine processor's first step inline (no Task unless it suspends):
results, errors, suspension and cancellation must behave exactly as with a Task."""

from __future__ import annotations

import asyncio

from remoting import RemotingClient, RemotingCommand, RemotingServer, RequestDispatcher
from remoting.codes import ResponseCode
from remoting.connection import inline_first_step


async def test_inline_and_suspended_processors() -> None:
    d = RequestDispatcher()
    gate = asyncio.Event()
    started = asyncio.Event()

    @inline_first_step
    async def done_at_once(ctx, cmd):  # type: ignore[no-untyped-def]
        return cmd.response(ext_fields={"how": "inline"})

    async def needs_a_task(ctx, cmd):  # type: ignore[no-untyped-def]
        async with asyncio.timeout(5):  # raises outside a Task: unmarked processors always get one
            return cmd.response(ext_fields={"how": "task"})

    @inline_first_step
    async def suspends(ctx, cmd):  # type: ignore[no-untyped-def]
        started.set()
        await gate.wait()
        await asyncio.sleep(0)
        return cmd.response(ext_fields={"how": "resumed"})

    @inline_first_step
    async def fails_late(ctx, cmd):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        raise ValueError("late failure")

    @inline_first_step
    async def fails_early(ctx, cmd):  # type: ignore[no-untyped-def]
        raise KeyError("early failure")

    d.register(1, done_at_once)
    d.register(2, suspends)
    d.register(3, fails_late)
    d.register(4, fails_early)
    d.register(6, needs_a_task)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    host, port = await srv.start()
    addr = f"{host}:{port}"
    client = RemotingClient()
    try:
        r = await client.invoke(addr, RemotingCommand.request(1), 5000)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields == {"how": "inline"}
        assert not d._tasks  # no Task was needed

        pending = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(2), 5000))
        await asyncio.wait_for(started.wait(), 5)
        assert len(d._tasks) == 1  # suspended: a Task drives the rest
        r = await client.invoke(addr, RemotingCommand.request(1), 5000)  # others are not blocked
        assert r.ext_fields == {"how": "inline"}
        gate.set()
        r = await asyncio.wait_for(pending, 5)
        assert r.ext_fields == {"how": "resumed"}

        for code, reason in ((3, "ValueError: late failure"), (4, "KeyError: 'early failure'")):
            r = await client.invoke(addr, RemotingCommand.request(code), 5000)
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == reason
        r = await client.invoke(addr, RemotingCommand.request(6), 5000)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields == {"how": "task"}
        assert d.group("default").inflight == 0
    finally:
        await client.close()
        await srv.stop()


async def test_cancelling_a_resumed_processor_runs_its_cleanup() -> None:
    d = RequestDispatcher()
    started = asyncio.Event()
    cleaned = asyncio.Event()

    @inline_first_step
    async def parks(ctx, cmd):  # type: ignore[no-untyped-def]
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    d.register(5, parks)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    host, port = await srv.start()
    client = RemotingClient()
    try:
        fut = await client.invoke_future(f"{host}:{port}", RemotingCommand.request(5), 5000)
        await asyncio.wait_for(started.wait(), 5)
        await d.close()  # cancels the Task driving the parked processor
        await asyncio.wait_for(cleaned.wait(), 5)
        assert d.group("default").inflight == 0
        fut.cancel()
    finally:
        await client.close()
        await srv.stop()
