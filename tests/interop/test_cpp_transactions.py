"""Transactional messages from the real C++ producer (its C API: the Python binding has no wrapper):
the local transaction's commit/rollback via END_TRANSACTION, and the broker's check-back
(CHECK_TRANSACTION_STATE) answered by the real client for an UNKNOWN one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client import sync as rmq

from .conftest import InteropCluster, start_cluster
from .cpp_client import CppProcess, needs_cpp, wait_until

pytestmark = [pytest.mark.interop, needs_cpp]


@pytest.fixture(scope="module")
def tx_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InteropCluster]:
    """Check half messages every second, once they are a second old (RocketMQ: 60 s / 6 s)."""
    yield from start_cluster(
        tmp_path_factory.mktemp("interop-tx"), transactionCheckInterval=1000, transactionTimeOut=1000
    )


def test_real_transaction_producer_commit_rollback_and_check_back(
    tx_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    ns = tx_cluster.namesrv
    topic = names("T")
    with rmq.Admin(ns) as admin:
        admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: len(admin.topic_queues(topic)) == 2, 20, "the topic's route")
    sends = [
        {"body": "committed", "keys": "k-commit", "local": "commit"},
        {"body": "rolled-back", "keys": "k-rollback", "local": "rollback"},
        {"body": "checked-commit", "keys": "k-check-commit", "local": "unknown", "check": "commit"},
        {"body": "checked-rollback", "keys": "k-check-rollback", "local": "unknown", "check": "rollback"},
    ]
    spec = {"namesrv": ns, "group": names("PID"), "topic": topic, "sends": sends, "max_s": 60}
    with CppProcess(cpp_home, "tx_producer.py", spec, "cpp-tx-producer") as p:
        lines = p.wait_lines(lambda ls: any("sent" in x for x in ls), 30, "the transactional sends")
        results = [x for x in lines if "i" in x]
        assert [r.get("status") for r in results] == [0, 0, 0, 0], results  # the half messages were stored
        # the broker asks the (still online) producer about the two UNKNOWN ones; it answers per message
        lines = p.wait_lines(
            lambda ls: {x.get("checked") for x in ls} >= {"k-check-commit", "k-check-rollback"},
            30,
            "the broker's check-backs",
        )
        asked = [x["checked"] for x in lines if "checked" in x]
        assert set(asked) == {"k-check-commit", "k-check-rollback"}, asked  # never about decided ones

        got: list = []
        with rmq.LitePullConsumer(names("G"), ns) as c:
            c.subscribe(topic, "*")

            def both_committed() -> bool:
                got.extend(c.poll(0.2))
                return len(got) >= 2

            wait_until(both_committed, 20, "the committed messages")
            got.extend(c.poll(0.5))  # a rolled-back one would show up now
    assert sorted((m.body, m.keys) for m in got) == [
        (b"checked-commit", "k-check-commit"),
        (b"committed", "k-commit"),
    ]
    by_key = {m.keys: m for m in got}
    uniq = {r["i"]: r["msg_id"] for r in results}
    assert by_key["k-commit"].uniq_key == uniq[0] and by_key["k-check-commit"].uniq_key == uniq[2]
    assert all("TRAN_MSG" not in m.properties for m in got), [m.properties for m in got]  # no longer prepared
