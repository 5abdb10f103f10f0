"""Blocking file helpers for the NameServer's small state files. Call them via asyncio.to_thread."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, data: bytes) -> None:
    """Replace path with data so that a reader (or a crash) sees the old file or the new one.

    Writes a temp file in the same directory, fsyncs it, renames it over path, then fsyncs the
    directory so the rename itself is durable. Creates missing parent directories.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def check_writable_file_path(path: str | Path) -> None:
    """Make sure path's directory exists (creating it) and a file can be created in it.

    Raises OSError with a message naming the cause. Probes with a real temp file, because
    os.access lies for root and on read-only mounts.
    """
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{p} is a directory")
    ancestor = p.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise NotADirectoryError(f"{ancestor} is not a directory")
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=p.parent)
    os.close(fd)
    os.unlink(tmp)
