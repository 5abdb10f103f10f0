"""Consumers subscribed with `MessageSelector.by_sql` against real daemons: broker-a runs with
`enablePropertyFilter=true`, broker-b without."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from client import (
    ConsumeConcurrentlyStatus,
    LitePullConsumer,
    Message,
    MessageSelector,
    Producer,
    PushConsumer,
)
from client.errors import MQClientError
from client.message import MessageExt

from .conftest import ConsumerCluster, consumer_cluster, create_topic, wait_until
from .test_lite_pull import poll_until

SELECTOR = "region = 'eu' AND price >= 10 OR TAGS = 'urgent'"


@pytest.fixture(scope="module")
def sql_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsumerCluster]:
    brokers: dict[str, dict[str, object]] = {
        "broker-a": {"enablePropertyFilter": "true"}, "broker-b": {"enablePropertyFilter": "false"},
    }
    with consumer_cluster(tmp_path_factory.mktemp("sql-cluster"), brokers) as c:
        yield c


async def send_mix(namesrv: str, topic: str, n: int = 40, prefix: str = "m") -> set[bytes]:
    """n messages with varied properties; returns the bodies SELECTOR selects."""
    wanted: set[bytes] = set()
    async with Producer(f"P_{topic}", namesrv) as p:
        for i in range(n):
            region = ("eu", "us", "apac")[i % 3]
            tags = "urgent" if i % 7 == 0 else "normal"
            body = f"{prefix}-{i}".encode()
            await p.send(Message(topic, body, tags=tags, properties={"region": region, "price": str(i)}))
            if (region == "eu" and i >= 10) or tags == "urgent":
                wanted.add(body)
    return wanted


async def test_push_consumer_gets_exactly_what_its_sql_selects(
    sql_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    await create_topic(sql_cluster, topic, 4)
    wanted = await send_mix(sql_cluster.namesrv_addr, topic)
    got: list[MessageExt] = []

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(group, sql_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, MessageSelector.by_sql(SELECTOR))
    c.register_listener(listener)
    await c.start()
    try:
        await wait_until(lambda: {m.body for m in got} >= wanted, 20, "the selected messages")
        # and, sent after the consumer is up (answered through long polling), only what it selects
        late = await send_mix(sql_cluster.namesrv_addr, topic, 14, prefix="late")
        await wait_until(lambda: {m.body for m in got} >= wanted | late, 20, "the late selected messages")
        await asyncio.sleep(0.5)
        assert sorted(m.body for m in got) == sorted(wanted | late)
        assert all(m.properties.get("region") in ("eu", None) or m.tags == "urgent" for m in got)
    finally:
        await c.shutdown()


async def test_lite_pull_consumer_polls_what_its_sql_selects(
    sql_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    await create_topic(sql_cluster, topic, 2)
    wanted = await send_mix(sql_cluster.namesrv_addr, topic)
    c = LitePullConsumer(group, sql_cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, MessageSelector.by_sql(SELECTOR))
    await c.start()
    try:
        got = [m.body for m in await poll_until(c, len(wanted), 20)]
        got.extend(m.body for m in await c.poll(0.5))  # and nothing more
        assert sorted(got) == sorted(wanted)
    finally:
        await c.shutdown()


async def test_start_fails_on_a_broker_without_property_filtering(
    sql_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    await create_topic(sql_cluster, topic, 2, brokers=["broker-b"])
    c = PushConsumer(group, sql_cluster.namesrv_addr)
    c.subscribe(topic, MessageSelector.by_sql("a > 1"))
    c.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    with pytest.raises(MQClientError) as e:
        await c.start()
    assert "enablePropertyFilter" in str(e.value) and "broker-b" in str(e.value)
    assert not c.running


async def test_start_fails_on_an_expression_that_does_not_compile(
    sql_cluster: ConsumerCluster, names: Callable[[str], str]
) -> None:
    topic, group = names("T"), names("G")
    await create_topic(sql_cluster, topic, 2)
    c = LitePullConsumer(group, sql_cluster.namesrv_addr)
    c.subscribe(topic, MessageSelector.by_sql("price >= 10 region = 'eu'"))
    with pytest.raises(MQClientError) as e:
        await c.start()
    assert "column 13" in str(e.value) and "SUBSCRIPTION_PARSE_FAILED" in str(e.value)
    assert not c.running


def test_message_selector_builds_the_subscription() -> None:
    from client.consumer.filter import build_subscription_data

    sd = build_subscription_data("T", MessageSelector.by_sql("a > 1"))
    assert (sd.expression_type, sd.sub_string, sd.tags_set) == ("SQL92", "a > 1", [])
    sd = build_subscription_data("T", MessageSelector.by_tag("A || B"))
    assert (sd.expression_type, sd.tags_set) == ("TAG", ["A", "B"])
    with pytest.raises(MQClientError):
        build_subscription_data("T", MessageSelector.by_sql("  "))
