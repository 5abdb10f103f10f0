"""End to end: real mqnamesrv + mqbroker subprocesses driven over TCP."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remoting.body import (
    ConsumerData,
    HeartbeatData,
    KVTable,
    SubscriptionData,
    TopicRouteData,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext, RequestDispatcher
from remoting.headers import (
    CreateTopicRequestHeader,
    GetRouteInfoRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SendMessageResponseHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from remoting.message import decode_message, decode_messages, decode_offset_msg_id
from tests.broker.helpers import props, pull, send_batch, send_v1, send_v2
from tests.support.daemons import BIN, PYTHON, Daemon, free_port, start_broker, start_namesrv, write_conf


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Daemon]]:
    """One NameServer and one broker for the read-mostly tests of this module."""
    tmp = tmp_path_factory.mktemp("shared")
    ns, ns_addr = start_namesrv(tmp)
    try:
        br, br_addr = start_broker(tmp, ns_addr)
        try:
            yield ns_addr, br_addr, br
        finally:
            br.terminate()
    finally:
        ns.terminate()


async def call(client: RemotingClient, addr: str, cmd: RemotingCommand, timeout_ms: float = 5000) -> RemotingCommand:
    return await client.invoke(addr, cmd, timeout_ms)


async def route(client: RemotingClient, ns_addr: str, topic: str) -> TopicRouteData | None:
    r = await call(client, ns_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                             GetRouteInfoRequestHeader(topic=topic).encode()))
    if r.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert r.code == ResponseCode.SUCCESS, r.remark
    return TopicRouteData.decode(r.body)


async def wait_route(client: RemotingClient, ns_addr: str, topic: str, present: bool = True,
                     timeout: float = 10.0) -> TopicRouteData | None:
    deadline = time.monotonic() + timeout
    while True:
        rd = await route(client, ns_addr, topic)
        if bool(rd is not None and rd.queue_datas) == present:
            return rd
        if time.monotonic() > deadline:
            raise AssertionError(f"route of {topic} {'never appeared' if present else 'did not go away'}")
        await asyncio.sleep(0.05)


async def max_offset(client: RemotingClient, addr: str, topic: str, qid: int) -> int:
    r = await call(client, addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                          TopicQueueRequestHeader(topic=topic, queue_id=qid).encode()))
    return OffsetResponseHeader.decode(r.ext_fields).offset


async def commit_log_max(client: RemotingClient, addr: str) -> int:
    r = await call(client, addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    return int(KVTable.decode(r.body).table["commitLogMaxOffset"])


async def pull_until(client: RemotingClient, addr: str, topic: str, qid: int, offset: int, want: int, **kw: object):
    deadline = time.monotonic() + 5
    while True:
        p = await call(client, addr, pull(topic, qid, offset, sys_flag=0x4, **kw))  # no suspend
        msgs = decode_messages(p.body) if p.code == ResponseCode.SUCCESS else []
        if len(msgs) >= want or time.monotonic() > deadline:
            return msgs
        await asyncio.sleep(0.02)


# ---------------------------------------------------------------------------------------- shared cluster


async def test_routes_appear_for_created_and_auto_created_topics(shared: tuple[str, str, Daemon]) -> None:
    ns, br, _ = shared
    c = RemotingClient()
    try:
        assert (await wait_route(c, ns, "TBW102")) is not None
        ct = CreateTopicRequestHeader(topic="Made", read_queue_nums=3, write_queue_nums=3, perm=6)
        r = await call(c, br, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ct.encode()))
        assert r.code == ResponseCode.SUCCESS
        rd = await wait_route(c, ns, "Made")
        assert rd is not None
        assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in rd.queue_datas] == [("broker-a", 3, 3)]
        assert rd.broker_datas[0].broker_addrs[0] == br
        assert (await route(c, ns, "AutoMade")) is None
        r = await call(c, br, send_v2("AutoMade", b"x", properties=props("t")))
        assert r.code == ResponseCode.SUCCESS
        rd = await wait_route(c, ns, "AutoMade")
        assert rd is not None and rd.queue_datas[0].write_queue_nums == 4
    finally:
        await c.close()


async def test_send_v1_v2_batch_and_pull(shared: tuple[str, str, Daemon]) -> None:
    _, br, _ = shared
    c = RemotingClient()
    try:
        r1 = await call(c, br, send_v1("E2E", b"one", queue_id=0, properties=props("A", "k1", "U1")))
        r2 = await call(c, br, send_v2("E2E", b"two", queue_id=0, properties=props("B", "k2", "U2")))
        r3 = await call(c, br, send_batch("E2E", [(b"three", props("A", "k3", "U3")), (b"four", props("C", "k4", "U4"))],
                                          queue_id=0))
        assert [r.code for r in (r1, r2, r3)] == [ResponseCode.SUCCESS] * 3
        assert SendMessageResponseHeader.decode(r3.ext_fields).queue_offset == 2
        msgs = await pull_until(c, br, "E2E", 0, 0, 4)
        assert [(m.body, m.tags, m.keys, m.uniq_key) for m in msgs] == [
            (b"one", "A", "k1", "U1"), (b"two", "B", "k2", "U2"), (b"three", "A", "k3", "U3"), (b"four", "C", "k4", "U4"),
        ]
        assert all(m.properties["CLUSTER"] == "DefaultCluster" for m in msgs)
        tagged = await pull_until(c, br, "E2E", 0, 0, 2, subscription="A")
        assert [m.body for m in tagged] == [b"one", b"three"]
    finally:
        await c.close()


async def test_long_poll_answered_promptly_after_send(shared: tuple[str, str, Daemon]) -> None:
    _, br, _ = shared
    consumer, producer = RemotingClient(), RemotingClient()
    latencies = []
    try:
        r = await call(producer, br, send_v1("LongPoll", b"warm", queue_id=0))
        assert r.code == ResponseCode.SUCCESS
        await pull_until(consumer, br, "LongPoll", 0, 0, 1)
        offset = 1
        for i in range(5):
            fut = await consumer.invoke_future(br, pull("LongPoll", 0, offset, suspend_ms=15000), 20000)
            await asyncio.sleep(0.15)  # let the pull be held
            assert not fut.done()
            t0 = time.monotonic()
            await producer.invoke_oneway(br, send_v1("LongPoll", f"m{i}".encode(), queue_id=0))
            p = await asyncio.wait_for(fut, 10)
            latencies.append((time.monotonic() - t0) * 1000)
            assert p.code == ResponseCode.SUCCESS
            assert [m.body for m in decode_messages(p.body)] == [f"m{i}".encode()]
            offset += 1
    finally:
        await consumer.close()
        await producer.close()
    latencies.sort()
    print(f"long poll send->answer latency ms: {[round(x, 1) for x in latencies]}")
    assert latencies[len(latencies) // 2] < 50, latencies  # median
    assert latencies[-1] < 500, latencies


async def test_held_pull_times_out_with_not_found(shared: tuple[str, str, Daemon]) -> None:
    _, br, _ = shared
    c = RemotingClient()
    try:
        ct = CreateTopicRequestHeader(topic="Quiet", read_queue_nums=1, write_queue_nums=1)
        await call(c, br, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ct.encode()))
        t0 = time.monotonic()
        p = await call(c, br, pull("Quiet", 0, 0, suspend_ms=500))
        elapsed = time.monotonic() - t0
        assert p.code == ResponseCode.PULL_NOT_FOUND
        assert 0.45 <= elapsed < 4, elapsed
    finally:
        await c.close()


async def test_query_by_key_and_by_id(shared: tuple[str, str, Daemon]) -> None:
    _, br, _ = shared
    c = RemotingClient()
    try:
        r = await call(c, br, send_v1("Find", b"needle", properties=props("t", "order-1", "UNIQ-FIND")))
        msg_id = SendMessageResponseHeader.decode(r.ext_fields).msg_id
        deadline = time.monotonic() + 5
        while True:
            q = await call(c, br, RemotingCommand.request(
                RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(topic="Find", key="order-1").encode()))
            if q.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert q.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(q.body)] == [b"needle"]
        q = await call(c, br, RemotingCommand.request(
            RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(topic="Find", key="UNIQ-FIND").encode()))
        assert [m.uniq_key for m in decode_messages(q.body)] == ["UNIQ-FIND"]
        v = await call(c, br, RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=decode_offset_msg_id(msg_id)[2]).encode()))
        assert v.code == ResponseCode.SUCCESS
        assert decode_message(v.body)[0].body == b"needle"
    finally:
        await c.close()


async def test_second_consumer_joining_notifies_the_first(shared: tuple[str, str, Daemon]) -> None:
    _, br, _ = shared
    notified = asyncio.Event()
    got: list[RemotingCommand] = []

    def on_notify(ctx: RequestContext, cmd: RemotingCommand) -> None:
        got.append(cmd)
        notified.set()

    d = RequestDispatcher()
    d.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    first, second = RemotingClient(d), RemotingClient()

    def hb(cid: str) -> RemotingCommand:
        data = HeartbeatData(client_id=cid, consumer_data_set=[
            ConsumerData(group_name="JoinGroup", subscription_data_set=[SubscriptionData(topic="E2E", sub_string="*")])])
        return RemotingCommand.request(RequestCode.HEART_BEAT, None, data.encode())

    try:
        assert (await call(first, br, hb("first@1"))).code == ResponseCode.SUCCESS
        await asyncio.wait_for(notified.wait(), 5)  # its own join
        notified.clear()
        got.clear()
        assert (await call(second, br, hb("second@2"))).code == ResponseCode.SUCCESS
        await asyncio.wait_for(notified.wait(), 5)
        assert got[0].ext_fields["consumerGroup"] == "JoinGroup"
        r = await call(first, br, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                           {"consumerGroup": "JoinGroup"}))
        assert sorted(__import__("json").loads(r.body)["consumerIdList"]) == ["first@1", "second@2"]
        notified.clear()
        await second.close()  # connection closed: the group shrinks and the first is told again
        await asyncio.wait_for(notified.wait(), 5)
    finally:
        await first.close()
        await second.close()


async def test_bad_input_is_refused_and_nothing_stored(shared: tuple[str, str, Daemon]) -> None:
    _, br, _ = shared
    c = RemotingClient()
    try:
        ct = CreateTopicRequestHeader(topic="Strict", read_queue_nums=2, write_queue_nums=2)
        await call(c, br, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ct.encode()))
        await call(c, br, send_v1("Strict", b"ok", queue_id=0))
        before = await commit_log_max(c, br)
        r = await call(c, br, send_v1("Strict", b"x" * (4 * 1024 * 1024 + 1)), timeout_ms=15000)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
        r = await call(c, br, send_v1("no/slashes", b"x"))
        assert r.code == ResponseCode.INVALID_PARAMETER and "illegal characters" in r.remark
        r = await call(c, br, send_v2("Strict", b"x", queue_id=7))
        assert r.code == ResponseCode.INVALID_PARAMETER and "queueId[7]" in r.remark
        assert await commit_log_max(c, br) == before
        assert await max_offset(c, br, "Strict", 0) == 1
        p = await call(c, br, pull("Strict", 0, -3, sys_flag=0x4))
        assert p.code == ResponseCode.PULL_OFFSET_MOVED and p.ext_fields["nextBeginOffset"] == "0"
    finally:
        await c.close()


# ---------------------------------------------------------------------------------------- own daemons


async def test_auto_create_off(tmp_path: Path, namesrv: str) -> None:
    br_d, br = start_broker(tmp_path, namesrv, name="broker-off",
                            extra={"autoCreateTopicEnable": False, "autoCreateSubscriptionGroup": False})
    c = RemotingClient()
    try:
        r = await call(c, br, send_v1("NotThere", b"x"))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and r.remark.startswith("topic[NotThere] not exist, apply first please!")
        assert await route(c, namesrv, "TBW102") is None  # no auto-create template advertised
        ct = CreateTopicRequestHeader(topic="There", read_queue_nums=1, write_queue_nums=1)
        await call(c, br, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ct.encode()))
        await call(c, br, send_v1("There", b"x", queue_id=0))
        p = await call(c, br, pull("There", 0, 0, group="UnknownGroup"))
        assert p.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "UnknownGroup" in p.remark
    finally:
        await c.close()
        assert br_d.terminate() == 0


async def test_restart_keeps_offsets_topics_and_messages_and_sigterm_unregisters(tmp_path: Path, namesrv: str) -> None:
    store = tmp_path / "store-r"
    port = free_port()
    br_d, br = start_broker(tmp_path, namesrv, name="broker-r", port=port, store_dir=store)
    c = RemotingClient()
    try:
        ct = CreateTopicRequestHeader(topic="Durable", read_queue_nums=2, write_queue_nums=2)
        assert (await call(c, br, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ct.encode()))).code == 0
        for i in range(3):
            await call(c, br, send_v1("Durable", f"d{i}".encode(), queue_id=1))
        u = UpdateConsumerOffsetRequestHeader(consumer_group="DG", topic="Durable", queue_id=1, commit_offset=2)
        assert (await call(c, br, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, u.encode()))).code == 0
        await wait_route(c, namesrv, "Durable")
        t0 = time.monotonic()
        assert br_d.terminate() == 0
        assert time.monotonic() - t0 < 10
        assert "unregistered_from_namesrv" in br_d.output()
        await wait_route(c, namesrv, "Durable", present=False, timeout=3)

        br_d, br = start_broker(tmp_path, namesrv, name="broker-r", port=port, store_dir=store)
        q = QueryConsumerOffsetRequestHeader(consumer_group="DG", topic="Durable", queue_id=1)
        r = await call(c, br, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, q.encode()))
        assert r.code == ResponseCode.SUCCESS and OffsetResponseHeader.decode(r.ext_fields).offset == 2
        rd = await wait_route(c, namesrv, "Durable")
        assert rd is not None and rd.queue_datas[0].write_queue_nums == 2
        msgs = await pull_until(c, br, "Durable", 1, 2, 1)
        assert [m.body for m in msgs] == [b"d2"]
    finally:
        await c.close()
        assert br_d.terminate() == 0


def run_broker_cli(*args: str, timeout: float = 20, namesrv_env: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)
    if namesrv_env:
        env["NAMESRV_ADDR"] = namesrv_env
    return subprocess.run([PYTHON, str(BIN / "mqbroker"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def test_bad_config_key_exits_non_zero_naming_it(tmp_path: Path) -> None:
    conf = write_conf(tmp_path / "bad.conf", {"brokerName": "b", "listenPortt": 1234,
                                              "storePathRootDir": str(tmp_path / "s")})
    r = run_broker_cli("-c", str(conf))
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "listenPortt" in lines[0], r.stderr
    conf = write_conf(tmp_path / "bad2.conf", {"flushDiskType": "NEVER", "storePathRootDir": str(tmp_path / "s")})
    r = run_broker_cli("-c", str(conf))
    assert r.returncode != 0 and "flushDiskType" in r.stderr


def test_print_config_and_namesrv_override(tmp_path: Path) -> None:
    conf = write_conf(tmp_path / "b.conf", {"brokerName": "printed", "namesrvAddr": "127.0.0.1:1"})
    r = run_broker_cli("-c", str(conf), "-n", "127.0.0.1:9999", "-p")
    assert r.returncode == 0, r.stderr
    assert "brokerName=printed" in r.stdout and "namesrvAddr=127.0.0.1:9999" in r.stdout
    assert "mappedFileSizeCommitLog=1073741824" in r.stdout  # store keys too
    r = run_broker_cli("-c", str(conf), "-p", namesrv_env="127.0.0.1:7777")
    assert "namesrvAddr=127.0.0.1:1" in r.stdout  # the file wins over the environment
    r = run_broker_cli("-p", namesrv_env="127.0.0.1:7777")
    assert r.returncode == 0 and "namesrvAddr=127.0.0.1:7777" in r.stdout


def test_port_in_use_and_unwritable_store_exit_at_once(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        conf = write_conf(tmp_path / "p.conf", {"brokerIP1": "127.0.0.1", "listenPort": busy,
                                                "storePathRootDir": str(tmp_path / "s1"),
                                                "mappedFileSizeCommitLog": 1 << 20})
        r = run_broker_cli("-c", str(conf))
        assert r.returncode != 0 and "listenPort" in r.stderr, r.stderr
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    conf = write_conf(tmp_path / "s.conf", {"brokerIP1": "127.0.0.1", "listenPort": free_port(),
                                            "storePathRootDir": str(blocker / "store")})
    r = run_broker_cli("-c", str(conf))
    assert r.returncode != 0 and "storePathRootDir" in r.stderr, r.stderr
    # Every store path set on its own too, named in one line, before anything is created under the root.
    for key, value in (("storePathCommitLog", blocker), ("storePathConsumeQueue", blocker / "cq"),
                       ("storePathIndex", blocker), ("storeCheckpoint", tmp_path), ("abortFile", blocker / "x" / "abort")):
        conf = write_conf(tmp_path / f"{key}.conf", {"brokerIP1": "127.0.0.1", "listenPort": free_port(),
                                                     "storePathRootDir": str(tmp_path / key), key: str(value)})
        r = run_broker_cli("-c", str(conf))
        said = [ln for ln in r.stderr.splitlines() if ln.startswith("mqbroker:")]
        assert r.returncode != 0 and "Traceback" not in r.stderr, (key, r.stderr)
        assert len(said) == 1 and key in said[0], r.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="signals")
def test_sigterm_without_namesrv_exits_zero(tmp_path: Path) -> None:
    port = free_port()
    conf = write_conf(tmp_path / "n.conf", {"brokerIP1": "127.0.0.1", "listenPort": port,
                                            "storePathRootDir": str(tmp_path / "s"),
                                            "mappedFileSizeCommitLog": 1 << 20})
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    d = Daemon("broker-alone", [PYTHON, str(BIN / "mqbroker"), "-c", str(conf)], env=env)
    try:
        line = d.wait_for("listening", 30)
        assert f"addr=127.0.0.1:{port}" in line
    finally:
        assert d.terminate() == 0


@pytest.mark.skipif(sys.platform != "linux", reason="reads the broker's limits from /proc/PID/limits (Linux only)")
async def test_broker_raises_its_open_files_limit_and_keeps_dispatching_past_the_soft_one(
    tmp_path: Path, namesrv: str
) -> None:
    """Every ConsumeQueue file keeps its descriptor open, as RocketMQ's do, and the JVM raises the soft
    limit to the hard one at start. Started under a soft limit of 256, the broker serves 80 topics x 4
    queues (320 queue files); it kept dispatching none of their messages once it ran out (EMFILE)."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"hard limit on open files is {hard}: no room to raise a soft 256 past 80 topics' 320 queue files")
    port = free_port()
    conf = write_conf(tmp_path / "fds.conf", {
        "brokerName": "broker-fds", "brokerIP1": "127.0.0.1", "listenPort": port, "namesrvAddr": namesrv,
        "storePathRootDir": str(tmp_path / "store-fds"), "mappedFileSizeCommitLog": 1 << 24,
        "mappedFileSizeConsumeQueue": 20 * 1000, "maxHashSlotNum": 5000, "maxIndexNum": 20000,
    })
    low_soft = ("import os, resource, sys; h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
                "resource.setrlimit(resource.RLIMIT_NOFILE, (256, h)); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
    d = Daemon("broker-fds", [PYTHON, "-c", low_soft, str(BIN / "mqbroker"), "-c", str(conf)])
    c = RemotingClient()
    try:
        d.wait_for("listening", 30)
        limits = Path(f"/proc/{d.pid}/limits").read_text().splitlines()
        soft_now, hard_now = next(line for line in limits if line.startswith("Max open files")).split()[3:5]
        assert soft_now == hard_now, limits
        br = f"127.0.0.1:{port}"
        for t in range(80):
            for q in range(4):
                r = await call(c, br, send_v1(f"Fds{t}", b"x", queue_id=q))
                assert r.code == ResponseCode.SUCCESS, r.remark
        deadline = time.monotonic() + 30
        while True:  # the last queue's message dispatched: every queue file was made
            p = await call(c, br, pull("Fds79", 3, 0, suspend_ms=1000))
            if p.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert p.code == ResponseCode.SUCCESS and len(decode_messages(p.body)) == 1, (p.code, p.remark)
        assert "EMFILE" not in d.output() and "Too many open files" not in d.output()
    finally:
        await c.close()
        assert d.terminate() == 0
