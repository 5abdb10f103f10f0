"""What the producer sends and what it gets back: Message, MessageQueue, SendStatus, SendResult.

`Message` keeps RocketMQ's model: every attribute the broker cares about (tags, keys, delay level,
the client-side unique id) lives in the `properties` map that travels with the message, so the
wire encoding is one join over that map. `tags`, `keys` and `delay_level` are views onto it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from remoting.message import (
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decode_messages,
    encode_properties,
)

from .errors import InvalidMessageError

__all__ = [
    "REPLY_MESSAGE_FLAG",
    "create_reply_message",
    "Message",
    "MessageConst",
    "MessageExt",
    "MessageQueue",
    "MessageSysFlag",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "decode_messages",
    "encode_message",
    "encode_messages",
]

_KEYS = MessageConst.PROPERTY_KEYS
_TAGS = MessageConst.PROPERTY_TAGS
_DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
_WAIT = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
_UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_PROPERTY_SEPARATOR = PROPERTY_SEPARATOR
_NAME_VALUE_SEPARATOR = NAME_VALUE_SEPARATOR
_NAME_VALUE_JOIN = NAME_VALUE_SEPARATOR.join


def _no_separators(what: str, s: str) -> str:
    """`s`, unless it holds \x01 or \x02: the characters a message's properties are separated by on the wire
    (name\x01value\x02...), so one inside a value would split or cut it where it is stored."""
    if _NAME_VALUE_SEPARATOR in s or _PROPERTY_SEPARATOR in s:
        raise InvalidMessageError(f"{what} {s!r} contains \\x01 or \\x02, RocketMQ's property separators")
    return s


def _refuse_property(name: str, value: str) -> None:
    """Raise the precise error for a property Message refuses (see Message.__init__)."""
    if not name or not value:
        # (the wire form drops an empty name or value, as RocketMQ's decoder does: refused here rather than
        # lost there; put_user_property refuses them too, as Java's does)
        raise InvalidMessageError(f"property {name!r}={value!r}: names and values must be non-empty")
    _no_separators("the property name", name)
    _no_separators(f"the value of property {name!r}", value)


def _join_keys(keys: str | Iterable[str] | None) -> str | None:
    if keys is None:
        return None
    if isinstance(keys, str):
        joined = keys
    else:
        joined = MessageConst.KEY_SEPARATOR.join(str(k) for k in keys if k)
    if not joined:
        return None
    if _NAME_VALUE_SEPARATOR in joined or _PROPERTY_SEPARATOR in joined:
        _no_separators("the keys", joined)  # (raises, naming them)
    return joined


class Message:
    """A message to send.

    >>> m = Message("TopicTest", b"hello", tags="TagA", keys=["order-1", "user-7"])
    >>> m.properties["KEYS"]
    'order-1 user-7'

    `body` may be bytes-like or str (encoded as UTF-8). `keys` is one key or a list of keys
    (joined with spaces in the KEYS property, which the broker indexes for queryMsgByKey).
    `properties` are user properties; names RocketMQ reserves (MessageConst.STRING_HASH_SET) are
    accepted here as-is (they are how system attributes travel), but `put_user_property` refuses
    them. `delay_level` 1..18 asks the broker to deliver later (messageDelayLevel on the broker:
    1s 5s 10s 30s 1m 2m ...). `flag` is RocketMQ's opaque user int, stored with the message.
    """

    __slots__ = ("topic", "body", "flag", "properties", "transaction_id")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        *,
        flag: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> None:
        self.topic = topic
        self.body = body.encode("utf-8") if isinstance(body, str) else body
        self.flag = flag
        self.transaction_id: str | None = None
        if not (properties or tags or keys or delay_level):
            # The plain message (the per-message path of most producers): the dict the steps below build.
            self.properties = {_WAIT: "true" if wait_store_msg_ok else "false"}
            return
        props: dict[str, str] = {}
        self.properties = props
        if properties:
            for k, v in properties.items():
                if v is not None:
                    k = str(k)
                    v = str(v)
                    # (the separator tests inline, not a call each: a message's properties are checked here)
                    if (not k or not v or _NAME_VALUE_SEPARATOR in k or _NAME_VALUE_SEPARATOR in v
                            or _PROPERTY_SEPARATOR in k or _PROPERTY_SEPARATOR in v):
                        _refuse_property(k, v)
                    props[k] = v
        if tags:
            if _NAME_VALUE_SEPARATOR in tags or _PROPERTY_SEPARATOR in tags:
                _no_separators("the tags", tags)  # (raises, naming them)
            props[_TAGS] = tags
        joined = _join_keys(keys)
        if joined:
            props[_KEYS] = joined
        if delay_level:
            props[_DELAY] = str(int(delay_level))
        if _WAIT not in props:
            props[_WAIT] = "true" if wait_store_msg_ok else "false"

    # ------------------------------------------------------------------ views on properties
    @property
    def tags(self) -> str | None:
        return self.properties.get(_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(_TAGS, _no_separators("the tags", value) if value else None)

    @property
    def keys(self) -> str | None:
        """The KEYS property: keys separated by single spaces."""
        return self.properties.get(_KEYS)

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        self._set(_KEYS, _join_keys(value))

    @property
    def keys_list(self) -> list[str]:
        k = self.properties.get(_KEYS)
        return [x for x in k.split(MessageConst.KEY_SEPARATOR) if x] if k else []

    @property
    def delay_level(self) -> int:
        v = self.properties.get(_DELAY)
        return int(v) if v else 0

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        self._set(_DELAY, str(int(level)) if level else None)

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(_WAIT, "true") != "false"

    @wait_store_msg_ok.setter
    def wait_store_msg_ok(self, value: bool) -> None:
        self.properties[_WAIT] = "true" if value else "false"

    @property
    def uniq_id(self) -> str | None:
        """The client-side unique id (UNIQ_KEY), set by the producer when it first sends this message."""
        return self.properties.get(_UNIQ)

    def get_property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    def put_property(self, name: str, value: str) -> None:
        self.properties[name] = value

    def remove_property(self, name: str) -> None:
        self.properties.pop(name, None)

    def put_user_property(self, name: str, value: str) -> None:
        """Set a user property, refusing the names RocketMQ reserves for itself (like Java)."""
        if name in MessageConst.STRING_HASH_SET:
            raise ValueError(f"the property {name!r} is used by the system, choose another name")
        if not name or not value:
            raise ValueError("user property name and value must be non-empty")
        self.properties[_no_separators("the property name", name)] = _no_separators(
            f"the value of property {name!r}", value)

    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in MessageConst.STRING_HASH_SET}

    def _set(self, key: str, value: str | None) -> None:
        if value is None:
            self.properties.pop(key, None)
        else:
            self.properties[key] = value

    def __repr__(self) -> str:
        size = len(self.body) if self.body is not None else 0
        return f"Message(topic={self.topic!r}, body=<{size} bytes>, properties={self.properties!r}, flag={self.flag})"


# Request-reply (RocketMQ 4.6+): what a request carries and how its reply finds the requester.
REPLY_MESSAGE_FLAG = "reply"  # MSG_TYPE of a reply (MixAll.REPLY_MESSAGE_FLAG)
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"  # a cluster's replies go to <cluster>_REPLY_TOPIC


def create_reply_message(request: MessageExt, body: bytes | bytearray | memoryview | str) -> Message:
    """The reply to a message sent with `Producer.request` (RocketMQ's MessageUtil.createReplyMessage):
    send it with any producer's `send` and the broker pushes it to the requester, whose `request` returns
    it. Raises MQClientError for a message that is not a request (no CLUSTER, REPLY_TO_CLIENT or
    CORRELATION_ID property: the broker sets CLUSTER on every message it stores)."""
    from .errors import MQClientError

    props = request.properties
    cluster = props.get(MessageConst.PROPERTY_CLUSTER)
    missing = [k for k in (MessageConst.PROPERTY_CLUSTER, MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT,
                           MessageConst.PROPERTY_CORRELATION_ID) if not props.get(k)]
    if missing:
        raise MQClientError(f"create reply message fail: the request message has no {', '.join(missing)} property "
                            "(was it sent with Producer.request?)")
    reply = Message(f"{cluster}_{REPLY_TOPIC_POSTFIX}", body)
    reply.properties[MessageConst.PROPERTY_MESSAGE_TYPE] = REPLY_MESSAGE_FLAG
    for k in (MessageConst.PROPERTY_CORRELATION_ID, MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT,
              MessageConst.PROPERTY_MESSAGE_TTL):
        v = props.get(k)
        if v:
            reply.properties[k] = v
    return reply


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker. Ordered like Java's: topic, broker name, queue id."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_body(self) -> dict[str, object]:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}


class SendStatus(enum.Enum):
    """How the broker stored the message (anything but SEND_OK means stored, but not as safely as asked)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class SendResult:
    """The broker's answer to a send.

    `msg_id` is the client-side unique id (UNIQ_KEY; for a batch, the ids joined with commas),
    `offset_msg_id` the broker's id (store host + CommitLog offset; what VIEW_MESSAGE_BY_ID takes),
    `queue`/`queue_offset` where the message landed.
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str = "DefaultRegion"
    trace_on: bool = True

    @property
    def send_status(self) -> SendStatus:
        return self.status

    @property
    def message_queue(self) -> MessageQueue:
        return self.queue


class PullStatus(enum.Enum):
    """Outcome of a PULL_MESSAGE (Java's PullStatus)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    """What one pull returned: messages (bodies decompressed) and the offsets to continue from."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]
    suggest_which_broker_id: int = 0

    @property
    def pull_status(self) -> PullStatus:
        return self.status

    @property
    def msg_found_list(self) -> list[MessageExt]:
        return self.messages


_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE(0), BODYCRC(0), FLAG, BODY length
_I16 = struct.Struct(">h")


def _encode_into(parts: list[bytes | bytearray | memoryview], msg: Message, encoded: str | None = None) -> None:
    body = msg.body
    if encoded is None:
        props_map = msg.properties
        try:
            encoded = _PROPERTY_SEPARATOR.join(map(_NAME_VALUE_JOIN, props_map.items()))
        except TypeError:  # a None value (properties edited by hand): encode_properties skips those
            encoded = encode_properties(props_map)
    props = encoded.encode("utf-8")
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise ValueError(
            f"properties of a message are {len(props)} bytes, over the {MAX_PROPERTIES_LENGTH} limit"
        )
    blen = len(body)
    parts.append(_BATCH_HEAD.pack(20 + blen + 2 + len(props), 0, 0, msg.flag, blen))
    parts.append(body)
    parts.append(_I16.pack(len(props)))
    parts.append(props)


# A plain message's properties once its new id is appended (WAIT first, as Message puts it), up to the id.
_WAIT_TRUE_UNIQ_BYTES = (f"{_WAIT}{NAME_VALUE_SEPARATOR}true{_PROPERTY_SEPARATOR}{_UNIQ}{NAME_VALUE_SEPARATOR}").encode()


def encode_batch_with_ids(msgs: Sequence[Message], create_id: Callable[[], str]) -> tuple[bytes, list[str]]:
    """encode_messages for a batch about to be sent, with each message's UNIQ_KEY set first (a new one
    from create_id() where it has none): the body and the ids, in one pass. A plain message (only
    WAIT=true) gets its properties bytes as a constant prefix and its new id, without the generic join."""
    parts: list[bytes | bytearray | memoryview] = []
    add = parts.append
    ids: list[str] = []
    add_id = ids.append
    pack_head = _BATCH_HEAD.pack
    pack_len = _I16.pack
    for m in msgs:
        props_map = m.properties
        uniq = props_map.get(_UNIQ)
        if uniq is None:
            uniq = create_id()
            props_map[_UNIQ] = uniq
            if len(props_map) == 2 and props_map.get(_WAIT) == "true":
                props = _WAIT_TRUE_UNIQ_BYTES + uniq.encode()
            else:
                props = _encoded_properties(props_map)
        else:
            props = _encoded_properties(props_map)
        plen = len(props)
        if plen > MAX_PROPERTIES_LENGTH:
            raise ValueError(f"properties of a message are {plen} bytes, over the {MAX_PROPERTIES_LENGTH} limit")
        body = m.body
        blen = len(body)
        add(pack_head(22 + blen + plen, 0, 0, m.flag, blen))
        add(body)
        add(pack_len(plen) + props)
        add_id(uniq)
    return b"".join(parts), ids


def _encoded_properties(props_map: Mapping[str, str]) -> bytes:
    try:
        encoded = _PROPERTY_SEPARATOR.join(map(_NAME_VALUE_JOIN, props_map.items()))
    except TypeError:  # a None value (properties edited by hand): encode_properties skips those
        encoded = encode_properties(props_map)
    return encoded.encode("utf-8")


def encode_message(msg: Message) -> bytes:
    """One message of a batch body, Java's MessageDecoder.encodeMessage: flag, body and properties only."""
    parts: list[bytes | bytearray | memoryview] = []
    _encode_into(parts, msg)
    return b"".join(parts)


def encode_messages(msgs: Sequence[Message], encoded_properties: Sequence[str | None] | None = None) -> bytes:
    """A SEND_BATCH_MESSAGE body: the messages' encodings back to back (MessageDecoder.encodeMessages);
    one join over all the parts, so each body is copied once. `encoded_properties`, if given, has per
    message its properties string already encoded (what encode_properties gives), or None."""
    parts: list[bytes | bytearray | memoryview] = []
    if encoded_properties is None:
        for m in msgs:
            _encode_into(parts, m)
    else:
        for m, e in zip(msgs, encoded_properties, strict=True):
            _encode_into(parts, m, e)
    return b"".join(parts)
