"""SQL92 property filtering on the broker (`enablePropertyFilter=true`): pulls with their own
subscription, pulls by what a heartbeat registered (RocketMQ's Java push consumer), CHECK_CLIENT_CONFIG,
long polling, and the retry topic with `filterSupportRetry`."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from broker.filter import ConsumerFilterManager, ExpressionForRetryMessageFilter, ExpressionMessageFilter
from remoting.body import TopicConfig
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import UnregisterClientRequestHeader
from remoting.message import decode_messages
from tests.broker.conftest import BrokerHarness, running_broker
from tests.broker.helpers import props as encode_props
from tests.broker.helpers import pull, send_v1, wait_until

SQL_ON = {"enablePropertyFilter": "true"}
SUSPEND = 0x2
SUSPEND_SUBSCRIPTION = 0x2 | 0x4


def make_topic(h: BrokerHarness, name: str, queues: int = 1) -> None:
    h.controller.topic_config_manager.update_topic_config(
        TopicConfig(topic_name=name, read_queue_nums=queues, write_queue_nums=queues)
    )


async def send(h: BrokerHarness, topic: str, body: bytes, tags: str | None = None, **user: str) -> None:
    r = await h.call(send_v1(topic, body, queue_id=0, properties=encode_props(tags=tags, **user)))
    assert r.code == ResponseCode.SUCCESS, r.remark


def sql_pull(topic: str, offset: int, expression: str | None, *, group: str = "CG", sys_flag: int = SUSPEND_SUBSCRIPTION,
             sub_version: int = 0, suspend_ms: int = 15000) -> RemotingCommand:
    cmd = pull(topic, 0, offset, group=group, subscription=expression, sys_flag=sys_flag, suspend_ms=suspend_ms)
    cmd.ext_fields["expressionType"] = "SQL92"
    cmd.ext_fields["subVersion"] = str(sub_version)
    if expression is None:
        cmd.ext_fields.pop("subscription", None)
    return cmd


def bodies(r: RemotingCommand) -> list[bytes]:
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return [m.body for m in decode_messages(r.body)]


def java_heartbeat(client_id: str, group: str, topic: str, expression: str, version: int) -> RemotingCommand:
    """What RocketMQ's Java push consumer sends for `subscribe(topic, MessageSelector.bySql(expression))`."""
    sub = {"classFilterMode": False, "codeSet": [], "expressionType": "SQL92", "subString": expression,
           "subVersion": version, "tagsSet": [], "topic": topic}
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY", "groupName": group,
        "messageModel": "CLUSTERING", "subscriptionDataSet": [sub], "unitMode": False}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, None, json.dumps(body).encode())


async def fill(h: BrokerHarness, topic: str, n: int = 20) -> None:
    make_topic(h, topic)
    for i in range(n):
        await send(h, topic, b"m%d" % i, tags="A" if i % 2 == 0 else "B", price=str(i))
    assert await h.controller.message_store.wait_dispatched(5.0)


async def test_pull_with_its_own_sql_subscription_gets_only_matching_messages(tmp_path: Path) -> None:
    async with running_broker(tmp_path, **SQL_ON) as h:
        await fill(h, "S")
        r = await h.call(sql_pull("S", 0, "price >= 10 AND TAGS = 'A'"))
        assert bodies(r) == [b"m10", b"m12", b"m14", b"m16", b"m18"]
        assert r.ext_fields["nextBeginOffset"] == "20"
        r = await h.call(sql_pull("S", 0, "price BETWEEN 3 AND 5 OR KEYS IS NOT NULL"))
        assert bodies(r) == [b"m3", b"m4", b"m5"]
        # nothing matches: the pull moves past what it read (PULL_RETRY_IMMEDIATELY), as RocketMQ's does
        r = await h.call(sql_pull("S", 0, "price > 100", sys_flag=0x4))
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext_fields["nextBeginOffset"] == "20"
        r = await h.call(sql_pull("S", 0, "price > > 1"))
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "column 9" in r.remark and "price > > 1" in r.remark


