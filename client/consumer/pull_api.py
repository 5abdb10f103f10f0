"""PullAPIWrapper: one PULL_MESSAGE for a consumer, and what the client does with the answer.

- picks the broker: the master, or the broker id the last answer suggested for that queue
  (suggestWhichBrokerId, when the data is no longer in the master's memory and slave reads are on);
- never asks a slave to commit an offset;
- processes the result: exact tag re-check (the broker filtered by hash code), and the
  MIN_OFFSET / MAX_OFFSET properties on every message (so a listener can see the backlog).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remoting.body import SubscriptionData
from remoting.headers import PullMessageRequestHeader
from remoting.message import MessageConst, add_properties

from ..errors import MQClientError
from ..message import MessageQueue, PullResult, PullStatus
from ..mq_client_api import PullSysFlag
from ..route import MASTER_ID
from .filter import filter_messages

if TYPE_CHECKING:
    from ..instance import MQClientInstance

__all__ = ["PullAPIWrapper"]

_MAX_TEMPLATES = 65536  # bound on cached header templates (one per pulled queue)


class PullAPIWrapper:
    def __init__(self, instance: MQClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self._pull_from_which_node: dict[MessageQueue, int] = {}
        self._templates: dict[MessageQueue, tuple[tuple[object, ...], dict[str, str]]] = {}

    def recalculate_pull_from_which_node(self, mq: MessageQueue) -> int:
        return self._pull_from_which_node.get(mq, MASTER_ID)

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
        found = inst.find_broker_address_in_subscribe(mq.broker_name, self._pull_from_which_node.get(mq, MASTER_ID), False)
        addr, is_slave = found if found is not None else await self._find_broker(mq)
        sys_flag = PullSysFlag.build(commit_enable and not is_slave, suspend, True, sd.class_filter_mode)
        ext = self._header_template(mq, sd, max_nums, suspend_timeout_ms if suspend else 0).copy()
        ext["queueOffset"] = str(offset)
        ext["sysFlag"] = str(sys_flag)
        ext["commitOffset"] = str(commit_offset)
        result = await inst.api.pull_message_ext(addr, ext, timeout_ms)
        return self.process_pull_result(mq, result, sd)

    def _header_template(self, mq: MessageQueue, sd: SubscriptionData, max_nums: int, suspend_timeout_ms: int) -> dict[str, str]:
        """PullMessageRequestHeader's wire form without the per-pull fields (queueOffset, sysFlag,
        commitOffset), built once per queue and subscription version: a pull copies it."""
        key = (sd.sub_string, sd.sub_version, sd.expression_type, max_nums, suspend_timeout_ms)
        cached = self._templates.get(mq)
        if cached is not None and cached[0] == key:
            return cached[1]
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
        if len(self._templates) >= _MAX_TEMPLATES:
            self._templates.clear()
        self._templates[mq] = (key, tmpl)
        return tmpl

    def process_pull_result(self, mq: MessageQueue, result: PullResult, sd: SubscriptionData) -> PullResult:
        self._pull_from_which_node[mq] = result.suggest_which_broker_id
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
