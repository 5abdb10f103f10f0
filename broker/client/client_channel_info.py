"""ClientChannelInfo: one client (producer or consumer instance) on one connection."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from remoting.codes import LanguageCode
from remoting.connection import RemotingConnection


@dataclass(slots=True, eq=False)
class ClientChannelInfo:
    conn: RemotingConnection
    client_id: str
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    # Monotonic time of the last heartbeat (expiry) and wall-clock ms (display).
    last_update: float = field(default_factory=time.monotonic)
    last_update_timestamp: int = field(default_factory=lambda: int(time.time() * 1000))

    def touch(self) -> None:
        self.last_update = time.monotonic()
        self.last_update_timestamp = int(time.time() * 1000)

    @property
    def remote_addr(self) -> str:
        return self.conn.remote_addr
