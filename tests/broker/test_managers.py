"""Managers in isolation: topics, groups, offsets, filters, locks, consumers, held pulls."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.client.client_channel_info import ClientChannelInfo
from broker.client.consumer_manager import ConsumerGroupEvent, ConsumerManager
from broker.client.producer_manager import ProducerManager
from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.config import BrokerConfig
from broker.filter import ExpressionMessageFilter, SubscriptionParseError, build_subscription_data
from broker.longpolling.pull_request_hold_service import PullRequest, PullRequestHoldService
from broker.offset.consumer_offset_manager import ConsumerOffsetManager
from broker.subscription.subscription_group_manager import SubscriptionGroupManager
from broker.topic.topic_config_manager import TopicConfigManager
from broker.topic.topic_validator import validate_topic
from remoting.body import MessageQueue, SubscriptionData, TopicConfig
from remoting.message import PermName, java_string_hash
from tests.support.loop_turns import counting_loop_turns


def cfg(tmp_path: Path, **kw: object) -> BrokerConfig:
    return BrokerConfig.from_values(
        {"storePathRootDir": str(tmp_path), "brokerName": "bk", "brokerClusterName": "Cl", **kw}
    )


# ---------------------------------------------------------------------------------------- topics


def test_system_topics_at_start(tmp_path: Path) -> None:
    tcm = TopicConfigManager(cfg(tmp_path))
    t = tcm.topic_config_table
    assert t["TBW102"].perm == PermName.PERM_INHERIT | PermName.PERM_READ | PermName.PERM_WRITE
    assert t["TBW102"].write_queue_nums == 8
    assert t["SCHEDULE_TOPIC_XXXX"].read_queue_nums == 18
    assert t["RMQ_SYS_TRANS_HALF_TOPIC"].write_queue_nums == 1
    assert t["RMQ_SYS_TRANS_OP_HALF_TOPIC"].write_queue_nums == 1
    for name in ("SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "Cl", "bk", "Cl_REPLY_TOPIC"):
        assert name in t
        assert tcm.is_system_topic(name)
    assert tcm.is_system_topic("rmq_sys_anything")
    assert not tcm.is_system_topic("Orders")
    assert "TBW102" not in TopicConfigManager(cfg(tmp_path, autoCreateTopicEnable="false")).topic_config_table



def test_serialize_wrapper_is_a_snapshot_and_perm_override_leaves_the_table(tmp_path: Path) -> None:
    """The registration snapshot keeps its topic set when the table changes after it was taken, and a
    perm override (broker not read-write) caps the snapshot's perms without touching the live configs."""
    tcm = TopicConfigManager(cfg(tmp_path))
    tcm.update_topic_config(TopicConfig(topic_name="Orders", read_queue_nums=4, write_queue_nums=4))
    before = tcm.data_version.counter
    w = tcm.build_serialize_wrapper()
    tcm.update_topic_config(TopicConfig(topic_name="Later", read_queue_nums=2, write_queue_nums=2))
    assert "Orders" in w.topic_config_table and "Later" not in w.topic_config_table
    assert w.data_version.counter == before  # the version of the snapshot, not of the table now
    body = json.loads(w.encode())
    assert body["topicConfigTable"]["Orders"]["writeQueueNums"] == 4

    capped = tcm.build_serialize_wrapper(PermName.PERM_READ)
    assert {tc.perm for tc in capped.topic_config_table.values()} == {PermName.PERM_READ}
    assert tcm.topic_config_table["Orders"].perm == PermName.PERM_READ | PermName.PERM_WRITE
    assert tcm.topic_config_table["TBW102"].perm & PermName.PERM_INHERIT

