"""`bin/mqadmin` subcommands end to end (subprocesses against real daemons), and `mqshutdown`'s process finder."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from client import (
    Admin,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from client.cli import mqshutdown
from remoting.message import create_offset_msg_id, decode_offset_msg_id, java_string_hash
from tests.client.conftest import RealCluster
from tests.support.daemons import BIN, PYTHON, free_port, refused_port, start_broker, start_namesrv


def mqadmin(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    full_env.update(env or {})
    return subprocess.run(
        [PYTHON, str(BIN / "mqadmin"), *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


def ok(*args: str, **kw: object) -> str:
    p = mqadmin(*args, **kw)  # type: ignore[arg-type]
    assert p.returncode == 0, f"mqadmin {' '.join(args)} failed ({p.returncode}): {p.stderr}"
    assert "Traceback" not in p.stderr
    return p.stdout


def fails(*args: str, **kw: object) -> str:
    p = mqadmin(*args, **kw)  # type: ignore[arg-type]
    assert p.returncode != 0, f"mqadmin {' '.join(args)} should fail:\n{p.stdout}"
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def rows(table: str) -> list[list[str]]:
    return [ln.split() for ln in table.splitlines()[1:] if ln.strip()]


async def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def test_topic_lifecycle(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    # resumeCheckHalfMessage (the broker side is tested in tests/transaction): an id that names no broker
    assert "is not an offset msg id" in fails("resumeCheckHalfMessage", "-n", n, "-i", "NOT-AN-ID")
    addr = real_cluster.brokers["broker-a"]
    host, port = addr.split(":")
    line = fails("resumeCheckHalfMessage", "-n", n, "-i", create_offset_msg_id(host, int(port), 1 << 40))
    assert "no message at commit log offset 1099511627776" in line
    out = ok("updateTopic", "-n", n, "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4")
    assert out.count("success.") == 2 and "readQueueNums=4" in out
    assert topic in ok("topicList", "-n", n).split()
    assert topic in json.loads(ok("topicList", "-n", n, "--json"))
    route = json.loads(ok("topicRoute", "-n", n, "-t", topic))
    assert {b["brokerName"] for b in route["brokerDatas"]} == {"broker-a", "broker-b"}
    status = rows(ok("topicStatus", "-n", n, "-t", topic))
    assert len(status) == 8 and {r[0] for r in status} == {"broker-a", "broker-b"}
    js = json.loads(ok("topicStatus", "-n", n, "-t", topic, "--json"))
    assert js[0]["queue"]["topic"] == topic and "maxOffset" not in js[0] and "max_offset" in js[0]
    # order topic: the NameServer gets the order conf for the topic
    ok(
        "updateTopic",
        "-n",
        n,
        "-b",
        real_cluster.brokers["broker-a"],
        "-t",
        topic,
        "-w",
        "2",
        "-r",
        "2",
        "-o",
        "true",
    )
    kv = json.loads(ok("getKvConfig", "-n", n, "-s", "ORDER_TOPIC_CONFIG", "-k", topic, "--json"))
    assert kv == {topic: "broker-a:2"}
    out = ok("deleteTopic", "-n", n, "-t", topic, "-c", "DefaultCluster")
    assert "success" in out
    line = fails("topicRoute", "-n", n, "-t", topic)
    assert line.startswith("mqadmin: ") and "TOPIC_NOT_EXIST" in line


def test_cluster_and_broker_views(real_cluster: RealCluster) -> None:
    n = real_cluster.namesrv_addr
    table = rows(ok("clusterList", "-n", n))
    assert {(r[0], r[1], r[2], r[3]) for r in table} == {
        ("DefaultCluster", name, "0", addr) for name, addr in real_cluster.brokers.items()
    }
    js = json.loads(ok("clusterList", "-n", n, "--json"))
    assert all(r["reachable"] for r in js)
    addr = real_cluster.brokers["broker-a"]
    status = ok("brokerStatus", "-n", n, "-b", addr)
    assert any(ln.startswith("putTps") for ln in status.splitlines())
    assert "putTps" in json.loads(ok("brokerStatus", "-n", n, "-b", addr, "--json"))
    conf = json.loads(ok("getBrokerConfig", "-n", n, "-b", addr, "--json"))
    assert conf[addr]["brokerName"] == "broker-a"
    assert "brokerName" in ok("getBrokerConfig", "-n", n, "-c", "DefaultCluster")
    nsconf = json.loads(ok("getNamesrvConfig", "-n", n, "--json"))
    assert nsconf[n]["listenPort"] == n.rsplit(":", 1)[1]
    ok("updateBrokerConfig", "-n", n, "-b", addr, "-k", "flushIntervalCommitLog", "-v", "700")
    assert (
        json.loads(ok("getBrokerConfig", "-n", n, "-b", addr, "--json"))[addr]["flushIntervalCommitLog"]
        == "700"
    )
    assert "noSuchKey" in fails(
        "updateBrokerConfig", "-n", n, "-c", "DefaultCluster", "-k", "noSuchKey", "-v", "1"
    )


def test_send_and_find_messages(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    ok("updateTopic", "-n", n, "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4")
    sent = json.loads(
        ok("sendMessage", "-n", n, "-t", topic, "-p", "hello mqadmin", "-k", "mk1", "-c", "TagX", "--json")
    )
    assert sent["status"] == "SEND_OK"
    broker, qid, qoff = sent["queue"]["brokerName"], sent["queue"]["queueId"], sent["queue_offset"]
    table = rows(ok("sendMessage", "-n", n, "-t", topic, "-p", "to queue 2", "-b", "broker-b", "-i", "2"))
    assert table[0][:3] == ["broker-b", "2", "SEND_OK"]
    q2_offset = table[0][5]  # the first message may have landed on broker-b/2 too

    by_offset_id = ok("queryMsgById", "-n", n, "-i", sent["offset_msg_id"])
    assert "hello mqadmin" in by_offset_id and "TagX" in by_offset_id
    by_uniq = json.loads(ok("queryMsgById", "-n", n, "-i", sent["msg_id"], "-t", topic, "--json"))
    assert by_uniq["body"] == "hello mqadmin" and by_uniq["uniq_key"] == sent["msg_id"]
    line = fails("queryMsgById", "-n", n, "-i", sent["msg_id"])  # a UNIQ_KEY id needs its topic
    assert "-t" in line
    by_unique = json.loads(ok("queryMsgByUniqueKey", "-n", n, "-i", sent["msg_id"], "-t", topic, "--json"))
    assert by_unique["body"] == "hello mqadmin" and by_unique["uniq_key"] == sent["msg_id"]
    assert "no message with unique key" in fails("queryMsgByUniqueKey", "-n", n, "-i", "00" * 16, "-t", topic)

    found = rows(ok("queryMsgByKey", "-n", n, "-t", topic, "-k", "mk1"))
    assert found[0][0] == sent["msg_id"]
    assert "no message with key" in fails("queryMsgByKey", "-n", n, "-t", topic, "-k", "nokey")

    at = ok("queryMsgByOffset", "-n", n, "-t", topic, "-b", broker, "-i", str(qid), "-o", str(qoff))
    assert "hello mqadmin" in at
    assert "no message at offset" in fails(
        "queryMsgByOffset", "-n", n, "-t", topic, "-b", broker, "-i", str(qid), "-o", "99"
    )

    everything = ok("consumeMessage", "-n", n, "-t", topic)
    assert "hello mqadmin" in everything and "to queue 2" in everything and "Consume ok: 2" in everything
    one = json.loads(
        ok(
            "consumeMessage",
            "-n",
            n,
            "-t",
            topic,
            "-b",
            "broker-b",
            "-i",
            "2",
            "-o",
            q2_offset,
            "-c",
            "1",
            "--json",
        )
    )
    assert [m["body"] for m in one] == ["to queue 2"]


async def test_groups_progress_and_reset(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    group = f"G_{topic}"
    ok("updateTopic", "-n", n, "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2")
    out = ok("updateSubGroup", "-n", n, "-c", "DefaultCluster", "-g", group, "-r", "5")
    assert out.count("success") == 2
    for i in range(6):
        ok("sendMessage", "-n", n, "-t", topic, "-p", f"m{i}", "-b", "broker-a", "-i", str(i % 2))
    assert "Not found the consumer group" in fails("consumerProgress", "-n", n, "-g", group)
    async with Admin(n) as admin:
        await admin.update_consume_offset(group, MessageQueue(topic, "broker-a", 0), 1)
        await admin.update_consume_offset(group, MessageQueue(topic, "broker-a", 1), 3)
    progress = json.loads(ok("consumerProgress", "-n", n, "-g", group, "--json"))
    offsets = {
        (q["queue"]["brokerName"], q["queue"]["queueId"]): (q["broker_offset"], q["consumer_offset"])
        for q in progress["queues"]
    }
    assert offsets[("broker-a", 0)] == (3, 1) and offsets[("broker-a", 1)] == (3, 3)
    assert progress["diff_total"] == 2
    text = ok("consumerProgress", "-n", n, "-g", group)
    assert "Diff Total: 2" in text
    # The group is offline: offsets are reset by the tool itself.
    reset = json.loads(ok("resetOffsetByTime", "-n", n, "-g", group, "-t", topic, "-s", "0", "--json"))
    assert {(r["queue"]["brokerName"], r["queue"]["queueId"]): r["offset"] for r in reset}[
        ("broker-a", 1)
    ] == 0
    assert json.loads(ok("consumerProgress", "-n", n, "-g", group, "--json"))["diff_total"] == 6
    ok("resetOffsetByTime", "-n", n, "-g", group, "-t", topic, "-s", "now")
    assert json.loads(ok("consumerProgress", "-n", n, "-g", group, "--json"))["diff_total"] == 0
    assert "not online" in fails("consumerConnection", "-n", n, "-g", group)
    # brokerConsumeStats: every group's lag on one broker; -l hides queues lagging less
    await admin_update(n, group, MessageQueue(topic, "broker-a", 0), 1)
    addr = real_cluster.brokers["broker-a"]
    table = [r for r in rows(ok("brokerConsumeStats", "-n", n, "-b", addr)) if len(r) > 1 and r[1] == group]
    assert {(r[0], r[3], r[4], r[5], r[6]) for r in table} == {(topic, "0", "3", "1", "2"), (topic, "1", "3", "3", "0")}
    lagging = [r for r in rows(ok("brokerConsumeStats", "-n", n, "-b", addr, "-l", "1")) if len(r) > 1 and r[1] == group]
    assert [(r[3], r[6]) for r in lagging] == [("0", "2")]
    js = json.loads(ok("brokerConsumeStats", "-n", n, "-b", addr, "--json"))
    assert js["broker_addr"] == addr and js["total_diff"] >= 2
    assert json.loads(ok("brokerConsumeStats", "-n", n, "-b", addr, "-o", "true", "--json"))["total_diff"] == 0
    assert ok("consumerProgress", "-n", n).splitlines()[0].startswith("#Group")
    assert ok("deleteSubGroup", "-n", n, "-c", "DefaultCluster", "-g", group).count("success") == 2


async def test_producer_connection_and_topic_clusters(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    ok("updateTopic", "-n", n, "-b", real_cluster.brokers["broker-b"], "-t", topic, "-r", "2", "-w", "2")
    assert ok("topicClusterList", "-n", n, "-t", topic).split() == ["DefaultCluster"]
    assert json.loads(ok("topicClusterList", "-n", n, "-t", topic, "--json")) == ["DefaultCluster"]
    group = f"PG_{topic}"
    async with Producer(group, n) as p:
        await p.send(Message(topic, b"x"))  # (its connection to broker-b opens with a heartbeat)
        table = rows(await asyncio.to_thread(ok, "producerConnection", "-n", n, "-g", group, "-t", topic))
        assert len(table) == 1 and table[0][1] == p.instance.client_id and table[0][3] == "PYTHON"
    # consumerStatus: the clients' own running info, through the broker they are connected to
    cgroup = f"CG_{topic}"
    consumer = PushConsumer(cgroup, n)
    consumer.subscribe(topic, "TagA || TagB")
    consumer.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    await consumer.start()
    try:
        out = await asyncio.to_thread(ok, "consumerStatus", "-n", n, "-g", cgroup)
        table = rows(out.split("\n\n")[0])
        assert len(table) == 1 and table[0][1] == consumer.client_id and table[0][3] == "PYTHON"
        assert "Same subscription in the same group of consumer" in out
        one = await asyncio.to_thread(ok, "consumerStatus", "-n", n, "-g", cgroup, "-i", consumer.client_id)
        assert "PROP_CLIENT_ID" in one and consumer.client_id in one and "TagA || TagB" in one
        # each assigned queue (the topic's two on broker-b, and the retry queue) and each topic's figures
        queue_rows = rows(one.split("Queues:\n")[1].split("\n\n")[0])
        assert sorted((r[0], r[1], r[2]) for r in queue_rows) == sorted(
            [(topic, "broker-b", "0"), (topic, "broker-b", "1"), (f"%RETRY%{cgroup}", "broker-b", "0")])
        figures = rows(one.split("failed messages over the last hour:\n")[1])
        assert sorted(r[0] for r in figures) == sorted([topic, f"%RETRY%{cgroup}"])
        js = json.loads(await asyncio.to_thread(ok, "consumerStatus", "-n", n, "-g", cgroup, "--json"))
        assert js[consumer.client_id]["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert js[consumer.client_id]["statusTable"][topic]["consumeFailedMsgs"] == 0
    finally:
        await consumer.shutdown()
    line = fails("producerConnection", "-n", n, "-g", "NoSuchGroup", "-t", topic)
    assert "Not found the producer group connection" in line
    shares = json.loads(ok("allocateMQ", "-n", n, "-t", topic, "-i", "10.0.0.1,10.0.0.2,10.0.0.3"))["result"]
    assert [[q["queueId"] for q in shares[ip]] for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3")] == [[0], [1], []]


async def test_get_consumer_status_and_producer(real_cluster: RealCluster, topic: str) -> None:
    """getConsumerStatus: each live push consumer's offsets of the topic as it reports them through a broker
    (the queues it owns, at what it consumed and committed); producer -b: the producers connected to a broker."""
    n = real_cluster.namesrv_addr
    ok("updateTopic", "-n", n, "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2")
    queues = sorted(MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in range(2))
    group, pgroup = f"GS_{topic}", f"PS_{topic}"
    received: list[bytes] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        received.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumers = [
        PushConsumer(group, n, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, instance_name=f"gs{i}")
        for i in range(2)
    ]
    for c in consumers:
        c.subscribe(topic, "*")
        c.register_listener(listener)
    try:
        for c in consumers:
            await c.start()

        def shared() -> bool:  # the four queues, two each
            owned = [[q for q in c.assigned_queues() if q.topic == topic] for c in consumers]
            return sorted(owned[0] + owned[1]) == queues and [len(o) for o in owned] == [2, 2]

        await wait_for(shared, 40, "the two consumers to share the topic's queues")
        async with Producer(pgroup, n) as p:
            for i, q in enumerate(queues):
                for j in range(i + 1):  # queue i gets i + 1 messages
                    await p.send(Message(topic, f"{q.broker_name}/{q.queue_id}/{j}".encode()), queue=q)
            want = {
                (c.client_id, q.broker_name, q.queue_id): queues.index(q) + 1
                for c in consumers for q in c.assigned_queues() if q.topic == topic
            }
            await wait_for(lambda: len(received) == 10, 30, "the ten messages to be consumed")
            await wait_for(
                lambda: all(c.consumer_status(topic).get(q) == queues.index(q) + 1
                            for c in consumers for q in c.assigned_queues() if q.topic == topic),
                10, "the consumers' offsets to move past their messages")
            for c in consumers:
                await c.persist_consumer_offset()
            async with Admin(n) as admin:
                committed = {q.queue: q.consumer_offset for q in (await admin.consumer_progress(group, topic)).queues}
            assert {(q.broker_name, q.queue_id): off for q, off in committed.items()} == {
                (b, qid): off for (_cid, b, qid), off in want.items()}

            out = await asyncio.to_thread(ok, "getConsumerStatus", "-n", n, "-g", group, "-t", topic)
            head, table = out.split("\n", 1)
            assert head == f"get consumer status from client. group={group}, topic={topic}, originClientId="
            assert table.splitlines()[0].split() == ["#clientId", "#brokerName", "#queueId", "#offset"]
            assert {(r[0], r[1], int(r[2])): int(r[3]) for r in rows(table)} == want
            one = consumers[1].client_id
            out = await asyncio.to_thread(ok, "getConsumerStatus", "-n", n, "-g", group, "-t", topic, "-i", one)
            assert out.startswith(f"get consumer status from client. group={group}, topic={topic}, originClientId={one}")
            assert {(r[0], r[1], int(r[2])): int(r[3]) for r in rows(out.split("\n", 1)[1])} == {
                k: v for k, v in want.items() if k[0] == one}
            js = json.loads(await asyncio.to_thread(ok, "getConsumerStatus", "-n", n, "-g", group, "-t", topic, "--json"))
            assert sorted(js) == sorted(c.client_id for c in consumers)
            assert {(cid, e["queue"]["brokerName"], e["queue"]["queueId"]): e["offset"]
                    for cid, entries in js.items() for e in entries} == want
            assert all(e["queue"]["topic"] == topic for entries in js.values() for e in entries)
            line = await asyncio.to_thread(fails, "getConsumerStatus", "-n", n, "-g", group, "-t", topic, "-i", "nobody")
            assert line.startswith("mqadmin: ") and f"The Consumer <{group}> <nobody> not online" in line

            # producer -b: the running producer's group and client on each broker it sent to
            for addr in real_cluster.brokers.values():
                table_rows = [r for r in rows(await asyncio.to_thread(ok, "producer", "-n", n, "-b", addr)) if r[0] == pgroup]
                assert [(r[1], r[3]) for r in table_rows] == [(p.instance.client_id, "PYTHON")]
                assert table_rows[0][2].startswith("/")  # the producer's end of the connection, as Java prints it
            js = json.loads(await asyncio.to_thread(ok, "producer", "-n", n, "-b", real_cluster.brokers["broker-a"], "--json"))
            [info] = js["data"][pgroup]
            assert (info["clientId"], info["language"], info["version"]) == (p.instance.client_id, "PYTHON", 401)
            assert info["lastUpdateTimestamp"] > 0 and info["remoteIP"].startswith("/")
    finally:
        for c in consumers:
            await c.shutdown()
    line = fails("getConsumerStatus", "-n", n, "-g", "NoSuchGroup", "-t", topic)
    assert line.startswith("mqadmin: ") and "No Any Consumer online in the consumer group: [NoSuchGroup]" in line
    js = json.loads(ok("producer", "-n", n, "-b", real_cluster.brokers["broker-a"], "--json"))
    assert pgroup not in js["data"]  # (the producer has shut down and unregistered)


async def test_query_cq(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    addr = real_cluster.brokers["broker-a"]
    await asyncio.to_thread(ok, "updateTopic", "-n", n, "-b", addr, "-t", topic, "-r", "2", "-w", "2")
    async with Producer(f"PG_{topic}", n) as p:
        sent = [await p.send(Message(topic, f"cq{i}".encode(), tags=f"Tag{i}"), queue=MessageQueue(topic, "broker-a", 0))
                for i in range(3)]
    phy = [decode_offset_msg_id(r.offset_msg_id)[2] for r in sent]
    # the topic's only broker, found by its route: every unit, its commit log offset and its tags' hash
    out = await asyncio.to_thread(ok, "queryCq", "-n", n, "-t", topic, "-q", "0", "-i", "0")
    assert out.splitlines()[0].split() == ["Broker:", addr, "Queue:", f"0@{topic}", "min", "index:", "0", "max",
                                           "index:", "3"]
    table = rows(out.split("\n\n", 1)[1])
    assert [(int(r[0]), int(r[1]), int(r[3])) for r in table] == [
        (i, phy[i], java_string_hash(f"Tag{i}")) for i in range(3)]
    assert all(int(r[2]) > 0 for r in table)
    js = json.loads(await asyncio.to_thread(ok, "queryCq", "-n", n, "-t", topic, "-q", "0", "-i", "1", "-c", "1",
                                            "-b", addr, "--json"))
    assert (js["broker_addr"], js["min_queue_index"], js["max_queue_index"]) == (addr, 0, 3)
    assert [(u["index"], u["physic_offset"], u["eval"]) for u in js["units"]] == [(1, phy[1], False)]
    assert js["subscription_data"] is None and js["filter_data"] is None and js["remark"] is None
    # past the queue's end; a queue that has no consume queue
    out = await asyncio.to_thread(ok, "queryCq", "-n", n, "-t", topic, "-q", "0", "-i", "3")
    assert f"Index 3 of 0@{topic} is not exist!" in out
    line = await asyncio.to_thread(fails, "queryCq", "-n", n, "-t", topic, "-q", "1", "-i", "0")
    assert f"1@{topic} is not exist!" in line
    # a group: offline, then online (its subscription of the topic, no SQL92 filter)
    group = f"CG_{topic}"
    out = await asyncio.to_thread(ok, "queryCq", "-n", n, "-t", topic, "-q", "0", "-i", "0", "-g", group)
    assert f"Filter data:\n{group}@{topic} is not online!" in out and "Subscription data" not in out
    consumer = PushConsumer(group, n)
    consumer.subscribe(topic, "Tag1 || Tag2")
    consumer.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    await consumer.start()
    try:
        args = ("queryCq", "-n", n, "-t", topic, "-q", "0", "-i", "0", "-g", group, "--json")
        for _ in range(50):  # (its heartbeat reaches broker-a once it has the topic's route)
            js = json.loads(await asyncio.to_thread(ok, *args))
            if js["subscription_data"] is not None:
                break
            await asyncio.sleep(0.2)
        assert js["subscription_data"]["subString"] == "Tag1 || Tag2" and js["filter_data"] == "null"
        assert len(js["units"]) == 3
        out = await asyncio.to_thread(ok, *args[:-1])
        assert "Subscription data:" in out and '"subString": "Tag1 || Tag2"' in out
    finally:
        await consumer.shutdown()


async def test_clean_expired_cq_and_unused_topic(tmp_path: Path) -> None:
    """A broker of its own: a restart with a topic left out of its config (so its queue is unused), and small
    commit log files that go as soon as they are full (so queues expire)."""
    ns_d, n = start_namesrv(tmp_path)
    port = free_port()
    store = tmp_path / "store-clean"
    cq = store / "consumequeue"
    conf: dict[str, object] = {
        "mappedFileSizeCommitLog": 64 * 1024,
        "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
        "fileReservedTime": 0,
        "cleanResourceInterval": 200,
        "deleteCommitLogFilesInterval": 0,
        "deleteConsumeQueueFilesInterval": 0,
    }
    br_d, addr = start_broker(tmp_path, n, name="broker-c", port=port, store_dir=store, extra=conf)
    try:
        for t in ("Old", "New", "Orphan"):
            await asyncio.to_thread(ok, "updateTopic", "-n", n, "-b", addr, "-t", t, "-r", "1", "-w", "1")
        big = b"b" * 3000
        async with Producer("PG_clean", n) as p:
            old_last = decode_offset_msg_id((await p.send(Message("Old", big))).offset_msg_id)[2]
            await p.send(Message("Orphan", big))
            for _ in range(60):
                await p.send(Message("New", big))

        # Orphan's config lost (a topics.json from before it was made): its queue is left unused
        assert br_d.terminate() == 0
        for name in ("topics.json", "topics.json.bak"):
            path = store / "config" / name
            if path.exists():
                data = json.loads(path.read_text())
                data["topicConfigTable"].pop("Orphan", None)
                path.write_text(json.dumps(data))
        br_d, addr = start_broker(tmp_path, n, name="broker-c", port=port, store_dir=store, extra=conf)
        assert (cq / "Orphan" / "0").is_dir() and (cq / "Old" / "0").is_dir()
        js = json.loads(await asyncio.to_thread(ok, "cleanUnusedTopic", "-n", n, "-c", "DefaultCluster", "--json"))
        assert js == {"success": True, "brokers": [addr]}
        assert not (cq / "Orphan").exists() and (cq / "Old" / "0").is_dir() and (cq / "New" / "0").is_dir()
        line = await asyncio.to_thread(fails, "queryCq", "-n", n, "-t", "Orphan", "-q", "0", "-i", "0", "-b", addr)
        assert "0@Orphan is not exist!" in line
        out = await asyncio.to_thread(ok, "cleanUnusedTopic", "-n", n, "-b", addr)
        assert out.splitlines() == [f"{addr}: success"]
        assert "cluster 'NoCluster' not found" in await asyncio.to_thread(
            fails, "cleanUnusedTopic", "-n", n, "-c", "NoCluster")

        # The last record New's (the commit log's last file is never deleted), Old's long deleted
        async with Producer("PG_clean", n) as p:
            await p.send(Message("New", b"last"))
        async with Admin(n) as admin:
            for _ in range(100):  # the broker's clean service deletes the full commit log files
                if int((await admin.broker_runtime_info(addr))["commitLogMinOffset"]) > old_last:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("no commit log file was deleted")
        assert "max index: 1" in await asyncio.to_thread(ok, "queryCq", "-n", n, "-t", "Old", "-q", "0", "-i", "0")
        assert (await asyncio.to_thread(ok, "cleanExpiredCQ", "-n", n, "-b", addr)).splitlines() == [f"{addr}: success"]
        assert not (cq / "Old").exists() and (cq / "New" / "0").is_dir()
        line = await asyncio.to_thread(fails, "queryCq", "-n", n, "-t", "Old", "-q", "0", "-i", "0", "-b", addr)
        assert "0@Old is not exist!" in line
        assert "max index: 61" in await asyncio.to_thread(ok, "queryCq", "-n", n, "-t", "New", "-q", "0", "-i", "60")
        # without -b or -c: every broker of every cluster
        js = json.loads(await asyncio.to_thread(ok, "cleanExpiredCQ", "-n", n, "--json"))
        assert js == {"success": True, "brokers": [addr]}
        # deleteExpiredCommitLog: the broker's next cleaning rounds delete expired files at once (the store
        # test checks the deleting); here, that every broker is asked and answers
        out = await asyncio.to_thread(ok, "deleteExpiredCommitLog", "-n", n, "-c", "DefaultCluster")
        assert out.splitlines() == [f"{addr}: success"]
        js = json.loads(await asyncio.to_thread(ok, "deleteExpiredCommitLog", "-n", n, "-b", addr, "--json"))
        assert js == {"success": True, "brokers": [addr]}
    finally:
        br_d.terminate()
        ns_d.terminate()


async def admin_update(n: str, group: str, mq: MessageQueue, offset: int) -> None:
    async with Admin(n) as admin:
        await admin.update_consume_offset(group, mq, offset)


def test_kv_config(real_cluster: RealCluster) -> None:
    n = real_cluster.namesrv_addr
    ok("updateKvConfig", "-n", n, "-s", "TEST_NS", "-k", "color", "-v", "blue")
    assert json.loads(ok("getKvConfig", "-n", n, "-s", "TEST_NS", "--json")) == {"color": "blue"}
    assert rows(ok("getKvConfig", "-n", n, "-s", "TEST_NS", "-k", "color")) == [["color", "blue"]]
    ok("deleteKvConfig", "-n", n, "-s", "TEST_NS", "-k", "color")
    fails("getKvConfig", "-n", n, "-s", "TEST_NS", "-k", "color")


def test_errors_are_one_line(real_cluster: RealCluster, tmp_path: Path) -> None:
    n = real_cluster.namesrv_addr
    assert "TOPIC_NOT_EXIST" in fails("topicStatus", "-n", n, "-t", "NoSuchTopic_xyz")
    with refused_port() as port:
        dead = f"127.0.0.1:{port}"
        line = fails("topicList", "-n", dead)
    assert "no available NameServer" in line and dead in line
    assert fails("topicList") == "mqadmin: -n or NAMESRV_ADDR required"
    assert "bad NameServer address" in fails("topicList", "-n", "nonsense")
    assert "TOPIC_NOT_EXIST" in fails("topicRoute", "-t", "NoSuchTopic_xyz", env={"NAMESRV_ADDR": n})
    assert "updateTopic needs -b brokerAddr or -c clusterName" in fails("updateTopic", "-n", n, "-t", "X")
    assert "cluster 'NoCluster' not found" in fails("updateTopic", "-n", n, "-t", "X", "-c", "NoCluster")
    assert mqadmin("noSuchCommand").returncode == 2
    assert mqadmin("topicRoute", "-n", n).returncode == 2  # missing -t: usage error


# ---------------------------------------------------------------------- mqshutdown


def _fake_proc(root: Path, pid: int, argv: list[str]) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_mqshutdown_finds_daemons_by_cmdline(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 101, ["/venv/bin/python", "/repo/bin/mqbroker", "-c", "broker.conf"])
    _fake_proc(tmp_path, 102, ["/venv/bin/python", "-m", "broker.cli", "-c", "x"])
    _fake_proc(tmp_path, 103, ["/venv/bin/python", "/repo/bin/mqnamesrv"])
    _fake_proc(tmp_path, 104, ["/usr/bin/vim", "notes-about-mqbroker.txt"])
    _fake_proc(tmp_path, 105, ["/venv/bin/python", "/repo/bin/mqshutdown", "broker"])
    (tmp_path / "self").mkdir()
    assert mqshutdown.find_pids("broker", tmp_path) == [101, 102]
    assert mqshutdown.find_pids("namesrv", tmp_path) == [103]


def test_mqshutdown_reports_nothing_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(mqshutdown, "find_pids", lambda kind: [])
    assert mqshutdown.main(["broker"]) == 0
    assert capsys.readouterr().out.strip() == "No mqbroker running."
    assert mqshutdown.main(["namesrv"]) == 0
    assert capsys.readouterr().out.strip() == "No mqnamesrv running."
    assert mqshutdown.main(["toaster"]) == 2


def test_mqshutdown_signals_the_found_pids(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(mqshutdown, "find_pids", lambda kind: [4242, 4343])
    monkeypatch.setattr(mqshutdown.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert mqshutdown.main(["namesrv"]) == 0
    assert sent == [(4242, 15), (4343, 15)]
    assert "4242 4343" in capsys.readouterr().out


async def test_stats_all_counts_traffic_in_and_out(real_cluster: RealCluster, topic: str) -> None:
    n = real_cluster.namesrv_addr
    idle = f"{topic}_IDLE"
    for t in (topic, idle):
        ok("updateTopic", "-n", n, "-c", "DefaultCluster", "-t", t, "-r", "2", "-w", "2")
    group = f"SG_{topic}"
    got: list[bytes] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        got.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, n, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    async with Producer(f"SP_{topic}", n) as p, consumer:
        for i in range(6):
            await p.send(Message(topic, f"s{i}".encode()))
        deadline = asyncio.get_running_loop().time() + 15
        while True:  # each broker snapshots a new stats key within a second of its first count
            js = json.loads(await asyncio.to_thread(ok, "statsAll", "-n", n, "-t", topic, "--json"))
            row = next((r for r in js if r["group"] == group), None)
            if len(got) == 6 and row is not None and row["in_msg_24h"] == 6 and row["out_msg_24h"] == 6:
                break
            assert asyncio.get_running_loop().time() < deadline, (js, len(got))
            await asyncio.sleep(0.3)
        assert row["in_tps"] > 0 and row["out_tps"] > 0
    # the consumer committed its offsets as it shut down: nothing left to consume
    [row] = json.loads(await asyncio.to_thread(ok, "statsAll", "-n", n, "-t", topic, "--json"))
    assert (row["group"], row["accumulation"], row["in_msg_24h"]) == (group, 0, 6)
    table = rows(await asyncio.to_thread(ok, "statsAll", "-n", n))
    assert [r for r in table if r[0] == idle] == [[idle, "0", "0.00", "0", "NO_CONSUMER"]]
    active = rows(await asyncio.to_thread(ok, "statsAll", "-n", n, "-a"))
    assert not [r for r in active if r[0] == idle] and [r for r in active if r[0] == topic]
