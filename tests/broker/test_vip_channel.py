"""RocketMQ's VIP channel: the broker also answers on listenPort - 2, where Java clients 4.0-4.5.0 send
every request but pulls by default (vipChannelEnabled=true)."""

from __future__ import annotations

import socket
from pathlib import Path

from remoting.body import HeartbeatData, ProducerData
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.conftest import running_broker
from tests.broker.helpers import pull, send_v1


def _port_pair() -> int:
    """A listenPort whose VIP port (listenPort - 2) is free too."""
    for _ in range(50):
        with socket.socket() as vip:
            vip.bind(("127.0.0.1", 0))
            port = vip.getsockname()[1] + 2
            with socket.socket() as main:
                try:
                    main.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise AssertionError("no free port pair")


async def test_the_vip_port_answers_what_the_main_port_does(tmp_path: Path) -> None:
    port = _port_pair()
    async with running_broker(tmp_path / "store", listenPort=port) as h:
        assert h.controller.fast_remoting_server is not None
        vip = f"127.0.0.1:{port - 2}"
        heartbeat = HeartbeatData(client_id="old-java@1", producer_data_set=[ProducerData(group_name="VipP")])
        r = await h.client.invoke(vip, RemotingCommand.request(RequestCode.HEART_BEAT, None, heartbeat.encode()), 3000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await h.client.invoke(vip, send_v1("VipTopic", b"over the vip channel", queue_id=0, group="VipP"), 3000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert h.controller.producer_manager.find_channel("old-java@1") is not None
        # what was sent there is read from the main port, as such a client's pulls are
        r = await h.call(pull("VipTopic", 0, 0))
        assert r.code == ResponseCode.SUCCESS and b"over the vip channel" in bytes(r.body or b"")


async def test_a_taken_vip_port_does_not_stop_the_broker(tmp_path: Path) -> None:
    port = _port_pair()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port - 2))
        taken.listen()
        async with running_broker(tmp_path / "store", listenPort=port) as h:
            assert h.controller.fast_remoting_server is None
            r = await h.call(send_v1("T", b"x", queue_id=0))
            assert r.code == ResponseCode.SUCCESS, r.remark
