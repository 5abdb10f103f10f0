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


class _Remoting:
    """What pull_kernel_nowait uses of RemotingClient: the peer's serialize type and the two sends."""

    def __init__(self, st: Any) -> None:
        self.serialize_type = st
        self.addr_serialize_types: dict[str, Any] = {}
        self.packed: list[tuple[Any, int, bytes]] = []

    def invoke_entry_packed_nowait(self, addr: str, entry: Any, code: int, ext_parts: tuple[bytes, ...],
                                   body: bytes, timeout_ms: float) -> bool:
        assert body == b""
        self.packed.append((entry, code, b"".join(ext_parts)))
        return True


class _NowaitApi:
    def __init__(self, st: Any) -> None:
        self.remoting = _Remoting(st)
        self.dict_sent: list[tuple[dict[str, str], Any]] = []

    def pull_message_callback_nowait(self, addr: str, ext: dict[str, str], timeout_ms: float, cb: Any) -> bool:
        self.dict_sent.append((ext, cb))
        return True

    def process_pull_response(self, response: Any, addr: str, *, decode: bool = True) -> PullResult:
        from client.mq_client_api import MQClientAPIImpl

        return MQClientAPIImpl.process_pull_response(self, response, addr, decode=decode)  # type: ignore[arg-type]


async def test_nowait_pull_to_a_msgpack_peer_sends_the_same_header_from_packed_pieces() -> None:
    import msgpack

    from remoting.codes import RequestCode, ResponseCode
    from remoting.command import RemotingCommand, SerializeType

    inst = _Instance()
    inst.api = _NowaitApi(SerializeType.MSGPACK)  # type: ignore[assignment]
    w = PullAPIWrapper(inst, "g1")  # type: ignore[arg-type]
    mq = MessageQueue("T", "b", 3)
    sd = SubscriptionData(topic="T", sub_string="a || b", sub_version=1, expression_type="TAG")
    got: list[Any] = []
    assert w.pull_kernel_nowait(mq, sd, 10, 32, lambda r, e: got.append((r, e)), commit_offset=7, commit_enable=True)
    assert w.pull_kernel_nowait_raw(mq, sd, 11, 32, lambda r, b, e: got.append((r, b, e)))
    remoting = inst.api.remoting  # type: ignore[attr-defined]
    (entry, code, packed), (entry2, _, packed2) = remoting.packed
    assert code == RequestCode.PULL_MESSAGE
    expected = PullMessageRequestHeader(
        consumer_group="g1", topic="T", queue_id=3, queue_offset=10, max_msg_nums=32,
        sys_flag=PullSysFlag.build(True, True, True), commit_offset=7, suspend_timeout_millis=15000,
        subscription="a || b", sub_version=1, expression_type="TAG",
    ).encode()
    assert msgpack.unpackb(packed) == expected
    assert msgpack.unpackb(packed2) == {**expected, "queueOffset": "11", "sysFlag": str(PullSysFlag.build(False, True, True)),
                                        "commitOffset": "0"}
    ext = {"nextBeginOffset": "11", "minOffset": "0", "maxOffset": "11", "suggestWhichBrokerId": "0"}
    entry.on_response(RemotingCommand(code=ResponseCode.PULL_NOT_FOUND, ext_fields=ext), None)
    entry2.on_response(None, TimeoutError("t"))
    assert got[0][0].status is PullStatus.NO_NEW_MSG and got[0][1] is None
    assert got[1][0] is None and got[1][1] is None and isinstance(got[1][2], TimeoutError)

    # A JSON peer (a Java broker): the header as a dict, the same entry answering.
    inst.api.remoting.serialize_type = SerializeType.JSON  # type: ignore[attr-defined]
    assert w.pull_kernel_nowait(mq, sd, 12, 32, lambda r, e: got.append((r, e)))
    (sent, cb), = inst.api.dict_sent  # type: ignore[attr-defined]
    assert sent == {**expected, "queueOffset": "12", "sysFlag": str(PullSysFlag.build(False, True, True)),
                    "commitOffset": "0"}
    cb(RemotingCommand(code=ResponseCode.SYSTEM_ERROR, remark="boom"), None)
    assert got[2][0] is None and "boom" in str(got[2][1])
