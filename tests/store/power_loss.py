"""A power-loss model for crash tests. A SIGKILL keeps everything the process wrote (the page cache
survives it); a power cut keeps only what a durability call made durable, plus whatever the kernel
happened to write back on its own. So a SIGKILL test cannot see an acknowledgement given before its
fsync ended, nor a recovery that trips over a half-written page.

In the process under test, `PowerLossRecorder.install()` wraps every durability call the store makes:
os.fsync / os.fdatasync (files and directories), syncfs and os.sync, and the Linux AIO fdatasync of the
group commit. Each call's file content is captured when the call starts (what it is guaranteed to make
durable) and copied to a shadow tree when it ends, before the caller can act on it. The names it made
durable go to a log.

After the process is SIGKILLed, `crash_image()` builds one state a disk could be in after the power
went at that moment:

* names: a name both live and durable (the same file) is there. Of the names created in a directory
  since it was last made durable, a random first few in name order are there (ext4, xfs and btrfs
  commit name changes in the order they were made; the store names its files in creation order). Of
  the names deleted since, all but a random first few in name order are back with their old files
  (the store deletes its files oldest first); a name replaced by a new file has the old one or not,
  at random.
* content: a file's durable content (zeros for a file never synced), with each 512-byte sector
  written since taken from the live file with probability `keep` (the kernel's own write-back, in any
  order; a torn page is sectors of both), or those up to a random point.

Names follow what those filesystems give: an fsync or fdatasync of a file makes its own name (and its
directories' names) durable; a deleted or renamed name needs its directory's fsync (or a syncfs).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

SECTOR = 512
NAMES_LOG = "names.log"
FILES_DIR = "files"


class PowerLossRecorder:
    """Runs inside the process under test (see the module doc)."""

    def __init__(self, root: str, shadow: str) -> None:
        self.root = os.path.realpath(root)
        self.files = os.path.join(shadow, FILES_DIR)
        os.makedirs(self.files, exist_ok=True)
        self._lock = threading.Lock()
        self._seq = 0
        self._committed: dict[str, tuple[int, bytes]] = {}
        for dirpath, _dirs, names in os.walk(self.files):
            for n in names:
                p = os.path.join(dirpath, n)
                with open(p, "rb") as f:
                    self._committed[os.path.relpath(p, self.files)] = (-1, f.read())
        self._names = open(os.path.join(shadow, NAMES_LOG), "a")  # noqa: SIM115 - lives with the process
        self._aio_pending: list[list[Snapshot]] = []

    # ---------------------------------------------------------------- capture and commit

    def _rel(self, path: str) -> str | None:
        path = os.path.realpath(path)
        if path == self.root:
            return "."
        if not path.startswith(self.root + os.sep):
            return None
        return os.path.relpath(path, self.root)

    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _capture_fd(self, fd: int) -> Snapshot | None:
        rel = self._rel(os.readlink(f"/proc/self/fd/{fd}"))
        if rel is None:
            return None
        seq = self._next_seq()
        st = os.fstat(fd)
        return Snapshot(rel, seq, os.pread(fd, st.st_size, 0), st.st_ino)

    def _capture_path(self, rel: str) -> Snapshot | None:
        seq = self._next_seq()
        try:
            with open(os.path.join(self.root, rel), "rb") as f:
                return Snapshot(rel, seq, f.read(), os.fstat(f.fileno()).st_ino)
        except FileNotFoundError:
            return None

    def _commit(self, snaps: Iterable[Snapshot]) -> None:
        with self._lock:
            for snap in snaps:
                old = self._committed.get(snap.path)
                if old is not None and old[0] > snap.seq:
                    continue  # a later capture of this file is already durable
                path = os.path.join(self.files, snap.path)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                prev = old[1] if old is not None else b""
                data = snap.data
                with open(path, "r+b" if old is not None else "wb") as f:
                    if len(prev) != len(data):
                        f.truncate(len(data))
                    mv, pv = memoryview(data), memoryview(prev)
                    for i in range(0, len(data), 4096):
                        if mv[i : i + 4096] != pv[i : i + 4096]:
                            f.seek(i)
                            f.write(mv[i : i + 4096])
                self._committed[snap.path] = (snap.seq, data)
                self._log({"op": "file", "path": snap.path, "size": len(data), "ino": snap.ino})

    def _log(self, entry: dict[str, Any]) -> None:
        self._names.write(json.dumps(entry) + "\n")
        self._names.flush()

    # ---------------------------------------------------------------- the wrapped calls

    def _wrap_fsync(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def fsync(fd: int) -> None:
            rel = self._rel(os.readlink(f"/proc/self/fd/{fd}"))
            if rel is not None and os.path.isdir(os.path.join(self.root, rel)):
                listing = _entries(Path(self.root), rel)
                real(fd)
                with self._lock:
                    self._log({"op": "dir", "path": rel, "entries": listing})
                return
            snap = self._capture_fd(fd) if rel is not None else None
            real(fd)
            if snap is not None:
                self._commit([snap])

        return fsync

    def _capture_all(self) -> tuple[list[Snapshot], dict[str, list[int]]]:
        names = _tree_entries(Path(self.root))
        snaps = [snap for rel, (size, _ino) in names.items() if size >= 0 and (snap := self._capture_path(rel))]
        return snaps, names

    def _wrap_syncfs(self, real: Callable[[str], bool]) -> Callable[[str], bool]:
        def syncfs(path: str) -> bool:
            snaps, names = self._capture_all()
            ok = real(path)
            if ok:
                self._commit(snaps)
                with self._lock:
                    self._log({"op": "all", "entries": names})
            return ok

        return syncfs

    def install(self) -> None:
        import store.flush
        import store.mapped_file
        import store.message_store
        from store.aio_fsync import AioFsync

        os.fsync = self._wrap_fsync(os.fsync)  # type: ignore[assignment]
        os.fdatasync = self._wrap_fsync(os.fdatasync)  # type: ignore[assignment]
        real_sync = os.sync
        os.sync = lambda: self._wrap_syncfs(lambda _path: real_sync() is None)(self.root)  # type: ignore[assignment]
        syncfs = self._wrap_syncfs(store.mapped_file.syncfs_blocking)
        for module in (store.flush, store.mapped_file, store.message_store):
            module.syncfs_blocking = syncfs  # type: ignore[attr-defined]

        recorder = self
        real_submit, real_reap = AioFsync.submit_fdatasync, AioFsync.reap

        def submit_fdatasync(aio: AioFsync, fd: int, token: int = 0) -> None:
            snap = recorder._capture_fd(fd)
            real_submit(aio, fd, token)
            recorder._aio_pending.append([snap] if snap is not None else [])

        def reap(aio: AioFsync) -> list[tuple[int, int]]:
            done = real_reap(aio)
            for _token, res in done:
                snaps = recorder._aio_pending.pop(0)  # the group commit has one in flight at a time
                if res >= 0:
                    recorder._commit(snaps)
            return done

        AioFsync.submit_fdatasync = submit_fdatasync  # type: ignore[method-assign]
        AioFsync.reap = reap  # type: ignore[method-assign]


class Snapshot(NamedTuple):
    path: str
    seq: int
    data: bytes
    ino: int


def _entries(root: Path, rel_dir: str) -> dict[str, list[int]]:
    """name -> [size (-1 for a directory), inode] of a directory's entries, relative to `root`."""
    out: dict[str, list[int]] = {}
    try:
        entries = list(os.scandir(root / rel_dir))
    except FileNotFoundError:
        return out
    for e in entries:
        rel = os.path.normpath(os.path.join(rel_dir, e.name))
        try:
            st = e.stat()
            out[rel] = [-1 if e.is_dir() else st.st_size, st.st_ino]
        except FileNotFoundError:
            continue
    return out


