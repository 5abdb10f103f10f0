"""Names shared by the transaction parts (RocketMQ's TransactionalMessageUtil) and a broker-side UNIQ_KEY maker."""

from __future__ import annotations

import itertools
import os
import random
import socket
import struct
import time
from typing import Final

from broker.topic import topic_validator as tv

# The op record's tag: "this half message is done" (committed or rolled back).
REMOVE_TAG: Final = "d"
# The system group whose consumer offsets record the checker's progress in the half and op queues.
CID_SYS_RMQ_TRANS: Final = "CID_RMQ_SYS_TRANS"
HALF_TOPIC: Final = tv.RMQ_SYS_TRANS_HALF_TOPIC
OP_TOPIC: Final = tv.RMQ_SYS_TRANS_OP_HALF_TOPIC
CHECK_MAX_TIME_TOPIC: Final = tv.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC
# Every half message goes to queue 0 of the half topic; its op records to queue 0 of the op topic.
HALF_QUEUE_ID: Final = 0
# Queues of TRANS_CHECK_MAX_TIME_TOPIC (Java's TCMT_QUEUE_NUMS).
TCMT_QUEUE_NUMS: Final = 1


class UniqIdGenerator:
    """UNIQ_KEY ids for records the broker writes itself (op records), in MessageClientIDSetter's layout:
    ip (4) | pid (2) | random (4) | ms since this generator started (4) | counter (2), upper-case hex."""

    def __init__(self, ip: str) -> None:
        try:
            ip_bytes = socket.inet_aton(ip)
        except OSError:
            ip_bytes = b"\x7f\x00\x00\x01"
        self._prefix = (ip_bytes + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))).hex().upper()
        self._start = time.monotonic()
        self._counter = itertools.count()

    def next(self) -> str:
        elapsed = int((time.monotonic() - self._start) * 1000) & 0xFFFFFFFF
        return self._prefix + struct.pack(">IH", elapsed, next(self._counter) & 0xFFFF).hex().upper()