def test_auto_create_takes_min_of_client_and_template(tmp_path: Path) -> None:
    tcm = TopicConfigManager(cfg(tmp_path))
    changes: list[str] = []
    tcm.add_change_listener(changes.append)
    v0 = tcm.data_version.counter
    tc = tcm.create_topic_in_send_message_method("New", "TBW102", "1.2.3.4:5", 4)
    assert tc is not None and tc.read_queue_nums == tc.write_queue_nums == 4
    assert tc.perm == PermName.PERM_READ | PermName.PERM_WRITE  # inherit bit dropped
    assert changes == ["New"] and tcm.data_version.counter == v0 + 1
    big = tcm.create_topic_in_send_message_method("Big", "TBW102", "x", 64)
    assert big is not None and big.write_queue_nums == 8
    # A template that is not inheritable, or missing, creates nothing.
    tcm.update_topic_config(TopicConfig(topic_name="Tmpl", perm=6))
    assert tcm.create_topic_in_send_message_method("X", "Tmpl", "x", 4) is None
    assert tcm.create_topic_in_send_message_method("X", "NoSuchTemplate", "x", 4) is None


def test_auto_create_off_refuses_even_a_persisted_template(tmp_path: Path) -> None:
    on = TopicConfigManager(cfg(tmp_path))
    on.persist_now()
    off = TopicConfigManager(cfg(tmp_path, autoCreateTopicEnable="false"))
    assert off.load()
    off.after_load()
    assert "TBW102" not in off.topic_config_table
    assert off.create_topic_in_send_message_method("New", "TBW102", "x", 4) is None


def test_topics_persist_and_load(tmp_path: Path) -> None:
    a = TopicConfigManager(cfg(tmp_path))
    a.update_topic_config(TopicConfig(topic_name="Orders", read_queue_nums=3, write_queue_nums=3, perm=6, order=True))
    a.create_topic_in_send_message_back_method("%RETRY%g1", 1, 6)
    a.persist_now()
    data = json.loads((tmp_path / "config" / "topics.json").read_text())
    assert data["topicConfigTable"]["Orders"]["readQueueNums"] == 3
    assert "dataVersion" in data
    b = TopicConfigManager(cfg(tmp_path))
    assert b.load()
    assert b.topic_config_table["Orders"].order is True
    assert b.topic_config_table["%RETRY%g1"].write_queue_nums == 1
    assert b.data_version.counter == a.data_version.counter
    # Keys are interned names, loaded or made (a decoded send's topic is interned: identity matches).
    a.update_topic_config(TopicConfig(topic_name="".join(["Run", "Time"]), read_queue_nums=1, write_queue_nums=1))
    for tcm, name in ((b, "Orders"), (b, "%RETRY%g1"), (a, "RunTime")):
        assert next(k for k in tcm.topic_config_table if k == name) is sys.intern("".join([name[:2], name[2:]]))
    assert b.delete_topic_config("Orders") and not b.delete_topic_config("Orders")


def test_corrupt_file_falls_back_to_backup(tmp_path: Path) -> None:
    a = TopicConfigManager(cfg(tmp_path))
    a.update_topic_config(TopicConfig(topic_name="First"))  # no loop: written at once
    a.persist_now()  # the previous write is kept as topics.json.bak
    (tmp_path / "config" / "topics.json").write_text("{not json")
    b = TopicConfigManager(cfg(tmp_path))
    assert b.load()
    assert "First" in b.topic_config_table
    (tmp_path / "config" / "topics.json.bak").write_text("{not json either")
    assert not TopicConfigManager(cfg(tmp_path)).load()


async def test_persist_requests_coalesce(tmp_path: Path) -> None:
    m = TopicConfigManager(cfg(tmp_path))
    writes = 0
    orig = m.encode

    def counting() -> str:
        nonlocal writes
        writes += 1
        return orig()

    m.encode = counting  # type: ignore[method-assign]
    for i in range(20):
        m.update_topic_config(TopicConfig(topic_name=f"T{i}"))
    await m.wait_persisted()
    assert 1 <= writes <= 2
    assert "T19" in json.loads((tmp_path / "config" / "topics.json").read_text())["topicConfigTable"]


@pytest.mark.parametrize(
    ("topic", "ok"),
    [("Abc_1-x", True), ("%RETRY%g", True), ("a|b", True), ("", False), ("has space", False), ("t.dot", False),
     ("x" * 127, True), ("x" * 128, False)],
)
def test_topic_name_rule(topic: str, ok: bool) -> None:
    assert (validate_topic(topic) is None) is ok


