"""Blocking facade: the same Producer and Admin for code that does not run an event loop.

    from client.sync import Producer, Admin
    from client import Message

    with Producer("my-group", "127.0.0.1:9876") as p:
        print(p.send(Message("TopicTest", b"hello")).msg_id)

Every object here drives the asyncio implementation on ONE background event-loop thread per
process (uvloop; started lazily; a daemon thread), so any number of threads (Spark executor task
threads, web workers) may call them at once: each call blocks only its caller. Calling these from
that loop's own thread (e.g. from a send callback) would deadlock and raises RuntimeError instead:
use the async API there. After os.fork() the child gets a fresh loop thread.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import inspect
import os
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Generic, NoReturn, TypeVar

from remoting.loop import new_event_loop

from . import admin as _admin
from .instance import get_client_manager
from .loop_inbox import LoopInbox
from .message import Message, MessageQueue, SendResult
from .producer import producer as _producer
from .producer.selector import MessageQueueSelector, SelectorFunction

T = TypeVar("T")

__all__ = ["Admin", "LoopThread", "Producer", "get_loop_thread", "run"]


class _LoopFuture(concurrent.futures.Future, Generic[T]):  # type: ignore[type-arg]
    """The caller's side of work started on the loop thread by LoopThread.start_future: completed from the
    asyncio future the work returned, with no Task and no chain of callbacks (run_coroutine_threadsafe's).
    cancel() while pending cancels that work on the loop, as run_coroutine_threadsafe's future does."""

    _aio: asyncio.Future[Any] | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        aio = self._aio  # (None: not started yet; _start sees the cancel and starts nothing)
        if aio is not None and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(aio.cancel)
            except RuntimeError:  # the loop is closed: nothing runs there any more
                pass
        return True

    def _start(self, begin: Callable[[], Any]) -> None:
        """On the loop thread: begin the work, unless cancelled meanwhile."""
        if self.cancelled():
            return
        try:
            aio = begin()
            if not asyncio.isfuture(aio):
                aio = asyncio.ensure_future(aio)  # a coroutine: its own Task after all
        except BaseException as e:  # noqa: BLE001 - the caller gets whatever starting it raised
            self._finish_with(None, e)
            return
        self._aio = aio
        aio.add_done_callback(self._done)
        if self.cancelled():  # cancelled between the check above and _aio being set
            aio.cancel()

    def _done(self, aio: asyncio.Future[Any]) -> None:
        if aio.cancelled():
            super().cancel()
            return
        exc = aio.exception()
        self._finish_with(None if exc is not None else aio.result(), exc)

    def _finish_with(self, result: Any, exc: BaseException | None) -> None:
        try:
            if exc is not None:
                self.set_exception(exc)
            else:
                self.set_result(result)
        except concurrent.futures.InvalidStateError:  # the caller cancelled it meanwhile
            pass


class LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str = "rocketmq-client-loop") -> None:
        self.loop = new_event_loop()
        # Work handed to the loop by start_future, run in call order, many per loop wake-up.
        self._calls: LoopInbox[tuple[_LoopFuture[Any], Callable[[], Any]]] = LoopInbox(self._drain, self.loop)
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.in_loop_thread():
            coro.close()
            self._refuse_in_loop_thread()
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def _refuse_in_loop_thread(self) -> NoReturn:
        raise RuntimeError(
            "blocking client call made from the client's own event-loop thread (e.g. inside a callback): "
            "use the async API there"
        )

    def start_future(self, begin: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Call begin() on the loop thread and return a future of the asyncio future (or coroutine) it returns.

        For many small requests from other threads (pipelined sends): the calls made before the loop thread
        gets to them are handed over together, with one wake-up of the loop, and an asyncio future is
        chained as it is, without a Task (run_coroutine_threadsafe costs both per call). begin() runs in
        call order; what it raises is the future's exception."""
        if self.in_loop_thread():
            self._refuse_in_loop_thread()
        fut: _LoopFuture[Any] = _LoopFuture()
        fut._loop = self.loop
        self._calls.put((fut, begin))
        return fut

    def _drain(self) -> None:
        calls = self._calls.items
        while calls:
            fut, begin = calls.popleft()
            fut._start(begin)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        fut = self.submit(coro)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop_thread():
            self.thread.join(timeout)


_lock = threading.Lock()
_runner: LoopThread | None = None
_runner_pid = -1


def get_loop_thread() -> LoopThread:
    """The process's client loop thread, started on first use (and again in a forked child)."""
    global _runner, _runner_pid
    r = _runner
    if r is not None and _runner_pid == os.getpid() and r.thread.is_alive():
        return r
    with _lock:
        if _runner is None or _runner_pid != os.getpid() or not _runner.thread.is_alive():
            _runner = LoopThread()
            _runner_pid = os.getpid()
        return _runner


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run a coroutine on the client loop thread and block for its result."""
    return get_loop_thread().run(coro, timeout)


async def _shutdown_all() -> None:
    mgr = get_client_manager()
    for inst in mgr.instances():
        if inst.loop is asyncio.get_running_loop():
            await inst.shutdown()


@atexit.register
def _at_exit() -> None:
    # Clients left running in blocking code still unregister from the brokers at exit (bounded).
    r = _runner
    if r is None or _runner_pid != os.getpid() or not r.thread.is_alive():
        return
    try:
        r.run(_shutdown_all(), timeout=5.0)
    except BaseException:
        pass
    r.stop(2.0)


class Producer:
    """Blocking twin of client.Producer: same constructor and method names, results returned directly.

    `send_async` returns a concurrent.futures.Future (callback(result, exc) runs on the client
    loop thread: keep it short and do not call blocking client methods from it).
    """

    def __init__(self, group: str, namesrv_addr: str | None = None, **kwargs: Any) -> None:
        self._runner = get_loop_thread()
        self._p = _producer.Producer(group, namesrv_addr, **kwargs)

    @property
    def group(self) -> str:
        return self._p.group

    @property
    def async_producer(self) -> _producer.Producer:
        """The underlying asyncio producer (use it only on the client loop thread)."""
        return self._p

    def start(self) -> None:
        self._runner.run(self._p.start())

    def shutdown(self) -> None:
        self._runner.run(self._p.shutdown())

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def send(
        self, msg: Message, *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        fut = self._runner.start_future(functools.partial(self._p.send_future, msg, queue=queue, timeout=timeout))
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # (interrupted: KeyboardInterrupt, ...)
            raise

    def send_async(
        self,
        msg: Message,
        callback: _producer.SendCallback | None = None,
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        return self._runner.start_future(
            functools.partial(self._p.send_async, msg, callback, queue=queue, timeout=timeout)
        )

    def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        self._runner.run(self._p.send_oneway(msg, queue=queue))

    def send_batch(
        self, msgs: Iterable[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        return self._runner.run(self._p.send_batch(list(msgs), queue=queue, timeout=timeout))

    def send_orderly(
        self,
        msg: Message,
        sharding_key: Any,
        selector: MessageQueueSelector | SelectorFunction | None = None,
        *,
        timeout: float | None = None,
    ) -> SendResult:
        return self._runner.run(self._p.send_orderly(msg, sharding_key, selector, timeout=timeout))

    def request(self, msg: Message, timeout: float = 3000, *, queue: MessageQueue | None = None) -> MessageExt:
        """Send `msg` and wait for its reply, `timeout` in milliseconds (see client.Producer.request)."""
        return self._runner.run(self._p.request(msg, timeout, queue=queue), timeout / 1000 + 5.0)

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._runner.run(self._p.fetch_publish_message_queues(topic))


class Admin:
    """Blocking twin of client.Admin: every coroutine method of it, as a blocking method."""

    def __init__(self, namesrv_addr: str | None = None, **kwargs: Any) -> None:
        self._runner = get_loop_thread()
        self._a = _admin.Admin(namesrv_addr, **kwargs)

    def start(self) -> None:
        self._runner.run(self._a.start())

    def shutdown(self) -> None:
        self._runner.run(self._a.shutdown())

    def __enter__(self) -> Admin:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if inspect.iscoroutinefunction(attr):
            runner = self._runner

            @functools.wraps(attr)
            def call(*args: Any, **kwargs: Any) -> Any:
                return runner.run(attr(*args, **kwargs))

            return call
        return attr

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {n for n in dir(self._a) if not n.startswith("_")})


# ------------------------------------------------------------------------------------------ consumers

from collections.abc import Iterator  # noqa: E402

from .consumer import lite_pull_consumer as _lite  # noqa: E402
from .consumer import push_consumer as _push  # noqa: E402
from .consumer.filter import MessageSelector  # noqa: E402
from .message import MessageExt  # noqa: E402

__all__ += ["LitePullConsumer", "PushConsumer"]


async def _call(fn: Callable[[], Any]) -> Any:
    """Run a plain function on the loop thread (for methods that create tasks)."""
    return fn()


class PushConsumer:
    """Blocking twin of client.PushConsumer: same constructor and method names.

    A plain-function listener runs in the consumer's thread pool (never on the loop thread), so it
    may block and may call other blocking client objects (e.g. a client.sync.Producer).
    """

    def __init__(self, group: str, namesrv_addr: str | None = None, **kwargs: Any) -> None:
        self._runner = get_loop_thread()
        self._c = _push.PushConsumer(group, namesrv_addr, **kwargs)

    @property
    def group(self) -> str:
        return self._c.group

    @property
    def async_consumer(self) -> _push.PushConsumer:
        """The underlying asyncio consumer (use it only on the client loop thread)."""
        return self._c

    @property
    def running(self) -> bool:
        return self._c.running

    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*") -> None:
        if self._c.running:
            self._runner.run(_call(lambda: self._c.subscribe(topic, expression)))
        else:
            self._c.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._runner.run(_call(lambda: self._c.unsubscribe(topic)))

    def register_listener(self, fn: Callable[..., Any], orderly: bool = False) -> None:
        self._c.register_listener(fn, orderly)

    def register_message_listener(self, fn: Callable[..., Any], orderly: bool = False) -> None:
        self._c.register_listener(fn, orderly)

    def register_orderly_listener(self, fn: Callable[..., Any]) -> None:
        self._c.register_orderly_listener(fn)

    def start(self) -> None:
        self._runner.run(self._c.start())

    def shutdown(self) -> None:
        self._runner.run(self._c.shutdown())

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def suspend(self) -> None:
        self._c.suspend()

    def resume(self) -> None:
        self._runner.run(self._c.resume())

    def assigned_queues(self) -> list[MessageQueue]:
        return self._runner.run(_call(self._c.assigned_queues))

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._runner.run(self._c.fetch_subscribe_message_queues(topic))

    def send_message_back(self, msg: MessageExt, delay_level: int = 0, broker_name: str | None = None) -> None:
        self._runner.run(self._c.send_message_back(msg, delay_level, broker_name))


class LitePullConsumer:
    """Blocking twin of client.LitePullConsumer: same constructor and method names; `poll(timeout)`
    blocks the calling thread up to `timeout` seconds; `read_range` is a blocking iterator."""

    def __init__(self, group: str, namesrv_addr: str | None = None, **kwargs: Any) -> None:
        self._runner = get_loop_thread()
        self._c = _lite.LitePullConsumer(group, namesrv_addr, **kwargs)
        self._c.enable_blocking_poll()  # poll takes a waiting batch in the calling thread

    @property
    def group(self) -> str:
        return self._c.group

    @property
    def async_consumer(self) -> _lite.LitePullConsumer:
        return self._c

    @property
    def running(self) -> bool:
        return self._c.running

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        return self._runner.run(coro, timeout)

    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*") -> None:
        self._run(_call(lambda: self._c.subscribe(topic, expression)))

    def unsubscribe(self, topic: str) -> None:
        self._run(_call(lambda: self._c.unsubscribe(topic)))

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        qs = list(queues)
        self._run(_call(lambda: self._c.assign(qs)))

    def assignment(self) -> list[MessageQueue]:
        return self._run(_call(self._c.assignment))

    def start(self) -> None:
        self._run(self._c.start())

    def shutdown(self) -> None:
        self._run(self._c.shutdown())

    def __enter__(self) -> LitePullConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """Blocks up to `timeout` seconds; a batch already waiting is taken in this thread, with no round
        trip to the client's loop thread (LitePullConsumer.poll_blocking)."""
        return self._c.poll_blocking(timeout)

    def commit(self, offsets: dict[MessageQueue, int] | None = None, *, persist: bool = True) -> dict[MessageQueue, int]:
        return self._run(self._c.commit(offsets, persist=persist))

    def commit_sync(self, offsets: dict[MessageQueue, int] | None = None) -> dict[MessageQueue, int]:
        return self._run(self._c.commit_sync(offsets))

    def committed(self, mq: MessageQueue) -> int | None:
        return self._run(self._c.committed(mq))

    def position(self, mq: MessageQueue) -> int | None:
        return self._run(_call(lambda: self._c.position(mq)))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        self._run(self._c.seek(mq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self._run(self._c.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        self._run(self._c.seek_to_end(mq))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        qs = list(queues)
        self._run(_call(lambda: self._c.pause(qs)))

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        qs = list(queues)
        self._run(_call(lambda: self._c.resume(qs)))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._c.fetch_message_queues(topic))

    def min_offset(self, mq: MessageQueue) -> int:
        return self._run(self._c.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._run(self._c.max_offset(mq))

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self._c.offset_for_timestamp(mq, timestamp_ms))

    def read_range(
        self, mq: MessageQueue, start: int, end: int, *, sub_expression: str = "*"
    ) -> Iterator[list[MessageExt]]:
        """Blocking iterator over LitePullConsumer.read_range (no group membership)."""
        agen = self._c.read_range(mq, start, end, sub_expression=sub_expression)
        try:
            while True:
                try:
                    batch = self._run(agen.__anext__(), 120.0)
                except StopAsyncIteration:
                    return
                yield batch
        finally:
            try:
                self._run(agen.aclose(), 10.0)
            except Exception:
                pass

    def close_reader(self) -> None:
        self._run(self._c.close_reader())


# ------------------------------------------------------------------------------------------ transactions

from .producer import transaction as _transaction  # noqa: E402

__all__ += ["TransactionProducer"]


class TransactionProducer(Producer):
    """Blocking twin of client.TransactionProducer: `send_in_transaction(msg, arg)` blocks for the result.

    Plain-function listener methods run in the producer's thread pool (never on the loop thread), so
    they may block and may call other blocking client objects; `async def` ones run on the loop.
    """

    def __init__(
        self, group: str, listener: Any = None, namesrv_addr: str | None = None, **kwargs: Any
    ) -> None:
        self._runner = get_loop_thread()
        self._p = _transaction.TransactionProducer(group, listener, namesrv_addr, **kwargs)

    @property
    def async_producer(self) -> _transaction.TransactionProducer:
        """The underlying asyncio producer (use it only on the client loop thread)."""
        assert isinstance(self._p, _transaction.TransactionProducer)
        return self._p

    @property
    def transaction_listener(self) -> Any:
        return self.async_producer.transaction_listener

    def set_transaction_listener(self, listener: Any) -> None:
        self.async_producer.set_transaction_listener(listener)

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    def send_in_transaction(
        self, msg: Message, arg: Any = None, *, timeout: float | None = None
    ) -> _transaction.TransactionSendResult:
        return self._runner.run(self.async_producer.send_in_transaction(msg, arg, timeout=timeout))
