"""TransactionProducer: RocketMQ's TransactionMQProducer on asyncio (half message, local transaction,
commit/rollback, and answers to the broker's check-back).

    class Orders(TransactionListener):
        async def execute_local_transaction(self, msg, arg):
            await db.save_order(arg, tx_id=msg.transaction_id)
            return LocalTransactionState.COMMIT_MESSAGE

        async def check_local_transaction(self, msg):
            found = await db.order_for(msg.transaction_id)
            return LocalTransactionState.COMMIT if found else LocalTransactionState.UNKNOWN

    async with TransactionProducer("tx-group", Orders(), "127.0.0.1:9876") as p:
        r = await p.send_in_transaction(Message("Orders", b"..."), arg=order)
        r.local_transaction_state   # what the listener decided

Flow (DefaultMQProducerImpl.sendMessageInTransaction): the message is sent synchronously as a half
message (properties TRAN_MSG=true and PGROUP=<group>; consumers do not see it yet); if it was stored
(SEND_OK), `execute_local_transaction(msg, arg)` runs; its answer goes to the broker that stored the
half message as END_TRANSACTION (oneway): COMMIT_MESSAGE makes the message visible, ROLLBACK_MESSAGE
drops it, UNKNOW (also: None, or an exception in the listener) leaves it to the broker, which later
asks a producer of the group (CHECK_TRANSACTION_STATE) and gets `check_local_transaction(msg)`'s answer
back as END_TRANSACTION (fromTransactionCheck=true).

Listener methods may be `async def` (run on the event loop) or plain functions (run in a thread pool,
so they may block). `msg.transaction_id` is the transaction's id (the message's UNIQ_KEY) in both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import functools
import inspect
import os
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import structlog

from remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from remoting.message import MessageConst, MessageExt, MessageSysFlag, decode_offset_msg_id

from ..errors import MQClientError
from ..listener_threads import ListenerThreads
from ..message import Message, SendResult, SendStatus
from .producer import Producer

log = structlog.get_logger(__name__)

__all__ = [
    "LocalTransactionState",
    "TransactionListener",
    "TransactionMessageExt",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionStatus",
]

_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_TRAN = MessageConst.PROPERTY_TRANSACTION_PREPARED
_PGROUP = MessageConst.PROPERTY_PRODUCER_GROUP
_TRANSACTION_ID_PROPERTY = "__transactionId__"


class LocalTransactionState(enum.Enum):
    """What the local transaction came to. COMMIT / ROLLBACK / UNKNOWN are aliases of RocketMQ's names."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"
    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"

    @property
    def transaction_type(self) -> int:
        """The END_TRANSACTION commitOrRollback value (a MessageSysFlag transaction type)."""
        return _TYPES[self]

    @classmethod
    def of(cls, value: object) -> LocalTransactionState:
        """Accept a state, its name or value ("COMMIT", "commit_message", ...); None means UNKNOW."""
        if isinstance(value, LocalTransactionState):
            return value
        if value is None:
            return cls.UNKNOW
        if isinstance(value, str):
            key = value.strip().upper()
            if key in cls.__members__:
                return cls.__members__[key]
        raise ValueError(f"not a LocalTransactionState: {value!r}")


_TYPES = {
    LocalTransactionState.COMMIT_MESSAGE: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: MessageSysFlag.TRANSACTION_NOT_TYPE,
}

# RocketMQ 5 / other SDKs call it TransactionStatus.
TransactionStatus = LocalTransactionState


