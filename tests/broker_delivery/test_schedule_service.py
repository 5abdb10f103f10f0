"""ScheduleMessageService in-process: delay table and config errors, the send-side rewrite, idleness,
periodic offset persistence and the crash-in-flight reconciliation."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

import broker.schedule.schedule_message_service as sms
from broker.config import BrokerConfig
from broker.schedule import DEFAULT_MESSAGE_DELAY_LEVEL, SCHEDULE_TOPIC, parse_delay_levels
from broker.schedule.delay_offset_checkpoint import DelayOffsetCheckpoint
from remoting.codes import ResponseCode
from remoting.message import MessageSysFlag
from remoting.properties import ConfigError
from store.message import MessageExtBrokerInner
from tests.broker.conftest import BrokerHarness, running_broker
from tests.broker.helpers import props, pull, send_v2
from tests.support.daemons import BIN, PYTHON, free_port, write_conf

# ------------------------------------------------------------------ delay table and config


def test_default_delay_levels() -> None:
    table = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
    assert len(table) == 18
    assert (table[1], table[3], table[5], table[16], table[18]) == (1000, 10_000, 60_000, 1_800_000, 7_200_000)
    assert parse_delay_levels("250ms 2d") == {1: 250, 2: 172_800_000}


@pytest.mark.parametrize("bad", ["", "1s 5x", "1s -5s", "s", "1.5s", "10"])
def test_bad_delay_levels(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_delay_levels(bad)
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        BrokerConfig.from_values({"messageDelayLevel": bad})


def test_broker_with_a_bad_delay_level_exits_naming_the_key(tmp_path: Path) -> None:
    conf = write_conf(tmp_path / "bad.conf", {
        "brokerIP1": "127.0.0.1", "listenPort": free_port(), "storePathRootDir": str(tmp_path / "store"),
        "messageDelayLevel": "1s 5s 10 30s",
    })
    p = subprocess.run([PYTHON, str(BIN / "mqbroker"), "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    out = p.stdout + p.stderr
    assert "messageDelayLevel" in out and "'10'" in out


# ------------------------------------------------------------------ send-side rewrite


def make_service(tmp_path: Path) -> sms.ScheduleMessageService:
    cfg = BrokerConfig.from_values({"storePathRootDir": str(tmp_path), "messageDelayLevel": "1s 2s 3s"})
    return sms.ScheduleMessageService(None, cfg.store_config)  # type: ignore[arg-type]


def test_rewrite_to_the_schedule_topic(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    m = MessageExtBrokerInner(topic="T", queue_id=2, properties={"DELAY": "7", "KEYS": "k", "WAIT": "true"})
    m.sys_flag = MessageSysFlag.TRANSACTION_COMMIT_TYPE  # committed transactional messages are delayed too
    assert svc.transform(m) is None
    assert (m.topic, m.queue_id) == (SCHEDULE_TOPIC, 2)  # level 7 clamped to 3
    p = m.properties
    assert (p["DELAY"], p["REAL_TOPIC"], p["REAL_QID"], p["KEYS"]) == ("3", "T", "2", "k")
    assert "WAIT" not in m.properties_string and "REAL_TOPIC" in m.properties_string
    deliver = svc.tags_code_hook(SCHEDULE_TOPIC, p)
    assert deliver == int(p[sms.PROPERTY_SCHEDULE_DELIVER_MS]) and deliver >= sms.now_ms() + 2900
    assert svc.tags_code_hook("T", p) is None


@pytest.mark.parametrize(
    ("topic", "sys_flag", "extra"),
    [
        ("T", MessageSysFlag.TRANSACTION_PREPARED_TYPE, {}),
        ("T", MessageSysFlag.TRANSACTION_ROLLBACK_TYPE, {}),
        ("RMQ_SYS_TRANS_HALF_TOPIC", 0, {}),
        ("T", 0, {"TRAN_MSG": "true"}),
        ("T", 0, {"DELAY": "0"}),
    ],
)
def test_not_delayed(tmp_path: Path, topic: str, sys_flag: int, extra: dict[str, str]) -> None:
    svc = make_service(tmp_path)
    m = MessageExtBrokerInner(topic=topic, queue_id=1, properties={"DELAY": "2", **extra}, sys_flag=sys_flag)
    assert svc.transform(m) is None
    assert (m.topic, m.queue_id) == (topic, 1) and "REAL_TOPIC" not in m.properties


def test_bad_delay_is_refused(tmp_path: Path) -> None:
    r = make_service(tmp_path).transform(MessageExtBrokerInner(topic="T", properties={"DELAY": "x"}))
    assert r is not None and r.code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in (r.remark or "")


# ------------------------------------------------------------------ running broker, in-process


async def send_delayed(h: BrokerHarness, topic: str, body: bytes, level: int, queue_id: int = 0) -> None:
    r = await h.call(send_v2(topic, body, queue_id=queue_id, properties=props(keys=body.decode(), DELAY=str(level))))
    assert r.code == ResponseCode.SUCCESS, r.remark


async def wait_max_offset(h: BrokerHarness, topic: str, queue_id: int, want: int, timeout: float = 5.0) -> None:
    store = h.controller.message_store
    deadline = asyncio.get_running_loop().time() + timeout
    while store.get_max_offset_in_queue(topic, queue_id) < want:
        assert asyncio.get_running_loop().time() < deadline, f"{topic}[{queue_id}] did not reach {want}"
        await asyncio.sleep(0.02)


async def test_an_idle_broker_does_not_poll(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "s", messageDelayLevel="200ms 1h") as h:
        svc = h.controller.schedule_message_service
        await send_delayed(h, "Idle", b"soon", 1)
        await wait_max_offset(h, "Idle", 0, 1)
        await send_delayed(h, "Idle", b"later", 2)  # pending for an hour
        await asyncio.sleep(0.2)
        before = svc.wakeups
        await asyncio.sleep(1.5)
        # one level waits for its head's due time (re-checked every 5 s at most), the other for an arrival
        assert svc.wakeups - before <= 1


async def test_delay_offsets_are_persisted_periodically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sms, "FLUSH_DELAY_OFFSET_INTERVAL_S", 0.2)
    path = tmp_path / "s" / "config" / "delayOffset.json"
    async with running_broker(tmp_path / "s", messageDelayLevel="100ms") as h:
        await send_delayed(h, "Persist", b"p1", 1)
        await wait_max_offset(h, "Persist", 0, 1)
        for _ in range(100):
            if path.exists() and json.loads(path.read_text()) == {"offsetTable": {"1": 1}}:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"delayOffset.json not written: {path.read_text() if path.exists() else 'missing'}")


@pytest.mark.parametrize("written", [True, False])
async def test_a_delivery_in_flight_at_a_crash_is_reconciled(tmp_path: Path, written: bool) -> None:
    """Crash between the re-put and the offset update: start-up finds the re-put record (no second
    delivery), or redelivers when the record never made it."""
    store_dir = tmp_path / "s"
    async with running_broker(store_dir, messageDelayLevel="100ms") as h:
        await send_delayed(h, "InFlight", b"m1", 1)
        await wait_max_offset(h, "InFlight", 0, 1)
        sched = h.controller.message_store.get_consume_queue(SCHEDULE_TOPIC, 0)
        assert sched is not None
        sched_phy = sched.get_unit(0)[0]  # type: ignore[index]
        end = h.controller.message_store.get_commit_log_max_offset()
    # Make the files look like the process died with the first delivery in flight.
    (store_dir / "config" / "delayOffset.json").write_text('{"offsetTable":{"1":0}}')
    ckpt = DelayOffsetCheckpoint(str(store_dir / "config" / "delayOffset.ckpt"))
    ckpt.open_blocking()
    ckpt.set_offset(1, 0)
    ckpt.set_pending(1, 0, sched_phy if written else end, sms.now_ms())
    ckpt.close_blocking()

    async with running_broker(store_dir, messageDelayLevel="100ms") as h:
        svc = h.controller.schedule_message_service
        await wait_max_offset(h, "InFlight", 0, 1 if written else 2)
        await asyncio.sleep(0.3)
        store = h.controller.message_store
        assert store.get_max_offset_in_queue("InFlight", 0) == (1 if written else 2)
        assert svc.offset_table[1] == 1
        r = await h.call(pull("InFlight", 0, 0))
        assert r.code == ResponseCode.SUCCESS
