"""client.sync.TransactionProducer from plain blocking code (no event loop in the caller)."""

from __future__ import annotations

import threading
import time
from typing import Any

import client.sync
from client import LocalTransactionState, Message
from remoting.client import RemotingClient

from .helpers import CLIENT_CONFIG, TxCluster, pull_topic


def read_bodies(c: TxCluster, topic: str) -> list[bytes]:
    async def go() -> list[bytes]:
        rc = RemotingClient()
        try:
            return sorted(m.body for m in await pull_topic(rc, c.broker, topic))
        finally:
            await rc.close()

    return client.sync.run(go(), 30)


def test_blocking_transaction_producer(tx_cluster: TxCluster) -> None:
    c = tx_cluster
    calls: list[tuple[str, str]] = []
    sync_producer_sent: list[str] = []

    class Listener:
        def __init__(self, side: client.sync.Producer) -> None:
            self.side = side

        def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
            calls.append(("execute", threading.current_thread().name))
            # A blocking listener may use other blocking client objects.
            sync_producer_sent.append(self.side.send(Message("TxSyncSide", b"audit")).msg_id)
            return arg

        def check_local_transaction(self, msg: Any) -> Any:
            calls.append(("check", msg.transaction_id))
            return LocalTransactionState.COMMIT

    with client.sync.Producer("PG-sync-side", c.namesrv) as side:
        with client.sync.TransactionProducer("PG-sync", Listener(side), c.namesrv, client_config=CLIENT_CONFIG) as p:
            r1 = p.send_in_transaction(Message("TxSync", b"now"), LocalTransactionState.COMMIT)
            r2 = p.send_in_transaction(Message("TxSync", b"later"), LocalTransactionState.UNKNOWN)
            assert r1.local_transaction_state is LocalTransactionState.COMMIT
            assert r2.local_transaction_state is LocalTransactionState.UNKNOWN
            deadline = time.monotonic() + 10
            while read_bodies(c, "TxSync") != [b"later", b"now"]:
                assert time.monotonic() < deadline, read_bodies(c, "TxSync")
                time.sleep(0.05)
    assert ("check", r2.msg_id) in calls
    assert [k for k, _ in calls].count("execute") == 2
    assert all(name != threading.current_thread().name for k, name in calls if k == "execute")
    assert len(sync_producer_sent) == 2
    assert read_bodies(c, "TxSyncSide") == [b"audit", b"audit"]
