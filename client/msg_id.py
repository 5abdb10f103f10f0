"""Client-side unique message ids (the UNIQ_KEY property), RocketMQ's MessageClientIDSetter layout.

16 bytes as 32 upper-case hex characters:

    ip (4) | pid (2) | class-loader hash (4, random per process) | ms since start of month (4) | counter (2)

The first 10 bytes never change in a process, so their hex is computed once, and the time part
once per millisecond; an id then costs one clock read, a counter step and a 4-digit format.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import random
import socket
import struct
import threading
import time

from .config import local_ip

__all__ = ["MessageIdGenerator", "create_uniq_id", "create_uniq_ids", "decode_uniq_id"]


def _month_bounds(now_ms: int) -> tuple[int, int]:
    """(start of this month, start of next month) in epoch ms, in local time like Java's Calendar."""
    now = _dt.datetime.fromtimestamp(now_ms / 1000.0).astimezone()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


_HEX2 = [f"{i:02X}" for i in range(256)]  # a byte as two upper-case hex digits (an id's counter part)


class MessageIdGenerator:
    """Thread-safe generator of UNIQ_KEY ids (the counter step is atomic under the GIL)."""

    def __init__(self, ip: str | None = None, pid: int | None = None, seed: int | None = None) -> None:
        try:
            ip_bytes = socket.inet_aton(ip or local_ip())
        except OSError:
            ip_bytes = struct.pack(">I", int(time.time() * 1000) & 0xFFFFFFFF)  # like createFakeIP
        pid = os.getpid() if pid is None else pid
        loader_hash = random.getrandbits(32) if seed is None else seed & 0xFFFFFFFF
        self._prefix = (ip_bytes + struct.pack(">HI", pid & 0xFFFF, loader_hash)).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start_ms, self._next_start_ms = _month_bounds(int(time.time() * 1000))
        # (ms << 8 | the counter's high byte, the id up to its last two hex digits) of the last id: one
        # attribute, so threads swap it atomically.
        self._head: tuple[int, str] = (-1, "")

    @property
    def prefix(self) -> str:
        return self._prefix

    def _roll_month(self, now_ms: int) -> None:
        with self._lock:
            if now_ms >= self._next_start_ms:
                self._start_ms, self._next_start_ms = _month_bounds(now_ms)

    def create(self) -> str:
        now_ms = time.time_ns() // 1_000_000
        n = next(self._counter) & 0xFFFF
        # The id up to its last two hex digits changes once per ms or per 256 ids: cached under that key.
        key = now_ms << 8 | n >> 8
        last_key, head = self._head
        if key != last_key:
            head = self._time_head(now_ms) + _HEX2[n >> 8]
            self._head = (key, head)
        return head + _HEX2[n & 0xFF]

    def create_many(self, k: int) -> list[str]:
        """k new ids with one clock read: what k create() calls within one millisecond give."""
        head = self._time_head(time.time_ns() // 1_000_000)
        hex2 = _HEX2
        return [head + hex2[n >> 8 & 0xFF] + hex2[n & 0xFF] for n in itertools.islice(self._counter, k)]

    def _time_head(self, now_ms: int) -> str:
        """The id's first 28 hex digits at now_ms: the process prefix and the ms since the month began."""
        if now_ms >= self._next_start_ms:
            self._roll_month(now_ms)
        diff = now_ms - self._start_ms
        if -1_000_000 < diff < 0:  # clock stepped back (NTP): Java clamps too
            diff = 0
        return f"{self._prefix}{diff & 0xFFFFFFFF:08X}"


_default: MessageIdGenerator | None = None
_default_lock = threading.Lock()


def _forget_after_fork() -> None:
    # A forked child (Spark workers fork) has another pid: it must not reuse the parent's ids. A
    # fresh lock too: another thread of the parent may have held it at the fork.
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def _generator() -> MessageIdGenerator:
    global _default
    gen = _default
    if gen is None:
        with _default_lock:
            gen = _default
            if gen is None:
                gen = _default = MessageIdGenerator()
    return gen


def create_uniq_id() -> str:
    """A new UNIQ_KEY id for this process."""
    gen = _default
    return (gen if gen is not None else _generator()).create()


def create_uniq_ids(k: int) -> list[str]:
    """k new UNIQ_KEY ids for this process, with one clock read (a batch's)."""
    gen = _default
    return (gen if gen is not None else _generator()).create_many(k)


def decode_uniq_id(uniq_id: str) -> dict[str, object]:
    """Split a UNIQ_KEY id into ip, pid and (approximate) creation time, like MessageClientIDSetter's getters."""
    raw = bytes.fromhex(uniq_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"not a unique message id: {uniq_id!r}")
    ip_len = 16 if len(raw) == 28 else 4
    ip = socket.inet_ntop(socket.AF_INET6 if ip_len == 16 else socket.AF_INET, raw[:ip_len])
    pid, _loader, span = struct.unpack_from(">HII", raw, ip_len)
    now_ms = int(time.time() * 1000)
    start, _ = _month_bounds(now_ms)
    if start + span > now_ms + 60_000:  # in the future: it was created last month
        prev = _dt.datetime.fromtimestamp(start / 1000.0 - 1).astimezone()
        start, _ = _month_bounds(int(prev.timestamp() * 1000))
    return {"ip": ip, "pid": pid, "timestamp_ms": start + span}
