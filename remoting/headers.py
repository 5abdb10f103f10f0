"""Typed custom headers carried in RemotingCommand.extFields.

Real clients send extFields values as strings, numbers or booleans, and add fields we do not
know (AccessKey, Signature, ...): decoding coerces the first and ignores the second. A missing
required field raises HeaderError naming it, which servers turn into an error response.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, get_type_hints

H = TypeVar("H", bound="CommandHeader")


class HeaderError(ValueError):
    """A request header is missing a required field or has a value of the wrong type."""


def _to_int(v: Any) -> int:
    if type(v) is int:
        return v
    if isinstance(v, bool):
        return int(v)
    return int(v)


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v != 0
    # Java writes "true"/"false"; the C++ core writes its bools with ostream <<, i.e. "1"/"0"
    # (SEND_MESSAGE_V2 k/m, END_TRANSACTION fromTransactionCheck, ...).
    s = str(v).strip().lower()
    return s == "true" or s == "1"


def _to_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_COERCERS: dict[Any, Callable[[Any], Any]] = {int: _to_int, bool: _to_bool, str: _to_str}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def wire(name: str) -> dict[str, str]:
    """Field metadata giving the wire name when camelCase of the attribute is not it."""
    return {"wire": name}


class CommandHeader:
    """Base for header dataclasses. Subclasses are @header-decorated dataclasses."""

    # (attribute, wire name, coercer, required)
    _specs: ClassVar[tuple[tuple[str, str, Callable[[Any], Any], bool], ...]] = ()

    @classmethod
    def decode(cls: type[H], ext: dict[str, Any] | None) -> H:
        ext = ext or {}
        kwargs: dict[str, Any] = {}
        for attr, wname, coerce, required in cls._specs:
            v = ext.get(wname)
            if v is None:
                if required:
                    raise HeaderError(f"{cls.__name__}: missing required field '{wname}'")
                continue
            try:
                kwargs[attr] = coerce(v)
            except (TypeError, ValueError):
                raise HeaderError(f"{cls.__name__}: field '{wname}' has a bad value {v!r}") from None
        return cls(**kwargs)

    def encode(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for attr, wname, _c, _r in self._specs:
            v = getattr(self, attr)
            if v is not None:
                out[wname] = _to_str(v)
        return out


def header(cls: type[H]) -> type[H]:
    """Make a dataclass header: fields without a default are required on decode."""
    dc = dataclasses.dataclass(slots=True)(cls)
    hints = get_type_hints(dc)
    specs = []
    for f in dataclasses.fields(dc):
        t = hints[f.name]
        base = next((b for b in (bool, int, str) if t is b or b in getattr(t, "__args__", ())), str)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append((f.name, f.metadata.get("wire", _camel(f.name)), _COERCERS[base], required))
    dc._specs = tuple(specs)
    _compile_codecs(dc)
    return dc


class _Fallback(Exception):
    pass


def _compile_codecs(dc: Any) -> None:
    """Give a header class a generated decode/encode: straight-line code, positional construction,
    no kwargs dict (both run per request on the pull and admin paths). Any missing or bad field
    falls back to CommandHeader.decode, which raises the HeaderError naming it."""
    fields = dataclasses.fields(dc)
    if any(f.default_factory is not dataclasses.MISSING or not f.init for f in fields):
        return
    ns: dict[str, Any] = {
        "_Fallback": _Fallback, "_generic": CommandHeader.decode.__func__,  # type: ignore[attr-defined]
        "_to_int": _to_int, "_to_bool": _to_bool, "_to_str": _to_str,
    }
    dec = ["def decode(cls, ext):", "    if not ext:", "        ext = {}", "    get = ext.get", "    try:"]
    enc = ["def encode(self):", "    out = {}"]
    for i, (f, (attr, wname, coerce, required)) in enumerate(zip(fields, dc._specs, strict=True)):
        conv = {
            _to_int: "(int(v) if v.__class__ is str else _to_int(v))",
            _to_bool: "_to_bool(v)",
            _to_str: "(v if v.__class__ is str else _to_str(v))",
        }[coerce]
        dec.append(f"        v = get({wname!r})")
        if required:
            dec.append("        if v is None:")
            dec.append("            raise _Fallback")
            dec.append(f"        a{i} = {conv}")
        else:
            ns[f"_d{i}"] = f.default
            dec.append(f"        a{i} = _d{i} if v is None else {conv}")
        enc.append(f"    v = self.{attr}")
        enc.append("    if v is not None:")
        enc.append(f"        out[{wname!r}] = v if v.__class__ is str else _to_str(v)")
    dec.append(f"        return cls({', '.join(f'a{i}' for i in range(len(fields)))})")
    dec.append("    except (_Fallback, TypeError, ValueError):")
    dec.append("        return _generic(cls, ext)")
    enc.append("    return out")
    exec("\n".join(dec) + "\n\n" + "\n".join(enc), ns)
    dc.decode = classmethod(ns["decode"])
    dc.encode = ns["encode"]


# ------------------------------------------------------------------ send


@header
class SendMessageRequestHeader(CommandHeader):
    producer_group: str
    topic: str
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    queue_id: int = -1
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None


@header
class ReplyMessageRequestHeader(CommandHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (broker -> requesting client): the reply's send header, plus where it
    was born and stored."""

    producer_group: str
    topic: str
    born_host: str
    store_host: str
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    queue_id: int = -1
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    store_timestamp: int = 0


