"""Offsets, queries, client management and admin requests against an in-process broker."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from remoting.body import (
    BrokerStatsData,
    ConsumerConnection,
    ConsumerData,
    ConsumeStats,
    GetConsumerListByGroupResponseBody,
    GroupList,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    ProducerConnection,
    ProducerData,
    ResetOffsetBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicStatsTable,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext, RequestDispatcher
from remoting.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageResponseHeader,
    TopicQueueRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from remoting.message import decode_message, decode_messages, decode_offset_msg_id
from remoting.properties import parse_properties
from tests.broker.conftest import BrokerHarness, running_broker
from tests.broker.helpers import props, send_v1, wait_until


def req(code: int, header: object | None = None, body: bytes | None = None) -> RemotingCommand:
    ext = header.encode() if header is not None else None  # type: ignore[attr-defined]
    return RemotingCommand.request(code, ext, body)


def heartbeat(client_id: str, group: str | None = None, topic: str = "T", producer: str | None = None) -> RemotingCommand:
    consumers = []
    if group:
        consumers.append(ConsumerData(group_name=group, subscription_data_set=[SubscriptionData(topic=topic, sub_string="*")]))
    producers = [ProducerData(group_name=producer)] if producer else []
    body = HeartbeatData(client_id=client_id, consumer_data_set=consumers, producer_data_set=producers).encode()
    cmd = RemotingCommand.request(RequestCode.HEART_BEAT, None, body)
    return cmd


# ---------------------------------------------------------------------------------------- offsets


async def test_consumer_offsets(broker: BrokerHarness) -> None:
    h = broker
    q = QueryConsumerOffsetRequestHeader(consumer_group="G", topic="T", queue_id=0)
    r = await h.call(req(RequestCode.QUERY_CONSUMER_OFFSET, q))
    # Never committed, queue starts at 0 and is in memory: RocketMQ answers 0.
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "0"
    u = UpdateConsumerOffsetRequestHeader(consumer_group="G", topic="T", queue_id=0, commit_offset=42)
    assert (await h.call(req(RequestCode.UPDATE_CONSUMER_OFFSET, u))).code == ResponseCode.SUCCESS
    r = await h.call(req(RequestCode.QUERY_CONSUMER_OFFSET, q))
    assert OffsetResponseHeader.decode(r.ext_fields).offset == 42
    u.commit_offset = -5
    assert (await h.call(req(RequestCode.UPDATE_CONSUMER_OFFSET, u))).code == ResponseCode.INVALID_PARAMETER
    r = await h.call(req(RequestCode.GET_ALL_CONSUMER_OFFSET))
    assert json.loads(r.body)["offsetTable"]["T@G"] == {"0": 42}
    r = await h.call(req(RequestCode.GET_ALL_DELAY_OFFSET))
    assert r.code == ResponseCode.SUCCESS and json.loads(r.body) == {"offsetTable": {}}


async def test_query_offset_not_found_when_queue_start_is_on_disk(broker: BrokerHarness) -> None:
    store = broker.controller.message_store
    store.check_in_disk_by_consume_offset = lambda t, q, o: True  # type: ignore[method-assign]
    r = await broker.call(req(RequestCode.QUERY_CONSUMER_OFFSET,
                              QueryConsumerOffsetRequestHeader(consumer_group="G", topic="T", queue_id=0)))
    assert r.code == ResponseCode.QUERY_NOT_FOUND


async def test_offsets_in_store_and_by_time(broker: BrokerHarness) -> None:
    h = broker
    t_before = int(time.time() * 1000) - 1
    for i in range(3):
        await h.call(send_v1("S", f"m{i}".encode(), queue_id=0))
    await h.controller.message_store.wait_dispatched(5)
    tq = TopicQueueRequestHeader(topic="S", queue_id=0)
    assert OffsetResponseHeader.decode((await h.call(req(RequestCode.GET_MAX_OFFSET, tq))).ext_fields).offset == 3
    assert OffsetResponseHeader.decode((await h.call(req(RequestCode.GET_MIN_OFFSET, tq))).ext_fields).offset == 0
    unused = TopicQueueRequestHeader(topic="S", queue_id=3)
    assert OffsetResponseHeader.decode((await h.call(req(RequestCode.GET_MIN_OFFSET, unused))).ext_fields).offset == 0
    assert OffsetResponseHeader.decode((await h.call(req(RequestCode.GET_MAX_OFFSET, unused))).ext_fields).offset == 0
    r = await h.call(req(RequestCode.GET_EARLIEST_MSG_STORETIME, tq))
    assert int(r.ext_fields["timestamp"]) >= t_before
    r = await h.call(req(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader(topic="S", queue_id=0, timestamp=t_before)))
    assert OffsetResponseHeader.decode(r.ext_fields).offset == 0


# ---------------------------------------------------------------------------------------- query


async def test_query_by_key_uniq_key_and_id(broker: BrokerHarness) -> None:
    h = broker
    r = await h.call(send_v1("Q", b"findme", properties=props("t", "order-7 other", "UNIQ-77")))
    msg_id = SendMessageResponseHeader.decode(r.ext_fields).msg_id
    await h.call(send_v1("Q", b"noise", properties=props("t", "nope")))
    await h.controller.message_store.wait_dispatched(5)
    r = await h.call(req(RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(topic="Q", key="order-7", max_num=32)))
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(r.body)] == [b"findme"]
    assert int(r.ext_fields["indexLastUpdateTimestamp"]) > 0
    uq = req(RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(topic="Q", key="UNIQ-77", max_num=1))
    uq.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    r = await h.call(uq)
    assert [m.uniq_key for m in decode_messages(r.body)] == ["UNIQ-77"]
    r = await h.call(req(RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(topic="Q", key="absent")))
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    # Query outside the time range finds nothing.
    r = await h.call(req(RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(topic="Q", key="order-7", begin_timestamp=1, end_timestamp=2)))
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    offset = decode_offset_msg_id(msg_id)[2]
    r = await h.call(req(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=offset)))
    assert r.code == ResponseCode.SUCCESS
    m, end = decode_message(r.body)
    assert m.body == b"findme" and m.msg_id == msg_id and end == len(r.body)
    r = await h.call(req(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=10**12)))
    assert r.code == ResponseCode.SYSTEM_ERROR and "offset" in r.remark


# ---------------------------------------------------------------------------------------- clients


class Listener:
    """A client connection that records NOTIFY_CONSUMER_IDS_CHANGED / RESET_CONSUMER_CLIENT_OFFSET."""

    def __init__(self) -> None:
        self.got: list[RemotingCommand] = []
        self.event = asyncio.Event()
        d = RequestDispatcher()
        d.register((RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, RequestCode.RESET_CONSUMER_CLIENT_OFFSET), self._on)
        self.client = RemotingClient(d)

    def _on(self, ctx: RequestContext, cmd: RemotingCommand) -> None:
        self.got.append(cmd)
        self.event.set()

    def codes(self) -> list[int]:
        return [c.code for c in self.got]


async def test_heartbeat_consumer_list_and_rebalance_notifications(broker: BrokerHarness) -> None:
    h = broker
    a, b = Listener(), Listener()
    try:
        r = await a.client.invoke(h.addr, heartbeat("client-a", "Grp", producer="PGrp"))
        assert r.code == ResponseCode.SUCCESS
        assert h.controller.topic_config_manager.select_topic_config("%RETRY%Grp") is not None
        await wait_until(lambda: a.got)
        a.got.clear()
        assert (await b.client.invoke(h.addr, heartbeat("client-b", "Grp"))).code == ResponseCode.SUCCESS
        await wait_until(lambda: a.got)
        assert a.got[0].code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and a.got[0].is_oneway
        assert a.got[0].ext_fields["consumerGroup"] == "Grp"
        r = await h.call(req(RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader(consumer_group="Grp")))
        assert sorted(GetConsumerListByGroupResponseBody.decode(r.body).consumer_id_list) == ["client-a", "client-b"]
        r = await h.call(req(RequestCode.GET_CONSUMER_CONNECTION_LIST, GetConsumerConnectionListRequestHeader(consumer_group="Grp")))
        cc = ConsumerConnection.decode(r.body)
        assert sorted(c.client_id for c in cc.connection_set) == ["client-a", "client-b"]
        assert cc.message_model == "CLUSTERING" and "T" in cc.subscription_table
        r = await h.call(req(RequestCode.GET_PRODUCER_CONNECTION_LIST, GetProducerConnectionListRequestHeader(producer_group="PGrp")))
        assert [c.client_id for c in ProducerConnection.decode(r.body).connection_set] == ["client-a"]
        r = await h.call(req(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, QueryTopicConsumeByWhoRequestHeader(topic="T")))
        assert GroupList.decode(r.body).group_list == ["Grp"]

        # b unregisters: a is told; then a's connection closes: the group is gone.
        a.got.clear()
        unreg = UnregisterClientRequestHeader(client_id="client-b", consumer_group="Grp")
        assert (await b.client.invoke(h.addr, req(RequestCode.UNREGISTER_CLIENT, unreg))).code == ResponseCode.SUCCESS
        await wait_until(lambda: a.got)
        await a.client.close()
        await wait_until(lambda: h.controller.consumer_manager.get_consumer_group_info("Grp") is None)
        r = await h.call(req(RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader(consumer_group="Grp")))
        assert r.code == ResponseCode.SYSTEM_ERROR
        r = await h.call(req(RequestCode.GET_CONSUMER_CONNECTION_LIST, GetConsumerConnectionListRequestHeader(consumer_group="Grp")))
        assert r.code == ResponseCode.CONSUMER_NOT_ONLINE
        assert h.controller.producer_manager.get_group_channels("PGrp") == {}
    finally:
        await a.client.close()
        await b.client.close()


async def test_silent_client_expires(tmp_path: Path) -> None:
    async with running_broker(tmp_path, channelExpiredTimeout="1000") as h:
        c = RemotingClient()
        try:
            await c.invoke(h.addr, heartbeat("quiet", "G2"))
            assert h.controller.consumer_manager.get_consumer_group_info("G2") is not None
            await asyncio.sleep(1.1)
            h.controller.client_housekeeping_service.scan_exception_channel()
            assert h.controller.consumer_manager.get_consumer_group_info("G2") is None
        finally:
            await c.close()


async def test_bad_heartbeat_body(broker: BrokerHarness) -> None:
    r = await broker.call(RemotingCommand.request(RequestCode.HEART_BEAT, None, b"{not json"))
    assert r.code == ResponseCode.INVALID_PARAMETER and "heartbeat" in r.remark


# ---------------------------------------------------------------------------------------- admin


async def test_topic_admin(broker: BrokerHarness) -> None:
    h = broker
    ct = CreateTopicRequestHeader(topic="Adm", read_queue_nums=3, write_queue_nums=3, perm=6)
    assert (await h.call(req(RequestCode.UPDATE_AND_CREATE_TOPIC, ct))).code == ResponseCode.SUCCESS
    for bad, needle in (("TBW102", "system topic"), ("bad name", "illegal"), ("DefaultCluster", "system topic")):
        r = await h.call(req(RequestCode.UPDATE_AND_CREATE_TOPIC, CreateTopicRequestHeader(topic=bad)))
        assert r.code == ResponseCode.INVALID_PARAMETER and needle in r.remark
    r = await h.call(req(RequestCode.GET_ALL_TOPIC_CONFIG))
    table = TopicConfigSerializeWrapper.decode(r.body).topic_config_table
    assert table["Adm"].read_queue_nums == 3 and "TBW102" in table
    r = await h.call(req(RequestCode.GET_TOPIC_NAME_LIST))
    assert "Adm" in TopicList.decode(r.body).topic_list

    await h.call(send_v1("Adm", b"x", queue_id=1))
    await h.controller.message_store.wait_dispatched(5)
    r = await h.call(req(RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader(topic="Adm")))
    stats = TopicStatsTable.decode(r.body)
    by_q = {mq.queue_id: o for mq, o in stats.offset_table.items()}
    assert by_q[1].max_offset == 1 and by_q[1].last_update_timestamp > 0 and by_q[0].max_offset == 0

    h.controller.consumer_offset_manager.commit_offset("x", "G", "Adm", 1, 1)
    r = await h.call(req(RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic="Adm")))
    assert r.code == ResponseCode.SUCCESS
    assert h.controller.topic_config_manager.select_topic_config("Adm") is None
    assert h.controller.consumer_offset_manager.query_offset("G", "Adm", 1) == -1
    assert h.controller.message_store.get_max_offset_in_queue("Adm", 1) == 0
    r = await h.call(req(RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic="SCHEDULE_TOPIC_XXXX")))
    assert r.code == ResponseCode.INVALID_PARAMETER


async def test_subscription_group_admin_and_consume_stats(broker: BrokerHarness) -> None:
    h = broker
    cfg = SubscriptionGroupConfig(group_name="SG", retry_max_times=3, consume_broadcast_enable=False)
    assert (await h.call(req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, cfg.encode()))).code == ResponseCode.SUCCESS
    r = await h.call(req(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert SubscriptionGroupWrapper.decode(r.body).subscription_group_table["SG"].retry_max_times == 3
    r = await h.call(req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, b"[]"))
    assert r.code == ResponseCode.INVALID_PARAMETER

    for _i in range(3):
        await h.call(send_v1("CS", b"x", queue_id=0))
    await h.controller.message_store.wait_dispatched(5)
    h.controller.consumer_offset_manager.commit_offset("x", "SG", "CS", 0, 2)
    r = await h.call(req(RequestCode.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(consumer_group="SG")))
    cs = ConsumeStats.decode(r.body)
    w = cs.offset_table[MessageQueue(topic="CS", broker_name="broker-t", queue_id=0)]
    assert (w.broker_offset, w.consumer_offset) == (3, 2) and w.last_timestamp > 0
    assert cs.total_diff() == 1

    dg = DeleteSubscriptionGroupRequestHeader(group_name="SG", clean_offset=True)
    assert (await h.call(req(RequestCode.DELETE_SUBSCRIPTIONGROUP, dg))).code == ResponseCode.SUCCESS
    assert "SG" not in h.controller.subscription_group_manager.subscription_group_table
    assert h.controller.consumer_offset_manager.query_offset("SG", "CS", 0) == -1


async def test_reset_offset_by_time_tells_online_consumers(broker: BrokerHarness) -> None:
    h = broker
    for i in range(4):
        await h.call(send_v1("RS", f"m{i}".encode(), queue_id=0))
    await h.controller.message_store.wait_dispatched(5)
    h.controller.consumer_offset_manager.commit_offset("x", "RG", "RS", 0, 4)
    lis = Listener()
    try:
        await lis.client.invoke(h.addr, heartbeat("rc", "RG", topic="RS"))
        await wait_until(lambda: lis.got)
        lis.got.clear()
        r = await h.call(req(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                             ResetOffsetRequestHeader(topic="RS", group="RG", timestamp=0, is_force=True)))
        assert r.code == ResponseCode.SUCCESS, r.remark
        table = ResetOffsetBody.decode(r.body).offset_table
        assert table[MessageQueue(topic="RS", broker_name="broker-t", queue_id=0)] == 0
        assert h.controller.consumer_offset_manager.query_offset("RG", "RS", 0) == 0
        await wait_until(lambda: RequestCode.RESET_CONSUMER_CLIENT_OFFSET in lis.codes())
        pushed = next(c for c in lis.got if c.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET)
        assert pushed.ext_fields["group"] == "RG"
        assert ResetOffsetBody.decode(pushed.body).offset_table == table
        # -1 = to the end.
        r = await h.call(req(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                             ResetOffsetRequestHeader(topic="RS", group="RG", timestamp=-1, is_force=True)))
        assert h.controller.consumer_offset_manager.query_offset("RG", "RS", 0) == 4
    finally:
        await lis.client.close()
    r = await h.call(req(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                         ResetOffsetRequestHeader(topic="Missing", group="RG", timestamp=0)))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST


async def test_runtime_info_and_broker_config(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# test\nbrokerName=broker-t\n")
    async with running_broker(tmp_path / "store") as h:
        h.controller.config_file = conf
        await h.call(send_v1("RT", b"x"))
        r = await h.call(req(RequestCode.GET_BROKER_RUNTIME_INFO))
        kv = KVTable.decode(r.body).table
        for key in ("msgPutTotalTodayNow", "putTps", "getTotalTps", "commitLogMinOffset", "commitLogMaxOffset",
                    "bootTimestamp", "runtime", "brokerVersionDesc", "sendThreadPoolQueueCapacity",
                    "putMessageDistributeTime", "dispatchMaxBuffer", "EndTransactionQueueSize",
                    "EndTransactionThreadPoolQueueCapacity"):
            assert key in kv, key
        # RocketMQ's mqadmin clusterList prints these as "(queue size,head wait ms)"
        for family in ("send", "pull", "query"):
            assert kv[f"{family}ThreadPoolQueueHeadWaitTimeMills"] == "0", family
        assert kv["msgPutTotalTodayNow"] == "1" and int(kv["commitLogMaxOffset"]) > 0

        r = await h.call(req(RequestCode.GET_BROKER_CONFIG))
        cfg = parse_properties(r.body.decode())
        assert cfg["brokerName"] == "broker-t" and cfg["maxMessageSize"] == str(4 * 1024 * 1024)
        assert "counter" in json.loads(r.ext_fields["version"])

        bad = await h.call(req(RequestCode.UPDATE_BROKER_CONFIG, None, b"noSuchKey=1\n"))
        assert bad.code == ResponseCode.INVALID_PARAMETER and "noSuchKey" in bad.remark
        bad = await h.call(req(RequestCode.UPDATE_BROKER_CONFIG, None, b"defaultTopicQueueNums=lots\n"))
        assert bad.code == ResponseCode.INVALID_PARAMETER and "defaultTopicQueueNums" in bad.remark
        ok = await h.call(req(RequestCode.UPDATE_BROKER_CONFIG, None, b"autoCreateTopicEnable=false\nmaxMessageSize=2048\n"))
        assert ok.code == ResponseCode.SUCCESS
        assert h.controller.store_config.maxMessageSize == 2048
        assert "TBW102" not in h.controller.topic_config_manager.topic_config_table
        r = await h.call(send_v1("Brand-New", b"x"))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert parse_properties(conf.read_text()) == {
            "brokerName": "broker-t", "autoCreateTopicEnable": "false", "maxMessageSize": "2048"
        }


async def test_view_broker_stats_data(broker: BrokerHarness) -> None:
    h = broker
    for i in range(3):
        assert (await h.call(send_v1("StatsT", f"m{i}".encode(), queue_id=0))).code == ResponseCode.SUCCESS
    await asyncio.sleep(1.2)  # the stats loop snapshots a new key within a second
    assert (await h.call(send_v1("StatsT", b"m3", queue_id=0))).code == ResponseCode.SUCCESS

    def view(name: str, key: str) -> RemotingCommand:
        return RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})

    r = await h.call(view("TOPIC_PUT_NUMS", "StatsT"))
    assert r.code == ResponseCode.SUCCESS, r.remark
    data = BrokerStatsData.decode(r.body)
    for window in (data.stats_minute, data.stats_hour, data.stats_day):
        assert window.sum == 4 and window.avgpt == 1.0 and window.tps > 0
    assert json.loads(r.body)["statsMinute"].keys() == {"sum", "tps", "avgpt"}  # RocketMQ's field names
    r = await h.call(view("TOPIC_PUT_NUMS", "NoSuchTopic"))
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist"


async def test_lock_batch_mq(broker: BrokerHarness) -> None:
    mqs = [MessageQueue(topic="O", broker_name="broker-t", queue_id=i) for i in range(2)]
    body = LockBatchRequestBody(consumer_group="OG", client_id="c1", mq_set=mqs).encode()
    r = await broker.call(req(RequestCode.LOCK_BATCH_MQ, None, body))
    assert set(LockBatchResponseBody.decode(r.body).lock_ok_mq_set) == set(mqs)
    body2 = LockBatchRequestBody(consumer_group="OG", client_id="c2", mq_set=mqs).encode()
    r = await broker.call(req(RequestCode.LOCK_BATCH_MQ, None, body2))
    assert LockBatchResponseBody.decode(r.body).lock_ok_mq_set == []
    assert (await broker.call(req(RequestCode.UNLOCK_BATCH_MQ, None, body))).code == ResponseCode.SUCCESS
    r = await broker.call(req(RequestCode.LOCK_BATCH_MQ, None, body2))
    assert set(LockBatchResponseBody.decode(r.body).lock_ok_mq_set) == set(mqs)


async def test_unknown_request_code(broker: BrokerHarness) -> None:
    r = await broker.call(RemotingCommand.request(9999))
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_heartbeat_with_enum_ordinals_as_the_cpp_core_sends(broker: BrokerHarness) -> None:
    body = (
        b'{"clientID":"127.0.0.1@1#DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
        b'"groupName":"CID-c","messageModel":1,"subscriptionDataSet":[{"subString":"*","subVersion":"1795315110870",'
        b'"topic":"%RETRY%CID-c"},{"codeSet":[0],"subString":"TagA","subVersion":"1795315110870","tagsSet":["TagA"],'
        b'"topic":"T"}],"unitMode":false}]}\n'
    )
    r = await broker.call(RemotingCommand.request(RequestCode.HEART_BEAT, None, body))
    assert r.code == ResponseCode.SUCCESS, r.remark
    gi = broker.controller.consumer_manager.get_consumer_group_info("CID-c")
    assert gi is not None
    assert (gi.consume_type, gi.message_model, gi.consume_from_where) == (
        "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    assert gi.find_subscription_data("T").sub_version == 1795315110870  # type: ignore[union-attr]
    bad = body.replace(b'"messageModel":1', b'"messageModel":7')
    r = await broker.call(RemotingCommand.request(RequestCode.HEART_BEAT, None, bad))
    assert r.code == ResponseCode.INVALID_PARAMETER and "messageModel" in r.remark
