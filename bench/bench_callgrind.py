"""Deterministic cost of the broker's send path: CPU instructions per message on the loop thread,
counted by valgrind's callgrind (immune to the CPU steal and neighbours that make wall-clock and even
/proc CPU figures swing on a shared VM). Needs `valgrind` on PATH; not part of `make test`.

    .venv/bin/python bench/bench_callgrind.py                        # batch, ASYNC_FLUSH
    .venv/bin/python bench/bench_callgrind.py --workload single --flush sync
    .venv/bin/python bench/bench_callgrind.py --root /tmp/old-tree   # another checkout, same harness
    .venv/bin/python bench/bench_callgrind.py --workload single --topics 1000   # spread over 1000 topics
    .venv/bin/python bench/bench_callgrind.py --workload single --tags TagA      # messages with a TAGS property
    .venv/bin/python bench/bench_callgrind.py --workload single --keys           # and a KEYS one (indexed)

In-process: a real BrokerController and store (temporary directory), requests encoded as our producer
puts them on the wire (SEND_BATCH_MESSAGE of 32 x 1 KiB, or SEND_MESSAGE_V2 of 1 KiB with WAIT and
UNIQ_KEY; MSGPACK headers led by the born timestamp and the properties), a group of frames per read
decoded by the broker's FrameDecoder and handed to SendMessageProcessor.process_requests (as
RequestDispatcher.dispatch_many does), then dispatched by the reput service. Frame decoding is counted;
the socket read and write are not. (Until 2026-11-23 the requests were JSON-headed commands handed over
undecoded, so the single-send figures were of the generic header path, which our producer never takes:
103.4k instructions a message then, 113.0k now with decoding, for the same tree.) The script runs itself
twice under callgrind, processing a small and a large number of the same built requests, and divides the
difference by the extra messages: start-up, building the requests and shutdown cancel out.

--topics N spreads the requests over N topics of 4 queues, round-robin over the topics as the
`topics` workload of wl_rocketmq.py sends (request k: topic k % N, queue (k // N) % 4), so the run
against --topics 1 gives the broker's extra instructions per message for many topics. Every queue
of every topic is written once before the timed runs, so consume queue files exist.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
BATCH = 32
GROUP = {"batch": 4, "single": 16}


def topic_names(n_topics: int) -> list[str]:
    return ["CallgrindT"] if n_topics == 1 else [f"CallgrindT_{i}" for i in range(n_topics)]


def _as_producer_sends(cmd: Any) -> Any:
    """The request as our producer puts it on the wire: a MSGPACK header whose map starts with the born
    timestamp (g) and the properties (i), the per-message fields, then the constant ones. The broker's
    frame decoder memoizes that constant tail per producer queue (remoting.codec.SendFixed), and the send
    processor's fast path reads it there: a JSON header, or a command handed over without decoding,
    takes the generic header path instead, which no client of this project's broker uses."""
    from remoting.codes import SerializeType

    ext = cmd.ext_fields
    cmd.ext_fields = {"g": ext["g"], "i": ext["i"], **{k: v for k, v in ext.items() if k not in ("g", "i")}}
    cmd.serialize_type = SerializeType.MSGPACK
    return cmd


def request_context() -> Any:
    """A RequestContext for requests handed to a processor in-process, with what it reads of a connection."""
    from remoting.connection import RequestContext

    class Conn:
        remote_addr = "127.0.0.1:54321"
        closed = False

    return RequestContext(Conn(), time.monotonic())  # type: ignore[arg-type]


def build_frames(requests: list[Any], group: int) -> list[bytes]:
    """The requests encoded, `group` frames joined per read (as pipelined sends arrive)."""
    from remoting.codec import encode

    frames = list(map(encode, requests))
    return [b"".join(frames[i:i + group]) for i in range(0, len(frames), group)]


