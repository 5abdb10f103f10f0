"""PullAPIWrapper.pull_kernel sends PullMessageRequestHeader's exact wire form from a per-queue
template, and the template follows a new subscription version."""

from __future__ import annotations

from typing import Any

from client.consumer.pull_api import PullAPIWrapper
from client.message import MessageQueue, PullResult, PullStatus
from client.mq_client_api import PullSysFlag
from remoting.body import SubscriptionData
from remoting.headers import PullMessageRequestHeader


class _Api:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, str]]] = []

    async def pull_message_ext(self, addr: str, ext: dict[str, str], timeout_ms: float) -> PullResult:
        self.sent.append((addr, ext))
        return PullResult(PullStatus.NO_NEW_MSG, int(ext["queueOffset"]), 0, 0, [], 0)


class _Instance:
    def __init__(self) -> None:
        self.api = _Api()

    def find_broker_address_in_subscribe(self, broker_name: str, broker_id: int, only: bool) -> Any:
        return ("127.0.0.1:10911", False)


async def test_pull_header_matches_typed_header_and_follows_sub_version() -> None:
    inst = _Instance()
    w = PullAPIWrapper(inst, "g1")  # type: ignore[arg-type]
    mq = MessageQueue("T", "b", 3)
    sd = SubscriptionData(topic="T", sub_string="a || b", sub_version=1, expression_type="TAG")
    await w.pull_kernel(mq, sd, 10, 32, commit_offset=7, commit_enable=True, suspend_timeout_ms=15000)
    await w.pull_kernel(mq, sd, 11, 32, commit_offset=0, commit_enable=False, suspend=False)
    sd.sub_version = 2
    await w.pull_kernel(mq, sd, 12, 32)

    def typed(offset: int, flag: int, commit: int, suspend_ms: int, ver: int) -> dict[str, str]:
        return PullMessageRequestHeader(
            consumer_group="g1", topic="T", queue_id=3, queue_offset=offset, max_msg_nums=32, sys_flag=flag,
            commit_offset=commit, suspend_timeout_millis=suspend_ms, subscription="a || b", sub_version=ver,
            expression_type="TAG",
        ).encode()

    sent = [ext for _addr, ext in inst.api.sent]
    assert sent[0] == typed(10, PullSysFlag.build(True, True, True), 7, 15000, 1)
    assert sent[1] == typed(11, PullSysFlag.build(False, False, True), 0, 0, 1)
    assert sent[2] == typed(12, PullSysFlag.build(False, True, True), 0, 15000, 2)
    assert sent[0] is not sent[1]  # each pull has its own dict (the template is copied)
