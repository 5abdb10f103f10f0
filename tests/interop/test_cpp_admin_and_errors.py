"""The real C++ client's message ids with `mqadmin queryMsgById`, and its clean failure when a topic
has no route (broker with autoCreateTopicEnable=false)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client import sync as rmq
from remoting.message import create_offset_msg_id
from tests.support.daemons import BIN, PYTHON

from .conftest import InteropCluster, start_cluster
from .cpp_client import needs_cpp, run_producer, wait_until

pytestmark = [pytest.mark.interop, needs_cpp]


@pytest.fixture(scope="module")
def no_autocreate_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InteropCluster]:
    yield from start_cluster(tmp_path_factory.mktemp("interop-noauto"), autoCreateTopicEnable=False)


def mqadmin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, str(BIN / "mqadmin"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_query_msg_by_id_finds_what_the_real_client_sent(
    no_autocreate_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    c = no_autocreate_cluster
    topic = names("T")
    with rmq.Admin(c.namesrv) as admin:
        admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: len(admin.topic_queues(topic)) == 2, 20, "the topic's route")
    sends = [
        {"topic": topic, "body": f"find-me-{i}", "tags": "Q", "keys": f"qk{i}", "props": {"p": str(i)}}
        for i in range(3)
    ]
    results = run_producer(cpp_home, c.namesrv, sends)
    assert all(r.get("status") == 0 for r in results), results
    msg_id = results[1]["msg_id"]  # the real client's SendResult.msg_id is the UNIQ_KEY, not the offsetMsgId

    # with the topic, a UNIQ_KEY id is found through the broker's index (as RocketMQ's queryMsgById -t does)
    r = mqadmin("queryMsgById", "-n", c.namesrv, "-i", msg_id, "-t", topic, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads(r.stdout)
    assert (
        m["topic"],
        m["body"],
        m["properties"]["KEYS"],
        m["properties"]["TAGS"],
        m["properties"]["p"],
    ) == (
        topic,
        "find-me-1",
        "qk1",
        "Q",
        "1",
    )
    assert m["properties"]["UNIQ_KEY"] == msg_id != m["msg_id"]
    # the message's offsetMsgId (store host + commit log offset) finds it too, without the topic
    host, port = c.broker.rsplit(":", 1)
    offset_id = create_offset_msg_id(host, int(port), m["commit_log_offset"])
    assert m["msg_id"] == offset_id
    r2 = mqadmin("queryMsgById", "-n", c.namesrv, "-i", offset_id, "--json")
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert json.loads(r2.stdout)["body"] == "find-me-1"
    # without the topic, a UNIQ_KEY id cannot be looked up (RocketMQ 5's queryMsgById needs -t too): say so
    r4 = mqadmin("queryMsgById", "-n", c.namesrv, "-i", msg_id)
    assert r4.returncode != 0 and "-t" in r4.stdout + r4.stderr, r4.stdout + r4.stderr
    # plain text output, as RocketMQ prints it
    r3 = mqadmin("queryMsgById", "-n", c.namesrv, "-i", msg_id, "-t", topic)
    assert r3.returncode == 0 and "find-me-1" in r3.stdout and "qk1" in r3.stdout, r3.stdout + r3.stderr


def test_send_to_an_unknown_topic_fails_with_no_route_info(
    no_autocreate_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    c = no_autocreate_cluster
    unknown = names("Nope")
    results = run_producer(cpp_home, c.namesrv, [{"topic": unknown, "body": "x"}])
    assert "status" not in results[0], results
    assert "No route info" in results[0]["error"], results[0]
    with rmq.Admin(c.namesrv) as admin:
        assert unknown not in admin.topic_list()  # and nothing was created behind its back
