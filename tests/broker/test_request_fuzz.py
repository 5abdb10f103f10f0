"""Mutated requests of every kind a client sends, into a real broker (a BrokerController on a real store, each
request on a connection of its own): every one the frame decoder takes is answered (an error naming what was
wrong, or a result), none by a processor's exception (SYSTEM_ERROR from `processor_failed`), and afterwards the
broker still stores and serves messages."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from remoting.body import TopicConfig
from remoting.codes import ResponseCode
from remoting.message import decode_messages
from tests.broker.conftest import running_broker
from tests.broker.helpers import pull, send_v1, wait_until
from tests.support.fuzz import TOPIC, broker_request_frames, fuzz_requests, spy_processor_failures


async def test_mutated_requests_are_answered_and_the_broker_keeps_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = spy_processor_failures(monkeypatch)
    rnd = random.Random(20261124)
    seeds = broker_request_frames()
    async with running_broker(tmp_path) as h:
        h.controller.topic_config_manager.update_topic_config(
            TopicConfig(topic_name=TOPIC, read_queue_nums=4, write_queue_nums=4))
        requests, unanswered = await fuzz_requests(h.addr, seeds, rnd, 3000)
        assert requests > 300
        assert not failed, failed[:5]
        assert not unanswered, unanswered[:3]
        # Still a broker: a send is stored and pulled back.
        r = await h.call(send_v1(TOPIC, b"after the fuzz", queue_id=3))
        assert r.code == ResponseCode.SUCCESS, r.remark
        offset = int(r.ext_fields["queueOffset"])  # type: ignore[index]
        await wait_until(lambda: h.controller.message_store.get_max_offset_in_queue(TOPIC, 3) > offset)
        p = await h.call(pull(TOPIC, 3, offset, subscription="*"))
        assert p.code == ResponseCode.SUCCESS and decode_messages(p.body)[0].body == b"after the fuzz"
