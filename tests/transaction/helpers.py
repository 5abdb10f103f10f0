"""Helpers of the transaction tests: cluster start-up with fast check-back settings, topic reads with plain
PULL_MESSAGE requests (no consumer group machinery), raw END_TRANSACTION, a recording listener."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from client import ClientConfig, LocalTransactionState, TransactionListener
from client.message import Message, MessageExt
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import EndTransactionRequestHeader, PullMessageRequestHeader
from remoting.message import decode_messages
from tests.support.daemons import Daemon, start_broker, start_namesrv

# Rounds every 300 ms; a half message is checked once it is 600 ms old.
FAST_CHECK: dict[str, object] = {"transactionCheckInterval": 300, "transactionTimeOut": 600}
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
CLIENT_CONFIG = ClientConfig(heartbeat_broker_interval=500, poll_name_server_interval=1000)


@dataclass
class TxCluster:
    tmp: Path
    namesrv: str
    broker: str
    broker_daemon: Daemon
    broker_port: int
    store_dir: Path
    extra: dict[str, object]

    def restart_broker(self) -> None:
        """SIGTERM the broker (it must exit 0) and start it again on the same port and store."""
        assert self.broker_daemon.terminate() == 0, self.broker_daemon.output()[-3000:]
        self.broker_daemon, self.broker = start_broker(
            self.tmp, self.namesrv, port=self.broker_port, extra=self.extra, store_dir=self.store_dir
        )


def start_tx_cluster(tmp: Path, extra: dict[str, object]) -> tuple[Daemon, TxCluster]:
    ns, ns_addr = start_namesrv(tmp)
    store = tmp / "store-broker-a"
    try:
        br, br_addr = start_broker(tmp, ns_addr, extra=extra, store_dir=store)
    except BaseException:
        ns.terminate()
        raise
    port = int(br_addr.rsplit(":", 1)[1])
    return ns, TxCluster(tmp, ns_addr, br_addr, br, port, store, extra)


# ------------------------------------------------------------------ reading topics


async def pull_queue(client: RemotingClient, broker: str, topic: str, queue_id: int) -> list[MessageExt]:
    """Every message of one queue (from offset 0), via non-suspending PULL_MESSAGE."""
    out: list[MessageExt] = []
    offset = 0
    for _ in range(1000):
        h = PullMessageRequestHeader(
            consumer_group="CID_TX_TEST_READER",
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=32,
            sys_flag=0x4,  # subscription, no suspend, no commit
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription="*",
            sub_version=0,
            expression_type="TAG",
        )
        r = await client.invoke(broker, RemotingCommand.request(RequestCode.PULL_MESSAGE, h.encode()), 5000)
        if r.code != ResponseCode.SUCCESS or not r.body:
            return out
        msgs = decode_messages(r.body, decompress_body=True)
        out.extend(msgs)
        offset = int((r.ext_fields or {})["nextBeginOffset"])
    return out


async def pull_topic(client: RemotingClient, broker: str, topic: str, queues: int = 4) -> list[MessageExt]:
    out: list[MessageExt] = []
    for q in range(queues):
        out.extend(await pull_queue(client, broker, topic, q))
    return out


async def eventually(
    probe: Callable[[], Awaitable[Any]] | Callable[[], Any], timeout: float = 10.0, interval: float = 0.05
) -> Any:
    """Poll `probe` until it returns something truthy (bounded); returns it."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = probe()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {last!r})")
        await asyncio.sleep(interval)


async def end_transaction(
    client: RemotingClient,
    broker: str,
    *,
    group: str,
    tran_state_table_offset: int,
    commit_log_offset: int,
    commit: bool,
    msg_id: str = "",
    from_check: bool = False,
) -> RemotingCommand:
    """A two-way END_TRANSACTION (real producers send it oneway; the answer is what the broker thought)."""
    h = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=tran_state_table_offset,
        commit_log_offset=commit_log_offset,
        commit_or_rollback=8 if commit else 12,
        from_transaction_check=from_check,
        msg_id=msg_id,
        transaction_id=msg_id,
    )
    return await client.invoke(broker, RemotingCommand.request(RequestCode.END_TRANSACTION, h.encode()), 5000)


# ------------------------------------------------------------------ listeners


@dataclass
class Recorder(TransactionListener):
    """Decides by message body: `execute` / `check` map a body to a state (default UNKNOWN)."""

    execute: dict[bytes, Any] = field(default_factory=dict)
    check: dict[bytes, Any] = field(default_factory=dict)
    executed: list[Message] = field(default_factory=list)
    checked: list[MessageExt] = field(default_factory=list)
    answers: list[tuple[bytes, Any]] = field(default_factory=list)

    async def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        self.executed.append(msg)
        v = self.execute.get(bytes(msg.body), LocalTransactionState.UNKNOWN)
        if isinstance(v, BaseException):
            raise v
        return v

    async def check_local_transaction(self, msg: MessageExt) -> Any:
        self.checked.append(msg)
        answer = self.check.get(msg.body, LocalTransactionState.UNKNOWN)
        self.answers.append((msg.body, answer))
        return answer

    def checks_of(self, body: bytes) -> int:
        return sum(1 for m in self.checked if m.body == body)
