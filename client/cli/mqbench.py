"""`mqbench`: load generator like RocketMQ's benchmark Producer / Consumer.

    mqbench producer -n 127.0.0.1:9876 -t BenchTopic --size 1024 --mode async --inflight 256 --duration 10
    mqbench consumer -n 127.0.0.1:9876 -t BenchTopic -g BenchGroup --mode push --duration 10

A line every second (TPS, MB/s, latency avg/p50/p99/max in ms, failures) and a closing summary;
`--json` prints the same as one JSON object per line. The producer's latency is its send RT (`rt_*`);
the consumer's is S2C (`s2c_*`), store to consume, from each message's store timestamp, in whole
milliseconds as RocketMQ's benchmark Consumer reports it: for a backlog it is how far behind the
consumer reads. With `--e2e` the producer stamps each message with its send time and the consumer
reports end-to-end latency (`e2e_*`, microsecond resolution) instead. `--rate N`
paces the producer to N msgs/s in total (e.g. the "e2e at 10 000 msg/s" workload):

    mqadmin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t E2E     # the consumer needs a route
    mqbench consumer -n 127.0.0.1:9876 -t E2E -g E2EGroup --e2e --duration 20 &
    mqbench producer -n 127.0.0.1:9876 -t E2E --mode async --inflight 64 --rate 10000 --e2e --duration 15

The exit code is 1 when a producer saw failures. bench/compare.py runs the same workloads side by
side with peer brokers.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import click

from remoting.log import configure_logging
from remoting.loop import run as run_loop

from ..config import NAMESRV_ADDR_ENV, ClientConfig
from ..message import Message

E2E_PROPERTY = "__BENCH_SEND_NS"
_store_timestamp = attrgetter("store_timestamp")


class Histogram:
    """Log-bucketed latency histogram (~1% resolution), bounded memory whatever the run length."""

    __slots__ = ("buckets", "count", "total", "max")
    SCALE = 100.0  # buckets per e-fold of microseconds

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def record(self, ms: float, n: int = 1) -> None:
        """n observations of `ms` (a consumer's S2C values are whole milliseconds: a batch has few)."""
        us = max(ms * 1000.0, 1.0)
        b = int(math.log(us) * self.SCALE)
        self.buckets[b] = self.buckets.get(b, 0) + n
        self.count += n
        self.total += ms * n
        if ms > self.max:
            self.max = ms

    def merge(self, other: Histogram) -> None:
        for b, n in other.buckets.items():
            self.buckets[b] = self.buckets.get(b, 0) + n
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)

    def percentile(self, p: float) -> float:
        if not self.count:
            return 0.0
        target = math.ceil(self.count * p / 100.0)
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= target:
                # (a bucket's middle, but never past the largest value seen, which is in that bucket or above)
                return min(math.exp((b + 0.5) / self.SCALE) / 1000.0, self.max)
        return self.max

    def avg(self) -> float:
        return self.total / self.count if self.count else 0.0


@dataclass
class Stats:
    msgs: int = 0
    bytes: int = 0
    failures: int = 0
    hist: Histogram = field(default_factory=Histogram)