# SEND_MESSAGE_V2 short names (RocketMQ's SendMessageRequestHeaderV2).
SEND_V2_SHORT_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
_V1_TO_V2 = {v: k for k, v in SEND_V2_SHORT_NAMES.items()}


def _decode_send_header_v2_slow(ext: dict[str, Any]) -> SendMessageRequestHeader:
    # A missing or bad field: the general decoder names it (HeaderError).
    return SendMessageRequestHeader.decode({SEND_V2_SHORT_NAMES.get(k, k): v for k, v in ext.items()})


def _compile_send_header_v2() -> Callable[[dict[str, Any]], SendMessageRequestHeader]:
    """Straight-line SEND_MESSAGE_V2 decoder (every single send runs it): short name first, then the
    long name (accepted in a V2 header too), positional construction, no kwargs dict."""
    ns: dict[str, Any] = {
        "_Fallback": _Fallback, "_slow": _decode_send_header_v2_slow, "_H": SendMessageRequestHeader,
        "_to_int": _to_int, "_to_bool": _to_bool, "_to_str": _to_str,
        # The spellings clients send, looked up instead of normalised ("1"/"0": the C++ core).
        "_BOOLS": {"true": True, "false": False, "1": True, "0": False},
    }
    fields = dataclasses.fields(SendMessageRequestHeader)
    lines = ["def decode_v2(ext):", "    get = ext.get", "    try:"]
    for i, (f, (_attr, wname, coerce, required)) in enumerate(
        zip(fields, SendMessageRequestHeader._specs, strict=True)  # type: ignore[attr-defined]
    ):
        conv = {
            _to_int: "(int(v) if v.__class__ is str else _to_int(v))",
            _to_bool: "(_BOOLS[v] if v.__class__ is str and v in _BOOLS else _to_bool(v))",
            _to_str: "(v if v.__class__ is str else _to_str(v))",
        }[coerce]
        lines.append(f"        v = get({_V1_TO_V2[wname]!r})")
        lines.append("        if v is None:")
        lines.append(f"            v = get({wname!r})")
        if required:
            lines.append("            if v is None:")
            lines.append("                raise _Fallback")
            lines.append(f"        a{i} = {conv}")
        else:
            ns[f"_d{i}"] = f.default
            lines.append(f"        a{i} = _d{i} if v is None else {conv}")
    lines.append(f"        return _H({', '.join(f'a{i}' for i in range(len(fields)))})")
    lines.append("    except (_Fallback, TypeError, ValueError):")
    lines.append("        return _slow(ext)")
    exec("\n".join(lines), ns)
    fn: Callable[[dict[str, Any]], SendMessageRequestHeader] = ns["decode_v2"]
    return fn


_decode_send_header_v2 = _compile_send_header_v2()


# decode_send_header_v2's memo: a producer sends the same a..m fields (but g, i) for every message of
# a (topic, queue, flags) key, so their decoded values are looked up by their wire strings instead of
# converted again (7 int(), 2 bool lookups per send). Keys are the short-name values in
# _SEND_V2_KEY_NAMES order; values the decoded fields in SendMessageRequestHeader order minus g and i.
_SEND_V2_KEY_NAMES = ("a", "b", "c", "d", "e", "f", "h", "j", "k", "l", "m")
_send_v2_memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_SEND_V2_MEMO_MAX = 16384  # cleared when full (1 000 topics x 4 queues x a few producer groups fit)
_H_SEND = SendMessageRequestHeader


