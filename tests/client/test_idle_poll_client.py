"""ClientConfig.idle_poll_us: off by default, validated, and handed to the client runtime's connections."""

from __future__ import annotations

import pytest

from client import Message, Producer
from client.config import ClientConfig
from remoting.idle_poll import available_cpus


def test_idle_poll_us_is_off_by_default_and_bounded() -> None:
    assert ClientConfig().idle_poll_us == 0
    assert ClientConfig(idle_poll_us=200).idle_poll_us == 200
    for bad in (-1, 100_001):
        with pytest.raises(ValueError, match="idle_poll_us"):
            ClientConfig(idle_poll_us=bad)


@pytest.mark.skipif(available_cpus() < 2, reason="idle polling turns itself off with one CPU")
async def test_a_producer_with_idle_poll_spins_after_its_sends(cluster: tuple[str, str, object]) -> None:
    ns, _broker, _d = cluster
    cfg = ClientConfig(idle_poll_us=5_000, instance_name="idle-poll-test")
    async with Producer("idle_poll_producer", ns, client_config=cfg) as p:
        for i in range(3):
            r = await p.send(Message("IdlePollTopic", b"m%d" % i))
            assert r.queue_offset >= 0
        poller = p.instance.remoting.idle_poller
        assert poller is not None and poller.window_us == 5_000 and poller.spins > 0
    async with Producer("plain_producer", ns, client_config=ClientConfig(instance_name="plain")) as q:
        await q.send(Message("IdlePollTopic", b"plain"))
        assert q.instance.remoting.idle_poller is None