class Reporter:
    def __init__(self, role: str, mode: str, json_out: bool, latency_name: str) -> None:
        self.role, self.mode, self.json_out, self.latency_name = role, mode, json_out, latency_name
        self.window = Stats()
        self.total = Stats()
        self.start = time.monotonic()

    def add(self, msgs: int, nbytes: int, latency_ms: float | None = None) -> None:
        for s in (self.window, self.total):
            s.msgs += msgs
            s.bytes += nbytes
        if latency_ms is not None:
            self.window.hist.record(latency_ms)

    def fail(self, n: int = 1) -> None:
        self.window.failures += n
        self.total.failures += n

    def _line(self, s: Stats, seconds: float, final: bool) -> dict[str, Any]:
        h = s.hist
        return {
            "role": self.role,
            "mode": self.mode,
            "final": final,
            "seconds": round(seconds, 3),
            "msgs": s.msgs,
            "tps": round(s.msgs / seconds, 1) if seconds > 0 else 0.0,
            "mb_s": round(s.bytes / seconds / 1e6, 2) if seconds > 0 else 0.0,
            f"{self.latency_name}_avg_ms": round(h.avg(), 3),
            f"{self.latency_name}_p50_ms": round(h.percentile(50), 3),
            f"{self.latency_name}_p99_ms": round(h.percentile(99), 3),
            f"{self.latency_name}_max_ms": round(h.max, 3),
            "failures": s.failures,
        }

    def _print(self, d: dict[str, Any]) -> None:
        if self.json_out:
            click.echo(json.dumps(d))
            return
        n = self.latency_name.upper()
        prefix = "SUMMARY " if d["final"] else ""
        click.echo(
            f"{prefix}{self.role} {self.mode}: {d['seconds']:.1f}s msgs={d['msgs']} TPS={d['tps']:.0f} "
            f"MB/s={d['mb_s']:.2f} {n}(ms) avg={d[f'{self.latency_name}_avg_ms']:.3f} "
            f"p50={d[f'{self.latency_name}_p50_ms']:.3f} p99={d[f'{self.latency_name}_p99_ms']:.3f} "
            f"max={d[f'{self.latency_name}_max_ms']:.3f} failures={d['failures']}"
        )

    def tick(self, seconds: float) -> None:
        self.total.hist.merge(self.window.hist)
        self._print(self._line(self.window, seconds, False))
        self.window = Stats()

    def summary(self) -> dict[str, Any]:
        self.total.hist.merge(self.window.hist)
        self.window = Stats()
        d = self._line(self.total, time.monotonic() - self.start, True)
        self._print(d)
        return d


async def _ticker(rep: Reporter, stop: asyncio.Event, interval: float = 1.0) -> None:
    last = time.monotonic()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            pass
        now = time.monotonic()
        if not stop.is_set():
            rep.tick(now - last)
        last = now


def _namesrv(addr: str | None) -> str:
    value = addr or os.environ.get(NAMESRV_ADDR_ENV)
    if not value:
        raise click.UsageError(f"-n or {NAMESRV_ADDR_ENV} required")
    return value


# ------------------------------------------------------------------ producer


