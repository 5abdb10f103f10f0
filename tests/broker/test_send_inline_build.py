"""The usual single send (canonical properties: a producer's WAIT + UNIQ_KEY, or with tags, keys or user
properties too) is built inline in process_requests: it must store exactly the record _build_message
stores for the same message sent with its properties in a form only the generic path takes (an item
repeated), and a topic's send view must follow its config."""

from __future__ import annotations

import asyncio
from pathlib import Path

from remoting.body import TopicConfig
from remoting.codes import ResponseCode
from remoting.message import MessageSysFlag, PermName, java_string_hash
from tests.broker.conftest import running_broker
from tests.broker.helpers import send_v2


async def _run(h, cmds):  # type: ignore[no-untyped-def]
    futs = [await h.client.invoke_future(h.addr, c, 5000) for c in cmds]
    return await asyncio.wait_for(asyncio.gather(*futs), 10)


def _offset(resp) -> int:  # type: ignore[no-untyped-def]
    return int(resp.ext_fields["msgId"][-16:], 16)  # offset msg id: host, port, then the CommitLog offset


async def test_inline_build_stores_what_the_generic_path_stores(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        tcm = h.controller.topic_config_manager
        tcm.update_topic_config(TopicConfig(topic_name="Inline", read_queue_nums=2, write_queue_nums=2,
                                            topic_filter_type="MULTI_TAG"))
        uniq = "C0A8000100002A9F0000000000000001"
        plain = f"WAIT\x01true\x02UNIQ_KEY\x01{uniq}"
        tagged = f"TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true\x02UNIQ_KEY\x01{uniq}\x02user\x01v"
        pairs = [
            (plain, f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02UNIQ_KEY\x01{uniq}"),
            (tagged, f"{tagged}\x02TAGS\x01TagA"),
        ]
        proc = h.controller.send_message_processor
        generic_builds = []
        build = proc._build_message
        proc._build_message = lambda *a: generic_builds.append(a[1].opaque) or build(*a)  # type: ignore[method-assign]
        store = h.controller.message_store
        for inline_props, generic_props in pairs:
            fast = send_v2("Inline", b"body", queue_id=1, properties=inline_props)
            generic = send_v2("Inline", b"body", queue_id=1, properties=generic_props)
            generic_builds.clear()
            r1, r2 = await _run(h, [fast, generic])
            assert generic_builds == [generic.opaque]  # the first built inline, the second not
            assert r1.code == r2.code == ResponseCode.SUCCESS
            assert r1.ext_fields["transactionId"] == r2.ext_fields["transactionId"] == uniq
            await store.reput_message_service.wait_caught_up(10)
            m1 = store.look_message_by_offset(_offset(r1))
            m2 = store.look_message_by_offset(_offset(r2))
            assert m1 is not None and m2 is not None
            assert m1.properties == m2.properties
            assert m1.properties["UNIQ_KEY"] == uniq and "WAIT" not in m1.properties
            assert m1.properties["CLUSTER"] == h.controller.broker_config.brokerClusterName
            assert m1.sys_flag == m2.sys_flag and m1.sys_flag & MessageSysFlag.MULTI_TAGS_FLAG
            assert (m1.queue_id, m1.body, m1.topic, m1.born_timestamp > 0) == (m2.queue_id, m2.body, m2.topic, True)
            assert m1.queue_offset + 1 == m2.queue_offset
        assert m1.properties["TAGS"] == "TagA" and m1.properties["KEYS"] == "k1 k2" and m1.properties["user"] == "v"
        # The tags code the consume queue holds (what tag filtering reads) is TAGS' hash for both.
        cq = store.find_consume_queue("Inline", 1)
        units = [cq.get_unit(m.queue_offset) for m in (m1, m2)]
        assert [u[2] for u in units if u] == [java_string_hash("TagA")] * 2
        assert len(store.query_message("Inline", "k2", 8, 0, m2.store_timestamp + 1000).message_buffers) == 2


async def test_config_replaced_in_the_table_is_seen(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        tcm = h.controller.topic_config_manager
        tcm.update_topic_config(TopicConfig(topic_name="Swap", read_queue_nums=4, write_queue_nums=4))
        resps = await _run(h, [send_v2("Swap", b"x", queue_id=3), send_v2("Swap", b"x", queue_id=3)])
        assert all(r.code == ResponseCode.SUCCESS for r in resps)
        assert "Swap" in tcm.send_views
        # Replaced without _changed (as a test or a loader might): the view no longer matches the config.
        tcm.topic_config_table["Swap"] = TopicConfig(topic_name="Swap", read_queue_nums=4, write_queue_nums=4,
                                                      perm=PermName.PERM_READ)
        resps = await _run(h, [send_v2("Swap", b"x", queue_id=3), send_v2("Swap", b"x", queue_id=3)])
        assert all(r.code == ResponseCode.NO_PERMISSION for r in resps), [r.remark for r in resps]
        tcm.update_topic_config(TopicConfig(topic_name="Swap", read_queue_nums=4, write_queue_nums=4))
        assert "Swap" not in tcm.send_views  # dropped by the change, made again by the next send
        resps = await _run(h, [send_v2("Swap", b"x", queue_id=3), send_v2("Swap", b"x", queue_id=2)])
        assert resps[0].code == ResponseCode.SUCCESS and tcm.send_views["Swap"].config is tcm.topic_config_table["Swap"]