@runtime_checkable
class TransactionListenerLike(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> Any: ...

    def check_local_transaction(self, msg: MessageExt) -> Any: ...


class TransactionListener:
    """Base class of transaction listeners (any object with these two methods will do).

    Each method returns a LocalTransactionState (or awaits to one when `async def`).
    """

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        """Run the local transaction for the stored half message `msg`; `arg` is send_in_transaction's."""
        raise NotImplementedError

    def check_local_transaction(self, msg: MessageExt) -> Any:
        """The broker asks how the transaction of `msg` (`msg.transaction_id`) ended."""
        raise NotImplementedError


@dataclasses.dataclass(slots=True)
class TransactionMessageExt(MessageExt):
    """The half message a check is about, with its transaction id."""

    transaction_id: str | None = None

    @classmethod
    def wrap(cls, msg: MessageExt, transaction_id: str | None) -> TransactionMessageExt:
        values = {f.name: getattr(msg, f.name) for f in dataclasses.fields(MessageExt)}
        return cls(**values, transaction_id=transaction_id)


@dataclasses.dataclass(slots=True)
class TransactionSendResult(SendResult):
    """SendResult of the half message plus what the local transaction decided."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


class TransactionProducer(Producer):
    """A Producer that sends messages in transactions.

    Args:
        group: producer group. The broker asks any live producer of this group about undecided
            transactions, so every producer of the group needs a listener that can answer.
        listener: a TransactionListener (or an object with the same two methods); may be set later
            with `set_transaction_listener`.
        namesrv_addr: as for Producer.
        check_thread_pool_size: how many check-backs are answered at once (RocketMQ: 1).
        check_request_hold_max: how many check-backs may wait; more are dropped (the broker asks
            again at its next round).
        executor: where plain-function listener methods run; by default this producer's own
            `listener_threads` threads (client.listener_threads: no concurrent future, no wake-up of
            the event loop per call of their own).
        Other keyword arguments are Producer's.
    """

    def __init__(
        self,
        group: str,
        listener: TransactionListenerLike | None = None,
        namesrv_addr: str | None = None,
        *,
        check_thread_pool_size: int = 1,
        check_request_hold_max: int = 2000,
        executor: concurrent.futures.Executor | None = None,
        listener_threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        if check_thread_pool_size <= 0 or check_request_hold_max <= 0:
            raise MQClientError("check_thread_pool_size and check_request_hold_max must be > 0")
        self.transaction_listener = listener
        self.check_thread_pool_size = check_thread_pool_size
        self.check_request_hold_max = check_request_hold_max
        self._executor = executor  # (the caller's: never shut down here)
        self._threads: ListenerThreads | None = None  # (without an executor given: started by start())
        self._listener_threads = listener_threads or min(32, (os.cpu_count() or 1) + 4)
        self._check_slots: asyncio.Semaphore | None = None
        self._check_tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lifecycle
    def set_transaction_listener(self, listener: TransactionListenerLike) -> None:
        self.transaction_listener = listener

    async def start(self) -> None:
        if self._executor is None and self._threads is None:
            self._threads = ListenerThreads(None, self._listener_threads, f"tx-listener-{self.group}")
        if self._check_slots is None:
            self._check_slots = asyncio.Semaphore(self.check_thread_pool_size)
        await super().start()
        # Like DefaultMQProducerImpl.start (which tracks the create-topic key's route): learn the brokers
        # at once, so they know this producer (and can ask it about undecided transactions) before it sends.
        try:
            await self._running_instance().update_topic_route_info_from_name_server(self.create_topic_key)
        except Exception as e:
            log.debug("transaction_producer_route_lookup_failed", topic=self.create_topic_key, error=str(e))

    async def shutdown(self) -> None:
        tasks = list(self._check_tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        await super().shutdown()
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown()
        self._executor = None

    async def __aenter__(self) -> TransactionProducer:
        await self.start()
        return self

    # ------------------------------------------------------------------ sending
    async def send_in_transaction(
        self, msg: Message, arg: Any = None, *, timeout: float | None = None
    ) -> TransactionSendResult:
        """Send `msg` as a half message, run the local transaction, tell the broker its outcome.

        Raises what send() raises when the half message cannot be stored (the local transaction
        does not run then). Errors of the listener make the state UNKNOW (the broker checks back);
        a failure to deliver END_TRANSACTION is logged, not raised (the broker checks back too).
        """
        listener = self.transaction_listener
        if listener is None:
            raise MQClientError("TransactionListener is null: pass a listener to TransactionProducer")
        if msg.delay_level:
            msg.delay_level = 0  # transactional messages cannot be delayed
        msg.put_property(_TRAN, "true")
        msg.put_property(_PGROUP, self.group)
        result = await self.send(msg, timeout=timeout)

        state = LocalTransactionState.UNKNOW
        local_exc: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            if result.transaction_id is not None:
                msg.put_property(_TRANSACTION_ID_PROPERTY, result.transaction_id)
            tid = msg.properties.get(_UNIQ)
            if tid:
                msg.transaction_id = tid
            try:
                state = LocalTransactionState.of(await self._call(listener.execute_local_transaction, msg, arg))
            except Exception as e:
                local_exc = e
                log.warning(
                    "local_transaction_failed",
                    group=self.group,
                    msg_id=result.msg_id,
                    error=f"{type(e).__name__}: {e}",
                    state=LocalTransactionState.UNKNOW.value,
                )
            if state is not LocalTransactionState.COMMIT_MESSAGE:
                log.info("local_transaction_state", group=self.group, msg_id=result.msg_id, state=state.value)
        elif result.status in (
            SendStatus.FLUSH_DISK_TIMEOUT,
            SendStatus.FLUSH_SLAVE_TIMEOUT,
            SendStatus.SLAVE_NOT_AVAILABLE,
        ):
            state = LocalTransactionState.ROLLBACK_MESSAGE
        try:
            await self.end_transaction(result, state, local_exc)
            if self._trace is not None:
                self._trace.end_transaction(
                    self.group, msg, result.msg_id,
                    self._running_instance().find_broker_address_in_publish(result.queue.broker_name),
                    result.transaction_id, state.value, False,
                )
        except Exception as e:
            log.warning(
                "end_transaction_failed",
                group=self.group,
                msg_id=result.msg_id,
                state=state.value,
                error=f"{type(e).__name__}: {e}",
            )
        return TransactionSendResult(
            status=result.status,
            msg_id=result.msg_id,
            offset_msg_id=result.offset_msg_id,
            queue=result.queue,
            queue_offset=result.queue_offset,
            transaction_id=result.transaction_id,
            region_id=result.region_id,
            trace_on=result.trace_on,
            local_transaction_state=state,
        )

    async def end_transaction(
        self, result: SendResult, state: LocalTransactionState, local_exc: BaseException | None = None
    ) -> None:
        """END_TRANSACTION (oneway) for the half message `result` describes, to the broker that stored it."""
        inst = self._running_instance()
        try:
            _, _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id or result.msg_id)
        except ValueError as e:
            raise MQClientError(f"cannot end transaction: {e}") from None
        addr = inst.find_broker_address_in_publish(result.queue.broker_name)
        if addr is None:
            raise MQClientError(f"cannot end transaction: the broker {result.queue.broker_name} is not in the route")
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=state.transaction_type,
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id,
        )
        remark = None
        if local_exc is not None:
            remark = f"executeLocalTransactionBranch exception: {type(local_exc).__name__}: {local_exc}"
        await inst.api.end_transaction_oneway(addr, header, remark)

    # ------------------------------------------------------------------ check-back
    def check_transaction_state(
        self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        """CHECK_TRANSACTION_STATE from a broker: answered in the background (bounded)."""
        if self.transaction_listener is None:
            log.warning("transaction_check_no_listener", group=self.group, msg_id=msg.uniq_key, broker=broker_addr)
            return None
        if not self.running:
            return None
        if len(self._check_tasks) >= self.check_request_hold_max:
            log.warning(
                "transaction_check_dropped",
                group=self.group,
                msg_id=msg.uniq_key,
                reason=f"{len(self._check_tasks)} checks already waiting (check_request_hold_max)",
            )
            return None
        task = asyncio.ensure_future(self._answer_check(broker_addr, msg, header))
        self._check_tasks.add(task)
        task.add_done_callback(self._check_tasks.discard)
        return None

    async def _answer_check(self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader) -> None:
        listener = self.transaction_listener
        slots = self._check_slots
        if listener is None or slots is None:
            return
        async with slots:
            uniq = msg.properties.get(_UNIQ) or msg.msg_id
            tid = uniq or header.transaction_id
            state = LocalTransactionState.UNKNOW
            exc: BaseException | None = None
            try:
                state = LocalTransactionState.of(
                    await self._call(listener.check_local_transaction, TransactionMessageExt.wrap(msg, tid))
                )
            except Exception as e:
                exc = e
                log.warning(
                    "check_local_transaction_failed", group=self.group, msg_id=uniq, error=f"{type(e).__name__}: {e}"
                )
            if state is not LocalTransactionState.COMMIT_MESSAGE:
                log.info("transaction_check_answer", group=self.group, msg_id=uniq, state=state.value)
            end = EndTransactionRequestHeader(
                producer_group=self.group,
                tran_state_table_offset=header.tran_state_table_offset,
                commit_log_offset=header.commit_log_offset,
                commit_or_rollback=state.transaction_type,
                from_transaction_check=True,
                msg_id=uniq,
                transaction_id=header.transaction_id,
            )
            remark = None
            if exc is not None:
                remark = f"checkLocalTransactionState Exception: {type(exc).__name__}: {exc}"
            try:
                await self._running_instance().api.end_transaction_oneway(broker_addr, end, remark)
                if self._trace is not None:
                    self._trace.end_transaction(self.group, msg, uniq, broker_addr, header.transaction_id,
                                                state.value, True)
            except Exception as e:
                log.warning("end_transaction_failed", group=self.group, msg_id=uniq, broker=broker_addr, error=str(e))

    # ------------------------------------------------------------------ listener calls
    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Await an async listener method; run a plain one in the thread pool."""
        if _is_async(fn):
            return await fn(*args)
        threads = self._threads
        if threads is not None:
            result = await threads.submit_call(fn, *args)
        else:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        if inspect.isawaitable(result):
            result = await result
        return result


def _is_async(fn: Callable[..., Any]) -> bool:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)
