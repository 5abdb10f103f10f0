"""SendMessageProcessor: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36).

Extension points (delayed and transactional messages live in broker/schedule and broker/transaction):

- `add_message_transformer(fn)`: fn(msg, send_ctx) is called, in registration order, with each
  MessageExtBrokerInner of a single send or a send-back just before it is stored. It may rewrite the
  message in place (e.g. DELAY -> SCHEDULE_TOPIC_XXXX, PREPARED -> RMQ_SYS_TRANS_HALF_TOPIC) and
  returns None to go on, or a RemotingCommand to answer with instead of storing. It may be async
  (it may run before the request has a Task: use no asyncio.timeout/TaskGroup before awaiting).
  Batches are not transformed (RocketMQ clients refuse delay/transaction in batches).
- `handle_retry_and_dlq` (a method) decides %RETRY% -> %DLQ% for sends to a retry topic.
- `put_message` (an attribute, default the store's put_message) stores one message; a feature may wrap it.
"""

from __future__ import annotations

import inspect
import operator
import random
import struct
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

import msgpack
import structlog

from broker import mix_all
from broker.mix_all import TopicSysFlag
from broker.processor.batch_template import decode_uniform_batch, first_record_shape
from broker.processor.common import QUEUED_MS, BadRequest, decode_header, now_ms, parse_host, reply
from broker.topic import topic_validator as tv
from broker.topic.topic_config_manager import TopicSendView
from remoting.body import TopicConfig
from remoting.codec import (
    ROCKETMQ_ANSWER_FLAG_NO_REMARK,
    json_answer_ext_head,
    json_answer_lead,
    json_str,
    rocketmq_answer_lead,
    rocketmq_ext_entry,
    rocketmq_ext_key,
    rocketmq_i32,
)
from remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from remoting.command import DEFAULT_VERSION, RemotingCommand
from remoting.connection import (
    PackedJsonResponse,
    PackedResponse,
    PackedRocketmqResponse,
    RequestContext,
    groupable,
    inline_first_step,
    packed_response_lead,
)
from remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    send_header_from_memo,
    send_header_v2_of_command,
)
from remoting.message import (
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageSysFlag,
    PermName,
    decode_properties,
    encode_properties,
    java_string_hash,
)
from store.commit_log import MessageBatch
from store.message import MessageExtBrokerInner
from store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

MULTI_TAG = "MULTI_TAG"
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGICCODE BODYCRC FLAG BODYLEN
_SHORT = struct.Struct(">h")

TIMEOUT_CLEAN_QUEUE_REMARK = (
    "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {}ms, size of queue: {}"
)
PC_BUSY_REMARK = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
# %DLQ%<group> is created readable as well as writable, as RocketMQ does since 4.9.2 (4.0-4.9.1 made it
# write-only): a consumer or lite pull consumer subscribes to it to handle dead letters, with no grant.
DLQ_TOPIC_PERM = PermName.PERM_READ | PermName.PERM_WRITE


def subscription_group_not_exist_remark(group: str) -> str:
    return (
        f"subscription group not exist, {group}: create it first (mqadmin updateSubGroup -g {group}) "
        "or enable autoCreateSubscriptionGroup on the broker"
    )


@dataclass(slots=True)
class SendMessageContext:
    """What a message transformer may want to know about the send it is part of."""

    request_context: RequestContext | None
    request: RemotingCommand | None
    header: SendMessageRequestHeader | None
    topic_config: TopicConfig | None
    producer_group: str | None
    origin_queue_id: int
    send_back: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


MessageTransformer = Callable[
    [MessageExtBrokerInner, SendMessageContext], RemotingCommand | None | Awaitable[RemotingCommand | None]
]


def tags_code_of(tags: str | None) -> int:
    return java_string_hash(tags) if tags else 0


def _is_v6(host: str) -> bool:
    return ":" in host


# Bound once: enum members and class attributes cost a lookup each per request.
_SEND_MESSAGE = int(RequestCode.SEND_MESSAGE)
_SEND_BATCH_MESSAGE = int(RequestCode.SEND_BATCH_MESSAGE)
_CONSUMER_SEND_MSG_BACK = int(RequestCode.CONSUMER_SEND_MSG_BACK)
_SUCCESS = int(ResponseCode.SUCCESS)
_JAVA = LanguageCode.JAVA
_RETRY_PREFIX = mix_all.RETRY_GROUP_TOPIC_PREFIX
_NO_BORN_HOST = ("127.0.0.1", 0)  # MessageExtBrokerInner's default, for a send without a connection
_VALID_TOPICS_MAX = 65536  # bound of SendMessageProcessor._valid_topics (cleared when full)
# str(queue id) of the usual queue ids, for the answers.
_QUEUE_ID_STR_N = 256
_QUEUE_ID_STR = tuple(str(q) for q in range(_QUEUE_ID_STR_N))
_MSGPACK = SerializeType.MSGPACK
_msgpack_packb = msgpack.Packer(use_bin_type=True).pack
# PackedResponse pieces of a stored single send's answer (handle_put_message_result's SUCCESS command:
# SendMessageResponseHeader's fields, then region and trace), as latin-1 strs of their msgpack bytes.
_SEND_OK_LEAD = packed_response_lead(_SUCCESS, LanguageCode.JAVA, DEFAULT_VERSION)
# msgpack str header of an n-byte str (n < 256): fixstr below 32, else str8.
_STR_HEAD = tuple(chr(0xA0 | n) if n < 32 else f"\xd9{chr(n)}" for n in range(256))


def _rocketmq_answer(mid: str, queue_id: int, offset: int, uniq: str | None, end: bytes) -> PackedRocketmqResponse:
    """A stored send's answer to a ROCKETMQ request (handle_put_message_result's fields, in its order);
    `mid` and `uniq` are ASCII."""
    off = str(offset)
    parts = [_RMQ_K_MSG_ID, rocketmq_i32(len(mid)), mid.encode(), _RMQ_QUEUE_ID[queue_id], _RMQ_K_QUEUE_OFFSET,
             rocketmq_i32(len(off)), off.encode()]
    if uniq is not None:
        parts += (_RMQ_K_TRANSACTION_ID, rocketmq_i32(len(uniq)), uniq.encode())
    parts.append(end)
    ext = b"".join(parts)
    return PackedRocketmqResponse(_SEND_OK_ROCKETMQ_LEAD, ROCKETMQ_ANSWER_FLAG_NO_REMARK + rocketmq_i32(len(ext)) + ext)


def _str_head(n: int) -> str:
    """_STR_HEAD[n] for any n (str16 / str32 past 255)."""
    if n < 256:
        return _STR_HEAD[n]
    if n < 65536:
        return f"\xda{chr(n >> 8)}{chr(n & 0xFF)}"
    return "\xdb" + n.to_bytes(4, "big").decode("latin-1")


def _latin1_packed(*values: str) -> str:
    return b"".join(_msgpack_packb(v) for v in values).decode("latin-1")


# flag (RPC_TYPE), remark nil, a map of 5 (no transaction id) or 6 pairs, and the msgId key.
_ANSWER_HEAD5 = "\x01\xc0\x85" + _latin1_packed("msgId")
_ANSWER_HEAD6 = "\x01\xc0\x86" + _latin1_packed("msgId")
_QUEUE_ID_PAIR = tuple(_latin1_packed("queueId", q) for q in _QUEUE_ID_STR)
_K_QUEUE_OFFSET = _latin1_packed("queueOffset")
_K_TRANSACTION_ID = _latin1_packed("transactionId")
# The same answer to a JSON request (RocketMQ's own clients): PackedJsonResponse pieces, the fields in
# encode_json_header's order.
_JSON = SerializeType.JSON
_SEND_OK_JSON_LEAD = json_answer_lead(_SUCCESS, LanguageCode.JAVA)
_JSON_ANSWER_HEAD = json_answer_ext_head(DEFAULT_VERSION) + '"msgId":"'
_JSON_QUEUE_ID = tuple(f'","queueId":"{q}","queueOffset":"' for q in _QUEUE_ID_STR)
_JSON_TRANSACTION_ID = '","transactionId":"'
# And to a ROCKETMQ (binary) request: PackedRocketmqResponse pieces, each key with its int16 length.
_ROCKETMQ = SerializeType.ROCKETMQ
_SEND_OK_ROCKETMQ_LEAD = rocketmq_answer_lead(_SUCCESS, LanguageCode.JAVA, DEFAULT_VERSION)
_RMQ_K_MSG_ID = rocketmq_ext_key("msgId")
_RMQ_QUEUE_ID = tuple(rocketmq_ext_entry("queueId", q) for q in _QUEUE_ID_STR)
_RMQ_K_QUEUE_OFFSET = rocketmq_ext_key("queueOffset")
_RMQ_K_TRANSACTION_ID = rocketmq_ext_key("transactionId")


def _accepting(bc: Any) -> bool:
    """msg_check's broker-wide conditions: past startAcceptSendRequestTimeStamp, and writeable."""
    if bc.startAcceptSendRequestTimeStamp and now_ms() < bc.startAcceptSendRequestTimeStamp:
        return False
    return PermName.is_writeable(bc.brokerPermission)


