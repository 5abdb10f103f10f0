"""The real RocketMQ C++ client (producer and push consumer) against our mqnamesrv + mqbroker."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from client import ConsumeConcurrentlyStatus, Message
from client import sync as rmq
from client.admin import ConsumerProgress
from remoting.body import LockBatchRequestBody, LockBatchResponseBody
from remoting.body import MessageQueue as BodyMessageQueue
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

from .conftest import InteropCluster
from .cpp_client import CppConsumer, needs_cpp, run_producer, run_pull_consumer, wait_until

pytestmark = [pytest.mark.interop, needs_cpp]

N = 1000


def committed(ns: str, group: str, topic: str) -> ConsumerProgress | None:
    with rmq.Admin(ns) as admin:
        try:
            return admin.consumer_progress(group, topic)
        except Exception:  # noqa: BLE001 - not yet known to the broker
            return None


def all_committed(ns: str, group: str, topic: str, total: int) -> bool:
    p = committed(ns, group, topic)
    if p is None:
        return False
    return sum(q.broker_offset for q in p.queues) == total and p.diff_total == 0


def test_sync_send_1000_then_push_consume_exactly_once(
    interop_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    ns = interop_cluster.namesrv
    topic, group = names("T"), names("G")
    sends = [
        {
            "topic": topic,
            "body": f"body-{i}-\u00e9\u4e2d",
            "tags": f"Tag{i % 3}",
            "keys": f"key-{i} alt-{i}",
            "props": {"idx": str(i), "color": ("red", "gr\u00fcn-\u7eff")[i % 2], "empty-ish": " "},
        }
        for i in range(N)
    ]
    results = run_producer(cpp_home, ns, sends)
    assert len(results) == N
    assert [r.get("error") for r in results if "error" in r] == []
    assert all(r["status"] == 0 for r in results)  # SendStatus.OK
    assert len({r["msg_id"] for r in results}) == N

    expected = sorted(
        (s["body"], s["tags"], s["keys"], s["props"]["idx"], s["props"]["color"]) for s in sends
    )
    with CppConsumer(cpp_home, ns, group, topic, props=["idx", "color", "empty-ish"], threads=4) as c:
        got = c.wait_for(lambda d: len(d) >= N, 60, f"{N} messages")
        # every delivery carries its tags, keys and user properties exactly as sent
        received = sorted(
            (d["body"], d["tags"], d["keys"], d["props"]["idx"], d["props"]["color"]) for d in got
        )
        assert received == expected
        assert all(d["props"]["empty-ish"] == " " for d in got)
        assert {d["id"] for d in got} == {
            r["msg_id"] for r in results
        }  # the SendResult id is the message's id
        # the client commits every 5 s: wait until the broker has every queue's offset at its max
        wait_until(lambda: all_committed(ns, group, topic, N), 30, "the consumer's offsets committed")
        assert len(c.snapshot()) == N  # and nothing was delivered twice

    # a second start of the group resumes from the committed offsets: only a new message arrives
    with CppConsumer(cpp_home, ns, group, topic, props=["idx"]) as c2:
        c2.wait_started()
        with rmq.Admin(ns) as admin:
            wait_until(lambda: len(admin.consumer_ids(group)) == 1, 20, "the second consumer registered")
        with rmq.Producer(names("P"), ns) as p:
            p.send(Message(topic, b"marker", tags="Tag0", properties={"idx": "marker"}))
        c2.wait_for(lambda d: any(x["body"] == "marker" for x in d), 40, "the marker message")
        time.sleep(1.0)  # anything redelivered from before the commit would come with or right after it
        got2 = c2.bodies()
        assert got2 == ["marker"], collections.Counter(got2).most_common(3)


def create_topic(ns: str, topic: str, queues: int) -> None:
    with rmq.Admin(ns) as admin:
        admin.create_topic(topic, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: len(admin.topic_queues(topic)) == queues, 20, f"the route of {topic}")


def test_two_real_consumers_and_one_of_ours_share_a_group(
    interop_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    ns = interop_cluster.namesrv
    topic, group = names("T"), names("G")
    create_topic(ns, topic, 6)
    ours: list[tuple[str, int]] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            ours.extend((m.body.decode(), m.queue_id) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    ours_c = rmq.PushConsumer(
        group, ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", rebalance_interval=2.0
    )
    ours_c.subscribe(topic, "*")
    ours_c.register_listener(listener)
    with (
        CppConsumer(cpp_home, ns, group, topic, instance="a") as a,
        CppConsumer(cpp_home, ns, group, topic, instance="b") as b,
    ):
        ours_c.start()
        try:
            with rmq.Admin(ns) as admin:
                wait_until(lambda: len(admin.consumer_ids(group)) == 3, 20, "three consumers in the group")
            # 6 queues / 3 consumers: every consumer (the real ones use the same averaging strategy) owns 2
            wait_until(lambda: len(ours_c.assigned_queues()) == 2, 30, "our consumer's share of the queues")
            time.sleep(1.5)  # the real clients rebalance at once on NOTIFY_CONSUMER_IDS_CHANGED
            bodies = [f"m-{i}" for i in range(300)]
            with rmq.Producer(names("P"), ns) as p:
                for body in bodies:
                    p.send(Message(topic, body.encode(), tags="T"))

            def total() -> int:
                with lock:
                    return len(ours) + len(a.snapshot()) + len(b.snapshot())

            wait_until(lambda: total() >= len(bodies), 40, "every message consumed")
            time.sleep(0.5)  # a duplicate would show up now
            got = {
                "a": [(d["body"], d["queue_id"]) for d in a.snapshot()],
                "b": [(d["body"], d["queue_id"]) for d in b.snapshot()],
                "ours": list(ours),
            }
        finally:
            ours_c.shutdown()
    everything = [body for part in got.values() for body, _q in part]
    assert sorted(everything) == sorted(bodies)  # every message exactly once
    queues = {k: {q for _b, q in v} for k, v in got.items()}
    assert {k: len(v) for k, v in queues.items()} == {"a": 2, "b": 2, "ours": 2}, queues  # 2 queues each
    assert (
        not (queues["a"] & queues["b"])
        and not (queues["a"] & queues["ours"])
        and not (queues["b"] & queues["ours"])
    )
    assert set().union(*queues.values()) == set(range(6))


def test_our_producer_to_real_consumer_with_a_tag_filter(
    interop_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    ns = interop_cluster.namesrv
    topic, group = names("T"), names("G")
    create_topic(ns, topic, 4)
    sent: dict[str, tuple[str, str, str]] = {}
    with rmq.Producer(names("P"), ns) as p:
        for i in range(60):
            tag = ("TagA", "TagB", "TagC")[i % 3]
            msg = Message(
                topic, f"ours-{i}".encode(), tags=tag, keys=[f"k{i}", f"j{i}"], properties={"idx": str(i)}
            )
            r = p.send(msg)
            assert r.status.name == "SEND_OK"
            sent[f"ours-{i}"] = (tag, f"k{i} j{i}", r.msg_id)
    want = {b: v for b, v in sent.items() if v[0] != "TagC"}
    with CppConsumer(cpp_home, ns, group, topic, expression="TagA || TagB", props=["idx"]) as c:
        c.wait_for(lambda d: len(d) >= len(want), 40, f"{len(want)} TagA/TagB messages")
        time.sleep(0.5)  # a TagC message or a duplicate would show up now
        got = c.snapshot()
    assert sorted(d["body"] for d in got) == sorted(want)
    for d in got:
        tag, keys, msg_id = want[d["body"]]
        assert (d["tags"], d["keys"], d["id"], d["props"]["idx"]) == (
            tag,
            keys,
            msg_id,
            d["body"].split("-")[1],
        )


def test_real_producer_to_our_push_consumer(
    interop_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    ns = interop_cluster.namesrv
    topic, group = names("T"), names("G")
    sends = [
        {
            "topic": topic,
            "body": f"cpp-{i}",
            "tags": f"Tag{i % 2}",
            "keys": f"key{i}",
            "props": {"idx": str(i)},
        }
        for i in range(40)
    ]
    results = run_producer(cpp_home, ns, sends)
    assert all(r.get("status") == 0 for r in results), results[:3]
    got: list = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = rmq.PushConsumer(group, ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, "*")
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(got) >= len(sends), 30, "every real-client message")
        time.sleep(0.3)
    finally:
        c.shutdown()
    by_body = {m.body.decode(): m for m in got}
    assert len(got) == len(sends) == len(by_body)
    for s, r in zip(sends, results, strict=True):
        m = by_body[s["body"]]
        assert (m.topic, m.tags, m.keys, m.properties.get("idx")) == (
            topic,
            s["tags"],
            s["keys"],
            s["props"]["idx"],
        )
        assert m.uniq_key == r["msg_id"]  # the real SendResult's msg_id is the UNIQ_KEY


def test_orderly_send_and_orderly_consume_keep_per_key_order(
    interop_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    ns = interop_cluster.namesrv
    topic, group = names("T"), names("G")
    create_topic(ns, topic, 4)
    keys, per_key = 6, 30
    sends = [
        {"topic": topic, "body": f"{k}:{seq}", "keys": f"order-{k}", "tags": "O", "order_arg": k}
        for seq in range(per_key)
        for k in range(keys)
    ]
    results = run_producer(cpp_home, ns, sends)
    assert all(r.get("status") == 0 for r in results), [r for r in results if r.get("status") != 0][:3]
    # the queue selector saw the 4 queues and picked arg % 4 for every message
    assert {(r["queue"], r["queues"]) for r, s in zip(results, sends, strict=True)} <= {
        (k % 4, 4) for k in range(keys)
    }
    assert all(r["queue"] == s["order_arg"] % 4 for r, s in zip(results, sends, strict=True))

    with CppConsumer(cpp_home, ns, group, topic, orderly=True, threads=4) as c:
        got = c.wait_for(lambda d: len({x["body"] for x in d}) >= len(sends), 60, "every ordered message")
        # consuming orderly, the real client holds the broker's locks of its queues: nobody else gets them
        assert lock_batch(interop_cluster.broker, group, "someone-else@1", topic, range(4)) == set()
    seen: dict[int, list[int]] = collections.defaultdict(list)
    for d in got:
        k, seq = map(int, d["body"].split(":"))
        assert d["queue_id"] == k % 4, d
        seen[k].append(seq)
    for k in range(keys):
        assert seen[k] == list(range(per_key)), (k, seen[k])  # in send order, each once


def lock_batch(broker: str, group: str, client_id: str, topic: str, queue_ids: Iterable[int]) -> set[int]:
    """LOCK_BATCH_MQ as an orderly consumer sends it; returns the queue ids the broker locked for us."""
    body = LockBatchRequestBody(
        consumer_group=group,
        client_id=client_id,
        mq_set=[BodyMessageQueue(topic=topic, broker_name="broker-a", queue_id=q) for q in queue_ids],
    )

    async def go() -> set[int]:
        c = RemotingClient()
        try:
            r = await c.invoke(
                broker, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, body.encode()), 5000
            )
        finally:
            await c.close()
        assert r.code == ResponseCode.SUCCESS, r.remark
        return {mq.queue_id for mq in LockBatchResponseBody.decode(r.body_bytes()).lock_ok_mq_set}

    return asyncio.run(go())


def test_reconsume_later_comes_back_via_the_retry_topic(
    interop_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    ns = interop_cluster.namesrv
    topic, group = names("T"), names("G")
    sends = [
        {"topic": topic, "body": f"r-{i}", "tags": "R", "keys": f"rk{i}", "props": {"idx": str(i)}}
        for i in range(5)
    ]
    results = run_producer(cpp_home, ns, sends)
    assert all(r.get("status") == 0 for r in results)
    props = ["idx", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "REAL_TOPIC", "DELAY"]
    with CppConsumer(cpp_home, ns, group, topic, props=props, fail_first=True) as c:
        # the first delivery is refused (RECONSUME_LATER): the client sends it back (CONSUMER_SEND_MSG_BACK),
        # the broker stores it in %RETRY%<group> after the delay level's time, the client pulls it from there
        got = c.wait_for(
            lambda d: {x["body"] for x in d if x["reconsume_times"] >= 1} >= {s["body"] for s in sends},
            60,
            "every message back from the retry topic",
        )
    first = [d for d in got if d["reconsume_times"] == 0]
    again = [d for d in got if d["reconsume_times"] >= 1]
    assert first and all(d["later"] for d in first)
    by_id = {r["msg_id"]: s for r, s in zip(results, sends, strict=True)}
    for d in again:
        s = by_id[d["id"]]  # same message id (UNIQ_KEY) as the original send
        assert (d["body"], d["tags"], d["keys"], d["props"]["idx"]) == (
            s["body"],
            s["tags"],
            s["keys"],
            s["props"]["idx"],
        )
        assert d["topic"] == topic  # the client restores the original topic from RETRY_TOPIC
        assert d["props"]["RETRY_TOPIC"] == topic
        # it waited out its delay level in SCHEDULE_TOPIC_XXXX, which then delivered it to %RETRY%<group>
        assert (d["props"]["REAL_TOPIC"], d["props"]["DELAY"]) == (f"%RETRY%{group}", "")
    with rmq.Admin(ns) as admin:
        retry = admin.topic_status(f"%RETRY%{group}")
    assert sum(q.max_offset for q in retry) >= len(sends)  # they went through the retry topic


def test_real_send_modes_compression_and_the_real_pull_consumer(
    interop_cluster: InteropCluster, cpp_home: Path, names: Callable[[str], str]
) -> None:
    """oneway, async, batch (the core writes its bools as "1"/"0") and a body over the core's 4 KiB
    compression threshold, read back by our consumer and by the real pull consumer."""
    ns = interop_cluster.namesrv
    topic = names("T")
    big = "big-" + "x" * 10_000 + "-end"
    sends = [
        {"topic": topic, "body": big, "tags": "Big", "keys": "kbig", "props": {"n": "big"}},
        {
            "topic": topic,
            "body": "oneway",
            "tags": "Ow",
            "keys": "kow",
            "props": {"n": "ow"},
            "mode": "oneway",
        },
        {"topic": topic, "body": "async", "tags": "As", "keys": "kas", "props": {"n": "as"}, "mode": "async"},
        {
            "mode": "batch",
            "messages": [
                {
                    "topic": topic,
                    "body": f"batch-{i}",
                    "tags": "Bt",
                    "keys": f"kb{i}",
                    "props": {"n": f"b{i}"},
                }
                for i in range(3)
            ],
        },
    ]
    results = run_producer(cpp_home, ns, sends)
    assert [r.get("status") for r in results] == [0, 0, 0, 0], results
    want = sorted(
        [(s["body"], s["tags"], s["keys"], s["props"]["n"]) for s in sends[:3]]
        + [(m["body"], m["tags"], m["keys"], m["props"]["n"]) for m in sends[3]["messages"]]
    )

    with rmq.LitePullConsumer(names("GL"), ns) as ours:
        ours.subscribe(topic, "*")
        got: list = []
        wait_until(
            lambda: got.extend(ours.poll(0.2)) or len(got) >= len(want), 30, "our consumer read them all"
        )
    assert (
        sorted((m.body.decode(), m.tags, m.keys, m.properties["n"]) for m in got) == want
    )  # body decompressed
    stored = {m.body.decode(): m for m in got}
    assert (
        stored[big].sys_flag & 0x1
    )  # stored compressed (MessageSysFlag.COMPRESSED_FLAG), as the client sent it
    assert len({m.queue_id for m in got if m.tags == "Bt"}) == 1  # one batch goes to one queue

    real = run_pull_consumer(cpp_home, ns, names("GP"), topic, props=["n"])
    assert sorted((d["body"], d["tags"], d["keys"], d["props"]["n"]) for d in real) == want