def decode_send_header_v2(ext: dict[str, Any] | None) -> SendMessageRequestHeader:
    if not ext:
        return _decode_send_header_v2({})
    get = ext.get
    key = (get("a"), get("b"), get("c"), get("d"), get("e"), get("f"), get("h"), get("j"), get("k"), get("l"),
           get("m"))
    try:
        c = _send_v2_memo.get(key)
    except TypeError:  # an unhashable value (a list or map from a msgpack or JSON header): the decoder names it
        return _decode_send_header_v2(ext)
    if c is not None:
        # Only all-str keys are stored (a str never equals None or a number), so every short name but l
        # is present: the long names are not consulted for them. l absent: its long name must be too.
        g = get("g")
        i = get("i")
        if g.__class__ is str and i.__class__ is str and (key[9] is not None or get("maxReconsumeTimes") is None):
            try:
                born = int(g)
            except ValueError:
                pass  # the full decoder names the bad field
            else:
                return send_header_from_memo(c, born, i)
        return _decode_send_header_v2(ext)
    h = _decode_send_header_v2(ext)
    for n, v in enumerate(key):
        if v.__class__ is not str and not (n == 9 and v is None and get("maxReconsumeTimes") is None):
            return h
    if len(_send_v2_memo) >= _SEND_V2_MEMO_MAX:
        _send_v2_memo.clear()
    _send_v2_memo[key] = _memo_tuple(h)
    return h


def send_header_v2_of(ext: dict[str, Any] | None, fixed: Any) -> SendMessageRequestHeader:
    """decode_send_header_v2(ext) for a command whose constant part the frame decoder recognised
    (`fixed`: its codec.SendFixed, or None): those fields are decoded once per SendFixed and kept in it,
    so a send costs its g and i only."""
    if fixed is None:
        return decode_send_header_v2(ext)
    c = fixed.header
    if c is None:
        # The memo key decode_send_header_v2 would use, from the fixed entries (they hold all but g, i).
        get = fixed.ext.get
        key = tuple(get(k) for k in _SEND_V2_KEY_NAMES)
        try:
            c = _send_v2_memo.get(key)
        except TypeError:  # an unhashable value: decoded (or refused, naming it) every time
            fixed.header = False
            return decode_send_header_v2(ext)
        if c is None:
            h = decode_send_header_v2(ext)  # decodes (or refuses) the whole header, memoizing its fixed part
            c = _send_v2_memo.get(key)
            if c is None:
                c = _exact_memo(key, ext, h)
                if c is None:  # not memoizable (a float, a missing entry, ...): the generic decoder every time
                    fixed.header = False
                    return h
        # The fields the broker's send path reads, as the SendFixed's own slots first (see SendFixed).
        fixed.topic = c[SEND_MEMO_TOPIC]
        fixed.queue_id = c[SEND_MEMO_QUEUE_ID]
        fixed.sys_flag = c[SEND_MEMO_SYS_FLAG]
        fixed.flag = c[SEND_MEMO_FLAG]
        fixed.reconsume_times = c[SEND_MEMO_RECONSUME_TIMES]
        fixed.batch = c[SEND_MEMO_BATCH]
        fixed.header = c
    elif c is False:
        return decode_send_header_v2(ext)
    assert ext is not None
    g = ext["g"]
    try:
        born = int(g)
    except (TypeError, ValueError):
        return decode_send_header_v2(ext)  # names the bad field
    return send_header_from_memo(c, born, ext["i"])


def _exact_memo(key: tuple[Any, ...], ext: dict[str, Any], h: SendMessageRequestHeader) -> tuple[Any, ...] | None:
    """The memo tuple of a SendFixed whose constant values are strs and ints (the C++ core writes d, e, f, h and
    l as numbers), which the value-keyed _send_v2_memo does not take (1, 1.0 and True are equal keys there,
    and decode differently); a SendFixed's values are exact (its bytes, or its values with their types), so
    `h`'s constant fields hold for every send that carries it. None for anything else."""
    for n, v in enumerate(key):
        if v.__class__ is not str and v.__class__ is not int and not (
            n == 9 and v is None and ext.get("maxReconsumeTimes") is None
        ):
            return None
    return _memo_tuple(h)


def _memo_tuple(h: SendMessageRequestHeader) -> tuple[Any, ...]:
    return (h.topic, h.queue_id, h.sys_flag, h.flag, h.reconsume_times, h.producer_group, h.default_topic,
            h.default_topic_queue_nums, h.unit_mode, h.batch, h.max_reconsume_times)


def send_header_v2_of_command(cmd: Any) -> SendMessageRequestHeader:
    """send_header_v2_of for a received SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE command: from its SendFixed's memo
    and its g and i (RemotingCommand.send_gi) without building its ext_fields, whenever it can."""
    fixed = cmd.send_fixed
    gi = cmd.send_gi
    if fixed is not None and gi is not None:
        c = fixed.header
        if c.__class__ is tuple:
            try:
                born = int(gi[0])
            except ValueError:
                pass  # decode_send_header_v2 names the bad field
            else:
                return send_header_from_memo(c, born, gi[1])
    return send_header_v2_of(cmd.ext_fields, fixed)


