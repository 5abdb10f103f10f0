"""NamesrvConfig loading, validation and UPDATE_NAMESRV_CONFIG persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from namesrv import NamesrvController
from namesrv.config import NamesrvConfig, load_namesrv_config, merge_properties_text, updated_config
from remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from remoting.properties import ConfigError

from .support import make_config


def test_defaults_match_rocketmq() -> None:
    c = NamesrvConfig()
    assert c.listenPort == 9876
    assert c.listenAddr == "0.0.0.0"
    assert c.scanNotActiveBrokerInterval == 10_000
    assert c.brokerChannelExpiredTime == 120_000
    assert c.serverChannelMaxIdleTimeSeconds == 120
    assert c.orderMessageEnable is False
    assert c.kvConfigPath == str(Path.home() / "namesrv" / "kvConfig.json")


def test_load_file_sets_config_store_path_and_accepts_bind_address(tmp_path: Path) -> None:
    f = tmp_path / "ns.conf"
    f.write_text(
        "# comment\nlistenPort=1234\nbindAddress=127.0.0.1\norderMessageEnable=true\nkvConfigPath=~/kv.json\n"
    )
    c = load_namesrv_config(f)
    assert (c.listenPort, c.listenAddr, c.orderMessageEnable) == (1234, "127.0.0.1", True)
    assert c.configStorePath == str(f.resolve())
    assert c.kvConfigPath == str(Path.home() / "kv.json")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("listenPort=99999\n", "listenPort"),
        ("brokerChannelExpiredTime=0\n", "brokerChannelExpiredTime"),
        ("x=1\n", "'x'"),
    ],
)
def test_load_rejects_bad_files(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "ns.conf"
    f.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_namesrv_config(f)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_updated_config_validates_everything_or_nothing() -> None:
    c = NamesrvConfig(listenPort=1)
    new, changes = updated_config(c, "scanNotActiveBrokerInterval=500\n")
    assert new.scanNotActiveBrokerInterval == 500 and changes == {"scanNotActiveBrokerInterval": "500"}
    with pytest.raises(ConfigError, match="bogus"):
        updated_config(c, "scanNotActiveBrokerInterval=500\nbogus=1\n")
    assert c.scanNotActiveBrokerInterval == 10_000


def test_merge_properties_text_keeps_comments() -> None:
    c = NamesrvConfig(listenPort=5, brokerChannelExpiredTime=9000, orderMessageEnable=True)
    text = "# my NameServer\nlistenPort = 5\n\nbrokerChannelExpiredTime=120000\n"
    merged = merge_properties_text(text, c, ["brokerChannelExpiredTime", "orderMessageEnable"])
    assert (
        merged
        == "# my NameServer\nlistenPort = 5\n\nbrokerChannelExpiredTime=9000\norderMessageEnable=true\n"
    )


async def test_update_persists_into_the_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text("# hand written\nlistenPort=0\nlistenAddr=127.0.0.1\nbrokerChannelExpiredTime=120000\n")
    cfg = load_namesrv_config(conf, {"kvConfigPath": str(tmp_path / "kv.json")})
    c = NamesrvController(cfg)
    await c.start()
    client = RemotingClient()
    try:
        r = await client.invoke(
            c.address,
            RemotingCommand.request(
                RequestCode.UPDATE_NAMESRV_CONFIG, body=b"brokerChannelExpiredTime=60000"
            ),
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await client.close()
        await c.stop()
    text = conf.read_text()
    assert text.startswith("# hand written\n")
    assert "brokerChannelExpiredTime=60000" in text and "brokerChannelExpiredTime=120000" not in text
    reloaded = load_namesrv_config(conf, {"kvConfigPath": str(tmp_path / "kv.json")})
    assert reloaded.brokerChannelExpiredTime == 60000


async def test_update_reports_persist_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    c = NamesrvController(make_config(tmp_path, configStorePath=str(blocker / "ns.properties")))
    await c.start()
    client = RemotingClient()
    try:
        r = await client.invoke(
            c.address,
            RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true"),
        )
        assert r.code == ResponseCode.SYSTEM_ERROR and "persisting" in r.remark
        assert c.config.orderMessageEnable is True  # in force even though the write failed
    finally:
        await client.close()
        await c.stop()
