"""The broker's share of the e2e workload, in-process: one 1 ms tick of compare.py's e2e at a time.

    .venv/bin/python bench/bench_e2e_tick.py                  # loop-thread CPU per tick, median of 3 000
    .venv/bin/python bench/bench_e2e_tick.py --callgrind      # instructions per tick (deterministic)
    .venv/bin/python bench/bench_e2e_tick.py --root /tmp/old  # another checkout, same harness

A tick is what the e2e workload (10 000 msg/s in 1 ms ticks, a push consumer on 8 queues) makes the
broker do every millisecond, through real RemotingConnections whose transport only counts what is
written: the consumer's read of 8 pulls, one per queue, each at its queue's end (so each is held), then
the producer's read of a burst of sends (--burst, 10), which are stored and dispatched; the dispatch
wakes the held pulls, which run again, find the new messages and are answered in one write. Requests
are encoded as our clients put them on the wire (MSGPACK headers, the constant parts where the frame
decoder memoizes them). No sockets and no client share the CPUs with it: on the daemons, broker CPU per
e2e message swings 40-80 us between runs here, as the consumer's pull rate follows the CPU it gets (a
pull is held only if it arrives before the next message); this fixes the pattern at 8 held pulls a tick.
With --callgrind the script runs itself twice under valgrind's callgrind (--small and --large ticks)
and divides the difference of the loop thread's instructions by the extra ticks. Repeated on an idle
machine the count moved by 0.15-1.8%; the loop's timed work (flush rounds, the hold service's safety check)
is in it too, so a run slowed by other load counts more (+40% once, with CI running beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOPIC = "CallgrindT"
GROUP = "E2eTickGroup"
TURNS = 4  # loop turns after the sends: enough for the dispatch and the answers (checked: one write a tick)


class CountingTransport:
    """What a RemotingConnection uses of a transport; writes are counted, not sent."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.writes = 0
        self.bytes = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", self.port), "sockname": ("127.0.0.1", 10911)}.get(name, default)

    def writelines(self, bufs: list[bytes]) -> None:
        self.writes += 1
        self.bytes += sum(map(len, bufs))

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.bytes += len(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def pull_frames(queues: int, offsets: list[int], opaque: int) -> bytes:
    """One read of the push consumer's next pulls, one per queue at `offsets[q]`: the header map as
    client/consumer/pull_api.py packs it (the per-pull entries first, then the queue's constant ones)."""
    from remoting.codec import encode
    from remoting.codes import SerializeType
    from remoting.command import RemotingCommand

    out = []
    for q in range(queues):
        offset = offsets[q]
        ext = {
            "queueOffset": str(offset), "sysFlag": "7", "commitOffset": str(max(0, offset - 1)),  # commit|suspend|sub
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q), "maxMsgNums": "32",
            "suspendTimeoutMillis": "20000", "subscription": "*", "subVersion": "1", "expressionType": "TAG",
        }
        cmd = RemotingCommand.request(11, ext, None)
        cmd.serialize_type = SerializeType.MSGPACK
        cmd.opaque = opaque + q
        out.append(encode(cmd))
    return b"".join(out)