# The memo tuple send_header_v2_of keeps in SendFixed.header: every field but born_timestamp (g) and
# properties (i), in this order. A hot caller may read its fields by these indexes instead of building
# the header, and build it with send_header_from_memo only when it needs one. (The broker's send path
# reads the fields it needs from the SendFixed, which copies them: the tuple was one more cold object a
# send with 4 000 queues.)
SEND_MEMO_TOPIC = 0
SEND_MEMO_QUEUE_ID = 1
SEND_MEMO_SYS_FLAG = 2
SEND_MEMO_FLAG = 3
SEND_MEMO_RECONSUME_TIMES = 4
SEND_MEMO_BATCH = 9


def send_header_from_memo(c: tuple[Any, ...], born: int, properties: str) -> SendMessageRequestHeader:
    """The header send_header_v2_of gives for a memo tuple `c` (SendFixed.header), g and i."""
    # _H_SEND's positional order: producer_group, topic, default_topic, default_topic_queue_nums, queue_id,
    # sys_flag, born_timestamp, flag, properties, reconsume_times, unit_mode, batch, max_reconsume_times.
    return _H_SEND(c[5], c[0], c[6], c[7], c[1], c[2], born, c[3], properties, c[4], c[8], c[9], c[10])


def encode_send_header_v2(h: SendMessageRequestHeader) -> dict[str, str]:
    return {_V1_TO_V2[k]: v for k, v in h.encode().items()}


@header
class SendMessageResponseHeader(CommandHeader):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None


@header
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    offset: int
    group: str
    delay_level: int = 0
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@header
class EndTransactionRequestHeader(CommandHeader):
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool = False
    msg_id: str = ""
    transaction_id: str | None = None


@header
class CheckTransactionStateRequestHeader(CommandHeader):
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# ------------------------------------------------------------------ pull and offsets


@header
class PullMessageRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 0
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str | None = None


_H_PULL = PullMessageRequestHeader


def pull_header_of(ext: dict[str, Any] | None, fixed: Any) -> PullMessageRequestHeader:
    """PullMessageRequestHeader.decode(ext) for a command whose constant part the frame decoder
    recognised (`fixed`: its codec.PullFixed, or None): those fields are decoded once per PullFixed
    and kept in it, so a pull costs its queueOffset, sysFlag and commitOffset only. Raises HeaderError
    as decode does."""
    if fixed is None:
        return _H_PULL.decode(ext)
    c = fixed.header
    if c is None:
        # The first pull decodes the whole header; each field is decoded from its own entry, so the
        # fields other than the per-pull three depend on fixed.ext only.
        h = _H_PULL.decode(ext)
        fixed.header = (h.consumer_group, h.topic, h.queue_id, h.max_msg_nums, h.suspend_timeout_millis,
                        h.subscription, h.sub_version, h.expression_type)
        return h
    assert ext is not None
    try:
        queue_offset = int(ext["queueOffset"])
        sys_flag = int(ext["sysFlag"])
        commit_offset = int(ext["commitOffset"])
    except (KeyError, TypeError, ValueError):
        return _H_PULL.decode(ext)  # names the bad field
    return _H_PULL(c[0], c[1], c[2], queue_offset, c[3], sys_flag, commit_offset, c[4], c[5], c[6], c[7])


@header
class PullMessageResponseHeader(CommandHeader):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


@header
class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int


@header
class QueryConsumerOffsetResponseHeader(CommandHeader):
    offset: int


@header
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@header
class TopicQueueRequestHeader(CommandHeader):
    """GET_MAX_OFFSET / GET_MIN_OFFSET / GET_EARLIEST_MSG_STORETIME share this shape."""

    topic: str
    queue_id: int


@header
class OffsetResponseHeader(CommandHeader):
    offset: int


@header
class SearchOffsetRequestHeader(CommandHeader):
    topic: str
    queue_id: int
    timestamp: int


@header
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: int


@header
class ViewMessageRequestHeader(CommandHeader):
    offset: int


@header
class QueryMessageRequestHeader(CommandHeader):
    topic: str
    key: str
    max_num: int = 32
    begin_timestamp: int = 0
    end_timestamp: int = 2**63 - 1


@header
class QueryMessageResponseHeader(CommandHeader):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


# ------------------------------------------------------------------ clients