async def test_sql_pull_on_a_broker_without_property_filtering_is_refused(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        await fill(h, "S", 2)
        r = await h.call(sql_pull("S", 0, "price > 0"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "enablePropertyFilter" in r.remark
        # updateBrokerConfig turns it on without a restart
        await h.controller.update_config({"enablePropertyFilter": "true", "filterDataCleanTimeSpan": "60000"})
        assert bodies(await h.call(sql_pull("S", 0, "price > 0"))) == [b"m1"]
        assert h.controller.consumer_filter_manager.clean_time_span_ms == 60000


async def test_java_push_consumer_pulls_by_the_expression_its_heartbeat_registered(tmp_path: Path) -> None:
    async with running_broker(tmp_path, **SQL_ON) as h:
        await fill(h, "S")
        v1 = int(time.time() * 1000)
        assert (await h.call(java_heartbeat("c1", "G", "S", "price < 3", v1))).code == ResponseCode.SUCCESS
        # Java's push consumer pulls without the subscription flag, naming only its version
        r = await h.call(sql_pull("S", 0, None, group="G", sys_flag=SUSPEND, sub_version=v1))
        assert bodies(r) == [b"m0", b"m1", b"m2"]
        r = await h.call(sql_pull("S", 0, None, group="G", sys_flag=SUSPEND, sub_version=v1 + 1))
        assert r.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
        # a newer subscription replaces the expression
        assert (await h.call(java_heartbeat("c1", "G", "S", "price > 16", v1 + 1))).code == ResponseCode.SUCCESS
        r = await h.call(sql_pull("S", 0, None, group="G", sys_flag=SUSPEND, sub_version=v1 + 1))
        assert bodies(r) == [b"m17", b"m18", b"m19"]
        # an expression that does not compile is not held: the pull says so rather than deliver unfiltered
        assert (await h.call(java_heartbeat("c2", "G2", "S", "price >", v1))).code == ResponseCode.SUCCESS
        r = await h.call(sql_pull("S", 0, None, group="G2", sys_flag=SUSPEND, sub_version=v1))
        assert r.code == ResponseCode.FILTER_DATA_NOT_EXIST


async def test_filter_data_outlives_the_group_going_offline_until_cleaned(tmp_path: Path) -> None:
    async with running_broker(tmp_path, **SQL_ON) as h:
        make_topic(h, "S")
        fm = h.controller.consumer_filter_manager
        assert (await h.call(java_heartbeat("c1", "G", "S", "price < 3", 5))).code == ResponseCode.SUCCESS
        assert fm.get("S", "G") is not None and not fm.get("S", "G").is_dead
        hdr = UnregisterClientRequestHeader(client_id="c1", consumer_group="G")
        r = await h.call(RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, hdr.encode()))
        assert r.code == ResponseCode.SUCCESS
        data = fm.get("S", "G")
        assert data is not None and data.is_dead
        assert fm.clean(data.dead_time + fm.clean_time_span_ms - 1) == 0
        # the same version revives it; past the clean time span it is gone
        assert (await h.call(java_heartbeat("c1", "G", "S", "price < 3", 5))).code == ResponseCode.SUCCESS
        assert not fm.get("S", "G").is_dead
        fm.unregister("G")
        assert fm.clean(fm.get("S", "G").dead_time + fm.clean_time_span_ms) == 1
        assert fm.get("S", "G") is None and fm.filter_data_by_topic == {}


def test_consumer_filter_manager_keeps_the_newest_version() -> None:
    fm = ConsumerFilterManager()
    assert fm.register_one("S", "G", "a > 1", "SQL92", 10)
    assert not fm.register_one("S", "G", "a > 2", "SQL92", 9)  # older: ignored
    assert fm.get("S", "G").expression == "a > 1"
    assert fm.register_one("S", "G", "a > 3", "SQL92", 11)
    assert fm.get("S", "G").message_filter.is_matched_by_commit_log(None, {"a": "4"})
    assert not fm.get("S", "G").message_filter.is_matched_by_commit_log(None, {"a": "3"})
    assert not fm.register_one("S", "G", "*", "TAG", 12)  # tags are not held here
    assert not fm.register_one("S", "G", "a >", "SQL92", 13)  # does not compile: dropped
    assert fm.get("S", "G") is None
    # a heartbeat without the topic marks the group's expression for it dead
    fm.register_one("S", "G", "a > 1", "SQL92", 14)
    fm.register("G", [])
    assert fm.get("S", "G").is_dead


async def test_check_client_config(tmp_path: Path) -> None:
    def check(expression_type: str, expression: str) -> RemotingCommand:
        sub = {"topic": "S", "subString": expression, "expressionType": expression_type, "subVersion": 1,
               "tagsSet": [], "codeSet": [], "classFilterMode": False}
        body = json.dumps({"clientId": "c1", "group": "G", "subscriptionData": sub}).encode()
        return RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body)

    async with running_broker(tmp_path, **SQL_ON) as h:
        assert (await h.call(check("SQL92", "a > 1 AND b IN ('x')"))).code == ResponseCode.SUCCESS
        assert (await h.call(check("TAG", "A || B"))).code == ResponseCode.SUCCESS
        r = await h.call(check("SQL92", "a >> 1"))
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 4" in r.remark
        r = await h.call(check("GROOVY", "x"))
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "GROOVY" in r.remark
    async with running_broker(tmp_path / "off") as h:
        r = await h.call(check("SQL92", "a > 1"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "enablePropertyFilter" in r.remark
        assert (await h.call(check("TAG", "*"))).code == ResponseCode.SUCCESS


async def test_held_sql_pull_is_woken_only_by_a_matching_message(tmp_path: Path) -> None:
    async with running_broker(tmp_path, **SQL_ON) as h:
        make_topic(h, "S")
        await send(h, "S", b"first", price="0")
        assert await h.controller.message_store.wait_dispatched(5.0)
        held = asyncio.ensure_future(h.call(sql_pull("S", 1, "price > 5", suspend_ms=10000), timeout_ms=15000))
        await wait_until(lambda: h.controller.pull_request_hold_service.held == 1)
        await send(h, "S", b"cheap", price="1")
        await asyncio.sleep(0.3)
        assert not held.done()  # not woken by a message it would not get
        await send(h, "S", b"dear", price="9")
        r = await asyncio.wait_for(held, 5)
        assert bodies(r) == [b"dear"] and r.ext_fields["nextBeginOffset"] == "3"


async def test_retry_topic_pulls_use_the_original_topics_expression_with_filter_support_retry(tmp_path: Path) -> None:
    async with running_broker(tmp_path, filterSupportRetry="true", **SQL_ON) as h:
        make_topic(h, "%RETRY%G")
        assert (await h.call(java_heartbeat("c1", "G", "S", "price > 5", 1))).code == ResponseCode.SUCCESS
        for body, topic, price in ((b"r1", "S", "1"), (b"r2", "S", "9"), (b"r3", "Other", "1")):
            await send(h, "%RETRY%G", body, RETRY_TOPIC=topic, price=price)
        assert await h.controller.message_store.wait_dispatched(5.0)
        r = await h.call(pull("%RETRY%G", 0, 0, group="G", subscription="*"))
        # r1 failed S's expression; r3's topic has none registered, so it passes
        assert bodies(r) == [b"r2", b"r3"]
    async with running_broker(tmp_path / "default", **SQL_ON) as h:  # off by default: the retry topic is not filtered
        make_topic(h, "%RETRY%G")
        assert (await h.call(java_heartbeat("c1", "G", "S", "price > 5", 1))).code == ResponseCode.SUCCESS
        await send(h, "%RETRY%G", b"r1", RETRY_TOPIC="S", price="1")
        assert await h.controller.message_store.wait_dispatched(5.0)
        assert bodies(await h.call(pull("%RETRY%G", 0, 0, group="G", subscription="*"))) == [b"r1"]


def test_retry_filter_unit() -> None:
    fm = ConsumerFilterManager()
    fm.register_one("S", "G", "a > 5", "SQL92", 1)
    f = ExpressionForRetryMessageFilter(ExpressionMessageFilter.parse("*"), "G", fm)
    assert f.needs_commit_log_match and f.matches_every_unit
    assert f.is_matched_by_commit_log(None, {"RETRY_TOPIC": "S", "a": "6"})
    assert not f.is_matched_by_commit_log(None, {"RETRY_TOPIC": "S", "a": "5"})
    assert f.is_matched_by_commit_log(None, {"RETRY_TOPIC": "T", "a": "5"})
    assert f.is_matched_by_commit_log(None, {"a": "5"})
