"""RequestDispatcher groups: a run of pipelined requests for a `groupable` processor goes to its group
function in one call; answers stay per request; the group's bounds still hold."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestContext,
    RequestDispatcher,
    ResponseCode,
)
from remoting.codec import FrameDecoder, encode
from remoting.codes import SerializeType
from remoting.connection import groupable

PUT, PUT_OTHER = 7, 8


class GroupApp:
    def __init__(self) -> None:
        self.runs: list[list[str]] = []
        self.singles: list[str] = []
        self.release = asyncio.Event()
        self.block = False
        self.dispatcher: RequestDispatcher | None = None

    @groupable("process_many")
    async def process(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        self.singles.append(cmd.ext("v") or "")
        if self.block:
            await self.release.wait()
        return self._answer(cmd)

    async def process_many(self, ctx: RequestContext, cmds: list[RemotingCommand]) -> list[RemotingCommand | None]:
        self.runs.append([c.ext("v") or "" for c in cmds])
        if self.block:
            await self.release.wait()
        return [self._answer(c) for c in cmds]

    @staticmethod
    def _answer(cmd: RemotingCommand) -> RemotingCommand:
        v = cmd.ext("v") or ""
        if v.startswith("bad"):
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, remark=f"refused {v}")
        return cmd.response(ext_fields={"v": v})


@pytest.fixture
async def served() -> AsyncIterator[tuple[GroupApp, str, RemotingClient]]:
    app = GroupApp()
    d = RequestDispatcher()
    d.add_group("put", concurrency=1, max_pending=3)
    d.register([PUT, PUT_OTHER], app.process, group="put")
    app.dispatcher = d
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    _, port = await srv.start()
    client = RemotingClient()
    try:
        yield app, f"127.0.0.1:{port}", client
    finally:
        app.release.set()
        await client.close()
        await srv.stop()


async def test_pipelined_run_is_one_group_call_with_answers_per_request(served) -> None:
    app, addr, client = served
    await client.invoke(addr, RemotingCommand.request(PUT, {"v": "warm"}), 3000)  # connect first
    vals = ["a", "b", "bad1", "c", "d", "bad2", "e"]
    # invoke_future writes every request of this loop step in one write: the server reads them together.
    futs = [
        await client.invoke_future(addr, RemotingCommand.request(PUT if i % 2 else PUT_OTHER, {"v": v}), 3000)
        for i, v in enumerate(vals)
    ]
    resps = await asyncio.wait_for(asyncio.gather(*futs), 5)
    for v, r in zip(vals, resps, strict=True):
        if v.startswith("bad"):
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and r.remark == f"refused {v}"
        else:
            assert r.code == ResponseCode.SUCCESS and r.ext("v") == v
    assert any(len(run) > 1 for run in app.runs), app.runs  # both codes share the processor: one run
    assert sorted(v for run in app.runs for v in run) + sorted(app.singles) == sorted(vals + ["warm"])


async def test_busy_group_falls_back_to_the_bounded_queue(served) -> None:
    app, addr, client = served
    await client.invoke(addr, RemotingCommand.request(PUT, {"v": "warm"}), 3000)
    app.block = True
    first = [await client.invoke_future(addr, RemotingCommand.request(PUT, {"v": "x"}), 5000)]
    await asyncio.sleep(0.2)  # it holds the group's only slot
    # 3 wait in the group's queue; the rest are refused at once, as without grouping.
    more = [await client.invoke_future(addr, RemotingCommand.request(PUT, {"v": f"y{i}"}), 5000) for i in range(5)]
    done, _ = await asyncio.wait(more, timeout=2)
    busy = [f.result() for f in done]
    assert len(busy) == 2 and all(r.code == ResponseCode.SYSTEM_BUSY for r in busy)
    # the oldest waiting request has waited the 2 s above (the broker's "...QueueHeadWaitTimeMills")
    assert app.dispatcher is not None
    group = app.dispatcher.group("put")
    assert 1900 <= group.head_wait_ms(time.monotonic()) < 10_000
    app.release.set()
    rest = await asyncio.wait_for(asyncio.gather(*first, *[f for f in more if f not in done]), 5)
    assert [r.code for r in rest] == [ResponseCode.SUCCESS] * 4
    assert group.head_wait_ms(time.monotonic()) == 0  # none waits


async def test_lone_request_takes_the_group_function(served) -> None:
    # The group function is the processor's fast path: a request that came alone uses it too.
    app, addr, client = served
    r = await client.invoke(addr, RemotingCommand.request(PUT, {"v": "solo"}), 3000)
    assert r.code == ResponseCode.SUCCESS and r.ext("v") == "solo"
    assert app.runs == [["solo"]] and app.singles == []


async def test_lone_request_is_answered_before_the_work_it_woke() -> None:
    # A sync send's answer must not wait behind what storing it scheduled (the dispatch of the record):
    # a read of one frame writes its answer before the loop runs the callbacks its handling scheduled.
    events: list[str] = []

    def process(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:  # answers inline, as a send does
        t = ctx.conn.transport
        if not getattr(t, "_wrapped", False):
            real = t.writelines

            class Spy:
                _wrapped = True

                def __getattr__(self, name: str) -> object:
                    return getattr(t, name)

                def writelines(self, data: list[bytes]) -> None:
                    events.append("write")
                    real(data)

            ctx.conn.transport = Spy()  # type: ignore[assignment]
        asyncio.get_running_loop().call_soon(events.append, "woken")
        return cmd.response(ext_fields={"v": cmd.ext("v") or ""})

    d = RequestDispatcher()
    d.register(PUT, process)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    _, port = await srv.start()
    client = RemotingClient()
    try:
        for i in range(3):
            events.clear()
            r = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(PUT, {"v": str(i)}), 3000)
            assert r.ext("v") == str(i)
            await asyncio.sleep(0.01)
            assert events == ["write", "woken"]
    finally:
        await client.close()
        await srv.stop()


def test_frame_decoder_reads_in_place_and_keeps_partial_frames() -> None:
    cmds = [RemotingCommand.request(PUT, {"v": str(i)}, b"b" * i) for i in range(5)]
    cmds[3].serialize_type = SerializeType.MSGPACK
    stream = b"".join(encode(c) for c in cmds)
    for cut in (1, 3, 7, len(stream) // 2, len(stream) - 1):
        d = FrameDecoder()
        got = d.feed(stream[:cut]) + d.feed(memoryview(stream[cut:])) + d.feed(b"")
        assert [(c.code, c.ext("v"), c.body or b"") for c in got] == [(PUT, str(i), b"b" * i) for i in range(5)]
        assert d.buffered == 0


class _Transport:
    """Records what the connection writes, frame by frame."""

    def __init__(self) -> None:
        self.frames: list[RemotingCommand] = []
        self._decoder = FrameDecoder()

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def writelines(self, bufs: list[bytes]) -> None:
        self.frames += self._decoder.feed(b"".join(bytes(b) for b in bufs))

    def write(self, data: bytes) -> None:
        self.writelines([data])


async def test_a_read_of_large_frames_is_cut_into_runs_answered_one_by_one() -> None:
    """Runs end once their frames reach GROUP_BYTES, and each run's answers are written before the next run
    of the same read is handled: a producer with several batches in flight gets its first answers (and
    sends more) while the broker works through the rest of a large read. A few small frames stay one run
    and one write; many small frames get a write every FLUSH_FRAMES answers."""
    from remoting.connection import GROUP_BYTES, RemotingConnection

    app = GroupApp()
    written_before: list[int] = []
    many = app.process_many

    async def recording(ctx: RequestContext, cmds: list[RemotingCommand]) -> list[RemotingCommand | None]:
        written_before.append(len(t.frames))
        return await many(ctx, cmds)

    app.process_many = recording  # type: ignore[method-assign]
    d = RequestDispatcher()
    d.add_group("put", concurrency=1, max_pending=3)
    d.register([PUT], app.process, group="put")
    conn = RemotingConnection(d)
    t = _Transport()
    conn.connection_made(t)  # type: ignore[arg-type]
    body = b"x" * (GROUP_BYTES // 4)  # four frames (with their headers) reach the limit
    reqs = [RemotingCommand.request(PUT, {"v": str(k)}, body) for k in range(7)]
    for k, r in enumerate(reqs):
        r.opaque = 100 + k
        r.serialize_type = SerializeType.MSGPACK
    conn.data_received(b"".join(encode(r) for r in reqs))
    await asyncio.sleep(0)
    assert app.runs == [["0", "1", "2", "3"], ["4", "5", "6"]]
    assert written_before == [0, 4]  # the first run's four answers went out before the second run began
    assert [f.opaque for f in t.frames] == [100 + k for k in range(7)]
    # Small frames: one run, one write at the end of the loop turn.
    app.runs.clear()
    written_before.clear()
    t.frames.clear()
    small = [RemotingCommand.request(PUT, {"v": f"s{k}"}) for k in range(5)]
    for k, r in enumerate(small):
        r.opaque = 200 + k
    conn.data_received(b"".join(encode(r) for r in small))
    await asyncio.sleep(0)
    assert app.runs == [[f"s{k}" for k in range(5)]] and written_before == [0]
    assert [f.opaque for f in t.frames] == [200 + k for k in range(5)]
    # Many small frames: runs of MAX_GROUP_SIZE, the answers written once FLUSH_FRAMES are answered.
    from remoting.connection import FLUSH_FRAMES, MAX_GROUP_SIZE

    app.runs.clear()
    written_before.clear()
    t.frames.clear()
    n = FLUSH_FRAMES + MAX_GROUP_SIZE // 2
    burst = [RemotingCommand.request(PUT, {"v": f"m{k}"}) for k in range(n)]
    for k, r in enumerate(burst):
        r.opaque = 300 + k
    conn.data_received(b"".join(encode(r) for r in burst))
    await asyncio.sleep(0)
    runs = [len(r) for r in app.runs]
    assert sum(runs) == n and max(runs) <= MAX_GROUP_SIZE
    assert written_before[0] == 0 and FLUSH_FRAMES in written_before  # an early write after FLUSH_FRAMES answers
    assert [f.opaque for f in t.frames] == [300 + k for k in range(n)]