@header
class UnregisterClientRequestHeader(CommandHeader):
    client_id: str = dataclasses.field(metadata=wire("clientID"))
    producer_group: str | None = None
    consumer_group: str | None = None


@header
class GetConsumerListByGroupRequestHeader(CommandHeader):
    consumer_group: str


@header
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    consumer_group: str


@header
class ResetOffsetRequestHeader(CommandHeader):
    topic: str
    group: str
    timestamp: int
    is_force: bool = True


@header
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    consumer_group: str
    client_id: str = dataclasses.field(metadata=wire("clientId"))
    jstack_enable: bool = False


# ------------------------------------------------------------------ admin (broker)


@header
class CreateTopicRequestHeader(CommandHeader):
    topic: str
    default_topic: str = "TBW102"
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


@header
class DeleteTopicRequestHeader(CommandHeader):
    topic: str


@header
class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    group_name: str
    clean_offset: bool = False


@header
class GetTopicStatsInfoRequestHeader(CommandHeader):
    topic: str


@header
class GetConsumerConnectionListRequestHeader(CommandHeader):
    consumer_group: str


@header
class GetConsumeStatsRequestHeader(CommandHeader):
    consumer_group: str
    topic: str | None = None


@header
class GetConsumeStatsInBrokerHeader(CommandHeader):
    is_order: bool = False


@header
class GetConsumerStatusRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223), admin -> broker, and GET_CONSUMER_STATUS_FROM_CLIENT (221),
    broker -> client. clientAddr, despite its name, is compared with client ids (as RocketMQ does)."""

    topic: str
    group: str
    client_addr: str | None = None


# ------------------------------------------------------------------ namesrv


@header
class RegisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    compressed: bool = False
    body_crc32: int = 0


@header
class RegisterBrokerResponseHeader(CommandHeader):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@header
class UnRegisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@header
class GetRouteInfoRequestHeader(CommandHeader):
    topic: str


@header
class PutKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str
    value: str


@header
class GetKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


@header
class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = None


@header
class DeleteKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


@header
class GetKVListByNamespaceRequestHeader(CommandHeader):
    namespace: str


@header
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    topic: str
    cluster_name: str | None = None


@header
class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: str


@header
class QueryDataVersionRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@header
class QueryDataVersionResponseHeader(CommandHeader):
    changed: bool


@header
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str


@header
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipe_topic_count: int


@header
class AddWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str


@header
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    add_topic_count: int


# ------------------------------------------------------------------ admin (broker), added with the broker core


@header
class GetProducerConnectionListRequestHeader(CommandHeader):
    producer_group: str


@header
class QueryTopicConsumeByWhoRequestHeader(CommandHeader):
    topic: str


@header
class GetBrokerConfigResponseHeader(CommandHeader):
    version: str | None = None


# ------------------------------------------------------------------ serialize type negotiation

# A broker of this project adds this ext field to its HEART_BEAT response, listing the header
# serialize types it reads ("JSON,ROCKETMQ,MSGPACK"); our client then speaks MSGPACK to that
# address. Real RocketMQ clients ignore extFields on a heartbeat response.
SERIALIZE_TYPES_EXT_FIELD = "serializeTypes"


# ------------------------------------------------------------------ admin (broker): offsets cloning, time span, consume directly


@header
class CloneGroupOffsetRequestHeader(CommandHeader):
    """CLONE_GROUP_OFFSET (314): copy srcGroup's offsets to destGroup; a blank topic means every topic."""

    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


@header
class ResumeCheckHalfMessageRequestHeader(CommandHeader):
    """RESUME_CHECK_HALF_MESSAGE (323): check a given-up transaction again (its message's offset msg id)."""

    msg_id: str


@header
class ViewBrokerStatsDataRequestHeader(CommandHeader):
    """VIEW_BROKER_STATS_DATA (315): one of the broker's stats items (`mqadmin statsAll`)."""

    stats_name: str
    stats_key: str


@header
class QueryConsumeTimeSpanRequestHeader(CommandHeader):
    """QUERY_CONSUME_TIME_SPAN (303)."""

    topic: str
    group: str


@header
class QueryConsumeQueueRequestHeader(CommandHeader):
    """QUERY_CONSUME_QUEUE (321, mqadmin queryCq). RocketMQ's tool always sends count; a request without
    it gets the tool's default rather than Java's int default of 0 (no units)."""

    topic: str
    queue_id: int
    index: int
    count: int = 10
    consumer_group: str | None = None


@header
class ConsumeMessageDirectlyResultRequestHeader(CommandHeader):
    """CONSUME_MESSAGE_DIRECTLY (309), admin -> broker -> consumer client. The broker adds brokerName."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None
