"""ConfigManager: a JSON file a manager is loaded from and persisted to (RocketMQ's ConfigManager).

Writes are atomic (temp file + fsync + rename + directory fsync, the previous version kept as
`<file>.bak`) and run off the event loop. Persist requests coalesce: while one write runs, any
number of further requests cause exactly one more write with the latest state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from abc import ABC, abstractmethod
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def atomic_write_text(path: Path, text: str) -> None:
    """Blocking: write text to path atomically and durably; keep the previous file as path.bak."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    data = text.encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        with contextlib.suppress(OSError):
            os.replace(path, bak)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_text_or_backup(path: Path) -> tuple[str | None, Path | None]:
    """Blocking: the file's text (or its .bak if the file is missing/empty), and which one was read."""
    for p in (path, path.with_name(path.name + ".bak")):
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        if text.strip():
            return text, p
    return None, None


class ConfigManager(ABC):
    """A manager whose state is one JSON document in one file."""

    def __init__(self) -> None:
        self._persist_task: asyncio.Task[None] | None = None
        self._persist_again = False

    @abstractmethod
    def config_file_path(self) -> Path: ...

    @abstractmethod
    def encode(self) -> str:
        """The state as JSON text (called on the loop, so it is a consistent snapshot)."""

    async def encode_on_loop(self) -> str:
        """encode() for the background persist. A manager whose state grows with the broker's (consumer
        offsets) overrides it to encode a slice per loop turn."""
        return self.encode()

    @abstractmethod
    def decode(self, text: str) -> None:
        """Replace/merge state from JSON text; raise ValueError when it cannot be parsed."""

    def load(self) -> bool:
        """Blocking (call at start-up, off the loop): load the file, falling back to its backup."""
        path = self.config_file_path()
        text, used = read_text_or_backup(path)
        if text is None:
            return True
        try:
            self.decode(text)
        except (ValueError, TypeError) as e:
            bak = path.with_name(path.name + ".bak")
            log.error("config_file_corrupt", path=str(used), error=str(e))
            if used == path and bak.exists():
                try:
                    self.decode(bak.read_text(encoding="utf-8"))
                    log.warning("config_file_loaded_from_backup", path=str(bak))
                    return True
                except (ValueError, TypeError, OSError):
                    pass
            return False
        log.info("config_file_loaded", path=str(used))
        return True

    def persist_now(self) -> None:
        """Blocking write of the current state (shutdown path, tests)."""
        atomic_write_text(self.config_file_path(), self.encode())

    async def persist(self) -> None:
        """Write the current state off the loop and wait for it; concurrent calls coalesce."""
        self.request_persist()
        await self.wait_persisted()

    def request_persist(self) -> None:
        """Fire-and-forget persist (from sync code on the loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.persist_now()
            return
        if self._persist_task is not None and not self._persist_task.done():
            self._persist_again = True
            return
        self._persist_task = loop.create_task(self._persist_loop())

    async def _persist_loop(self) -> None:
        while True:
            self._persist_again = False
            text = await self.encode_on_loop()
            path = self.config_file_path()
            try:
                await asyncio.to_thread(atomic_write_text, path, text)
            except OSError as e:
                log.error("config_persist_failed", path=str(path), error=str(e))
            if not self._persist_again:
                return

    async def wait_persisted(self) -> None:
        """Wait for any running/pending write to finish."""
        while self._persist_task is not None and not self._persist_task.done():
            await asyncio.shield(self._persist_task)