# ---------------------------------------------------------------------------------------- groups and offsets


def test_subscription_group_auto_create(tmp_path: Path) -> None:
    on = SubscriptionGroupManager(cfg(tmp_path))
    g = on.find_subscription_group_config("G1")
    assert g is not None and g.retry_max_times == 16 and g.retry_queue_nums == 1 and g.consume_enable
    off = SubscriptionGroupManager(cfg(tmp_path, autoCreateSubscriptionGroup="false"))
    assert off.find_subscription_group_config("G1") is None
    assert off.find_subscription_group_config("CID_RMQ_SYS_X") is not None  # system groups always
    on.persist_now()
    again = SubscriptionGroupManager(cfg(tmp_path, autoCreateSubscriptionGroup="false"))
    assert again.load() and again.find_subscription_group_config("G1") is not None


def test_offsets_shape_and_java_style_file(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(cfg(tmp_path))
    assert m.query_offset("g", "T", 0) == -1
    m.commit_offset("c", "g", "T", 0, 12)
    m.commit_offset("c", "g", "T", 1, 7)
    m.commit_offset("c", "g2", "U", 0, 3)
    assert m.dirty
    data = json.loads(m.encode())
    assert data == {"offsetTable": {"T@g": {"0": 12, "1": 7}, "U@g2": {"0": 3}}}
    assert not m.dirty
    m.decode('{"offsetTable":{"T@g":{0:5,1:6}}}')  # fastjson writes int keys unquoted
    assert m.query_offset("g", "T", 1) == 6
    m.decode(json.dumps(data))
    assert m.which_topic_by_consumer("g") == {"T"}
    assert m.which_group_by_topic("U") == {"g2"}
    m.remove_topic("T")
    assert m.query_offset("g", "T", 0) == -1 and m.query_offset("g2", "U", 0) == 3
    m.remove_offset("g2")
    assert m.offset_table == {}


async def test_offsets_persist_a_slice_per_loop_turn_and_read_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table grows with topics x groups: 4 000 keys were 17 ms of one json.dumps on the loop every
    flushConsumerOffsetInterval. The background persist encodes ENCODE_SLICE keys per loop turn."""
    import broker.offset.consumer_offset_manager as com

    monkeypatch.setattr(com, "ENCODE_SLICE", 10)
    m = ConsumerOffsetManager(cfg(tmp_path))
    for t in range(95):
        for q in range(4):
            m.commit_offset("c", f"g{t % 7}", f"T{t}", q, 1000 * t + q)
    async with counting_loop_turns() as loop:
        before = loop.turns
        text = await m.encode_on_loop()
        assert loop.turns - before >= 9  # 95 keys, 10 a turn: the loop ran other tasks in between
    assert not m.dirty
    assert json.loads(text) == json.loads(m.encode_snapshot())
    await m.persist()  # through the background path, to the file
    n = ConsumerOffsetManager(cfg(tmp_path))
    assert n.load()
    assert n.offset_table == m.offset_table and n.query_offset("g3", "T94", 2) == 94002


# ---------------------------------------------------------------------------------------- filters


def test_subscription_expression_parsing() -> None:
    sd = build_subscription_data("T", "TagA || TagB ||  ")
    assert sd.tags_set == ["TagA", "TagB"]
    assert sd.code_set == [java_string_hash("TagA"), java_string_hash("TagB")]
    assert build_subscription_data("T", "*").sub_string == "*"
    assert build_subscription_data("T", None).sub_string == "*"
    with pytest.raises(SubscriptionParseError):
        build_subscription_data("T", "||")
    with pytest.raises(SubscriptionParseError):
        build_subscription_data("T", "", "SQL92")


def test_filter_matches_tags_codes() -> None:
    f = ExpressionMessageFilter.parse("a||b")
    assert f.is_matched_by_consume_queue(java_string_hash("a"))
    assert f.is_matched_by_consume_queue(java_string_hash("b"))
    assert not f.is_matched_by_consume_queue(java_string_hash("c"))
    assert not f.is_matched_by_consume_queue(0)  # untagged message
    assert ExpressionMessageFilter.parse("*").is_matched_by_consume_queue(0)
    assert ExpressionMessageFilter.parse(None).is_matched_by_consume_queue(0)
    assert ExpressionMessageFilter.parse("a > 1", "SQL92").is_matched_by_consume_queue(5)
    with pytest.raises(SubscriptionParseError):
        ExpressionMessageFilter.parse(" || ")
    # A heartbeat with a bogus codeSet still filters by its tag strings.
    bogus = SubscriptionData(topic="T", sub_string="a", tags_set=["a"], code_set=[0])
    assert ExpressionMessageFilter.from_subscription(bogus).is_matched_by_consume_queue(java_string_hash("a"))
    assert not ExpressionMessageFilter.from_subscription(bogus).is_matched_by_consume_queue(0)
    # What the store reads to skip calls: "*" accepts every unit; only non-tag filters need the record.
    assert [ExpressionMessageFilter.parse(e).matches_every_unit for e in ("*", None, "a||b")] == [True, True, False]
    assert not ExpressionMessageFilter.parse("a").needs_commit_log_match
    assert ExpressionMessageFilter.parse("a > 1", "SQL92").needs_commit_log_match


# ---------------------------------------------------------------------------------------- locks


def test_rebalance_locks() -> None:
    m = RebalanceLockManager(max_live_time_ms=60000)
    q = [MessageQueue(topic="T", broker_name="b", queue_id=i) for i in range(3)]
    assert m.try_lock_batch("g", q[:2], "c1", now=100.0) == set(q[:2])
    assert m.try_lock_batch("g", q, "c2", now=110.0) == {q[2]}
    assert m.try_lock_batch("other", q, "c2", now=110.0) == set(q)  # groups are independent
    assert m.is_locked("g", q[0], "c1", now=120.0)
    assert m.try_lock_batch("g", [q[1]], "c1", now=150.0) == {q[1]}  # renewed
    # c1 stops renewing: after 60 s c2 takes over.
    assert m.try_lock_batch("g", q[:1], "c2", now=185.0) == {q[0]}
    m.unlock_batch("g", [q[1]], "c2")  # not the holder: ignored
    assert not m.try_lock("g", q[1], "c2", now=186.0)
    m.unlock_batch("g", [q[1]], "c1")
    assert m.try_lock("g", q[1], "c2", now=186.0)


# ---------------------------------------------------------------------------------------- consumers


class FakeConn:
    def __init__(self, name: str) -> None:
        self.remote_addr = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_consumer_membership_events() -> None:
    events: list[tuple[ConsumerGroupEvent, str, Any]] = []
    m = ConsumerManager(lambda e, g, a: events.append((e, g, a)), channel_expired_timeout_ms=120000)
    c1, c2 = FakeConn("1"), FakeConn("2")
    sub = [SubscriptionData(topic="T", sub_string="*")]
    i1 = ClientChannelInfo(c1, "client-1")  # type: ignore[arg-type]
    assert m.register_consumer("g", i1, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", sub)
    changes = [a for e, g, a in events if e is ConsumerGroupEvent.CHANGE]
    assert changes == [[c1]]
    events.clear()
    # A repeated heartbeat changes nothing.
    assert not m.register_consumer("g", ClientChannelInfo(c1, "client-1"), "CONSUME_PASSIVELY", "CLUSTERING",  # type: ignore[arg-type]
                                   "CONSUME_FROM_LAST_OFFSET", sub)
    assert not [e for e, _, _ in events if e is ConsumerGroupEvent.CHANGE]
    m.register_consumer("g", ClientChannelInfo(c2, "client-2"), "CONSUME_PASSIVELY", "CLUSTERING",  # type: ignore[arg-type]
                        "CONSUME_FROM_LAST_OFFSET", sub)
    assert m.get_consumer_group_info("g").all_client_ids() == ["client-1", "client-2"]  # type: ignore[union-attr]
    events.clear()
    m.do_channel_close_event(c1)  # type: ignore[arg-type]
    assert [(e, a) for e, g, a in events] == [(ConsumerGroupEvent.CHANGE, [c2])]
    events.clear()
    # c2 goes silent: expired by the scan, group gone.
    info2 = m.get_consumer_group_info("g").channel_info_table[c2]  # type: ignore[union-attr,index]
    expired = m.scan_not_active_channel(now=info2.last_update + 121)
    assert expired == [c2]
    assert m.get_consumer_group_info("g") is None
    assert [e for e, _, _ in events] == [ConsumerGroupEvent.UNREGISTER, ConsumerGroupEvent.CHANGE]
    assert m.query_topic_consume_by_who("T") == set()


def test_producer_manager() -> None:
    m = ProducerManager(channel_expired_timeout_ms=1000)
    c1 = FakeConn("1")
    info = ClientChannelInfo(c1, "p1")  # type: ignore[arg-type]
    m.register_producer("pg", info)
    assert m.get_available_channel("pg") is c1
    assert m.find_channel("p1") is c1
    assert m.scan_not_active_channel(now=info.last_update + 2) == [c1]
    assert m.get_available_channel("pg") is None


# ---------------------------------------------------------------------------------------- held pulls


def held(conn: Any, topic: str, qid: int, offset: int, timeout_ms: int, sub: str = "*") -> PullRequest:
    ctx = SimpleNamespace(conn=conn)
    return PullRequest(ctx, SimpleNamespace(), topic, qid, offset,  # type: ignore[arg-type]
                       ExpressionMessageFilter.parse(sub), timeout_ms)


async def test_the_safety_net_wakes_missed_arrivals_a_slice_of_queues_per_loop_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every 5 s the held queues are re-checked against the store (an arrival notice can be missed); with a
    pull held on each of 16 000 queues one pass held the loop for ~11 ms, so it goes CHECK_SLICE a turn."""
    import broker.longpolling.pull_request_hold_service as phs

    monkeypatch.setattr(phs, "CHECK_SLICE", 4)
    woken: list[PullRequest] = []
    svc = PullRequestHoldService(woken.append, lambda t, q: 6 if t != "Quiet" else 5)
    svc.start()
    try:
        conn = FakeConn("c")
        reqs = [held(conn, f"T{i}", 0, 5, 10000) for i in range(10)] + [held(conn, "Quiet", 0, 5, 10000)]
        for r in reqs:
            assert svc.suspend_pull_request(r)
        async with counting_loop_turns() as loop:
            before = loop.turns
            await svc.check_hold_request()
            assert loop.turns - before >= 2  # 11 queues, 4 a turn
        for _ in range(3):
            await asyncio.sleep(0)
        assert sorted(r.topic for r in woken) == sorted(f"T{i}" for i in range(10))  # not the quiet one
        assert svc.held == 1
    finally:
        await svc.stop()


async def test_held_pull_woken_by_matching_arrival_only() -> None:
    woken: list[PullRequest] = []
    max_offsets = {("T", 0): 5}
    svc = PullRequestHoldService(woken.append, lambda t, q: max_offsets.get((t, q), 0))
    svc.start()
    try:
        conn = FakeConn("c")
        r_a = held(conn, "T", 0, 5, 10000, "a")
        r_b = held(conn, "T", 0, 5, 10000, "b")
        r_other = held(conn, "T", 1, 0, 10000)
        for r in (r_a, r_b, r_other):
            assert svc.suspend_pull_request(r)
        assert svc.held == 3
        svc.notify_message_arriving("T", 0, 6, java_string_hash("b"))
        await asyncio.sleep(0)
        assert woken == [r_b] and svc.held == 2
        # An arrival at an offset the pull is already past wakes nothing.
        svc.notify_message_arriving("T", 0, 5, java_string_hash("a"))
        await asyncio.sleep(0)
        assert woken == [r_b]
        svc.notify_message_arriving("T", 0, 7, java_string_hash("a"))
        await asyncio.sleep(0)
        assert woken == [r_b, r_a]
    finally:
        await svc.stop()
    assert woken[-1] is r_other  # stop answers what is still held


async def test_pulls_woken_in_one_turn_are_answered_together_in_order_each_on_its_own() -> None:
    """A dispatch pass wakes one pull per queue it fed: they are answered in one callback on the next loop
    turn, in the order woken; a closed connection's pull is skipped and a failing answer does not stop the
    rest. A pull woken while that callback runs gets a turn of its own."""
    answered: list[PullRequest] = []
    queues = 4
    svc: PullRequestHoldService

    def wake(r: PullRequest) -> None:
        if r.queue_id == 1:
            raise RuntimeError("boom")
        answered.append(r)
        if r.queue_id == 0:  # an answer whose work wakes another held pull
            svc.notify_message_arriving("Late", 0, 1)

    svc = PullRequestHoldService(wake, lambda t, q: 0)
    svc.start()
    try:
        conns = [FakeConn(f"c{q}") for q in range(queues)]
        reqs = [held(conns[q], "T", q, 0, 10000) for q in range(queues)]
        late = held(FakeConn("late"), "Late", 0, 0, 10000)
        for r in [*reqs, late]:
            assert svc.suspend_pull_request(r)
        conns[2].close()
        loop = asyncio.get_running_loop()
        scheduled: list[object] = []
        svc._loop = SimpleNamespace(  # type: ignore[assignment]  # counts what the service schedules
            call_soon=lambda cb, *args: (scheduled.append(cb), loop.call_soon(cb, *args))[1])
        for q in reversed(range(queues)):
            svc.notify_message_arriving("T", q, 1)
        assert len(scheduled) == 1  # one callback for all four
        assert answered == [] and svc.held == 1
        await asyncio.sleep(0)
        assert answered == [reqs[3], reqs[0]]  # woken order; 2 closed, 1 failed alone
        await asyncio.sleep(0)
        assert answered == [reqs[3], reqs[0], late] and svc.held == 0
    finally:
        await svc.stop()


async def test_a_queues_first_held_pull_is_announced_once() -> None:
    """The store keeps its listeners' per-queue filter answers: the hold service says when has_held turns
    true for a queue, and only then."""
    firsts: list[tuple[str, int]] = []
    svc = PullRequestHoldService(lambda r: None, lambda t, q: 0, on_first_held=lambda t, q: firsts.append((t, q)))
    svc.start()
    try:
        conn = FakeConn("c")
        r1, r2 = held(conn, "T", 0, 0, 10000), held(conn, "T", 0, 0, 10000)
        assert svc.suspend_pull_request(r1) and svc.suspend_pull_request(r2)
        assert firsts == [("T", 0)] and svc.has_held("T", 0)
        svc.notify_message_arriving("T", 0, 1)  # wakes both: the queue has none held now
        await asyncio.sleep(0)
        assert not svc.has_held("T", 0)
        assert svc.suspend_pull_request(held(conn, "T", 0, 1, 10000))
        assert svc.suspend_pull_request(held(conn, "T", 1, 0, 10000))
        assert firsts == [("T", 0), ("T", 0), ("T", 1)]
    finally:
        await svc.stop()


async def test_held_pull_times_out_and_bounds() -> None:
    woken: list[PullRequest] = []
    svc = PullRequestHoldService(woken.append, lambda t, q: 0, max_held=2)
    svc.start()
    try:
        conn = FakeConn("c")
        r1 = held(conn, "T", 0, 0, 50)
        assert svc.suspend_pull_request(r1)
        assert svc.suspend_pull_request(held(conn, "T", 0, 0, 10000))
        assert not svc.suspend_pull_request(held(conn, "T", 0, 0, 10000))  # over max_held
        await asyncio.sleep(0.15)
        assert woken == [r1] and svc.expired_total == 1
        # A closed client's pulls are dropped without an answer.
        svc.on_channel_close(conn)  # type: ignore[arg-type]
        assert svc.held == 0 and svc.pull_request_table == {}
    finally:
        await svc.stop()
    assert woken == [r1]


async def test_held_pull_timeouts_expire_in_deadline_order_without_a_timer_each() -> None:
    """Held pulls of several timeout values expire each at its own deadline (none early, in deadline
    order); an answered pull never expires later; one loop timer serves them all."""
    woken: list[PullRequest] = []
    times: dict[int, float] = {}
    loop = asyncio.get_running_loop()

    def wake(r: PullRequest) -> None:
        woken.append(r)
        times[id(r)] = loop.time()

    svc = PullRequestHoldService(wake, lambda t, q: 0)
    svc.start()
    try:
        conn = FakeConn("c")
        t0 = loop.time()
        slow = held(conn, "T", 0, 0, 300)
        fast = held(conn, "T", 1, 0, 60)
        mid = held(conn, "T", 2, 0, 150)
        answered = held(conn, "T", 3, 0, 60)
        for r in (slow, fast, mid, answered):
            assert svc.suspend_pull_request(r)
        svc.notify_message_arriving("T", 3, 1)  # answered now: must not be answered again at 60 ms
        await asyncio.sleep(0)
        assert woken == [answered]
        await asyncio.sleep(0.5)
        assert woken == [answered, fast, mid, slow] and svc.expired_total == 3 and svc.held == 0
        for r, ms in ((fast, 60), (mid, 150), (slow, 300)):
            assert times[id(r)] - t0 >= ms / 1000 - 0.002
    finally:
        await svc.stop()


async def test_held_pull_timeouts_keep_only_what_is_held_behind_a_long_held_pull() -> None:
    """A pull held for long (an idle queue's) does not make the time-outs keep every pull answered after
    it: an answered pull leaves them at once. (Kept until a compaction, thousands of answered pulls and
    their requests were freed at once: 2-3 ms of loop time every ~0.6 s at 8 000 pulls a second.)"""
    svc = PullRequestHoldService(lambda r: None, lambda t, q: 0)
    svc.start()
    try:
        conn = FakeConn("c")
        assert svc.suspend_pull_request(held(conn, "Idle", 0, 0, 15000))
        for i in range(20000):
            assert svc.suspend_pull_request(held(conn, "Busy", 0, i, 15000))
            svc.notify_message_arriving("Busy", 0, i + 1)
        await asyncio.sleep(0)
        assert svc.held == 1
        assert len(svc._expiry) == 1
    finally:
        await svc.stop()


def test_send_view_follows_the_config() -> None:
    from broker.config import BrokerConfig
    from broker.topic.topic_config_manager import TopicConfigManager

    tcm = TopicConfigManager(BrokerConfig.from_values({"brokerName": "b"}))
    assert tcm.send_view("Nope") is None
    tcm.update_topic_config(TopicConfig(topic_name="V", read_queue_nums=2, write_queue_nums=3))
    v = tcm.send_view("V")
    assert v is not None and v.writable and v.queue_limit == 3 and v.write_queue_nums == 3 and not v.multi_tag
    assert tcm.send_view("V") is v  # remembered
    tcm.update_topic_config(TopicConfig(topic_name="V", read_queue_nums=8, write_queue_nums=1, perm=4,
                                        topic_filter_type="MULTI_TAG"))
    v2 = tcm.send_view("V")
    assert v2 is not v and not v2.writable and v2.queue_limit == 8 and v2.multi_tag


def test_inc_put_adds_per_topic_and_totals() -> None:
    from broker.stats import BrokerStatsManager

    s = BrokerStatsManager()
    s.inc_put("A", 1, 10)
    s.inc_put("A", 2, 20)
    s.inc_put("B", 3, 30)
    assert (s.put_nums, s.put_size) == (6, 60)
    assert s.topic_put_nums == {"A": 3, "B": 3} and s.topic_put_size == {"A": 30, "B": 30}
    s.forget_topic("A")
    assert s.topic_put_nums == {"B": 3} and s.topic_put_size == {"B": 30}
