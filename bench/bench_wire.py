"""What the broker spends on each wire format, in-process: our clients' MSGPACK headers against the JSON
headers RocketMQ's own clients send by default (Java's, and the C++ core's, which are signed), and the
binary ROCKETMQ ones a Java client sends with `-Drocketmq.serialize.type=ROCKETMQ`, in alternating rounds.

    .venv/bin/python bench/bench_wire.py                     # 6 rounds of each workload and wire
    .venv/bin/python bench/bench_wire.py --root /tmp/other   # another checkout, same harness

Both go through a real RemotingConnection of a real BrokerController (temporary store) whose transport
counts what is written, so the broker decodes each frame, processes it and encodes each answer. Timed on
the event loop thread's CPU clock, as bench_inproc.py:
- `send`: pipelined single sends of 1 KiB to 4 queues, 32 frames a read; per send, dispatch included.
- `pull`: pulls of up to 32 messages, one per queue and read, each answered at once from stored messages
  (a lite pull consumer catching up); per pull.
The MSGPACK requests are what client/ writes (bench_callgrind.py's, and pull_api's header order); the
JSON ones what a Java 4.x client writes (fastjson: the fields by name, extFields a map of strs; a SEND's
short names a..m); the ROCKETMQ ones the same extFields in RocketMQSerializable's layout; the C++ core's
(`cpp`) numbers as numbers and an ACL Signature that differs per request. The figures are medians of the
rounds' loop-thread CPU; the machine's noise moves them by a few per cent between runs, so compare the
wires of one run, or two trees in one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOPIC = "CallgrindT"  # bench_callgrind.build_requests sends to it
GROUP = "WireGroup"
WIRES = ("msgpack", "json", "rocketmq", "cpp")


def java_frame(code: int, opaque: int, ext: dict[str, str], body: bytes | None, wire: str = "json") -> bytes:
    """A request as RocketMQ's Java client frames it: JSON header (fastjson orders the fields by name), or
    the binary ROCKETMQ one (wire="rocketmq"); then the body."""
    if wire == "rocketmq":
        from remoting.codec import encode
        from remoting.codes import LanguageCode, SerializeType
        from remoting.command import RemotingCommand

        return encode(RemotingCommand(code, opaque, 0, None, ext, body, LanguageCode.JAVA, 395, SerializeType.ROCKETMQ))
    header = json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 395}, separators=(",", ":")).encode()
    body = body or b""
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body


def cpp_frame(code: int, opaque: int, ext: dict[str, Any], body: bytes | None) -> bytes:
    """A request as the RocketMQ C++ client core frames it (2.1.0, ../shared/reference/real-client-wire.md): a
    JSON header with its fields by name, a trailing newline, numbers as numbers, and the ACL entries it
    always adds, whose Signature differs from one request to the next."""
    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": f"N/YT7X6tJe5UfutmW+uN{opaque:08X}=", **ext}
    header = (json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "CPP", "opaque": opaque,
                          "remark": "", "version": 333}, separators=(",", ":")) + "\n").encode()
    body = body or b""
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body


_CPP_NUMBERS = {"d", "e", "f", "h", "l"}  # the C++ core writes these SEND_MESSAGE_V2 fields as numbers


def send_reads(wire: str, n: int, start: int, group: int) -> list[bytes]:
    import bench_callgrind as harness

    requests = harness.build_requests("single", n, start)
    if wire == "msgpack":
        return harness.build_frames(requests, group)
    frames = []
    for k, r in enumerate(requests):
        ext = {key: str(r.ext_fields[key]) for key in sorted(r.ext_fields)}  # a..m: a Java HashMap's order
        if wire == "cpp":
            ext = {key: int(v) if key in _CPP_NUMBERS else v for key, v in ext.items()} | {"l": 16}
            frames.append(cpp_frame(r.code, start + k, dict(sorted(ext.items())), r.body))
        else:
            frames.append(java_frame(r.code, start + k, ext, r.body, wire))
    return [b"".join(frames[i:i + group]) for i in range(0, len(frames), group)]


def pull_reads(wire: str, offsets: list[int], opaque: int) -> list[bytes]:
    """One read per queue: a pull of up to 32 messages at offsets[q] (commit and subscription flags)."""
    import bench_e2e_tick as tick

    if wire == "msgpack":
        saved = tick.TOPIC, tick.GROUP
        tick.TOPIC, tick.GROUP = TOPIC, GROUP
        try:
            one = tick.pull_frames(len(offsets), offsets, opaque)
        finally:
            tick.TOPIC, tick.GROUP = saved
        from remoting.codec import FrameDecoder

        cmds = FrameDecoder().feed(one)
        from remoting.codec import encode

        return [encode(c) for c in cmds]
    reads = []
    for q, offset in enumerate(offsets):
        ext = {"commitOffset": str(max(0, offset - 1)), "consumerGroup": GROUP, "expressionType": "TAG",
               "maxMsgNums": "32", "queueId": str(q), "queueOffset": str(offset), "subVersion": "1763800000000",
               "subscription": "*", "suspendTimeoutMillis": "20000", "sysFlag": "7", "topic": TOPIC}
        if wire == "cpp":  # numbers as numbers; suspend and subscription flags, the offset committed apart
            ext = {k: int(v) if v.isdigit() else v for k, v in ext.items()} | {"sysFlag": 6}
            reads.append(cpp_frame(11, opaque + q, ext, None))
        else:
            reads.append(java_frame(11, opaque + q, ext, None, wire))
    return reads


async def measure(rounds: int, per: int, group: int, pulls: int) -> dict[str, dict[str, list[float]]]:
    import bench_callgrind as harness
    import bench_e2e_tick as tick

    from remoting.connection import RemotingConnection

    async with harness.in_process_broker("wire", {TOPIC: 4}) as c:
        conn = RemotingConnection(c.dispatcher)
        transport = tick.CountingTransport(50001)
        conn.connection_made(transport)  # type: ignore[arg-type]
        store = c.message_store
        reput = store.reput_message_service
        seq = 0
        sent = 0

        async def feed(reads: list[bytes]) -> None:
            for read in reads:
                conn.data_received(read)
                await asyncio.sleep(0)
                await asyncio.sleep(0)  # (the answers' write is a loop callback)

        async def sends(wire: str, n: int) -> float:
            nonlocal seq, sent
            reads = send_reads(wire, n, seq, group)
            seq += n
            sent += n
            w0 = transport.writes
            c0 = time.thread_time()
            await feed(reads)
            await reput.wait_caught_up(60)
            dt = time.thread_time() - c0
            if transport.writes - w0 < len(reads):
                raise SystemExit(f"{wire}: {transport.writes - w0} answer writes for {len(reads)} reads")
            return dt

        async def pull_round(wire: str, n: int) -> float:
            # Each pull reads 32 messages from where the last one of its queue stopped (wrapping round).
            nonlocal seq
            max_offset = min(store.get_max_offset_in_queue(TOPIC, q) for q in range(4))
            reads: list[bytes] = []
            for k in range(n // 4):
                offsets = [(k * 32) % max(1, max_offset - 32)] * 4
                reads += pull_reads(wire, offsets, (1 << 24) + seq)
                seq += 4
            b0 = transport.bytes
            c0 = time.thread_time()
            await feed(reads)
            dt = time.thread_time() - c0
            if transport.bytes - b0 < len(reads) * 32 * 1024:
                raise SystemExit(f"{wire}: pull answers carried {transport.bytes - b0} bytes for {len(reads)} pulls")
            return dt

        for wire in WIRES:  # warm: queue files, the SendFixed / PullFixed caches, a round of each
            await sends(wire, 8 * group)
            await pull_round(wire, 64)
        gc.collect()
        gc.freeze()  # as remoting.loop.run does in the daemons
        us: dict[str, dict[str, list[float]]] = {"send": {w: [] for w in WIRES}, "pull": {w: [] for w in WIRES}}
        for _ in range(rounds):
            for wire in WIRES:
                us["send"][wire].append(round(await sends(wire, per) / per * 1e6, 2))
                us["pull"][wire].append(round(await pull_round(wire, pulls) / pulls * 1e6, 2))
        stored = sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(4))
        if stored != sent:  # a refused send would make the figures meaningless
            raise SystemExit(f"{stored} messages stored, {sent} sent")
        return us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per", type=int, default=16000, help="sends per round and wire")
    ap.add_argument("--pulls", type=int, default=2000, help="pulls per round and wire")
    ap.add_argument("--group", type=int, default=32, help="send frames per read")
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure (default: this one)")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    a = ap.parse_args()
    if a.rounds < 1 or a.per < 1 or a.group < 1 or a.pulls < 4:
        raise SystemExit("--rounds, --per, --group >= 1 and --pulls >= 4")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(a.root.resolve()))
    from remoting.log import configure_logging

    configure_logging(level="ERROR")
    import uvloop

    us = uvloop.run(measure(a.rounds, a.per, a.group, a.pulls))
    med = {w: {k: statistics.median(v) for k, v in by.items()} for w, by in us.items()}
    out: dict[str, Any] = {"root": str(a.root), "rounds": us, "median_us": med,
                           "json_over_msgpack": {w: round(m["json"] / m["msgpack"], 3) for w, m in med.items()},
                           "rocketmq_over_msgpack": {w: round(m["rocketmq"] / m["msgpack"], 3) for w, m in med.items()},
                           "cpp_over_msgpack": {w: round(m["cpp"] / m["msgpack"], 3) for w, m in med.items()}}
    if a.json:
        print(json.dumps(out))
        return 0
    for w, m in med.items():
        what = "a single send" if w == "send" else "a pull of 32"
        print(f"{what:>14}: MSGPACK {m['msgpack']:.2f} us, JSON {m['json']:.2f} us (x{out['json_over_msgpack'][w]:.2f}), "
              f"ROCKETMQ {m['rocketmq']:.2f} us (x{out['rocketmq_over_msgpack'][w]:.2f}), "
              f"C++ core {m['cpp']:.2f} us (x{out['cpp_over_msgpack'][w]:.2f}) of loop-thread CPU; "
              f"rounds {us[w]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