async def child(ticks: int, burst: int, queues: int, built: int = 0) -> list[float]:
    """Loop-thread CPU seconds of each tick. `built`: build the requests of that many ticks (at least `ticks`),
    so that two runs under callgrind build as much and their difference is the ticks alone."""
    import bench_callgrind as harness

    from remoting.connection import RemotingConnection

    async with harness.in_process_broker("e2e-tick", {TOPIC: queues}, **{
        "warmMapedFileEnable": False,
        "flushIntervalConsumeQueue": 3_600_000,  # as bench_callgrind.py: not counted ~50x under valgrind
    }) as c:
        producer = RemotingConnection(c.dispatcher)
        pt = CountingTransport(50001)
        producer.connection_made(pt)  # type: ignore[arg-type]
        consumer = RemotingConnection(c.dispatcher)
        ct = CountingTransport(50002)
        consumer.connection_made(ct)  # type: ignore[arg-type]
        reput = c.message_store.reput_message_service
        store = c.message_store
        warm = 50
        n_built = warm + max(ticks, built)
        requests = harness.build_requests("single", n_built * burst, 0, 1)
        for k, r in enumerate(requests):
            r.ext_fields["e"] = str(k % queues)  # the V2 header's queueId: the producer's round-robin over queues
        reads = [harness.build_frames(requests[i * burst:(i + 1) * burst], burst)[0] for i in range(n_built)]
        # Message k goes to queue k % queues, so before tick t queue q holds ceil((t * burst - q) / queues): the
        # consumer's pulls are built ahead, out of the timed ticks, each at its queue's end.
        pulls = [pull_frames(queues, [max(0, -(-(t * burst - q) // queues)) for q in range(queues)], (1 << 20) + t * queues)
                 for t in range(n_built)]
        cpu: list[float] = []

        async def tick(t: int) -> None:
            consumer.data_received(pulls[t])  # held: nothing new in their queues yet
            await asyncio.sleep(0)
            producer.data_received(reads[t])  # stored; the put wakes the dispatcher
            for _ in range(TURNS):  # dispatch, the held pulls woken and run again, their answers' write
                await asyncio.sleep(0)

        for t in range(warm):
            await tick(t)
        await reput.wait_caught_up(5)
        gc.collect()
        gc.freeze()  # as remoting.loop.run does in the daemons
        w0 = ct.writes
        for t in range(warm, warm + ticks):
            c0 = time.thread_time()
            await tick(t)
            cpu.append(time.thread_time() - c0)
        offsets = [store.get_max_offset_in_queue(TOPIC, q) for q in range(queues)]
        if ct.writes - w0 != ticks or c.pull_request_hold_service.held:
            raise SystemExit(f"expected one answer write a tick and no pull left held: {ct.writes - w0} writes for "
                             f"{ticks} ticks, {c.pull_request_hold_service.held} held")
        if sum(offsets) != (warm + ticks) * burst:
            raise SystemExit(f"{sum(offsets)} messages stored, {(warm + ticks) * burst} sent")
        return cpu


def instructions(root: Path, ticks: int, burst: int, queues: int, built: int) -> int:
    """Loop-thread instructions of one child run under callgrind."""
    from bench_callgrind import loop_thread_instructions

    return loop_thread_instructions(Path(__file__).resolve(), [
        "--child", "--root", str(root), "--ticks", str(ticks), "--burst", str(burst), "--queues", str(queues),
        "--built", str(built)], timeout=3600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=3000)
    ap.add_argument("--burst", type=int, default=10, help="sends a tick (10 000 msg/s in 1 ms ticks)")
    ap.add_argument("--queues", type=int, default=8, help="queues of the topic, one held pull each")
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure (default: this one)")
    ap.add_argument("--callgrind", action="store_true", help="count instructions under valgrind instead")
    ap.add_argument("--small", type=int, default=100, help="--callgrind: ticks of the short run")
    ap.add_argument("--large", type=int, default=500, help="--callgrind: ticks of the long run")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--built", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ticks < 1 or a.burst < 1 or a.queues < 1 or not 0 < a.small < a.large:
        raise SystemExit("--ticks, --burst, --queues >= 1 and 0 < --small < --large")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(a.root.resolve()))
    if a.callgrind:
        if shutil.which("valgrind") is None:
            raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
        lo = instructions(a.root, a.small, a.burst, a.queues, a.large)
        hi = instructions(a.root, a.large, a.burst, a.queues, a.large)
        per_tick = (hi - lo) / (a.large - a.small)
        print(f"{a.root}: {per_tick:,.0f} loop-thread instructions a tick of {a.burst} sends and {a.queues} held "
              f"pulls, {per_tick / a.burst:,.0f} a message ({a.small} vs {a.large} ticks)")
        return 0
    from remoting.log import configure_logging

    configure_logging(level="ERROR")
    import uvloop

    cpu = uvloop.run(child(a.ticks, a.burst, a.queues, a.built))
    if a.child:
        return 0
    med = statistics.median(cpu) * 1e6
    print(f"{a.root}: median {med:.1f} us of loop-thread CPU a tick of {a.burst} sends and {a.queues} held pulls, "
          f"{med / a.burst:.1f} us a message ({a.ticks} ticks; p90 {statistics.quantiles(cpu, n=10)[-1] * 1e6:.1f})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