def build_requests(workload: str, n_requests: int, start: int, n_topics: int = 1,
                   tags: str | None = None, tag_count: int = 0, keys: bool = False) -> list[Any]:
    """Our producer's requests. Messages may carry `tags` (one for all), `tag_count` tags (tag0.., one per
    message in turn) and `keys` (a key per message, changing every 1 000: mqbench's send second)."""
    from client.message import Message, encode_messages
    from remoting.codes import RequestCode
    from remoting.command import RemotingCommand
    from remoting.headers import SendMessageRequestHeader, encode_send_header_v2
    from remoting.message import encode_properties

    body = b"x" * 1024
    names = topic_names(n_topics)
    tag_item = f"TAGS\x01{tags}\x02" if tags else ""  # as our producer orders a tagged message's properties
    out = []
    seq = start
    for k in range(n_requests):
        if workload == "batch":
            msgs = [Message("CallgrindT", body) for _ in range(BATCH)]
            props = []
            for m in msgs:
                seq += 1
                uniq = f"7F0000010E1C18B4AAC2{seq // 1280:08X}{seq % 1280:04X}"
                m.properties["UNIQ_KEY"] = uniq
                lead = f"TAGS\x01tag{seq % tag_count}\x02" if tag_count else tag_item
                if keys:
                    lead += f"KEYS\x01{1763800000 + seq // 1000}\x02"
                props.append(lead + "WAIT\x01true\x02UNIQ_KEY\x01" + uniq)
            h = SendMessageRequestHeader(
                producer_group="PG", topic="CallgrindT", queue_id=k % 4, born_timestamp=1763800000000,
                properties=encode_properties({"WAIT": "true"}), batch=True, default_topic="TBW102",
                default_topic_queue_nums=4, reconsume_times=0,
            )
            out.append(_as_producer_sends(RemotingCommand.request(
                RequestCode.SEND_BATCH_MESSAGE, encode_send_header_v2(h), encode_messages(msgs, props))))
        else:
            seq += 1
            uniq = f"7F0000010E1C18B4AAC2{seq // 1280:08X}{seq % 1280:04X}"
            # (as our producer orders them: TAGS, KEYS, WAIT, then the UNIQ_KEY it adds)
            lead = tag_item
            if tag_count:
                lead = f"TAGS\x01tag{seq % tag_count}\x02"
            if keys:
                lead += f"KEYS\x01{1763800000 + seq // 1000}\x02"
            h = SendMessageRequestHeader(
                producer_group="PG", topic=names[k % n_topics], queue_id=(k // n_topics) % 4,
                born_timestamp=1763800000000, properties=lead + "WAIT\x01true\x02UNIQ_KEY\x01" + uniq,
                default_topic="TBW102",
                default_topic_queue_nums=4, reconsume_times=0,  # "j": "0", as our producer and Java's send it
            )
            out.append(_as_producer_sends(
                RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(h), body)))
    return out


@contextlib.asynccontextmanager
async def in_process_broker(name: str, topics: dict[str, int], **values: Any) -> AsyncIterator[Any]:
    """A real BrokerController (ASYNC_FLUSH unless `values` say otherwise) on a temporary store, with `topics`
    (name -> queues) created: what the in-process benchmarks time. Stopped, its store removed, on leaving."""
    from broker.config import BrokerConfig
    from broker.controller import BrokerController
    from remoting.body import TopicConfig

    store_dir = tempfile.mkdtemp(prefix=f"bench-{name}-")
    c = BrokerController(BrokerConfig.from_values({
        "brokerName": f"broker-{name}", "brokerIP1": "127.0.0.1", "listenPort": 0, "storePathRootDir": store_dir,
        "flushDiskType": "ASYNC_FLUSH", **values,
    }))
    await c.start()
    try:
        for topic, queues in topics.items():
            c.topic_config_manager.update_topic_config(
                TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues))
        yield c
    finally:
        await c.stop()
        shutil.rmtree(store_dir, ignore_errors=True)


