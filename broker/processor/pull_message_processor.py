"""PullMessageProcessor: PULL_MESSAGE (11), with long polling through PullRequestHoldService.

Status mapping follows RocketMQ 4.9.4's PullMessageProcessor:
FOUND -> SUCCESS (body = the stored records, joined once); MESSAGE_WAS_REMOVING and
NO_MATCHED_MESSAGE -> PULL_RETRY_IMMEDIATELY; NO_MATCHED_LOGIC_QUEUE / NO_MESSAGE_IN_QUEUE ->
PULL_OFFSET_MOVED unless the pull was from offset 0 (then PULL_NOT_FOUND); OFFSET_FOUND_NULL and
OFFSET_OVERFLOW_ONE -> PULL_NOT_FOUND; OFFSET_OVERFLOW_BADLY and OFFSET_TOO_SMALL -> PULL_OFFSET_MOVED.
A PULL_NOT_FOUND pull with the suspend flag is held (not answered) until a matching message arrives
or its suspend timeout passes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import structlog

from broker import mix_all
from broker.filter import (
    EXPRESSION_TYPE_TAG,
    ExpressionForRetryMessageFilter,
    ExpressionMessageFilter,
    SubscriptionParseError,
    is_tag_type,
)
from broker.longpolling.pull_request_hold_service import PullRequest
from broker.mix_all import PullSysFlag
from broker.processor.common import (
    QUEUED_MS,
    BadRequest,
    await_dispatch,
    decode_header,
    now_ms,
    parse_host,
    reply,
)
from broker.topic import topic_validator as tv
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext
from remoting.headers import HeaderError, PullMessageRequestHeader, PullMessageResponseHeader, pull_header_of
from remoting.message import MessageConst, PermName, encode_properties, java_string_hash
from store.config import BrokerRole
from store.message import MessageExtBrokerInner
from store.results import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

S = GetMessageStatus
_STATUS_CODE: dict[GetMessageStatus, int] = {
    S.FOUND: ResponseCode.SUCCESS,
    S.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    S.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    S.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    S.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    S.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    S.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


# Plain values of what the hot path tests per pull (PermName.is_readable, PullSysFlag.has_*_flag,
# GetMessageStatus.value as the remark).
_PERM_READ = PermName.PERM_READ
_FLAG_COMMIT_OFFSET = PullSysFlag.FLAG_COMMIT_OFFSET
_FLAG_SUSPEND = PullSysFlag.FLAG_SUSPEND
_FLAG_SUBSCRIPTION = PullSysFlag.FLAG_SUBSCRIPTION
_REMARKS: dict[GetMessageStatus, str] = {s: s.value for s in GetMessageStatus}
_FOUND_REMARK = GetMessageStatus.FOUND.value
_GROUP_TOPIC_PREFIXES = (mix_all.RETRY_GROUP_TOPIC_PREFIX, mix_all.DLQ_GROUP_TOPIC_PREFIX)
_RETRY_PREFIX = mix_all.RETRY_GROUP_TOPIC_PREFIX

_FILTER_CACHE_MAX = 4096
_AWAIT_DISPATCH = object()  # _process: "retry once the store has dispatched recent writes"


class PullMessageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        # Parsed `subscription` expressions, shared by every pull using the same one.
        self._filters: dict[tuple[str | None, str | None], ExpressionMessageFilter] = {}

    # ------------------------------------------------------------------ entry points

    def process_request(
        self, ctx: RequestContext, cmd: RemotingCommand
    ) -> RemotingCommand | None | Awaitable[RemotingCommand | None]:
        """Synchronous on the hot path; a coroutine only in the rare wait-for-dispatch case."""
        bc = self.c.broker_config
        if bc.brokerFastFailureEnable:
            waited = ctx.queued_ms()
            if waited >= bc.waitTimeMillsInPullQueue and waited >= QUEUED_MS:
                return reply(
                    ResponseCode.SYSTEM_BUSY,
                    f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                    f"{int(waited)}ms, size of queue: {self.c.pending_in_group('pull')}",
                )
        try:
            try:
                # (decode_header, inlined) with the frame decoder's cached constant part when it has one
                h = pull_header_of(cmd.ext_fields, cmd.send_fixed)
            except HeaderError as e:
                return reply(ResponseCode.INVALID_PARAMETER, str(e))
            result = self._process(ctx, cmd, h, broker_allow_suspend=True)
        except BadRequest as e:
            return e.response
        if result is _AWAIT_DISPATCH:
            return self._after_dispatch(ctx, cmd, h)
        return result

    async def _after_dispatch(
        self, ctx: RequestContext, cmd: RemotingCommand, h: PullMessageRequestHeader
    ) -> RemotingCommand | None:
        """A pull that would not be held found nothing while the store still had undispatched
        writes: wait for them (bounded) so a reader sees what was acknowledged before its pull."""
        await await_dispatch(self.c.message_store)
        try:
            return self._process(ctx, cmd, h, broker_allow_suspend=True, dispatch_checked=True)
        except BadRequest as e:
            return e.response

    def execute_request_when_wakeup(self, req: PullRequest) -> None:
        """Re-run a held pull (woken or timed out), without holding it again, and answer it. Every
        check runs again (as RocketMQ's re-run of processRequest does); only the header decode is
        reused."""
        try:
            h = req.header
            if h is None:
                h = decode_header(PullMessageRequestHeader, req.request)
            response = self._process(req.ctx, req.request, h, broker_allow_suspend=False, dispatch_checked=True)
        except BadRequest as e:
            response = e.response
        except Exception as e:  # never lose a held pull silently
            log.exception("pull_wakeup_processing_failed", topic=req.topic, queue_id=req.queue_id)
            response = reply(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if response is not None:
            req.ctx.send_response(req.request, response)

    # ------------------------------------------------------------------ the pull

    def _message_filter(self, h: PullMessageRequestHeader, has_subscription_flag: bool) -> ExpressionMessageFilter:
        """The pull's own subscription (the subscription flag: RocketMQ's pull and lite pull consumers,
        and ours), else what its group registered by heartbeat (Java's push consumer)."""
        c = self.c
        if has_subscription_flag:
            key = (h.subscription, h.expression_type)
            f = self._filters.get(key)
            if f is None:
                try:
                    f = ExpressionMessageFilter.parse(h.subscription, h.expression_type)
                except SubscriptionParseError as e:
                    raise BadRequest(reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                           f"parse the consumer's subscription failed: {e}")) from None
                if len(self._filters) >= _FILTER_CACHE_MAX:
                    self._filters.clear()
                self._filters[key] = f
            return f
        gi = c.consumer_manager.get_consumer_group_info(h.consumer_group)
        if gi is None:
            raise BadRequest(reply(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                   f"the consumer's group info not exist, group {h.consumer_group}: send a heartbeat "
                                   "first or pull with the subscription flag"))
        sgc = c.subscription_group_manager.find_subscription_group_config(h.consumer_group, create=False)
        if sgc is not None and not sgc.consume_broadcast_enable and gi.message_model == "BROADCASTING":
            raise BadRequest(reply(ResponseCode.NO_PERMISSION,
                                   f"the consumer group[{h.consumer_group}] can not consume by broadcast way"))
        sd = gi.find_subscription_data(h.topic)
        if sd is None:
            raise BadRequest(reply(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                   f"the consumer's subscription not exist, group {h.consumer_group} topic {h.topic}"))
        if sd.sub_version < h.sub_version:
            raise BadRequest(reply(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"))
        if is_tag_type(sd.expression_type):
            return ExpressionMessageFilter.from_subscription(sd)
        data = c.consumer_filter_manager.get(h.topic, h.consumer_group)
        if data is None:
            raise BadRequest(reply(ResponseCode.FILTER_DATA_NOT_EXIST,
                                   f"The broker's consumer filter data is not exist! Your expression may be wrong! "
                                   f"group {h.consumer_group} topic {h.topic} expression {sd.sub_string!r}"))
        if data.client_version < h.sub_version:
            raise BadRequest(reply(ResponseCode.FILTER_DATA_NOT_LATEST, "the consumer's consumer filter data not latest"))
        return data.message_filter

    def _process(
        self,
        ctx: RequestContext,
        cmd: RemotingCommand,
        h: PullMessageRequestHeader,
        *,
        broker_allow_suspend: bool,
        dispatch_checked: bool = False,
    ) -> Any:
        # Every pull runs this twice when it is held (here, and again on wake-up): the checks are
        # RocketMQ's, in its order, written with plain bit tests and identity compares.
        c = self.c
        bc = c.broker_config
        if not bc.brokerPermission & _PERM_READ:
            return reply(ResponseCode.NO_PERMISSION, f"the broker[{bc.brokerIP1}] pulling message is forbidden")

        sgc = c.subscription_group_manager.find_subscription_group_config(h.consumer_group)
        if sgc is None:
            return reply(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumer_group}] does not exist (autoCreateSubscriptionGroup is off: "
                "create it with updateSubGroup first)",
            )
        if not sgc.consume_enable:
            return reply(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")

        sys_flag = h.sys_flag
        has_suspend = sys_flag & _FLAG_SUSPEND

        topic = h.topic
        queue_id = h.queue_id
        tc = c.topic_config_manager.select_topic_config(topic)
        if tc is None:
            return reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & _PERM_READ:
            return reply(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return reply(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{tc.read_queue_nums}] consumer:[{ctx.remote_addr}]",
            )

        message_filter: ExpressionMessageFilter | ExpressionForRetryMessageFilter = self._message_filter(
            h, bool(sys_flag & _FLAG_SUBSCRIPTION)
        )
        if bc.filterSupportRetry and topic.startswith(_RETRY_PREFIX):
            message_filter = ExpressionForRetryMessageFilter(message_filter, h.consumer_group, c.consumer_filter_manager)
        et = message_filter.expression_type
        if et is not None and et != "" and et != EXPRESSION_TYPE_TAG and not bc.enablePropertyFilter:  # is_tag_type
            return reply(ResponseCode.SYSTEM_ERROR,
                         f"The broker does not support consumer to filter message by {et} "
                         "(set enablePropertyFilter=true to allow it)")

        commit = broker_allow_suspend and sys_flag & _FLAG_COMMIT_OFFSET
        store = c.message_store
        if h.queue_offset < 0:
            # RocketMQ lets the store report OFFSET_TOO_SMALL; say it plainly and point at the queue start.
            min_off = max(0, store.get_min_offset_in_queue(topic, queue_id))
            max_off = max(0, store.get_max_offset_in_queue(topic, queue_id))
            ext = PullMessageResponseHeader(
                suggest_which_broker_id=mix_all.MASTER_ID, next_begin_offset=min_off, min_offset=min_off,
                max_offset=max_off,
            ).encode()
            self._commit(ctx, h, commit)
            return reply(ResponseCode.PULL_OFFSET_MOVED, f"pull offset {h.queue_offset} is negative", ext)

        if has_suspend and broker_allow_suspend and store.at_queue_end(topic, queue_id, h.queue_offset):
            # The usual long-polling pull: nothing new since the consumer's last answer. get_message would
            # find OFFSET_OVERFLOW_ONE (PULL_NOT_FOUND): hold it as below, without building that result.
            response = self._hold(ctx, cmd, h, message_filter, S.OFFSET_OVERFLOW_ONE)
            self._commit(ctx, h, commit)
            return response

        result = store.get_message(h.consumer_group, topic, queue_id, h.queue_offset, h.max_msg_nums, message_filter)
        status = result.status

        response: RemotingCommand | None
        if status is S.FOUND:
            body = result.body()
            result.release()
            c.broker_stats.inc_get(h.consumer_group, topic, result.message_count, len(body))
            response = reply(ResponseCode.SUCCESS, _FOUND_REMARK, self._response_ext(result, sgc), body)
        else:
            if status is S.NO_MATCHED_LOGIC_QUEUE or status is S.NO_MESSAGE_IN_QUEUE:
                code = ResponseCode.PULL_OFFSET_MOVED if h.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
            else:
                code = _STATUS_CODE.get(status, ResponseCode.SYSTEM_ERROR)
            if code == ResponseCode.PULL_NOT_FOUND and not has_suspend and not dispatch_checked \
                    and store.dispatch_behind_bytes() > 0:
                return _AWAIT_DISPATCH
            if (
                code == ResponseCode.PULL_OFFSET_MOVED
                and not dispatch_checked
                and h.queue_offset > result.max_offset
                and store.dispatch_behind_bytes() > 0
            ):
                # Beyond the queue's end only because acknowledged writes are not dispatched yet (a
                # reader that pulls right after its sends were answered): wait for them, do not move it.
                return _AWAIT_DISPATCH
            if code == ResponseCode.PULL_NOT_FOUND and broker_allow_suspend and has_suspend:
                response = self._hold(ctx, cmd, h, message_filter, status)
            else:
                response = reply(code, _REMARKS[status], self._response_ext(result, sgc))
                if code == ResponseCode.PULL_OFFSET_MOVED:
                    log.info("pull_offset_moved", topic=topic, group=h.consumer_group, queue_id=queue_id,
                             request_offset=h.queue_offset, new_offset=result.next_begin_offset,
                             status=status.value)
                    self.generate_offset_moved_event(h, result.next_begin_offset)

        self._commit(ctx, h, commit)
        return response

    def _hold(
        self, ctx: RequestContext, cmd: RemotingCommand, h: PullMessageRequestHeader,
        message_filter: ExpressionMessageFilter | ExpressionForRetryMessageFilter, status: GetMessageStatus,
    ) -> RemotingCommand | None:
        """Hold a pull that found nothing (None: no answer now), or answer SYSTEM_BUSY when too many are held."""
        c = self.c
        bc = c.broker_config
        topic = h.topic
        queue_id = h.queue_id
        polling = h.suspend_timeout_millis if bc.longPollingEnable else bc.shortPollingTimeMills
        req = PullRequest(ctx, cmd, topic, queue_id, h.queue_offset, message_filter, polling, h)
        hold = c.pull_request_hold_service
        if not hold.suspend_pull_request(req):
            return reply(ResponseCode.SYSTEM_BUSY, f"too many pull requests held ({hold.held}); retry later")
        if status is S.NO_MATCHED_LOGIC_QUEUE and not topic.startswith(_GROUP_TOPIC_PREFIXES):
            # A consumer waits on a queue that never had a message: have its consume queue file made now,
            # not by the dispatcher when the first message comes (every group's %RETRY% queue is pulled
            # too: those keep Java's file-on-first-message).
            prepare = getattr(c.message_store, "prepare_consume_queue", None)
            if prepare is not None:
                prepare(topic, queue_id)
        return None

    def _response_ext(self, result: GetMessageResult, sgc: Any) -> dict[str, str]:
        """PullMessageResponseHeader's wire form, built directly (only for a pull answered now: a held
        pull needs none)."""
        suggest = mix_all.MASTER_ID
        if self.c.broker_config.slaveReadEnable:
            suggest = sgc.which_broker_when_consume_slowly if result.suggest_pulling_from_slave else sgc.broker_id
        return {
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }

    def _commit(self, ctx: RequestContext, h: PullMessageRequestHeader, enabled: Any) -> None:
        if enabled and self.c.store_config.brokerRole is not BrokerRole.SLAVE:
            self.c.consumer_offset_manager.commit_offset(
                ctx.remote_addr, h.consumer_group, h.topic, h.queue_id, h.commit_offset
            )

    def generate_offset_moved_event(self, h: PullMessageRequestHeader, offset_new: int) -> None:
        """Record the correction in OFFSET_MOVED_EVENT (tag = the group), as RocketMQ does."""
        c = self.c
        event = {
            "consumerGroup": h.consumer_group,
            "messageQueue": {"topic": h.topic, "brokerName": c.broker_config.brokerName, "queueId": h.queue_id},
            "offsetRequest": h.queue_offset,
            "offsetNew": offset_new,
        }
        props = {MessageConst.PROPERTY_TAGS: h.consumer_group, MessageConst.PROPERTY_KEYS: h.consumer_group}
        msg = MessageExtBrokerInner(
            topic=tv.RMQ_SYS_OFFSET_MOVED_EVENT,
            body=json.dumps(event, separators=(",", ":")).encode(),
            queue_id=0,
            properties=props,
            properties_string=encode_properties(props),
            tags_code=java_string_hash(h.consumer_group),
            born_timestamp=now_ms(),
            born_host=parse_host(c.broker_config.broker_addr),
            store_host=c.store_host,
        )
        c.spawn(c.message_store.put_message(msg), "offset_moved_event")

