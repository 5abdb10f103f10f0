"""MessageQueueSelector: how an ordered send picks its queue from (queues, message, sharding key).

The default hashes the sharding key the way Java's SelectMessageQueueByHash does
(`abs(key.hashCode() % n)` with Java's String/Integer/Long hashCode), so Java, C++ and Python
producers of one topic route the same key to the same queue.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from remoting.message import java_string_hash

from ..message import Message, MessageQueue

__all__ = [
    "MessageQueueSelector",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SelectorFunction",
    "as_selector",
    "java_hash_code",
]

SelectorFunction = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


@runtime_checkable
class MessageQueueSelector(Protocol):
    def select(self, queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue: ...


def _to_int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


def java_hash_code(arg: Any) -> int:
    """Java's hashCode of the boxed argument: String, Integer, Long, Boolean; str() of anything else."""
    if isinstance(arg, bool):
        return 1231 if arg else 1237
    if isinstance(arg, int):
        if -(2**31) <= arg < 2**31:
            return arg
        v = arg & 0xFFFFFFFFFFFFFFFF
        return _to_int32(v ^ (v >> 32))
    if isinstance(arg, bytes | bytearray):
        arg = bytes(arg).decode("utf-8", "replace")
    return java_string_hash(arg if isinstance(arg, str) else str(arg))


class SelectMessageQueueByHash:
    """Same key, same queue (as long as the queue count does not change)."""

    def select(self, queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return queues[abs(java_hash_code(arg)) % len(queues)]


class SelectMessageQueueByRandom:
    def select(self, queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return queues[random.randrange(len(queues))]


class _FunctionSelector:
    __slots__ = ("fn",)

    def __init__(self, fn: SelectorFunction) -> None:
        self.fn = fn

    def select(self, queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return self.fn(queues, msg, arg)


_HASH = SelectMessageQueueByHash()


def as_selector(selector: MessageQueueSelector | SelectorFunction | None) -> MessageQueueSelector:
    """A selector object from a selector, a plain function (queues, msg, arg) -> queue, or None (hash)."""
    if selector is None:
        return _HASH
    if isinstance(selector, MessageQueueSelector):
        return selector
    if callable(selector):
        return _FunctionSelector(selector)
    raise TypeError(f"selector must be a MessageQueueSelector or a function, not {type(selector).__name__}")