async def run_producer(
    namesrv: str,
    topic: str,
    size: int,
    mode: str,
    batch: int,
    inflight: int,
    duration: float | None,
    count: int | None,
    e2e: bool,
    json_out: bool,
    group: str,
    rate: float | None = None,
    idle_poll_us: int = 0,
    auto_batch: bool = False,
) -> dict[str, Any]:
    from ..producer.producer import Producer

    producer = Producer(group, namesrv_addr=namesrv, max_async_inflight=max(inflight, 1),
                        client_config=ClientConfig(idle_poll_us=idle_poll_us), auto_batch=auto_batch)
    await producer.start()
    rep = Reporter("producer", mode, json_out, "rt")
    body = os.urandom(size // 2).hex().encode()[:size].ljust(size, b"x")
    stop = asyncio.Event()
    deadline = time.monotonic() + duration if duration else None
    remaining = [count if count is not None else -1]

    def take(n: int) -> int:
        if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
            stop.set()
            return 0
        if remaining[0] < 0:
            return n
        n = min(n, remaining[0])
        remaining[0] -= n
        if remaining[0] == 0:
            stop.set()
        return n

    # Pacing (--rate): each send takes the next slot of 1/rate s; a sender ahead of its slot sleeps.
    next_slot = [time.monotonic()]

    async def pace(n: int) -> None:
        if not rate:
            return
        now = time.monotonic()
        slot = max(next_slot[0], now - 0.05)  # do not bank more than 50 ms of idle time
        next_slot[0] = slot + n / rate
        if slot > now:
            await asyncio.sleep(slot - now)

    def make() -> Message:
        props = {E2E_PROPERTY: str(time.time_ns())} if e2e else None
        return Message(topic, body, properties=props)

    async def worker() -> None:
        while True:
            n = take(batch if mode == "batch" else 1)
            if n == 0:
                return
            await pace(n)
            t0 = time.perf_counter()
            try:
                if mode == "batch":
                    await producer.send_batch([make() for _ in range(n)])
                elif mode == "oneway":
                    await producer.send_oneway(make())
                elif mode == "async":
                    await producer.send_async(make())
                else:
                    await producer.send(make())
            except Exception:
                rep.fail(n)
                continue
            # (oneway: the call itself, the request handed to the connection, as RocketMQ's benchmark
            # Producer times sendOneway)
            rep.add(n, n * size, (time.perf_counter() - t0) * 1000.0)

    ticker = asyncio.create_task(_ticker(rep, stop))
    try:
        # sync: `inflight` callers each waiting for their answer; async/batch: that many in flight.
        workers = inflight if mode in ("sync", "async", "batch") else 1
        await asyncio.gather(*(worker() for _ in range(max(1, workers))))
    finally:
        stop.set()
        await ticker
        summary = rep.summary()
        await producer.shutdown()
    return summary


# ------------------------------------------------------------------ consumer


async def run_consumer(
    namesrv: str,
    topic: str,
    group: str,
    mode: str,
    duration: float | None,
    count: int | None,
    from_first: bool,
    e2e: bool,
    json_out: bool,
    idle_poll_us: int = 0,
) -> dict[str, Any]:
    rep = Reporter("consumer", mode, json_out, "e2e" if e2e else "s2c")
    cc = ClientConfig(idle_poll_us=idle_poll_us)
    stop = asyncio.Event()
    deadline = time.monotonic() + duration if duration else None

    def account(msgs: Sequence[Any]) -> None:
        now_ns = time.time_ns()
        n = len(msgs)
        nbytes = sum(len(m.body) for m in msgs)
        hist = rep.window.hist
        if e2e:
            for m in msgs:
                ts = m.properties.get(E2E_PROPERTY)
                if ts is not None:
                    hist.record((now_ns - int(ts)) / 1e6)
        else:
            # S2C: one histogram update per distinct millisecond of the batch, not per message (a batch
            # of 32 usually spans one or two), so the accounting stays cheap at ~10^6 msgs/s.
            now_ms = now_ns // 1_000_000
            for stored, k in Counter(map(_store_timestamp, msgs)).items():
                hist.record(max(now_ms - stored, 0), k)
        rep.add(n, nbytes)
        if count is not None and rep.total.msgs >= count:
            stop.set()

    ticker = asyncio.create_task(_ticker(rep, stop))
    try:
        from ..consumer import listener as listener_mod

        cfw = (
            listener_mod.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            if from_first
            else listener_mod.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        )
        if mode == "push":
            from ..consumer.push_consumer import PushConsumer

            consumer = PushConsumer(group, namesrv_addr=namesrv, consume_from_where=cfw, client_config=cc)
            consumer.subscribe(topic, "*")

            async def on_message(msgs: list[Any], ctx: Any) -> Any:
                account(msgs)
                return listener_mod.ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            consumer.register_listener(on_message)
            await consumer.start()
            try:
                while not stop.is_set():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    try:
                        await asyncio.wait_for(stop.wait(), 0.5 if left is None else min(0.5, left))
                    except TimeoutError:
                        pass
            finally:
                await consumer.shutdown()
        else:
            from ..consumer.lite_pull_consumer import LitePullConsumer

            lite = LitePullConsumer(group, namesrv_addr=namesrv, consume_from_where=cfw, client_config=cc)
            lite.subscribe(topic, "*")
            await lite.start()
            try:
                while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                    msgs = await lite.poll(timeout=0.5)
                    if msgs:
                        account(msgs)
            finally:
                await lite.shutdown()
    finally:
        stop.set()
        await ticker
    return rep.summary()


# ------------------------------------------------------------------ CLI


@click.group()
def cli() -> None:
    """RocketMQ benchmark producer and consumer."""


def _common(f: Any) -> Any:
    f = click.option("-n", "--namesrv", "namesrv", default=None, help="NameServer address(es), a:p;b:p")(f)
    f = click.option("-t", "--topic", required=True, help="topic")(f)
    f = click.option("--duration", type=float, default=None, help="seconds to run")(f)
    f = click.option("--count", type=int, default=None, help="messages to send/receive, then stop")(f)
    f = click.option("--json", "json_out", is_flag=True, help="JSON lines instead of text")(f)
    f = click.option("--e2e", is_flag=True, help="end-to-end latency (producer stamps, consumer measures)")(f)
    f = click.option("--idle-poll-us", "idle_poll_us", type=click.IntRange(0, 100_000), default=0, show_default=True,
                     help="client idle polling after each exchange, up to this many microseconds "
                          "(ClientConfig.idle_poll_us; the window adapts to the gaps between answers)")(f)
    return f


@cli.command()
@_common
@click.option("--size", type=int, default=1024, show_default=True, help="body size in bytes")
@click.option("--mode", type=click.Choice(["sync", "async", "oneway", "batch"]), default="sync", show_default=True)
@click.option("--batch", type=int, default=32, show_default=True, help="messages per batch (--mode batch)")
@click.option("--threads", "--inflight", "inflight", type=int, default=1, show_default=True,
              help="concurrent senders (sync) / requests in flight (async, batch)")
@click.option("-g", "--group", default="BenchmarkProducerGroup", show_default=True)
@click.option("--rate", type=float, default=None, help="send at most this many msgs/s in total (default: no limit)")
@click.option("--auto-batch", "auto_batch", is_flag=True,
              help="the producer gathers single sends (sync, async) into batches: Producer(auto_batch=True)")
def producer(
    namesrv: str | None, topic: str, duration: float | None, count: int | None, json_out: bool, e2e: bool,
    idle_poll_us: int, size: int, mode: str, batch: int, inflight: int, group: str, rate: float | None,
    auto_batch: bool,
) -> int:
    """Send messages as fast as the mode (and --rate) allows."""
    if duration is None and count is None:
        duration = 10.0
    if rate is not None and rate <= 0:
        raise click.BadParameter("must be > 0", param_hint="--rate")
    if size < 1 or batch < 1 or inflight < 1:
        raise click.UsageError("--size, --batch and --threads/--inflight must be >= 1")
    summary = run_loop(run_producer(
        _namesrv(namesrv), topic, size, mode, batch, inflight, duration, count, e2e, json_out, group, rate,
        idle_poll_us, auto_batch,
    ))
    return 1 if summary["failures"] else 0


@cli.command()
@_common
@click.option("-g", "--group", default="BenchmarkConsumerGroup", show_default=True)
@click.option("--mode", type=click.Choice(["push", "litepull"]), default="push", show_default=True)
@click.option("--from-first", is_flag=True, help="start from the first offset (default: last)")
def consumer(
    namesrv: str | None, topic: str, duration: float | None, count: int | None, json_out: bool, e2e: bool,
    idle_poll_us: int, group: str, mode: str, from_first: bool,
) -> None:
    """Consume messages and report throughput (and end-to-end latency with --e2e)."""
    if duration is None and count is None:
        duration = 10.0
    run_loop(run_consumer(
        _namesrv(namesrv), topic, group, mode, duration, count, from_first, e2e, json_out, idle_poll_us
    ))


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging(level=os.environ.get("RMQ_LOG_LEVEL", "ERROR"))
    try:
        rv = cli.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="mqbench", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.ClickException as e:
        e.show()
        return int(e.exit_code)
    except KeyboardInterrupt:
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