def _tree_entries(root: Path) -> dict[str, list[int]]:
    """_entries of every directory under `root`."""
    out: dict[str, list[int]] = {}
    for dirpath, _dirs, _files in os.walk(root):
        out.update(_entries(root, os.path.relpath(dirpath, root)))
    return out


# -------------------------------------------------------------------- the parent's side


def start_shadow(shadow: Path, durable_root: Path | None = None) -> None:
    """A new shadow tree; with `durable_root`, everything in it counts as durable already (the store a
    previous power cut left, which the process under test is about to run on)."""
    if shadow.exists():
        shutil.rmtree(shadow)
    (shadow / FILES_DIR).mkdir(parents=True)
    log: list[dict[str, Any]] = []
    names: dict[str, list[int]] = {}
    if durable_root is not None:
        names = _tree_entries(durable_root)
        for rel, (size, ino) in names.items():
            if size >= 0:
                dst = shadow / FILES_DIR / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(durable_root / rel, dst)
                log.append({"op": "file", "path": rel, "size": size, "ino": ino})
    log.append({"op": "all", "entries": names})
    with open(shadow / NAMES_LOG, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in log)


def _replay(shadow: Path) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """(durable name -> (size, inode), path -> the inode whose content the shadow holds)."""
    names: dict[str, tuple[int, int]] = {}
    content: dict[str, int] = {}
    with open(shadow / NAMES_LOG) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue  # the last line, cut by the kill
            op = e["op"]
            if op == "all":
                names = {n: (v[0], v[1]) for n, v in e["entries"].items()}
            elif op == "dir":
                d = "" if e["path"] == "." else e["path"]
                names = {n: v for n, v in names.items() if os.path.dirname(n) != d}
                names.update((n, (v[0], v[1])) for n, v in e["entries"].items())
                _add_dirs(names, d)
            else:  # a file's fsync: its content, its own name and its directories'
                p = e["path"]
                names[p] = (e["size"], e["ino"])
                content[p] = e["ino"]
                _add_dirs(names, os.path.dirname(p))
    return names, content


