"""Pipelined sends checked inline (no per-run topic cache): many topics in one run, names refused every
time they come, and a topic's config changed between runs is seen by the next run at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from remoting.body import TopicConfig
from remoting.codes import ResponseCode
from remoting.message import PermName
from tests.broker.conftest import running_broker
from tests.broker.helpers import props, send_v2


async def _run(h, cmds):  # type: ignore[no-untyped-def]
    # invoke_future writes all of them in one write: the broker reads them as one run.
    futs = [await h.client.invoke_future(h.addr, c, 5000) for c in cmds]
    return await asyncio.wait_for(asyncio.gather(*futs), 10)


async def test_many_topics_and_bad_names_in_one_run(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        tcm = h.controller.topic_config_manager
        for i in range(12):
            tcm.update_topic_config(TopicConfig(topic_name=f"Many{i}", read_queue_nums=2, write_queue_nums=2))
        cmds = []
        expect = []
        for i in range(12):
            cmds.append(send_v2(f"Many{i}", b"x", queue_id=i % 2, properties=props(uniq=f"U{i}")))
            expect.append(ResponseCode.SUCCESS)
            if i in (2, 7):
                cmds.append(send_v2("bad topic!", b"x", properties=props(uniq="B")))
                expect.append(ResponseCode.INVALID_PARAMETER)
            if i in (3, 9):
                cmds.append(send_v2("SCHEDULE_TOPIC_XXXX", b"x", properties=props(uniq="S")))
                expect.append(ResponseCode.NO_PERMISSION)
            if i == 5:
                cmds.append(send_v2("Many1", b"x", queue_id=5, properties=props(uniq="Q")))  # no queue 5
                expect.append(ResponseCode.INVALID_PARAMETER)
            if i == 6:
                cmds.append(send_v2("AutoNew", b"x", properties=props(uniq="A")))  # auto-created
                expect.append(ResponseCode.SUCCESS)
        resps = await _run(h, cmds)
        assert [r.code for r in resps] == expect, [(r.code, r.remark) for r in resps]
        assert tcm.select_topic_config("AutoNew") is not None
        # The same names again in the next run: still refused (a cached verdict is only ever "valid").
        resps = await _run(h, [send_v2("bad topic!", b"x"), send_v2("SCHEDULE_TOPIC_XXXX", b"x"),
                               send_v2("Many0", b"x", queue_id=0)])
        assert [r.code for r in resps] == [ResponseCode.INVALID_PARAMETER, ResponseCode.NO_PERMISSION,
                                           ResponseCode.SUCCESS]


async def test_config_change_between_runs_is_seen(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as h:
        tcm = h.controller.topic_config_manager
        tcm.update_topic_config(TopicConfig(topic_name="Flip", read_queue_nums=4, write_queue_nums=4))
        resps = await _run(h, [send_v2("Flip", b"x", queue_id=3) for _ in range(4)])
        assert all(r.code == ResponseCode.SUCCESS for r in resps)
        tcm.update_topic_config(TopicConfig(topic_name="Flip", read_queue_nums=4, write_queue_nums=4,
                                            perm=PermName.PERM_READ))
        resps = await _run(h, [send_v2("Flip", b"x", queue_id=3) for _ in range(4)])
        assert all(r.code == ResponseCode.NO_PERMISSION for r in resps), [r.remark for r in resps]
        tcm.update_topic_config(TopicConfig(topic_name="Flip", read_queue_nums=2, write_queue_nums=2))
        resps = await _run(h, [send_v2("Flip", b"x", queue_id=3), send_v2("Flip", b"x", queue_id=1)])
        assert [r.code for r in resps] == [ResponseCode.INVALID_PARAMETER, ResponseCode.SUCCESS]
