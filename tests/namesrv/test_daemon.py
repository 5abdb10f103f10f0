"""The real `bin/mqnamesrv` as a subprocess on a free loopback port."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests.support.daemons import BIN, PYTHON, Daemon, free_port, start_namesrv, write_conf

from .support import get_route, register_cmd


def run_mqnamesrv(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, str(BIN / "mqnamesrv"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Daemon, str]]:
    d, addr = start_namesrv(tmp_path)
    try:
        yield d, addr
    finally:
        d.terminate()


async def test_daemon_serves_routes_and_stops_on_sigterm(daemon: tuple[Daemon, str]) -> None:
    d, addr = daemon
    client = RemotingClient()
    try:
        r = await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
        )
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert "No topic route info in name server for the topic: T" in r.remark
        r = await client.invoke(addr, register_cmd("broker-a", "127.0.0.1:10911", ["T"]))
        assert r.code == ResponseCode.SUCCESS, r.remark
        route = await get_route(client, addr, "T")
        assert route is not None and route.broker_datas[0].broker_addrs == {0: "127.0.0.1:10911"}
        r = await client.invoke(
            addr,
            RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"}),
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await client.close()
    assert d.terminate() == 0
    out = d.output()
    listening = [line for line in out.splitlines() if "listening" in line]
    assert len(listening) == 1 and f"addr=0.0.0.0:{addr.rsplit(':', 1)[1]}" in listening[0], out


def test_sigint_exits_zero(tmp_path: Path) -> None:
    d, _addr = start_namesrv(tmp_path)
    try:
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(10) == 0
    finally:
        d.terminate()


def test_print_config_and_exit(tmp_path: Path) -> None:
    port = free_port()
    conf = write_conf(tmp_path / "ns.conf", {"listenPort": port, "brokerChannelExpiredTime": 60000})
    p = run_mqnamesrv("-c", str(conf), "-p")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert f"listenPort={port}" in lines
    assert "brokerChannelExpiredTime=60000" in lines
    assert "scanNotActiveBrokerInterval=10000" in lines
    assert any(line.startswith("kvConfigPath=") for line in lines)
    assert f"configStorePath={conf.resolve()}" in lines
    # It did not start a server.
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"listenPort": 1, "noSuchKey": "x"}, "noSuchKey"),
        ({"listenPort": "abc"}, "listenPort"),
        ({"scanNotActiveBrokerInterval": -5}, "scanNotActiveBrokerInterval"),
        ({"orderMessageEnable": "maybe"}, "orderMessageEnable"),
    ],
)
def test_bad_config_exits_nonzero_naming_the_key(
    tmp_path: Path, values: dict[str, object], needle: str
) -> None:
    conf = write_conf(tmp_path / "bad.conf", values)
    p = run_mqnamesrv("-c", str(conf))
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0], p.stderr


def test_missing_config_file(tmp_path: Path) -> None:
    p = run_mqnamesrv("-c", str(tmp_path / "nope.conf"))
    assert p.returncode != 0 and "nope.conf" in p.stderr


def test_port_in_use_exits_nonzero(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        conf = write_conf(
            tmp_path / "ns.conf", {"listenPort": port, "kvConfigPath": str(tmp_path / "kv.json")}
        )
        p = run_mqnamesrv("-c", str(conf))
    assert p.returncode != 0
    err = [line for line in p.stderr.splitlines() if line.startswith("mqnamesrv:")]
    assert len(err) == 1 and "listenPort" in err[0] and str(port) in err[0], p.stderr
    assert "listening" not in p.stderr


def test_unwritable_kv_config_dir_exits_nonzero(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    conf = write_conf(
        tmp_path / "ns.conf",
        {"listenPort": free_port(), "kvConfigPath": str(blocker / "sub" / "kvConfig.json")},
    )
    p = run_mqnamesrv("-c", str(conf))
    assert p.returncode != 0
    err = [line for line in p.stderr.splitlines() if line.startswith("mqnamesrv:")]
    assert len(err) == 1 and "kvConfigPath" in err[0], p.stderr


def test_corrupt_kv_file_exits_nonzero(tmp_path: Path) -> None:
    kv = tmp_path / "kvConfig.json"
    kv.write_text("{ this is not json")
    conf = write_conf(tmp_path / "ns.conf", {"listenPort": free_port(), "kvConfigPath": str(kv)})
    p = run_mqnamesrv("-c", str(conf))
    assert p.returncode != 0
    assert "kvConfigPath" in p.stderr and str(kv) in p.stderr