def _add_dirs(names: dict[str, tuple[int, int]], d: str) -> None:
    """A synced file's or directory's own directories are durable with it."""
    while d and d not in names:
        names[d] = (-1, -1)
        d = os.path.dirname(d)


def crash_image(live: Path, shadow: Path, out: Path, rng: random.Random, keep: float | None) -> dict[str, int]:
    """Write to `out` one state the disk may hold after a power cut (module doc); returns counts of
    what was decided at random, for the test's message. `keep` None: each file's written sectors were
    written back in file order, up to a random point (the common case: a log's tail is lost)."""
    durable, content_ino = _replay(shadow)
    present = {n: (v[0], v[1]) for n, v in _tree_entries(live).items()}
    stats = {"new_names_kept": 0, "new_names_lost": 0, "gone_names_back": 0, "sectors_kept": 0, "sectors_lost": 0}

    def same_file(name: str) -> bool:
        d, p = durable[name], present[name]
        return d[0] < 0 and p[0] < 0 or d[1] == p[1]

    # name -> (size, whose: "live" for the live file, else the durable one)
    chosen: dict[str, tuple[int, str]] = {}
    by_dir: dict[str, list[str]] = {}
    for name in set(durable) | set(present):
        by_dir.setdefault(os.path.dirname(name), []).append(name)
    for d in sorted(by_dir, key=lambda n: (n.count(os.sep), n) if n else (-1, "")):
        if d and d not in chosen:
            continue  # the directory itself is not there
        names = sorted(by_dir[d])
        created = [n for n in names if n in present and (n not in durable or not same_file(n))]
        made = set(created[: rng.randint(0, len(created))])  # a prefix, in name (creation) order
        deleted = [n for n in names if n in durable and n not in present]
        gone = set(deleted[: rng.randint(0, len(deleted))])  # the store deletes its files oldest first
        for n in names:
            if n in present and n in durable and same_file(n):
                chosen[n] = (present[n][0], "live")
            elif n in made:
                chosen[n] = (present[n][0], "live")
                stats["new_names_kept"] += 1
            elif n in durable and n not in gone and (n not in present or rng.random() < 0.5):
                chosen[n] = (durable[n][0], "old")  # its deletion (or replacement) was not made durable
                stats["gone_names_back"] += 1
            elif n in present:
                stats["new_names_lost"] += 1
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name, (size, whose) in sorted(chosen.items(), key=lambda kv: kv[0].count(os.sep)):
        dst = out / name
        if size < 0:
            dst.mkdir(exist_ok=True)
            continue
        ino = present[name][1] if whose == "live" else durable[name][1]
        base_path = shadow / FILES_DIR / name
        base = bytearray(base_path.read_bytes()) if content_ino.get(name) == ino else bytearray()
        base = base[:size] + bytearray(max(0, size - len(base)))
        if whose == "live":
            new = (live / name).read_bytes()
            written = [i for i in range(0, size, SECTOR) if base[i : i + SECTOR] != new[i : i + SECTOR]]
            cut = rng.randint(0, len(written)) if keep is None else len(written)
            for k, i in enumerate(written):
                if k < cut if keep is None else rng.random() < keep:
                    base[i : i + SECTOR] = new[i : i + SECTOR]
                    stats["sectors_kept"] += 1
                else:
                    stats["sectors_lost"] += 1
        dst.write_bytes(bytes(base))
    return stats