class _RunState:
    """What the single sends of one run (one connection's pipelined requests) share, worked out once:
    msg_check's broker-wide verdict, hosts and their sys-flag bits, the CLUSTER item, and whether
    handle_retry_and_dlq is this class's own (then it only matters for %RETRY% topics)."""

    __slots__ = ("accept", "born_host", "store_host", "host_flags", "cluster", "cluster_item", "reject_tran",
                 "plain_retry")

    def __init__(
        self, accept: bool, born_host: tuple[str, int], store_host: tuple[str, int], host_flags: int,
        cluster: str, cluster_item: str, reject_tran: bool, plain_retry: bool,
    ) -> None:
        self.accept = accept
        self.born_host = born_host
        self.store_host = store_host
        self.host_flags = host_flags
        self.cluster = cluster
        self.cluster_item = cluster_item
        self.reject_tran = reject_tran
        self.plain_retry = plain_retry


def _queue_hint(fixed: Any, store: Any, get_cq: Any, topic: str, queue_id: int) -> Any:
    """The queue's ConsumeQueue for MessageExtBrokerInner.consume_queue / MessageBatch.consume_queue, kept on
    the producer's SendFixed (one per producer queue): the put and the dispatcher then skip ~4 per-topic
    look-ups, cold cache lines each when a producer goes round 4 000 queues. Only an existing queue (the
    dispatcher makes new ones) of this store (the SendFixed cache is the process's), not since removed."""
    cq = fixed.queue_hint
    if cq is not None and cq.owner is store and not cq.removed:
        return cq
    if get_cq is not None and (cq := get_cq(topic, queue_id)) is not None:
        fixed.queue_hint = cq
        return cq
    return None


def send_header_of(cmd: RemotingCommand) -> SendMessageRequestHeader:
    """A send's header: RocketMQ's long field names for SEND_MESSAGE and SEND_REPLY_MESSAGE, the short
    V2 ones for the rest; BadRequest (INVALID_PARAMETER, or decode_header's answer) when it is not valid."""
    if cmd.code == RequestCode.SEND_MESSAGE or cmd.code == RequestCode.SEND_REPLY_MESSAGE:
        return decode_header(SendMessageRequestHeader, cmd)
    try:
        return send_header_v2_of_command(cmd)
    except ValueError as e:
        raise BadRequest(reply(ResponseCode.INVALID_PARAMETER, str(e))) from None


class SendMessageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        # _put_units: (regionId, traceOn str, their msgpack pairs as a latin-1 str, the JSON answer's end, their
        # ROCKETMQ entries) of the last answers.
        self._answer_suffix: tuple[str, str, str, str, bytes] = ("", "", "", "", b"")
        self.message_transformers: list[MessageTransformer] = []
        self.put_message: Callable[[MessageExtBrokerInner], Awaitable[PutMessageResult]] = (
            controller.message_store.put_message
        )
        # Set by the controller: how many sends wait for a slot (for the flow-control remark).
        self.queue_size: Callable[[], int] = lambda: 0
        # Hot path: the store config (updated in place at run time) without pydantic's private-attr
        # lookup per send, and the page-cache-busy probe resolved once.
        self._store_cfg = controller.broker_config.store_config
        self._page_cache_busy: Callable[[], bool] | None = None
        self._born_hosts: dict[str, tuple[str, int]] = {}
        # Topic names that passed validate_topic and is_not_allowed_send_topic (pure functions of the
        # name): with many topics a run seldom repeats one, so the regex would run per send.
        self._valid_topics: set[str] = set()
        self._transform_always = False  # a transformer without triggers: every send goes through them
        self._transform_triggers: frozenset[str] = frozenset()
        self._transformer_triggers: list[frozenset[str] | None] = []  # per transformer, in order
        self._property_shapes = PropertyShapes()

    def add_message_transformer(self, fn: MessageTransformer, triggers: Iterable[str] | None = None) -> None:
        """fn(msg, send_ctx) for each message before it is stored. With `triggers`, fn acts only on
        messages that carry one of these properties, and a send without any of them skips it (no
        SendMessageContext is built for a plain send)."""
        self.message_transformers.append(fn)
        trig = None if triggers is None else frozenset(triggers)
        self._transformer_triggers.append(trig)
        if trig is None:
            self._transform_always = True
        else:
            self._transform_triggers = self._transform_triggers | trig

    def _needs_transform(self, props: dict[str, str]) -> bool:
        return bool(self.message_transformers) and (
            self._transform_always or not self._transform_triggers.isdisjoint(props)
        )

    # ------------------------------------------------------------------ entry point

    @groupable("process_requests")  # pipelined sends of one read are stored together
    @inline_first_step  # a send to an ASYNC_FLUSH store completes without suspending: no Task needed
    async def process_request(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            if cmd.code == RequestCode.CONSUMER_SEND_MSG_BACK:
                return await self.consumer_send_msg_back(ctx, cmd)
            busy = self._flow_control(ctx)
            if busy is not None:
                return busy
            header = send_header_of(cmd)
            if cmd.code == RequestCode.SEND_BATCH_MESSAGE or header.batch:
                return await self.send_batch_message(ctx, cmd, header)
            return await self.send_message(ctx, cmd, header)
        except BadRequest as e:
            return e.response

    async def process_requests(self, ctx: RequestContext, cmds: list[RemotingCommand]) -> list[RemotingCommand | None]:
        """A run of pipelined requests from one connection (the dispatcher's group entry): each is checked
        and built as process_request would, then all the sends are stored with one put_many (one lock
        round, one dispatcher hand-off, one flush wait), in arrival order. One answer per request."""
        out: list[Any] = [None] * len(cmds)  # RemotingCommand, PackedResponse (a MSGPACK send's answer) or None
        store = self.c.message_store
        put_many = getattr(store, "put_many", None)
        if put_many is None or self.put_message != store.put_message:
            # A feature wraps single puts (or the store cannot group): keep them one by one.
            for i, cmd in enumerate(cmds):
                out[i] = await self.process_request(ctx, cmd)
            return out
        busy = self._flow_control(ctx)
        get_cq = getattr(store, "get_consume_queue", None)
        units: list[Sequence[MessageExtBrokerInner] | MessageBatch] = []
        slots: list[tuple[int, int, int, int]] = []  # (request index, queue id, body bytes, batch size)
        run = self._run_state(ctx)
        # msg_check's outcome for a send whose topic config exists and passes every check is "that
        # config": the checks are inlined below (dict lookups and compares, no call) and only a send that
        # fails one of them, or whose topic is new, goes through msg_check for the precise answer. No
        # config is kept across sends, so a topic changed meanwhile is seen at once.
        tcm = self.c.topic_config_manager
        topics = tcm.topic_config_table
        # A topic's send view exists only once a send to it passed msg_check (name valid and allowed), and
        # is used only while the table still holds the config it was made from (see TopicSendView).
        views = tcm.send_views
        max_size = self._store_cfg.maxMessageSize
        accept = run.accept
        transformers = self.message_transformers
        always = self._transform_always
        triggers = self._transform_triggers
        # The usual single send (see _build_message) is built inline when handle_retry_and_dlq is this
        # class's own: these are what its MessageExtBrokerInner shares across the run.
        plain = run.plain_retry
        born_host = run.born_host
        store_host = run.store_host
        host_flags = run.host_flags
        cluster = run.cluster
        cluster_item = run.cluster_item
        sep_cluster_item = _SEP + cluster_item
        shapes = self._property_shapes.get
        for i, cmd in enumerate(cmds):
            code = cmd.code
            try:
                if code == _CONSUMER_SEND_MSG_BACK:
                    if units:  # keep arrival order: what came before is stored first
                        await self._put_units(put_many, units, slots, out, cmds)
                        units, slots = [], []
                    out[i] = await self.consumer_send_msg_back(ctx, cmd)
                    continue
                if busy is not None:
                    out[i] = reply(busy.code, busy.remark)
                    continue
                header: SendMessageRequestHeader | None = None
                memo = None
                if code != _SEND_MESSAGE and (fixed := cmd.send_fixed) is not None and (gi := cmd.send_gi) is not None:
                    # (g and i from send_gi: the command's ext_fields is never built on this path)
                    memo = fixed.header
                    if memo.__class__ is tuple:
                        try:
                            born = int(gi[0])  # (as send_header_v2_of; a bad g takes it for the answer)
                        except ValueError:
                            memo = None
                if memo.__class__ is tuple:
                    # A producer's pipelined send whose constant header fields the frame decoder's SendFixed
                    # memoized: read them from the memo; a header object is built only if a slower step
                    # below needs one (msg_check, a batch, _build_message, a transformer).
                    ps = gi[1]
                    topic = fixed.topic  # (the memo's fields, copied into the SendFixed's first cache lines)
                    qid = fixed.queue_id
                    is_batch = fixed.batch
                    sys_flag0 = fixed.sys_flag
                    flag0 = fixed.flag
                    reconsume0 = fixed.reconsume_times
                else:
                    if code == _SEND_MESSAGE:
                        header = decode_header(SendMessageRequestHeader, cmd)
                    else:
                        try:
                            header = send_header_v2_of_command(cmd)
                        except ValueError as e:
                            out[i] = reply(ResponseCode.INVALID_PARAMETER, str(e))
                            continue
                    topic = header.topic
                    ps = header.properties
                    qid = header.queue_id
                    is_batch = header.batch
                    sys_flag0 = header.sys_flag
                    flag0 = header.flag
                    born = header.born_timestamp
                    reconsume0 = header.reconsume_times
                view = views.get(topic)
                body = cmd.body
                if (
                    view is None
                    or view.config is not topics.get(topic)
                    or not accept
                    or not view.writable
                    or qid >= view.queue_limit
                    or (body is not None and len(body) > max_size)
                    or (ps is not None and len(ps) * 4 > MAX_PROPERTIES_LENGTH)
                ):
                    if header is None:
                        header = send_header_from_memo(memo, born, ps)  # type: ignore[arg-type]
                    tc = self.msg_check(ctx, cmd, header)
                    view = tcm.send_view(topic) or TopicSendView(tc)
                else:
                    tc = view.config
                if code == _SEND_BATCH_MESSAGE or is_batch:
                    if header is None:
                        header = send_header_from_memo(memo, born, ps)  # type: ignore[arg-type]
                    batch = self._build_batch(ctx, cmd, header, tc)
                    if type(batch) is RemotingCommand:
                        out[i] = batch
                        continue
                    msgs, queue_id, total_body = batch  # type: ignore[misc]
                    if memo.__class__ is tuple and type(msgs) is MessageBatch:
                        msgs.consume_queue = _queue_hint(fixed, store, get_cq, topic, qid)
                    units.append(msgs)
                    slots.append((i, queue_id, total_body, len(msgs)))
                    continue
                # _build_message's usual case, inline: a plain topic, a chosen queue, canonical properties.
                props = None
                if plain and qid >= 0 and ps and not topic.startswith(_RETRY_PREFIX):
                    if (
                        ps.startswith(_WAIT_TRUE_UNIQ)
                        and (uniq := ps[_WAIT_TRUE_UNIQ_LEN:])
                        and _SEP not in uniq
                        and _NV not in uniq
                    ):
                        # A producer's message without tags, keys or user properties: WAIT + UNIQ_KEY (the id
                        # holds no separator), so neither a split nor a search for WAIT.
                        props = {_PROP_WAIT: "true", _PROP_UNIQ: uniq, _PROP_CLUSTER: cluster}
                        stored = ps[_WAIT_TRUE_ITEM_LEN:] + sep_cluster_item
                    elif (made := shapes(ps, cluster, cluster_item)) is not None:
                        # With tags, keys or user properties: the wire string, less WAIT, is stored.
                        props, stored = made
                if props is not None:
                    if body.__class__ is not bytes:
                        body = b"" if body is None else bytes(body)
                    sys_flag = sys_flag0 | host_flags
                    if view.multi_tag:
                        sys_flag |= _MULTI_TAGS_FLAG
                    # Positional: topic, body, queue_id, flag, properties, properties_string, tags_code,
                    # sys_flag, born_timestamp, born_host, store_host, reconsume_times.
                    msg = MessageExtBrokerInner(
                        topic, body, qid, flag0, props, stored, 0, sys_flag, born, born_host, store_host,
                        reconsume0 or 0,
                    )
                    queue_id = qid
                    if memo.__class__ is tuple:
                        # The queue's ConsumeQueue, kept on the producer's SendFixed, goes with the message
                        # (_queue_hint, inlined: the per-message path).
                        cq = fixed.queue_hint
                        if cq is not None and cq.owner is store and not cq.removed:
                            msg.consume_queue = cq
                        elif get_cq is not None and (cq := get_cq(topic, qid)) is not None:
                            fixed.queue_hint = msg.consume_queue = cq
                else:
                    if header is None:
                        header = send_header_from_memo(memo, born, ps)  # type: ignore[arg-type]
                    built = self._build_message(ctx, cmd, header, tc, run)
                    if type(built) is RemotingCommand:
                        out[i] = built
                        continue
                    msg, queue_id = built  # type: ignore[misc]
                if transformers and (always or not triggers.isdisjoint(msg.properties)):
                    if header is None:
                        header = send_header_from_memo(memo, born, ps)  # type: ignore[arg-type]
                    stop = self._transform(
                        msg, SendMessageContext(ctx, cmd, header, tc, header.producer_group, queue_id)
                    )
                    if stop is not None:
                        if type(stop) is not RemotingCommand:
                            stop = await stop  # type: ignore[misc]
                            accept = run.accept = _accepting(self.c.broker_config)  # time passed while we waited
                        if stop is not None:
                            out[i] = stop  # type: ignore[assignment]
                            continue
                units.append((msg,))
                slots.append((i, queue_id, len(msg.body), 0))
            except BadRequest as e:
                out[i] = e.response
        if units:
            await self._put_units(put_many, units, slots, out, cmds)
        return out

    async def _put_units(
        self,
        put_many: Callable[
            [list[Sequence[MessageExtBrokerInner] | MessageBatch]], Awaitable[list[PutMessageResult]]
        ],
        units: list[Sequence[MessageExtBrokerInner] | MessageBatch],
        slots: list[tuple[int, int, int, int]],
        out: list[Any],
        cmds: list[RemotingCommand],
    ) -> None:
        results = await put_many(units)
        handle = self.handle_put_message_result
        if getattr(handle, "__func__", None) is not SendMessageProcessor.handle_put_message_result:
            # A feature overrides the answer: every result goes through it.
            for (i, queue_id, body_size, batch), msgs, result in zip(slots, units, results, strict=True):
                out[i] = handle(result, msgs if batch else msgs[0], queue_id, body_size, batch)  # type: ignore[index, arg-type]
            return
        # handle_put_message_result for the stored single sends, inlined: their stats are counted once per
        # topic of the run, and each answer is its header dict and one command.
        bc = self.c.broker_config
        region = bc.regionId
        trace = "true" if bc.traceOn else "false"
        # A MSGPACK request's answer is its header bytes (PackedResponse): built as one latin-1 str of the
        # msgpack bytes (every per-message value is ASCII) and encoded once. The region/trace pairs that
        # end every answer are packed once per (region, trace).
        suffix = self._answer_suffix
        if suffix[0] != region or suffix[1] != trace:
            suffix = self._answer_suffix = (region, trace, (
                _msgpack_packb(_PROP_MSG_REGION) + _msgpack_packb(region)
                + _msgpack_packb(_PROP_TRACE_SWITCH) + _msgpack_packb(trace)
            ).decode("latin-1"), f'",{json_str(_PROP_MSG_REGION)}:{json_str(region)},'
                f'{json_str(_PROP_TRACE_SWITCH)}:{json_str(trace)}}}}}',
                rocketmq_ext_entry(_PROP_MSG_REGION, region) + rocketmq_ext_entry(_PROP_TRACE_SWITCH, trace))
        tail_end = suffix[2]
        json_end = suffix[3]  # after the last field before the region: its closing quote, region, trace
        rmq_end = suffix[4]  # the region and trace entries
        # The stats (BrokerStatsManager.inc_put, inlined): each topic's cell updated in place, the totals once.
        stats = self.c.broker_stats
        cells = stats.topic_put
        put_n = put_size = 0
        for (i, queue_id, body_size, batch), msgs, result in zip(slots, units, results, strict=True):
            if (
                result is None
                or result.status is not _PUT_OK
                or (ar := result.append_result) is None
                or (batch and ((st := cmds[i].serialize_type) is not _MSGPACK and st is not _JSON
                               and st is not _ROCKETMQ or not 0 <= queue_id < _QUEUE_ID_STR_N))
            ):
                out[i] = handle(result, msgs if batch else msgs[0], queue_id, body_size, batch)  # type: ignore[index, arg-type]
                continue
            # Counted as handle_put_message_result counts (a batch's topic is its own, a single's its message's).
            topic = msgs.topic if batch else msgs[0].topic  # type: ignore[union-attr, index]
            n = ar.msg_num or batch or 1
            wrote = ar.wrote_bytes
            c = cells.get(topic)
            if c is None:
                cells[topic] = [n, wrote, 1 - n]
            else:
                c[0] += n
                c[1] += wrote
                if batch:
                    c[2] += 1 - n  # puts less messages: a batch is one put of n
            put_n += n
            put_size += wrote
            if batch:
                # A stored batch to a MSGPACK, JSON or ROCKETMQ request: handle_put_message_result's answer (no
                # transaction id; msgId is the comma-joined ids, a str16 past 255 chars in msgpack) as a
                # PackedResponse, PackedJsonResponse or PackedRocketmqResponse (every value is hex, digits or
                # a comma: nothing to escape).
                mid = ar.msg_id
                if st is _JSON:
                    tail = f"{_JSON_ANSWER_HEAD}{mid}{_JSON_QUEUE_ID[queue_id]}{ar.logics_offset}{json_end}"
                    out[i] = PackedJsonResponse(_SEND_OK_JSON_LEAD, tail.encode())
                    continue
                if st is _ROCKETMQ:
                    out[i] = _rocketmq_answer(mid, queue_id, ar.logics_offset, None, rmq_end)
                    continue
                off = str(ar.logics_offset)
                tail = (f"{_ANSWER_HEAD5}{_str_head(len(mid))}{mid}{_QUEUE_ID_PAIR[queue_id]}"
                        f"{_K_QUEUE_OFFSET}{_STR_HEAD[len(off)]}{off}{tail_end}")
                out[i] = PackedResponse(_SEND_OK_LEAD, tail.encode("latin-1"))
                continue
            msg = msgs[0]  # type: ignore[index]
            uniq = msg.properties.get(_PROP_UNIQ)  # type: ignore[union-attr]
            st = cmds[i].serialize_type
            if (
                st is _JSON
                and 0 <= queue_id < _QUEUE_ID_STR_N
                and (uniq is None or (uniq.isascii() and uniq.isalnum()))  # nothing to escape
            ):
                tail = f"{_JSON_ANSWER_HEAD}{ar.msg_id}{_JSON_QUEUE_ID[queue_id]}{ar.logics_offset}"
                if uniq is not None:
                    tail = f"{tail}{_JSON_TRANSACTION_ID}{uniq}"
                out[i] = PackedJsonResponse(_SEND_OK_JSON_LEAD, f"{tail}{json_end}".encode())
                continue
            if st is _ROCKETMQ and 0 <= queue_id < _QUEUE_ID_STR_N and (uniq is None or uniq.isascii()):
                out[i] = _rocketmq_answer(ar.msg_id, queue_id, ar.logics_offset, uniq, rmq_end)
                continue
            if (
                st is _MSGPACK
                and 0 <= queue_id < _QUEUE_ID_STR_N
                and (uniq is None or (len(uniq) < 256 and uniq.isascii()))
            ):
                mid = ar.msg_id
                off = str(ar.logics_offset)
                if uniq is None:
                    tail = (f"{_ANSWER_HEAD5}{_STR_HEAD[len(mid)]}{mid}{_QUEUE_ID_PAIR[queue_id]}"
                            f"{_K_QUEUE_OFFSET}{_STR_HEAD[len(off)]}{off}{tail_end}")
                else:
                    tail = (f"{_ANSWER_HEAD6}{_STR_HEAD[len(mid)]}{mid}{_QUEUE_ID_PAIR[queue_id]}"
                            f"{_K_QUEUE_OFFSET}{_STR_HEAD[len(off)]}{off}"
                            f"{_K_TRANSACTION_ID}{_STR_HEAD[len(uniq)]}{uniq}{tail_end}")
                out[i] = PackedResponse(_SEND_OK_LEAD, tail.encode("latin-1"))
                continue
            qid = _QUEUE_ID_STR[queue_id] if 0 <= queue_id < _QUEUE_ID_STR_N else str(queue_id)
            # SendMessageResponseHeader's wire form plus _response_ext (as handle_put_message_result).
            if uniq is None:
                ext = {
                    "msgId": ar.msg_id, "queueId": qid, "queueOffset": str(ar.logics_offset),
                    _PROP_MSG_REGION: region, _PROP_TRACE_SWITCH: trace,
                }
            else:
                ext = {
                    "msgId": ar.msg_id, "queueId": qid, "queueOffset": str(ar.logics_offset),
                    "transactionId": uniq, _PROP_MSG_REGION: region, _PROP_TRACE_SWITCH: trace,
                }
            out[i] = RemotingCommand(_SUCCESS, 0, 0, None, ext, None, _JAVA)
        if put_n:
            stats.put_nums += put_n
            stats.put_size += put_size

    def _run_state(self, ctx: RequestContext | None) -> _RunState:
        bc = self.c.broker_config
        born = self._born_host(ctx.remote_addr) if ctx is not None else _NO_BORN_HOST
        store = self.c.store_host
        host_flags = 0
        if _is_v6(born[0]):
            host_flags |= MessageSysFlag.BORNHOST_V6_FLAG
        if _is_v6(store[0]):
            host_flags |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
        cluster = bc.brokerClusterName
        retry = self.handle_retry_and_dlq
        return _RunState(
            _accepting(bc), born, store, host_flags, cluster, _PROP_CLUSTER_ITEM + cluster,
            bc.rejectTransactionMessage,
            getattr(retry, "__func__", None) is SendMessageProcessor.handle_retry_and_dlq,
        )

    def _flow_control(self, ctx: RequestContext) -> RemotingCommand | None:
        bc = self.c.broker_config
        if bc.brokerFastFailureEnable:
            waited = ctx.queued_ms()
            if waited >= bc.waitTimeMillsInSendQueue and waited >= QUEUED_MS:  # (one compare when under it)
                return reply(ResponseCode.SYSTEM_BUSY, TIMEOUT_CLEAN_QUEUE_REMARK.format(int(waited), self.queue_size()))
        busy = self._page_cache_busy
        if busy is None:
            store = self.c.message_store
            busy = getattr(store, "is_os_page_cache_busy", None) or getattr(
                getattr(store, "commit_log", None), "is_os_page_cache_busy", None
            ) or (lambda: False)
            self._page_cache_busy = busy
        if busy():
            return reply(ResponseCode.SYSTEM_BUSY, PC_BUSY_REMARK)
        return None

    # ------------------------------------------------------------------ checks

    def _response_ext(self) -> dict[str, str]:
        bc = self.c.broker_config
        return {
            MessageConst.PROPERTY_MSG_REGION: bc.regionId,
            MessageConst.PROPERTY_TRACE_SWITCH: "true" if bc.traceOn else "false",
        }

    def msg_check(self, ctx: RequestContext, cmd: RemotingCommand, header: SendMessageRequestHeader) -> TopicConfig:
        """Validate a send; returns the (possibly auto-created) topic config or raises BadRequest."""
        bc = self.c.broker_config
        tcm = self.c.topic_config_manager
        topic = header.topic
        if bc.startAcceptSendRequestTimeStamp and now_ms() < bc.startAcceptSendRequestTimeStamp:
            raise BadRequest(reply(ResponseCode.SYSTEM_ERROR, "broker unable to service, until "
                                   f"{bc.startAcceptSendRequestTimeStamp}"))
        if not PermName.is_writeable(bc.brokerPermission):
            raise BadRequest(reply(ResponseCode.NO_PERMISSION, f"the broker[{bc.brokerIP1}] sending message is forbidden"))
        valid = self._valid_topics
        if topic not in valid:
            bad = tv.validate_topic(topic)
            if bad is not None:
                raise BadRequest(reply(ResponseCode.INVALID_PARAMETER, bad))
            if tv.is_not_allowed_send_topic(topic):
                raise BadRequest(reply(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."))
            if len(valid) >= _VALID_TOPICS_MAX:
                valid.clear()
            valid.add(topic)
        self._check_sizes(cmd, header)

        tc = tcm.select_topic_config(topic)
        if tc is None:
            topic_sys_flag = 0
            if header.unit_mode:
                topic_sys_flag = (
                    TopicSysFlag.build(False, True)
                    if topic.startswith(mix_all.RETRY_GROUP_TOPIC_PREFIX)
                    else TopicSysFlag.build(True, False)
                )
            tc = tcm.create_topic_in_send_message_method(
                topic, header.default_topic or tv.AUTO_CREATE_TOPIC_KEY_TOPIC, ctx.remote_addr,
                header.default_topic_queue_nums if header.default_topic_queue_nums > 0 else bc.defaultTopicQueueNums,
                topic_sys_flag,
            )
            if tc is None and topic.startswith(mix_all.RETRY_GROUP_TOPIC_PREFIX):
                tc = tcm.create_topic_in_send_message_back_method(
                    topic, 1, PermName.PERM_WRITE | PermName.PERM_READ, topic_sys_flag
                )
            if tc is None:
                raise BadRequest(reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"))
        if not PermName.is_writeable(tc.perm):
            raise BadRequest(reply(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"))
        self._check_queue_id(header, tc)
        return tc

    def _msg_check_per_request(self, cmd: RemotingCommand, header: SendMessageRequestHeader, tc: TopicConfig) -> None:
        """msg_check for a send whose topic already passed it in the same run: only what differs per request."""
        self._check_sizes(cmd, header)
        self._check_queue_id(header, tc)

    def _check_sizes(self, cmd: RemotingCommand, header: SendMessageRequestHeader) -> None:
        body_len = len(cmd.body) if cmd.body is not None else 0
        max_size = self._store_cfg.maxMessageSize
        if body_len > max_size:
            raise BadRequest(reply(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {body_len} bytes exceeds the broker's maxMessageSize {max_size} bytes",
            ))
        ps = header.properties
        # A code point is at most 4 UTF-8 bytes: short strings need no encoding to be measured.
        if ps is not None and len(ps) * 4 > MAX_PROPERTIES_LENGTH and len(ps.encode("utf-8")) > MAX_PROPERTIES_LENGTH:
            raise BadRequest(reply(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message properties are {len(ps)} characters long; the limit is 32767 bytes",
            ))

    def _check_queue_id(self, header: SendMessageRequestHeader, tc: TopicConfig) -> None:
        limit = max(tc.write_queue_nums, tc.read_queue_nums)
        if header.queue_id >= limit:
            raise BadRequest(reply(
                ResponseCode.INVALID_PARAMETER,
                f"request queueId[{header.queue_id}] is illegal, topic {header.topic} has {tc.write_queue_nums} "
                f"write queues (valid queueId 0..{limit - 1}, or -1 to let the broker choose)",
            ))

    def _choose_queue(self, header: SendMessageRequestHeader, tc: TopicConfig) -> int:
        if header.queue_id >= 0:
            return header.queue_id
        if tc.write_queue_nums <= 0:
            raise BadRequest(reply(ResponseCode.NO_PERMISSION, f"topic[{tc.topic_name}] has no write queue"))
        return random.randrange(tc.write_queue_nums)

    def handle_retry_and_dlq(
        self, header: SendMessageRequestHeader, cmd: RemotingCommand, msg: MessageExtBrokerInner, tc: TopicConfig
    ) -> None:
        """A send to %RETRY%<group> past the group's max reconsume times goes to %DLQ%<group> instead."""
        topic = header.topic
        if topic.startswith(mix_all.RETRY_GROUP_TOPIC_PREFIX):
            group = topic[len(mix_all.RETRY_GROUP_TOPIC_PREFIX):]
            sgc = self.c.subscription_group_manager.find_subscription_group_config(group)
            if sgc is None:
                raise BadRequest(reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                       subscription_group_not_exist_remark(group)))
            max_reconsume = sgc.retry_max_times
            if header.max_reconsume_times is not None:
                max_reconsume = header.max_reconsume_times
            reconsume = header.reconsume_times or 0
            if reconsume >= max_reconsume:
                dlq = mix_all.get_dlq_topic(group)
                self.c.topic_config_manager.create_topic_in_send_message_back_method(
                    dlq, mix_all.DLQ_NUMS_PER_GROUP, DLQ_TOPIC_PERM, 0
                )
                msg.topic = dlq
                msg.queue_id = random.randrange(mix_all.DLQ_NUMS_PER_GROUP)
                msg.properties.pop(MessageConst.PROPERTY_DELAY_TIME_LEVEL, None)
                msg.properties_string = ""
                log.info("message_to_dlq", group=group, reconsume_times=reconsume, max_reconsume_times=max_reconsume)
        sys_flag = header.sys_flag
        if tc.topic_filter_type == MULTI_TAG:
            sys_flag |= MessageSysFlag.MULTI_TAGS_FLAG
        msg.sys_flag = sys_flag

    def _born_host(self, remote_addr: str) -> tuple[str, int]:
        """parse_host, cached per peer address (every send of a connection asks for the same one)."""
        cache = self._born_hosts
        h = cache.get(remote_addr)
        if h is None:
            if len(cache) > 4096:
                cache.clear()
            h = cache[remote_addr] = parse_host(remote_addr)
        return h

    def _set_hosts(self, msg: MessageExtBrokerInner, ctx: RequestContext | None) -> None:
        if ctx is not None:
            msg.born_host = self._born_host(ctx.remote_addr)
        msg.store_host = self.c.store_host
        if _is_v6(msg.born_host[0]):
            msg.sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
        if _is_v6(msg.store_host[0]):
            msg.sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG

    def _transform(
        self, msg: MessageExtBrokerInner, sctx: SendMessageContext
    ) -> RemotingCommand | None | Awaitable[RemotingCommand | None]:
        """Run the transformers; an async one turns the rest into an awaitable (the common, all-sync case
        costs no coroutine)."""
        fns = self.message_transformers
        triggers = self._transformer_triggers
        for k, fn in enumerate(fns):
            trig = triggers[k]
            if trig is not None and trig.isdisjoint(msg.properties):
                continue
            r = fn(msg, sctx)
            if r is None:
                continue
            if type(r) is not RemotingCommand and inspect.isawaitable(r):
                return self._transform_rest(r, msg, sctx, k + 1)
            return r
        return None

    async def _transform_rest(
        self, first: Awaitable[RemotingCommand | None], msg: MessageExtBrokerInner, sctx: SendMessageContext,
        start: int,
    ) -> RemotingCommand | None:
        r = await first
        if r is not None:
            return r
        for fn, trig in zip(self.message_transformers[start:], self._transformer_triggers[start:], strict=True):
            if trig is not None and trig.isdisjoint(msg.properties):
                continue
            r = fn(msg, sctx)
            if inspect.isawaitable(r):
                r = await r
            if r is not None:
                return r
        return None

    # ------------------------------------------------------------------ single send

    def _build_message(
        self, ctx: RequestContext | None, cmd: RemotingCommand, header: SendMessageRequestHeader, tc: TopicConfig,
        run: _RunState | None = None,
    ) -> tuple[MessageExtBrokerInner, int] | RemotingCommand:
        """The MessageExtBrokerInner a checked single send stores (before the transformers), and the queue
        id its answer names; or the answer refusing it. `run`: what the sends of the run share."""
        if run is None:
            run = self._run_state(ctx)
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = self._choose_queue(header, tc)
        raw = header.properties
        # Properties as every client writes them (canonical: each item one non-empty name\x01value, no
        # name twice) split with C-level calls; anything else through decode_properties (not reusable).
        props: dict[str, str] | None = None
        if (
            raw
            and raw.startswith(_WAIT_TRUE_UNIQ)
            and (uniq := raw[_WAIT_TRUE_UNIQ_LEN:])
            and _SEP not in uniq
            and _NV not in uniq
        ):
            # What a producer sends for a message without tags, keys or user properties (WAIT first,
            # then its new UNIQ_KEY, which holds no separator): canonical by construction.
            props = {_PROP_WAIT: "true", _PROP_UNIQ: uniq}
            canonical = True
        elif raw:
            props = _canonical_properties(raw)
            canonical = props is not None
            if props is None:
                props = decode_properties(raw)
        else:
            props = {}
            canonical = True
        n_props = len(props)
        topic = header.topic
        body = cmd.body
        if body.__class__ is not bytes:
            body = b"" if body is None else bytes(body)
        # Positional: topic, body, queue_id, flag, properties, properties_string, tags_code, sys_flag,
        # born_timestamp, born_host, store_host, reconsume_times.
        msg = MessageExtBrokerInner(
            topic, body, queue_id, header.flag, props, "", 0, 0, header.born_timestamp, run.born_host,
            run.store_host, header.reconsume_times or 0,
        )
        if run.plain_retry and not topic.startswith(_RETRY_PREFIX):
            # handle_retry_and_dlq of a send to a plain topic: only the sys flag.
            sys_flag = header.sys_flag
            if tc.topic_filter_type == MULTI_TAG:
                sys_flag |= MessageSysFlag.MULTI_TAGS_FLAG
            msg.sys_flag = sys_flag | run.host_flags
        else:
            self.handle_retry_and_dlq(header, cmd, msg, tc)
            msg.sys_flag |= run.host_flags
            props = msg.properties
        cluster = run.cluster
        # WAIT is for the broker only: it stays in the dict (the store reads it), not in the stored bytes.
        if canonical and raw and len(props) == n_props and _PROP_CLUSTER not in props:
            # The dict is still what the wire string says: reuse the string instead of re-encoding
            # (_stored_properties, with its usual case -- WAIT first, as clients write it -- inline).
            if raw.startswith(_WAIT_ITEM):
                cut = raw.find(_SEP)
                msg.properties_string = run.cluster_item if cut < 0 else f"{raw[cut + 1:]}{_SEP}{run.cluster_item}"
            else:
                msg.properties_string = _stored_properties(raw, props, run.cluster_item)
            props[_PROP_CLUSTER] = cluster
        else:
            props[_PROP_CLUSTER] = cluster
            msg.properties_string = _encode_without_wait(props)
        # tags_code is left to the store: CommitLog._prepare computes it for every message it stores (the
        # tags-code hook first, then TAGS' hash from its cache).
        if run.reject_tran and props.get(_PROP_TRAN_PREPARED, "").lower() == "true":
            return reply(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.c.broker_config.brokerIP1}] sending transaction message is forbidden",
            )
        return msg, queue_id

    async def send_message(
        self, ctx: RequestContext, cmd: RemotingCommand, header: SendMessageRequestHeader
    ) -> RemotingCommand:
        tc = self.msg_check(ctx, cmd, header)
        built = self._build_message(ctx, cmd, header, tc)
        if type(built) is RemotingCommand:
            return built
        msg, queue_id = built  # type: ignore[misc]
        if self._needs_transform(msg.properties):
            stop = self._transform(msg, SendMessageContext(ctx, cmd, header, tc, header.producer_group, queue_id))
            if stop is not None:
                if type(stop) is not RemotingCommand:
                    stop = await stop  # type: ignore[misc]
                if stop is not None:
                    return stop  # type: ignore[return-value]
        result = await self.put_message(msg)
        return self.handle_put_message_result(result, msg, queue_id, len(msg.body))

    # ------------------------------------------------------------------ batch send

    def _build_batch(
        self, ctx: RequestContext, cmd: RemotingCommand, header: SendMessageRequestHeader, tc: TopicConfig
    ) -> tuple[MessageBatch, int, int] | RemotingCommand:
        """The MessageBatch a checked batch send stores, its queue id and total body bytes; or the refusal.
        One pass over the wire body: each message's flag, body and properties go straight into the
        batch's lists (no MessageExtBrokerInner per message); what they share is set once."""
        if header.topic.startswith(mix_all.RETRY_GROUP_TOPIC_PREFIX):
            return reply(ResponseCode.MESSAGE_ILLEGAL, "retry topics are not supported for batch sends")
        queue_id = self._choose_queue(header, tc)
        # The batch's own items (a producer sends the same header properties every time): decoded and
        # encoded once per (properties, cluster); the dict is only read from here on.
        cluster = self.c.broker_config.brokerClusterName
        cache_key = (header.properties, cluster)
        cached = _BATCH_PROPS_CACHE.get(cache_key)
        if cached is None:
            batch_props = decode_properties(header.properties)
            batch_props.pop(_PROP_WAIT, None)
            batch_props[_PROP_CLUSTER] = cluster
            if len(_BATCH_PROPS_CACHE) >= 256:
                _BATCH_PROPS_CACHE.clear()
            cached = _BATCH_PROPS_CACHE[cache_key] = (batch_props, encode_properties(batch_props).encode("utf-8"))
        batch_props, batch_b = cached
        sys_flag = header.sys_flag
        if tc.topic_filter_type == MULTI_TAG:
            sys_flag |= MessageSysFlag.MULTI_TAGS_FLAG
        born_host = self._born_host(ctx.remote_addr)
        store_host = self.c.store_host
        # Host-family bits, once for the whole batch (what _set_hosts does per message).
        if _is_v6(born_host[0]):
            sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
        if _is_v6(store_host[0]):
            sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
        data = cmd.body if cmd.body is not None else b""
        if type(data) is not bytes:
            data = bytes(data)
        if not data:
            raise BadRequest(reply(ResponseCode.MESSAGE_ILLEGAL, "bad batch body: no message in it"))
        uniform = decode_uniform_batch(data, batch_props, batch_b)
        if uniform is not None:
            # One shape (every client's batch): columns straight from one struct, stored as a template.
            flags, bodies, body_len, props_list, pieces, columns, stored_len = uniform
            if stored_len > MAX_PROPERTIES_LENGTH:
                return reply(
                    ResponseCode.MESSAGE_ILLEGAL, "the properties of a message in the batch exceed 32767 bytes"
                )
            batch = MessageBatch(
                header.topic, queue_id, sys_flag, header.born_timestamp, born_host, store_host,
                header.reconsume_times or 0, flags, bodies, props_list, None, None,
                body_len=body_len, properties_template=(pieces, columns, stored_len),
            )
            return batch, queue_id, body_len * len(bodies)
        cols = _uniform_columns(data)
        if cols is None:
            cols = _walk_batch(data)
        flags, bodies, raws = cols
        built = _columnar_properties(raws, batch_props, batch_b)
        if built is None:
            built = _per_message_properties(raws, batch_props, batch_b)
        props_list, stored = built
        if max(map(len, stored)) > MAX_PROPERTIES_LENGTH:
            return reply(ResponseCode.MESSAGE_ILLEGAL, "the properties of a message in the batch exceed 32767 bytes")
        batch = MessageBatch(
            header.topic, queue_id, sys_flag, header.born_timestamp, born_host, store_host,
            header.reconsume_times or 0, flags, bodies, props_list, None, stored,
        )
        return batch, queue_id, sum(map(len, bodies))

    async def send_batch_message(
        self, ctx: RequestContext, cmd: RemotingCommand, header: SendMessageRequestHeader
    ) -> RemotingCommand:
        tc = self.msg_check(ctx, cmd, header)
        built = self._build_batch(ctx, cmd, header, tc)
        if type(built) is RemotingCommand:
            return built
        batch, queue_id, total_body = built  # type: ignore[misc]
        store = self.c.message_store
        if getattr(store, "put_many", None) is None:  # a store that only takes message lists
            result = await store.put_messages(batch.to_messages())
        else:
            result = await store.put_messages(batch)  # type: ignore[arg-type]
        return self.handle_put_message_result(result, batch, queue_id, total_body, batch=len(batch))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ result

    def handle_put_message_result(
        self, result: PutMessageResult | None, msg: MessageExtBrokerInner, queue_id: int, body_size: int,
        batch: int = 0,
    ) -> RemotingCommand:
        if result is None:
            return reply(ResponseCode.SYSTEM_ERROR, "store putMessage return null")
        status = result.status
        ok_code = _SEND_OK_CODES.get(status)
        if ok_code is None or result.append_result is None:
            self.c.broker_stats.send_failures += 1
            code, remark = self._failure(status, result)
            log.debug("send_failed", topic=msg.topic, status=status.value, remark=remark)
            return reply(code, remark)
        ar = result.append_result
        self.c.broker_stats.inc_put(msg.topic, ar.msg_num or max(1, batch), ar.wrote_bytes)
        uniq = None if batch else msg.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        bc = self.c.broker_config
        # SendMessageResponseHeader's wire form plus _response_ext, built directly (per-send hot path).
        if uniq is None:
            ext = {
                "msgId": ar.msg_id, "queueId": str(queue_id), "queueOffset": str(ar.logics_offset),
                _PROP_MSG_REGION: bc.regionId, _PROP_TRACE_SWITCH: "true" if bc.traceOn else "false",
            }
        else:
            ext = {
                "msgId": ar.msg_id, "queueId": str(queue_id), "queueOffset": str(ar.logics_offset),
                "transactionId": uniq,
                _PROP_MSG_REGION: bc.regionId, _PROP_TRACE_SWITCH: "true" if bc.traceOn else "false",
            }
        # Positional: code, opaque, flag, remark, ext_fields, body, language (what reply() builds).
        return RemotingCommand(ok_code, 0, 0, None, ext, None, LanguageCode.JAVA)

    def _failure(self, status: PutMessageStatus, result: PutMessageResult) -> tuple[int, str]:
        S = PutMessageStatus
        if status == S.CREATE_MAPEDFILE_FAILED:
            return ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken."
        if status in (S.MESSAGE_ILLEGAL, S.PROPERTIES_SIZE_EXCEEDED):
            return ResponseCode.MESSAGE_ILLEGAL, (
                result.remark
                or "the message is illegal, maybe msg body or properties length not matched. msg body length limit "
                f"{self.c.broker_config.store_config.maxMessageSize}B, msg properties length limit 32KB."
            )
        if status == S.SERVICE_NOT_AVAILABLE:
            return ResponseCode.SERVICE_NOT_AVAILABLE, (
                "service not available now. It may be caused by one of the following reasons: the broker's disk "
                "is full, messages are put to the slave, message store has been shut down, etc."
                + (f" ({result.remark})" if result.remark else "")
            )
        if status == S.OS_PAGECACHE_BUSY:
            return ResponseCode.SYSTEM_BUSY, PC_BUSY_REMARK
        return ResponseCode.SYSTEM_ERROR, result.remark or status.value

    # ------------------------------------------------------------------ consumer send back (retry / DLQ)

    async def consumer_send_msg_back(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """A consumer failed a message: store a copy in %RETRY%<group> (delayed) or %DLQ%<group>."""
        c = self.c
        h = decode_header(ConsumerSendMsgBackRequestHeader, cmd)
        sgc = c.subscription_group_manager.find_subscription_group_config(h.group)
        if sgc is None:
            return reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, subscription_group_not_exist_remark(h.group))
        if not PermName.is_writeable(c.broker_config.brokerPermission):
            return reply(ResponseCode.NO_PERMISSION,
                         f"the broker[{c.broker_config.brokerIP1}] sending message is forbidden")
        if sgc.retry_queue_nums <= 0:
            return reply(ResponseCode.SUCCESS)
        new_topic = mix_all.get_retry_topic(h.group)
        queue_id = random.randrange(sgc.retry_queue_nums)
        topic_sys_flag = TopicSysFlag.build(False, True) if h.unit_mode else 0
        tc = c.topic_config_manager.create_topic_in_send_message_back_method(
            new_topic, sgc.retry_queue_nums, PermName.PERM_WRITE | PermName.PERM_READ, topic_sys_flag
        )
        if not PermName.is_writeable(tc.perm):
            return reply(ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden")
        msg_ext = c.message_store.look_message_by_offset(h.offset)
        if inspect.isawaitable(msg_ext):
            msg_ext = await msg_ext
        if msg_ext is None:
            return reply(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        props = dict(msg_ext.properties)
        if MessageConst.PROPERTY_RETRY_TOPIC not in props:
            props[MessageConst.PROPERTY_RETRY_TOPIC] = msg_ext.topic
        props.pop(MessageConst.PROPERTY_WAIT_STORE_MSG_OK, None)
        delay_level = h.delay_level
        max_reconsume = h.max_reconsume_times if h.max_reconsume_times is not None else sgc.retry_max_times
        if msg_ext.reconsume_times >= max_reconsume or delay_level < 0:
            new_topic = mix_all.get_dlq_topic(h.group)
            queue_id = random.randrange(mix_all.DLQ_NUMS_PER_GROUP)
            c.topic_config_manager.create_topic_in_send_message_back_method(
                new_topic, mix_all.DLQ_NUMS_PER_GROUP, DLQ_TOPIC_PERM, 0
            )
            props.pop(MessageConst.PROPERTY_DELAY_TIME_LEVEL, None)
            log.info("message_to_dlq", group=h.group, offset=h.offset, reconsume_times=msg_ext.reconsume_times)
        else:
            if delay_level == 0:
                delay_level = 3 + msg_ext.reconsume_times
            props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        # The id the client knows the message by: its UNIQ_KEY when the producer set one (every RocketMQ
        # client does), else the broker's offset msg id; a message failed again keeps its first origin.
        origin = props.get(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID)
        props[MessageConst.PROPERTY_ORIGIN_MESSAGE_ID] = (
            origin or props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg_ext.msg_id
        )
        msg = MessageExtBrokerInner(
            topic=new_topic,
            body=msg_ext.body,
            queue_id=queue_id,
            flag=msg_ext.flag,
            properties=props,
            tags_code=tags_code_of(props.get(MessageConst.PROPERTY_TAGS)),
            sys_flag=msg_ext.sys_flag,
            born_timestamp=msg_ext.born_timestamp,
            born_host=msg_ext.born_host,
            store_host=msg_ext.store_host,
            reconsume_times=msg_ext.reconsume_times + 1,
        )
        msg.properties_string = encode_properties(props)
        sctx = SendMessageContext(ctx, cmd, None, tc, None, queue_id, send_back=True, extra={"group": h.group})
        stop = self._transform(msg, sctx)
        if stop is not None and type(stop) is not RemotingCommand:
            stop = await stop  # type: ignore[misc]
        if stop is not None:
            return stop  # type: ignore[return-value]
        result = await self.put_message(msg)
        if result is not None and result.status == PutMessageStatus.PUT_OK:
            c.broker_stats.send_back_nums += 1
            return reply(ResponseCode.SUCCESS)
        return reply(ResponseCode.SYSTEM_ERROR, result.status.value if result is not None else "putMessageResult is null")


_SEND_OK_CODES: dict[PutMessageStatus, int] = {
    PutMessageStatus.PUT_OK: int(ResponseCode.SUCCESS),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: int(ResponseCode.FLUSH_DISK_TIMEOUT),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: int(ResponseCode.FLUSH_SLAVE_TIMEOUT),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: int(ResponseCode.SLAVE_NOT_AVAILABLE),
}


_PROP_WAIT = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
_PROP_MSG_REGION = MessageConst.PROPERTY_MSG_REGION
_PROP_TRACE_SWITCH = MessageConst.PROPERTY_TRACE_SWITCH
_PROP_CLUSTER = MessageConst.PROPERTY_CLUSTER
_PROP_CLUSTER_ITEM = _PROP_CLUSTER + NAME_VALUE_SEPARATOR
_PROP_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_WAIT_TRUE_UNIQ = f"{_PROP_WAIT}{NAME_VALUE_SEPARATOR}true{PROPERTY_SEPARATOR}{_PROP_UNIQ}{NAME_VALUE_SEPARATOR}"
_WAIT_TRUE_UNIQ_LEN = len(_WAIT_TRUE_UNIQ)
_WAIT_TRUE_ITEM_LEN = len(f"{_PROP_WAIT}{NAME_VALUE_SEPARATOR}true{PROPERTY_SEPARATOR}")
_NV = NAME_VALUE_SEPARATOR
_MULTI_TAGS_FLAG = MessageSysFlag.MULTI_TAGS_FLAG
_PROP_TAGS = MessageConst.PROPERTY_TAGS
_PUT_OK = PutMessageStatus.PUT_OK
_WAIT_ITEM = _PROP_WAIT + NAME_VALUE_SEPARATOR
_SEP_WAIT_ITEM = PROPERTY_SEPARATOR + _WAIT_ITEM


_SEP = PROPERTY_SEPARATOR
_SEP_B = _SEP.encode()
_WAIT_ITEM_B = _WAIT_ITEM.encode()
_SEP_WAIT_ITEM_B = _SEP_WAIT_ITEM.encode()
_NUL = "\x00"
_NUL_B = b"\x00"
_NV_B = NAME_VALUE_SEPARATOR.encode()
_ITEM_SEPS = _NV_B + _SEP_B
_SPLIT_ITEM = operator.methodcaller("split", NAME_VALUE_SEPARATOR)
_PROP_TRAN_PREPARED = MessageConst.PROPERTY_TRANSACTION_PREPARED


def _canonical_properties(raw: str) -> dict[str, str] | None:
    """The properties of `raw` as every client writes them (each item one non-empty name\x01value, no name
    twice), split with C-level calls; None for anything else (decode_properties' job)."""
    items = raw.split(_SEP)
    try:
        props = dict(map(_SPLIT_ITEM, items))
    except ValueError:  # an item without exactly one \x01
        return None
    if len(props) != len(items) or "" in props or "" in props.values():
        return None
    return props


_UNIQ_ITEM = _PROP_UNIQ + NAME_VALUE_SEPARATOR
_SEP_UNIQ_ITEM = PROPERTY_SEPARATOR + _UNIQ_ITEM
_UNIQ_ITEM_LEN = len(_UNIQ_ITEM)
PROPERTY_SHAPES_MAX = 1024  # property shapes remembered (PropertyShapes)
PROPERTY_SHAPES_REST = 4096  # single sends that skip the memo after it filled up


class PropertyShapes:
    """The send path's properties for a single send with tags, keys or user properties: its dict and its
    stored string (canonical: each item one non-empty name\x01value, no name twice; less WAIT; CLUSTER
    added), remembered by the wire string's shape, which is that string without the UNIQ_KEY value (a
    producer's messages repeat their tags, keys and properties; the id is new each time). A hit copies
    the dict and joins the string around the new id instead of splitting every item again (0.25 against
    1.4 us, timeit). Bounded: when PROPERTY_SHAPES_MAX shapes are held (every message its own, e.g. an
    order id as its key) the memo is emptied and the next PROPERTY_SHAPES_REST sends go without it."""

    __slots__ = ("shapes", "cluster", "rest")

    def __init__(self) -> None:
        # shape -> (the dict with CLUSTER, UNIQ_KEY "" at its place; stored string before and after the id)
        self.shapes: dict[str, tuple[dict[str, str], str, str]] = {}
        self.cluster = ""
        self.rest = 0

    def get(self, raw: str, cluster: str, cluster_item: str) -> tuple[dict[str, str], str] | None:
        """(dict, stored string) of canonical `raw`, or None (not canonical, or CLUSTER or a prepared
        transaction in it: _build_message's job)."""
        if self.rest:
            self.rest -= 1
            return _canonical_and_stored(raw, cluster, cluster_item)
        u = raw.rfind(_SEP_UNIQ_ITEM) + 1  # (from the end: our producer puts the id last)
        if not u and not raw.startswith(_UNIQ_ITEM):
            return _canonical_and_stored(raw, cluster, cluster_item)
        v = u + _UNIQ_ITEM_LEN
        e = raw.find(_SEP, v)
        if e < 0:
            e = len(raw)
        uniq = raw[v:e]
        if not uniq or _NV in uniq:
            return _canonical_and_stored(raw, cluster, cluster_item)
        shape = f"{raw[:v]}{raw[e:]}"
        if cluster != self.cluster:
            self.shapes.clear()
            self.cluster = cluster
        hit = self.shapes.get(shape)
        if hit is not None:
            props = hit[0].copy()
            props[_PROP_UNIQ] = uniq
            return props, f"{hit[1]}{uniq}{hit[2]}"
        made = _canonical_and_stored(raw, cluster, cluster_item)
        if made is not None:
            props, stored = made
            # The id is in the stored string once, in its item (values hold no separator).
            at = stored.find(f"{_UNIQ_ITEM}{uniq}")
            if at == 0 or (at > 0 and stored[at - 1] == _SEP):
                if len(self.shapes) >= PROPERTY_SHAPES_MAX:
                    self.shapes.clear()
                    self.rest = PROPERTY_SHAPES_REST
                template = props.copy()
                template[_PROP_UNIQ] = ""
                begin = at + _UNIQ_ITEM_LEN
                self.shapes[shape] = (template, stored[:begin], stored[begin + len(uniq):])
        return made


def _canonical_and_stored(raw: str, cluster: str, cluster_item: str) -> tuple[dict[str, str], str] | None:
    props = _canonical_properties(raw)
    if props is None or _PROP_CLUSTER in props or _PROP_TRAN_PREPARED in props:
        return None  # re-encoded / refused or flagged: _build_message's job
    stored = _stored_properties(raw, props, cluster_item)
    props[_PROP_CLUSTER] = cluster
    return props, stored


_BATCH_PROPS_CACHE: dict[tuple[str | None, str], tuple[dict[str, str], bytes]] = {}
_UNIFORM_CACHE: dict[tuple[int, int, int], struct.Struct] = {}
_UNIFORM_CACHE_MAX = 16
_NOT_SEPARATORS = bytes(b for b in range(256) if b not in (0, 1, 2))


def _uniform_columns(data: bytes) -> tuple[list[int], list[bytes], list[bytes]] | None:
    """(flags, bodies, raw properties) of a batch body whose messages all have the first one's body and
    properties lengths (the common case), unpacked with one struct call; None when they do not."""
    shape = first_record_shape(data)
    if shape is None:
        return None
    n, total, body_len, props_len = shape
    key = (n, body_len, props_len)
    st = _UNIFORM_CACHE.get(key)
    if st is None:
        if len(_UNIFORM_CACHE) >= _UNIFORM_CACHE_MAX:
            _UNIFORM_CACHE.clear()
        st = _UNIFORM_CACHE[key] = struct.Struct(">" + f"iiiii{body_len}sh{props_len}s" * n)
    v = st.unpack(data)
    if v[0::8].count(total) != n or v[4::8].count(body_len) != n or v[6::8].count(props_len) != n:
        return None
    return list(v[3::8]), list(v[5::8]), list(v[7::8])


def _walk_batch(data: bytes) -> tuple[list[int], list[bytes], list[bytes]]:
    """(flags, bodies, raw properties) of a batch body (MessageDecoder.encodeMessages records), message
    by message; raises BadRequest naming the first malformed one."""
    flags: list[int] = []
    bodies: list[bytes] = []
    raws: list[bytes] = []
    head = _BATCH_HEAD.unpack_from
    head_size = _BATCH_HEAD.size
    short = _SHORT.unpack_from
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < head_size + 2:
            raise BadRequest(reply(ResponseCode.MESSAGE_ILLEGAL,
                                   f"bad batch body: truncated message header at byte {pos}"))
        total, _magic, _crc, flag, body_len = head(data, pos)
        if total < head_size + 2 or pos + total > end:
            raise BadRequest(reply(ResponseCode.MESSAGE_ILLEGAL,
                                   f"bad batch body: message at byte {pos} has size {total}, {end - pos} bytes left"))
        bpos = pos + head_size
        if body_len < 0 or bpos + body_len + 2 > pos + total:
            raise BadRequest(reply(ResponseCode.MESSAGE_ILLEGAL,
                                   f"bad batch body: message at byte {pos} has body length {body_len}"))
        ppos = bpos + body_len
        (props_len,) = short(data, ppos)
        ppos += 2
        if props_len < 0 or ppos + props_len != pos + total:
            raise BadRequest(reply(ResponseCode.MESSAGE_ILLEGAL,
                                   f"bad batch body: message at byte {pos} has inconsistent sizes"))
        flags.append(flag)
        bodies.append(data[bpos:ppos - 2])
        pos += total
        raws.append(data[ppos:pos])
    return flags, bodies, raws


def _columnar_properties(
    raws: list[bytes], batch_props: dict[str, str], batch_b: bytes
) -> tuple[list[dict[str, str]], list[bytes]] | None:
    """Each message's properties (its own plus the batch's) and stored bytes (its own minus WAIT, then the
    batch's), column by column with C-level calls, when every message's wire properties are ASCII,
    canonical (each item one non-empty name\x01value, no name twice) and name the same keys in the same
    order, none of them one the batch sets -- what every client sends. Then the stored bytes are the wire
    bytes minus WAIT plus the batch's: no decode/encode round per message. None otherwise."""
    n = len(raws)
    r0 = raws[0]
    if not r0:
        return None
    m = r0.count(_SEP_B) + 1
    # All messages in one string, each behind a \x00 (a byte canonical properties here never hold: the
    # check below refuses it), so the whole batch is checked, cut and split with a few C calls.
    j = _NUL_B + _NUL_B.join(raws)
    if not j.isascii():
        return None
    # Separators: per message \x00 then \x01 \x02 \x01 ... \x01 -- exactly m items, one \x01 in each.
    if j.translate(None, _NOT_SEPARATORS) != (_NUL_B + _ITEM_SEPS * (m - 1) + _NV_B) * n:
        return None
    flat = j[1:].decode("ascii").replace(NAME_VALUE_SEPARATOR, _SEP).replace(_NUL, _SEP).split(_SEP)
    if "" in flat:  # an empty name or value
        return None
    k0 = flat[0 : 2 * m : 2]  # name, value, name, value, ...
    if flat[0::2] != k0 * n or len(set(k0)) != m or not batch_props.keys().isdisjoint(k0):
        return None
    values = flat[1::2]
    sep_batch_b = _SEP_B + batch_b
    if _PROP_WAIT not in k0:
        cut = j
    elif m == 1:
        wk = k0[0]
        return [{wk: v, **batch_props} for v in values], [batch_b] * n
    elif values[k0.index(_PROP_WAIT)::m].count(wait := values[k0.index(_PROP_WAIT)]) == n:
        # One WAIT value throughout: cut the same item out of every message. WAIT is a name once per
        # message, matched from the separator before it, and no value holds a separator.
        if k0[0] == _PROP_WAIT:
            cut = j.replace(_NUL_B + _WAIT_ITEM_B + wait.encode() + _SEP_B, _NUL_B)
        else:
            cut = j.replace(_SEP_WAIT_ITEM_B + wait.encode(), b"")
    else:
        cut = _NUL_B + _NUL_B.join(map(_strip_wait, raws))
    # "\x00a\x00b" -> ["a<batch>", "b<batch>"]: the batch's items appended to each message in one go.
    stored = (cut + _NUL_B).replace(_NUL_B, sep_batch_b + _NUL_B)[len(sep_batch_b) + 1 : -1].split(_NUL_B)
    if m == 2 and len(batch_props) == 1:
        ka, kb = k0
        ((kc, vc),) = batch_props.items()
        props_list = [{ka: a, kb: b, kc: vc} for a, b in zip(values[0::2], values[1::2], strict=True)]
    else:
        keys = (*k0, *batch_props)
        columns = [values[i::m] for i in range(m)] + [[v] * n for v in batch_props.values()]
        props_list = list(map(dict, map(zip, repeat(keys), zip(*columns, strict=True))))
    return props_list, stored


def _per_message_properties(
    raws: list[bytes], batch_props: dict[str, str], batch_b: bytes
) -> tuple[list[dict[str, str]], list[bytes]]:
    """_columnar_properties message by message (mixed shapes): the canonical ones without a decode/encode
    round, the rest through _batch_item_slow."""
    batch_keys = batch_props.keys()
    sep_batch_b = _SEP_B + batch_b
    props_list: list[dict[str, str]] = []
    stored: list[bytes] = []
    for raw in raws:
        if not raw:
            props_list.append(dict(batch_props))
            stored.append(batch_b)
            continue
        try:
            items = raw.decode("utf-8").split(_SEP)
            props: dict[str, str] | None = dict(map(_SPLIT_ITEM, items))
        except (UnicodeDecodeError, ValueError):
            props = None
        if (
            props is None or len(props) != len(items) or "" in props or "" in props.values()
            or not batch_keys.isdisjoint(props)
        ):
            props, pb = _batch_item_slow(raw, batch_props)
        else:
            if _PROP_WAIT in props:
                raw = _strip_wait(raw)
            pb = raw + sep_batch_b if raw else batch_b
            props.update(batch_props)
        props_list.append(props)
        stored.append(pb)
    return props_list, stored


def _strip_wait(raw: bytes) -> bytes:
    """Canonical properties bytes (see _build_batch) that hold a WAIT item, without it."""
    if raw.startswith(_WAIT_ITEM_B):
        cut = raw.find(_SEP_B)
        return b"" if cut < 0 else raw[cut + 1:]
    k = raw.find(_SEP_WAIT_ITEM_B)
    e = raw.find(_SEP_B, k + 1)
    return raw[:k] if e < 0 else raw[:k] + raw[e:]


def _batch_item_slow(raw: bytes, batch_props: dict[str, str]) -> tuple[dict[str, str], bytes]:
    """A batch message's properties (its own plus the batch's) and stored bytes, for wire bytes the fast
    path of _build_batch does not take: invalid UTF-8 (replaced), dropped or repeated items, a name the
    batch also sets (the message's own value wins)."""
    text = raw.decode("utf-8", "replace")
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        k, sep, v = item.partition(NAME_VALUE_SEPARATOR)
        if sep and k and v:
            props[k] = v
    for k, v in batch_props.items():
        props.setdefault(k, v)
    return props, _encode_without_wait(props).encode("utf-8")


def _encode_without_wait(props: dict[str, str]) -> str:
    """encode_properties without WAIT (for the broker only: kept in the dict, not in the stored bytes)."""
    wait = props.pop(_PROP_WAIT, None)
    ps = encode_properties(props)
    if wait is not None:
        props[_PROP_WAIT] = wait
    return ps


def _decode_properties(raw: str | None) -> tuple[dict[str, str], bool]:
    """decode_properties, and whether `raw` is canonical: exactly one name\x01value item per key, none
    dropped by the decoder -- then encode_properties(result) == raw, and the string can be reused."""
    if not raw:
        return {}, True
    props = decode_properties(raw)
    n = len(props)
    return props, raw.count(NAME_VALUE_SEPARATOR) == n and raw.count(PROPERTY_SEPARATOR) == n - 1


def _stored_properties(raw: str, props: dict[str, str], extra: str) -> str:
    """The stored properties string without re-encoding the dict: canonical `raw` (what `props` was
    decoded from) minus its WAIT item, then `extra` (encoded items for keys not in `props`) -- i.e.
    _encode_without_wait(props | extra's items)."""
    if _PROP_WAIT in props:
        if raw.startswith(_WAIT_ITEM):
            cut = raw.find(PROPERTY_SEPARATOR)
            raw = "" if cut < 0 else raw[cut + 1:]
        else:
            k = raw.find(_SEP_WAIT_ITEM)
            e = raw.find(PROPERTY_SEPARATOR, k + 1)
            raw = raw[:k] if e < 0 else raw[:k] + raw[e:]
    return f"{raw}{PROPERTY_SEPARATOR}{extra}" if raw else extra
