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

What the messages carry and how they are consumed follow RocketMQ's benchmark options: the producer's
`--keys` (a key per message, the send second: the broker indexes it), `--tag-count N` (tags tag0..tagN-1),
`--property-size N` (user properties of about N characters) and `--delay-level L` (delayed delivery); the
consumer's `--expression` (a tag expression the broker filters by; SQL92 with `-f SQL92`), `--threads` (consume threads),
`--fail-rate R` (that share of listener calls answers RECONSUME_LATER, or suspends an orderly queue, and is
counted as failures: the messages come back through the retry topic), `--listener thread` (a plain function
run in the consume threads, the way RocketMQ's listeners are written, instead of an `async def` on the loop)
and `--orderly`:

    mqbench producer -n 127.0.0.1:9876 -t BenchTopic --mode async --inflight 128 --tag-count 4 --keys
    mqbench consumer -n 127.0.0.1:9876 -t BenchTopic --expression "tag1 || tag2" --listener thread

The exit code is 1 when a producer saw failures. bench/compare.py runs the same workloads side by
side with peer brokers.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import click

from remoting.errors import RemotingError
from remoting.log import configure_logging
from remoting.loop import run as run_loop

from ..config import NAMESRV_ADDR_ENV, ClientConfig
from ..consumer.filter import MessageSelector
from ..errors import MQBrokerError, MQClientError
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
    """The window (since the last line) and the run's totals. `lock` guards them: a plain listener
    reports from the consume threads while the loop prints and swaps the window."""

    def __init__(self, role: str, mode: str, json_out: bool, latency_name: str) -> None:
        self.role, self.mode, self.json_out, self.latency_name = role, mode, json_out, latency_name
        self.window = Stats()
        self.total = Stats()
        self.start = time.monotonic()
        self.lock = threading.Lock()

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
        with self.lock:
            window, self.window = self.window, Stats()
            self.total.hist.merge(window.hist)
        self._print(self._line(window, seconds, False))

    def summary(self) -> dict[str, Any]:
        with self.lock:
            window, self.window = self.window, Stats()
            self.total.hist.merge(window.hist)
            d = self._line(self.total, time.monotonic() - self.start, True)
        self._print(d)
        return d


def user_properties(size: int, start: int) -> dict[str, str]:
    """RocketMQ's benchmark Producer's `-p` properties: pairs prop<i>=hello<v>, prop<i+1>=<v> (v counting up from
    `start`) until their names and values pass `size` characters."""
    props: dict[str, str] = {}
    i = n = 0
    while True:
        k1, v1, k2, v2 = f"prop{i}", f"hello{start}", f"prop{i + 1}", str(start)
        props[k1] = v1
        props[k2] = v2
        n += len(k1) + len(v1) + len(k2) + len(v2)
        if n > size:
            return props
        i += 2
        start += 2


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
    keys: bool = False,
    tag_count: int = 0,
    property_size: int = 0,
    delay_level: int = 0,
    report_interval: float = 1.0,
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

    # (--property-size: upstream draws the first value at random per message; 100 prepared sets, drawn per message)
    prop_sets = [user_properties(property_size, v) for v in range(100)] if property_size > 0 else []
    plain = not (prop_sets or keys or tag_count or delay_level)

    def make() -> Message:
        if plain:
            return Message(topic, body, properties={E2E_PROPERTY: str(time.time_ns())} if e2e else None)
        props = dict(random.choice(prop_sets)) if prop_sets else {}
        if e2e:
            props[E2E_PROPERTY] = str(time.time_ns())
        now_ms = time.time_ns() // 1_000_000
        # (as upstream: the key is the send second, the tag the send millisecond modulo the tag count)
        return Message(topic, body, tags=f"tag{now_ms % tag_count}" if tag_count else None,
                       keys=str(now_ms // 1000) if keys else None, properties=props, delay_level=delay_level)

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

    ticker = asyncio.create_task(_ticker(rep, stop, report_interval))
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
    expression: str | MessageSelector = "*",
    threads: int = 20,
    fail_rate: float = 0.0,
    listener: str = "async",
    orderly: bool = False,
    report_interval: float = 1.0,
) -> dict[str, Any]:
    from ..consumer import listener as listener_mod

    rep = Reporter("consumer", mode, json_out, "e2e" if e2e else "s2c")
    cc = ClientConfig(idle_poll_us=idle_poll_us)
    stop = asyncio.Event()
    deadline = time.monotonic() + duration if duration else None
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    lock = rep.lock

    def account(msgs: Sequence[Any]) -> bool:
        """Count a listener call's messages (from the loop or a consume thread); True: this call fails
        (--fail-rate), and its messages are counted as failures too."""
        now_ns = time.time_ns()
        n = len(msgs)
        nbytes = len(msgs[0].body) if n == 1 else sum(len(m.body) for m in msgs)
        failed = fail_rate > 0 and random.random() < fail_rate
        with lock:
            hist = rep.window.hist
            if e2e:
                for m in msgs:
                    ts = m.properties.get(E2E_PROPERTY)
                    if ts is not None:
                        hist.record((now_ns - int(ts)) / 1e6)
            elif n == 1:  # (RocketMQ's default: one message a call)
                hist.record(max(now_ns // 1_000_000 - msgs[0].store_timestamp, 0))
            else:
                # S2C: one histogram update per distinct millisecond of the batch, not per message (a batch
                # of 32 usually spans one or two), so the accounting stays cheap at ~10^6 msgs/s.
                now_ms = now_ns // 1_000_000
                for stored, k in Counter(map(_store_timestamp, msgs)).items():
                    hist.record(max(now_ms - stored, 0), k)
            rep.add(n, nbytes)
            if failed:
                rep.fail(n)
            done = count is not None and rep.total.msgs >= count
        if done:
            if threading.get_ident() == loop_thread:
                stop.set()
            else:
                loop.call_soon_threadsafe(stop.set)
        return failed

    ticker = asyncio.create_task(_ticker(rep, stop, report_interval))
    try:
        cfw = (
            listener_mod.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            if from_first
            else listener_mod.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        )
        if mode == "push":
            from ..consumer.push_consumer import PushConsumer

            consumer = PushConsumer(group, namesrv_addr=namesrv, consume_from_where=cfw, client_config=cc,
                                    consume_thread_min=threads, consume_thread_max=threads)
            consumer.subscribe(topic, expression)
            if orderly:
                ok: Any = listener_mod.ConsumeOrderlyStatus.SUCCESS
                again: Any = listener_mod.ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            else:
                ok = listener_mod.ConsumeConcurrentlyStatus.CONSUME_SUCCESS
                again = listener_mod.ConsumeConcurrentlyStatus.RECONSUME_LATER

            def plain_listener(msgs: list[Any], ctx: Any) -> Any:  # run in the consume threads
                return again if account(msgs) else ok

            async def async_listener(msgs: list[Any], ctx: Any) -> Any:
                return again if account(msgs) else ok

            consumer.register_listener(plain_listener if listener == "thread" else async_listener, orderly=orderly)
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
            lite.subscribe(topic, expression)
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
    f = click.option("--report-interval", "report_interval", type=click.FloatRange(0, min_open=True), default=1.0,
                     show_default=True, help="seconds between the live lines")(f)
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
@click.option("--keys", is_flag=True, help="give each message a key, the send second (the broker indexes it)")
@click.option("--tag-count", "tag_count", type=click.IntRange(0), default=0, show_default=True,
              help="tag messages tag0..tagN-1 (by the send millisecond); 0: no tags")
@click.option("--property-size", "property_size", type=click.IntRange(0), default=0, show_default=True,
              help="user properties of about this many characters a message (prop0=hello<v>, prop1=<v>, ...)")
@click.option("--delay-level", "delay_level", type=click.IntRange(0), default=0, show_default=True,
              help="delayed delivery at this level (the broker's messageDelayLevel: 1 = 1s, 2 = 5s, ...); 0: none")
def producer(
    namesrv: str | None, topic: str, duration: float | None, count: int | None, json_out: bool, e2e: bool,
    idle_poll_us: int, report_interval: float, size: int, mode: str, batch: int, inflight: int, group: str,
    rate: float | None, auto_batch: bool, keys: bool, tag_count: int, property_size: int, delay_level: int,
) -> int:
    """Send messages as fast as the mode (and --rate) allows."""
    if duration is None and count is None:
        duration = 10.0
    if rate is not None and rate <= 0:
        raise click.BadParameter("must be > 0", param_hint="--rate")
    if size < 1 or batch < 1 or inflight < 1:
        raise click.UsageError("--size, --batch and --threads/--inflight must be >= 1")
    if delay_level and mode == "batch":
        raise click.UsageError("--delay-level cannot be used with --mode batch: RocketMQ does not batch delayed messages")
    summary = run_loop(run_producer(
        _namesrv(namesrv), topic, size, mode, batch, inflight, duration, count, e2e, json_out, group, rate,
        idle_poll_us, auto_batch, keys, tag_count, property_size, delay_level, report_interval,
    ))
    return 1 if summary["failures"] else 0


@cli.command()
@_common
@click.option("-g", "--group", default="BenchmarkConsumerGroup", show_default=True)
@click.option("--mode", type=click.Choice(["push", "litepull"]), default="push", show_default=True)
@click.option("--from-first", is_flag=True, help="start from the first offset (default: last)")
@click.option("-e", "--expression", default="*", show_default=True,
              help='expression the broker filters by: tags, e.g. "tag1 || tag2", or SQL92 with -f SQL92')
@click.option("-f", "--filter-type", "filter_type", type=click.Choice(["TAG", "SQL92"]), default="TAG",
              show_default=True, help="how --expression is read (SQL92 needs a broker with enablePropertyFilter=true)")
@click.option("--threads", type=click.IntRange(1, 1000), default=None,
              help="push: consume threads (consume_thread_min and max)  [default: 20]")
@click.option("--fail-rate", "fail_rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="push: share of listener calls that fail (RECONSUME_LATER, or an orderly queue suspended), "
                   "counted as failures")
@click.option("--listener", type=click.Choice(["async", "thread"]), default="async", show_default=True,
              help="push: an async def listener on the loop, or a plain function in the consume threads")
@click.option("--orderly", is_flag=True, help="push: an orderly listener (queues locked, consumed in order)")
def consumer(
    namesrv: str | None, topic: str, duration: float | None, count: int | None, json_out: bool, e2e: bool,
    idle_poll_us: int, report_interval: float, group: str, mode: str, from_first: bool, expression: str,
    filter_type: str, threads: int | None, fail_rate: float, listener: str, orderly: bool,
) -> None:
    """Consume messages and report throughput (and end-to-end latency with --e2e)."""
    if duration is None and count is None:
        duration = 10.0
    if mode == "litepull":
        for name, given in (("--threads", threads is not None), ("--fail-rate", fail_rate > 0),
                            ("--listener", listener != "async"), ("--orderly", orderly)):
            if given:
                raise click.UsageError(f"{name} is for --mode push (a lite pull consumer's application polls)")
    run_loop(run_consumer(
        _namesrv(namesrv), topic, group, mode, duration, count, from_first, e2e, json_out, idle_poll_us,
        MessageSelector.by_sql(expression) if filter_type == "SQL92" else expression, threads or 20, fail_rate,
        listener, orderly, report_interval,
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
    except (MQClientError, MQBrokerError, RemotingError) as e:
        # e.g. a consumer whose broker refuses its subscription: say why, without a traceback
        if os.environ.get("RMQ_DEBUG"):
            raise
        click.echo(f"mqbench: {type(e).__name__}: {e}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