async def child(workload: str, flush: str, n_requests: int, n_built: int, n_topics: int = 1,
                group: int | None = None, turns: int = 1, tags: str | None = None, keys: bool = False) -> None:
    from remoting.codec import FrameDecoder

    names = topic_names(n_topics)
    async with in_process_broker("callgrind", dict.fromkeys(names, 4), **{
        "mappedFileSizeCommitLog": 256 * 1024 * 1024, "warmMapedFileEnable": False,
        "flushDiskType": "SYNC_FLUSH" if flush == "sync" else "ASYNC_FLUSH",
        # The consume queue flush walks every queue once a second of wall time, and a run under callgrind
        # is ~50x slower than a real one: with 4 000 queues that walk would be counted ~50x per message.
        "flushIntervalConsumeQueue": 3_600_000,
    }) as c:
        proc = c.send_message_processor
        ctx = request_context()
        reput = c.message_store.reput_message_service
        group = group or GROUP[workload]
        # Every queue of every topic once (single sends), so no timed run creates a queue file.
        n_warm = 10 * group if n_topics == 1 or workload == "batch" else -(-4 * n_topics // group) * group
        decoder = FrameDecoder()
        for read in build_frames(build_requests(workload, n_warm, 0, n_topics, tags, keys=keys), group):
            r = await proc.process_requests(ctx, decoder.feed(read))
            assert r[0] is not None and r[0].code == 0, (r[0] and r[0].code, r[0] and r[0].remark)
        await reput.wait_caught_up(10)
        # Both runs build as many requests (the long run's count), so building cancels out. Decoding the
        # frames is timed: it is part of the broker's work for each send.
        timed = build_frames(
            build_requests(workload, max(n_built, n_requests), 10 * group * BATCH + n_warm, n_topics, tags, keys=keys),
            group)
        gc.collect()
        gc.freeze()  # as remoting.loop.run does in the daemons
        for read in timed[: -(-n_requests // group)]:
            cmds = decoder.feed(read)
            if cmds[0].send_fixed is None:
                raise SystemExit("the broker's frame decoder did not take the requests as a producer's sends")
            await proc.process_requests(ctx, cmds)
            for _ in range(turns):
                await asyncio.sleep(0)
        await reput.wait_caught_up(30)
        per_request = BATCH if workload == "batch" else 1
        stored = sum(c.message_store.get_max_offset_in_queue(t, q) for t in names for q in range(4))
        expected = (n_warm + n_requests) * per_request
        if stored != expected:  # a refused send would make the count meaningless
            raise SystemExit(f"{stored} messages in the queues, expected {expected}")
        if tags:  # the consume queue units carry the TAGS hash (what tag filtering reads)
            from remoting.message import java_string_hash

            unit = c.message_store.find_consume_queue(names[0], 0).get_unit(0)
            if unit is None or unit[2] != java_string_hash(tags):
                raise SystemExit(f"consume queue unit {unit}: tags code is not hash({tags!r})")


def loop_thread_instructions(script: Path, args: list[str], keep: Path | None = None, timeout: float = 1800) -> int:
    """Instructions of the main thread (the event loop) of `python script args...` run under callgrind;
    its output file is copied to `keep` when given (for callgrind_annotate)."""
    with tempfile.TemporaryDirectory(prefix="cg-out-") as out:
        cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}/cg.%p",
               sys.executable, str(script), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise SystemExit(f"callgrind run failed:\n{r.stderr[-2000:]}")
        main = sorted(glob.glob(f"{out}/cg.*-01"))  # thread 1: the event loop
        if not main:
            raise SystemExit("no callgrind output for the main thread")
        if keep is not None:
            shutil.copy(main[0], keep)
        for line in open(main[0]):
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit("no instruction total in the callgrind output")


def instructions(root: Path, workload: str, flush: str, n_requests: int, n_built: int, n_topics: int = 1,
                 keep: Path | None = None, group: int | None = None, turns: int = 1, tags: str | None = None,
                 keys: bool = False) -> int:
    """Loop-thread instructions of one child run under callgrind."""
    return loop_thread_instructions(Path(__file__).resolve(), [
        "--child", "--root", str(root), "--workload", workload, "--flush", flush,
        "--requests", str(n_requests), "--built", str(n_built), "--topics", str(n_topics),
        *(["--group", str(group)] if group else []), "--turns", str(turns), *(["--tags", tags] if tags else []),
        *(["--keys"] if keys else [])], keep)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=("batch", "single"), default="batch")
    ap.add_argument("--flush", choices=("async", "sync"), default="async")
    ap.add_argument("--root", type=Path, default=HERE, help="the checkout to measure (default: this one)")
    ap.add_argument("--small", type=int, default=None, help="requests in the short run")
    ap.add_argument("--large", type=int, default=None, help="requests in the long run")
    ap.add_argument("--topics", type=int, default=1, help="spread the requests over this many topics of 4 queues")
    ap.add_argument("--group", type=int, default=None,
                    help="requests per process_requests call, each followed by one loop turn (default: 4 batches, "
                         "16 singles, as pipelined sends arrive); 1 is a sync send's pattern, one wake-up each")
    ap.add_argument("--turns", type=int, default=1,
                    help="loop turns after each group (default 1); 4 lets the dispatcher go idle and wait for the "
                         "next put, as it does between a sync sender's requests")
    ap.add_argument("--tags", default=None,
                    help="single sends carry this TAGS property, as most producers' messages do (the broker's "
                         "general property path instead of the WAIT + UNIQ_KEY-only one)")
    ap.add_argument("--keys", action="store_true",
                    help="single sends carry a KEYS property too (a key a message, changing every 1 000: mqbench "
                         "--keys), which the index adds an entry for")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy the long run's loop-thread callgrind output here (for callgrind_annotate), the "
                         "short run's to KEEP.small")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--built", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, str(a.root.resolve()))
        from remoting.log import configure_logging

        configure_logging(level="ERROR")
        import uvloop

        uvloop.run(child(a.workload, a.flush, a.requests, a.built, a.topics, a.group, a.turns, a.tags, a.keys))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    per_request = BATCH if a.workload == "batch" else 1
    small = a.small or (40 if a.workload == "batch" else 640)
    large = a.large or (240 if a.workload == "batch" else 3840)
    if a.topics < 1 or (a.topics > 1 and a.workload == "batch"):
        raise SystemExit("--topics: 1 or more, and only with --workload single")
    lo = instructions(a.root, a.workload, a.flush, small, large, a.topics,
                      a.keep.with_name(a.keep.name + ".small") if a.keep else None, a.group, a.turns, a.tags,
                      a.keys)
    hi = instructions(a.root, a.workload, a.flush, large, large, a.topics, a.keep, a.group, a.turns, a.tags, a.keys)
    per_msg = (hi - lo) / ((large - small) * per_request)
    spread = f", {a.topics} topics x 4 queues" if a.topics > 1 else ""
    spread += f", TAGS {a.tags!r}" if a.tags else ""
    spread += ", KEYS" if a.keys else ""
    print(f"{a.root} {a.workload} {a.flush.upper()}_FLUSH{spread}: {per_msg:,.0f} loop-thread instructions per "
          f"message ({small} vs {large} requests)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
