"""PullAPIWrapper: one PULL_MESSAGE for a consumer, and what the client does with the answer.

- picks the broker: the master, or the broker id the last answer suggested for that queue
  (suggestWhichBrokerId, when the data is no longer in the master's memory and slave reads are on);
- never asks a slave to commit an offset;
- processes the result: exact tag re-check (the broker filtered by hash code), and the
  MIN_OFFSET / MAX_OFFSET properties on every message (so a listener can see the backlog).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from remoting.body import SubscriptionData
from remoting.codes import RequestCode
from remoting.command import RemotingCommand, SerializeType
from remoting.connection import ResponseEntry
from remoting.headers import PullMessageRequestHeader
from remoting.message import MessageConst, add_properties, decode_messages

from ..errors import MQClientError
from ..message import MessageQueue, PullResult, PullStatus
from ..mq_client_api import PullSysFlag
from ..route import MASTER_ID
from .filter import filter_messages

if TYPE_CHECKING:
    from ..instance import MQClientInstance

__all__ = ["PullAPIWrapper", "PullCallback", "RawPullCallback"]

PullCallback = Callable[[PullResult | None, BaseException | None], None]
# pull_kernel_nowait_raw's callback: (result without messages, the undecoded body, None) or (None, None, error).
RawPullCallback = Callable[[PullResult | None, bytes | None, BaseException | None], None]

_MAX_TARGETS = 65536  # bound on per-queue pull state (one per pulled queue)

_MSGPACK = SerializeType.MSGPACK
_PULL_MESSAGE = int(RequestCode.PULL_MESSAGE)
_PACK = msgpack.Packer(use_bin_type=True).pack
# The per-pull entries of the header, first in its packed map (the rest is the queue's cached piece).
_PER_PULL = ("queueOffset", "sysFlag", "commitOffset")
_K_QUEUE_OFFSET, _K_SYS_FLAG, _K_COMMIT_OFFSET = (_PACK(k) for k in _PER_PULL)


class _PullTarget:
    """Per queue: the broker id the last answer suggested (pullFromWhichNodeTable) and the request
    header template (as a dict, and as the packed msgpack map's head without the per-pull entries).
    One record, so a pull looks its queue up once."""

    __slots__ = ("which_node", "key", "template", "packed_head", "packed")

    def __init__(self) -> None:
        self.which_node = MASTER_ID
        self.key: tuple[object, ...] | None = None
        self.template: dict[str, str] = {}
        self.packed_head = b""
        self.packed = b""


class _PullEntry(ResponseEntry):
    """One long-polling pull in flight, its own response handler: with a MSGPACK peer the request goes
    out as cached header bytes plus the three per-pull entries (RemotingConnection.invoke_entry_packed),
    so a pull builds no header dict, RemotingCommand, callback closures or pending record. `sd` set:
    the answer's messages are decoded and processed (callback(result, exc)); None: raw
    (callback(result, body, exc))."""

    __slots__ = ("wrapper", "target", "addr", "sd", "callback")

    def __init__(
        self, wrapper: PullAPIWrapper, target: _PullTarget, addr: str, sd: SubscriptionData | None, callback: Any
    ) -> None:
        self.wrapper = wrapper
        self.target = target
        self.addr = addr
        self.sd = sd
        self.callback = callback

    def on_response(self, response: RemotingCommand | None, exc: BaseException | None) -> None:
        callback = self.callback
        self.callback = None  # called once: let go of the callback's state
        sd = self.sd
        if exc is None:
            try:
                result = self.wrapper.instance.api.process_pull_response(response, self.addr, decode=False)  # type: ignore[arg-type]
            except Exception as e:  # an error code from the broker, a bad header
                if sd is None:
                    callback(None, None, e)
                else:
                    callback(None, e)
                return
            self.target.which_node = result.suggest_which_broker_id
            body = response.body if result.status is PullStatus.FOUND else None  # type: ignore[union-attr]
            if sd is None:
                callback(result, body, None)
                return
            try:
                result = self.wrapper.decode_raw(result, body, sd)
            except Exception as e:  # a corrupt body
                callback(None, e)
                return
            callback(result, None)
        elif sd is None:
            callback(None, None, exc)
        else:
            callback(None, exc)


class PullAPIWrapper:
    def __init__(self, instance: MQClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self._targets: dict[MessageQueue, _PullTarget] = {}

    def _target(self, mq: MessageQueue) -> _PullTarget:
        t = self._targets.get(mq)
        if t is None:
            if len(self._targets) >= _MAX_TARGETS:
                self._targets.clear()
            t = self._targets[mq] = _PullTarget()
        return t

    def recalculate_pull_from_which_node(self, mq: MessageQueue) -> int:
        t = self._targets.get(mq)
        return MASTER_ID if t is None else t.which_node

    async def _find_broker(self, mq: MessageQueue) -> tuple[str, bool]:
        inst = self.instance
        found = inst.find_broker_address_in_subscribe(mq.broker_name, self.recalculate_pull_from_which_node(mq), False)
        if found is None:
            await inst.update_topic_route_info_from_name_server(mq.topic)
            found = inst.find_broker_address_in_subscribe(
                mq.broker_name, self.recalculate_pull_from_which_node(mq), False
            )
        if found is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return found

    async def pull_kernel(
        self,
        mq: MessageQueue,
        sd: SubscriptionData,
        offset: int,
        max_nums: int,
        *,
        commit_offset: int = 0,
        commit_enable: bool = False,
        suspend: bool = True,
        suspend_timeout_ms: int = 15_000,
        timeout_ms: float = 30_000,
    ) -> PullResult:
        """Pull `max_nums` messages of `mq` from `offset` (long polling when `suspend`), processed."""
        inst = self.instance
        found = inst.find_broker_address_in_subscribe(mq.broker_name, self.recalculate_pull_from_which_node(mq), False)
        addr, is_slave = found if found is not None else await self._find_broker(mq)
        sys_flag = PullSysFlag.build(commit_enable and not is_slave, suspend, True, sd.class_filter_mode)
        ext = self._header_template(mq, sd, max_nums, suspend_timeout_ms if suspend else 0).copy()
        ext["queueOffset"] = str(offset)
        ext["sysFlag"] = str(sys_flag)
        ext["commitOffset"] = str(commit_offset)
        result = await inst.api.pull_message_ext(addr, ext, timeout_ms)
        return self.process_pull_result(mq, result, sd)

    def pull_kernel_nowait(
        self,
        mq: MessageQueue,
        sd: SubscriptionData,
        offset: int,
        max_nums: int,
        callback: PullCallback,
        *,
        commit_offset: int = 0,
        commit_enable: bool = False,
        suspend_timeout_ms: int = 15_000,
        timeout_ms: float = 30_000,
    ) -> bool:
        """pull_kernel (long polling) without awaiting: False (nothing sent) when the broker's address
        is unknown or its connection is not open and writable -- the caller falls back to pull_kernel.
        Else `callback(result, None)` (processed as pull_kernel's) or `callback(None, error)` runs
        once, from the connection's read path."""
        return self._send_nowait(mq, sd, offset, max_nums, callback, sd, commit_offset, commit_enable,
                                 suspend_timeout_ms, timeout_ms)

    def pull_kernel_nowait_raw(
        self,
        mq: MessageQueue,
        sd: SubscriptionData,
        offset: int,
        max_nums: int,
        callback: RawPullCallback,
        *,
        commit_offset: int = 0,
        commit_enable: bool = False,
        suspend_timeout_ms: int = 15_000,
        timeout_ms: float = 30_000,
    ) -> bool:
        """pull_kernel_nowait leaving the body undecoded: `callback(result, body, None)`, where `result`
        has no messages yet (decode_raw makes them, e.g. after the next pull went out), or
        `callback(None, None, error)`. False: nothing sent."""
        return self._send_nowait(mq, sd, offset, max_nums, callback, None, commit_offset, commit_enable,
                                 suspend_timeout_ms, timeout_ms)

    def _send_nowait(
        self, mq: MessageQueue, sd: SubscriptionData, offset: int, max_nums: int, callback: Any,
        decode_sd: SubscriptionData | None, commit_offset: int, commit_enable: bool, suspend_timeout_ms: int,
        timeout_ms: float,
    ) -> bool:
        target = self._target(mq)
        found = self.instance.find_broker_address_in_subscribe(mq.broker_name, target.which_node, False)
        if found is None:
            return False
        addr, is_slave = found
        sys_flag = PullSysFlag.build(commit_enable and not is_slave, True, True, sd.class_filter_mode)
        entry = _PullEntry(self, target, addr, decode_sd, callback)
        remoting = self.instance.api.remoting
        ext = self._header_template(mq, sd, max_nums, suspend_timeout_ms, target)
        if target.packed and remoting.addr_serialize_types.get(addr, remoting.serialize_type) is _MSGPACK:
            # (serialize_type_for, inlined) the header's map: the per-pull entries first, then the queue's
            # cached bytes (a constant tail, as a pipelined send's: a decoder can look it up by its bytes)
            ext_parts = (target.packed_head, _K_QUEUE_OFFSET, _PACK(str(offset)), _K_SYS_FLAG, _PACK(str(sys_flag)),
                         _K_COMMIT_OFFSET, _PACK(str(commit_offset)), target.packed)
            return remoting.invoke_entry_packed_nowait(addr, entry, _PULL_MESSAGE, ext_parts, b"", timeout_ms)
        ext = ext.copy()
        ext["queueOffset"] = str(offset)
        ext["sysFlag"] = str(sys_flag)
        ext["commitOffset"] = str(commit_offset)
        return self.instance.api.pull_message_callback_nowait(addr, ext, timeout_ms, entry.on_response)

    def decode_raw(self, result: PullResult, body: bytes | None, sd: SubscriptionData) -> PullResult:
        """The messages of a pull_kernel_nowait_raw answer, processed as pull_kernel's (tag re-check,
        MIN/MAX_OFFSET properties). Raises ValueError on a corrupt body."""
        result.messages = decode_messages(body, decompress_body=True) if body else []
        return self._process_messages(result, sd)

    def _header_template(
        self, mq: MessageQueue, sd: SubscriptionData, max_nums: int, suspend_timeout_ms: int,
        target: _PullTarget | None = None,
    ) -> dict[str, str]:
        """PullMessageRequestHeader's wire form without the per-pull fields (queueOffset, sysFlag,
        commitOffset), built once per queue and subscription version: a pull copies it."""
        key = (sd.sub_string, sd.sub_version, sd.expression_type, max_nums, suspend_timeout_ms)
        t = target if target is not None else self._target(mq)
        if t.key == key:
            return t.template
        tmpl = PullMessageRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=0,
            max_msg_nums=max_nums,
            suspend_timeout_millis=suspend_timeout_ms,
            subscription=sd.sub_string,
            sub_version=sd.sub_version,
            expression_type=sd.expression_type,
        ).encode()
        t.key = key
        t.template = tmpl
        fixed = {k: v for k, v in tmpl.items() if k not in _PER_PULL}
        n = len(fixed) + len(_PER_PULL)
        # The fixed entries, packed (without their map header: the request's map has n entries, n <= 15
        # for a fixmap); b"": the dict path.
        t.packed = _PACK(fixed)[1:] if n <= 15 else b""
        t.packed_head = bytes((0x80 | n,)) if n <= 15 else b""
        return tmpl

    def process_pull_result(
        self, mq: MessageQueue, result: PullResult, sd: SubscriptionData, target: _PullTarget | None = None
    ) -> PullResult:
        (target if target is not None else self._target(mq)).which_node = result.suggest_which_broker_id
        return self._process_messages(result, sd)

    @staticmethod
    def _process_messages(result: PullResult, sd: SubscriptionData) -> PullResult:
        if result.status is PullStatus.FOUND and result.messages:
            msgs = result.messages
            if sd.tags_set and not sd.class_filter_mode:
                msgs = filter_messages(sd, msgs)
            # One shared pair tuple; pulled messages take it when their properties are first read.
            add_properties(
                msgs,
                (
                    (MessageConst.PROPERTY_MIN_OFFSET, str(result.min_offset)),
                    (MessageConst.PROPERTY_MAX_OFFSET, str(result.max_offset)),
                ),
            )
            result.messages = msgs
        return result
