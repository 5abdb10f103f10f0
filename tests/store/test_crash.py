"""Crash recovery: a child process is SIGKILLed mid-stream; the restarted store must hold every
acknowledged record exactly once, a clean tail, and consume queues / index that agree with the log."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remoting.message import BLANK_MAGIC_CODE, MessageExt, decode_message, decode_messages, encode_properties
from store.message_store import DefaultMessageStore
from store.results import GetMessageStatus

from .crash_child import QUEUES, child_config

CHILD = Path(__file__).resolve().parent / "crash_child.py"
ROOT = Path(__file__).resolve().parents[2]


class Child:
    """The crash child with a reader thread; every wait is bounded."""

    def __init__(
        self, root: Path, flush: str, batch: int, limit: int = 0, first: int = 0, shadow: Path | None = None,
        cleanup: bool = False,
    ) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        env = dict(os.environ)
        if shadow is not None:
            env["CRASH_SHADOW"] = str(shadow)
        if cleanup:
            env["CRASH_CLEANUP"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(root), flush, str(batch), str(limit), str(first)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=str(ROOT),
            text=True,
            env=env,
        )
        self.acks: list[tuple[str, int, int, int]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pred_line: str | None, min_acks: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"child exited early with {self.proc.poll()}")
            self._take(line)
            if pred_line is not None and line.strip() == pred_line:
                return
            if pred_line is None and len(self.acks) >= min_acks:
                return
        raise AssertionError(f"timed out waiting for {pred_line or min_acks} (acks={len(self.acks)})")

    def _take(self, line: str) -> None:
        parts = line.split()
        if parts and parts[0] == "ACK" and len(parts) == 5:
            self.acks.append((parts[1], int(parts[2]), int(parts[3]), int(parts[4])))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        # Everything printed before the kill was acknowledged: drain it.
        while True:
            try:
                line = self.lines.get(timeout=5)
            except queue.Empty:
                break
            if line is None:
                break
            self._take(line)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    made: list[Child] = []
    try:
        yield made
    finally:
        for c in made:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait(timeout=10)


def scan_commit_log(store: DefaultMessageStore) -> list[MessageExt]:
    """Every record from min to max offset; asserts the log is well formed end to end."""
    cl = store.commit_log
    out: list[MessageExt] = []
    pos = max(cl.get_min_offset(), 0)  # -1: no file at all
    end = cl.get_max_offset()
    while pos < end:
        data = cl.get_data(pos)
        assert data is not None, pos
        mv, mf = data
        size, magic = int.from_bytes(mv[:4], "big", signed=True), int.from_bytes(mv[4:8], "big")
        if magic == BLANK_MAGIC_CODE:
            assert pos + size == mf.file_end_offset
            pos = mf.file_end_offset
            continue
        msg, nxt = decode_message(mv)
        assert msg.commit_log_offset == pos
        out.append(msg)
        pos += nxt
    assert pos == end  # the tail is clean: the last record ends exactly at the max offset
    return out


def check_consistency(
    store: DefaultMessageStore, records: list[MessageExt], expired_below: int | None = None
) -> None:
    """Consume queues and the index agree with the commit log. `expired_below`: the store had deleted its
    log files below this offset (cleanup) before a power cut, which may bring some back; records there
    are not checked (their queue and index files may have gone for good), and the queues may start
    past offset 0."""
    if expired_below is not None:
        records = [m for m in records if m.commit_log_offset >= expired_below]
    by_queue: dict[int, list[MessageExt]] = {}
    for m in records:
        by_queue.setdefault(m.queue_id, []).append(m)
    for q in range(QUEUES):
        expect = by_queue.get(q, [])
        start = 0
        if expired_below is not None:
            start = expect[0].queue_offset if expect else store.get_max_offset_in_queue("CrashTopic", q)
        assert store.get_max_offset_in_queue("CrashTopic", q) == start + len(expect)
        assert [m.queue_offset for m in expect] == list(range(start, start + len(expect)))
        got: list[MessageExt] = []
        off = start
        while off < start + len(expect):
            res = store.get_message("check", "CrashTopic", q, off, 64, max_total_bytes=1 << 22)
            assert res.status == GetMessageStatus.FOUND
            got.extend(decode_messages(res.body()))
            off = res.next_begin_offset
        assert [m.commit_log_offset for m in got] == [m.commit_log_offset for m in expect]
        cq = store.consume_queue_table["CrashTopic"][q] if expect else None
        for m in expect:  # every unit whole: a consumer filtering by tag reads the tags code
            assert cq is not None
            want = (m.commit_log_offset, m.store_size, store.compute_tags_code(m.topic, m.properties))
            assert cq.get_unit(m.queue_offset) == want, (q, m.queue_offset)
    idx_sample = records[:: max(1, len(records) // 60)] + records[-3:]
    for m in idx_sample:
        res = store.query_message("CrashTopic", m.properties["UNIQ_KEY"], 32, 0, 1 << 62)
        assert [decode_message(b)[0].commit_log_offset for b in res.message_buffers] == [m.commit_log_offset]
        res = store.query_message("CrashTopic", m.properties["KEYS"], 32, 0, 1 << 62)
        assert len(res.message_buffers) == 1


def append_torn_record(root: Path, file_size: int) -> int:
    """Simulate a write cut short by the crash: after the last record of the last file, put the first
    bytes of a copy of that record (with this position as its PHYSICALOFFSET), the rest zeros."""
    files = sorted((root / "commitlog").iterdir())
    while int.from_bytes(files[-1].read_bytes()[4:8], "big") != 0xDAA320A7:
        files.pop()  # an empty, preallocated next file
    data = bytearray(files[-1].read_bytes())
    start = int(files[-1].name)
    pos = prev = 0
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        if int.from_bytes(data[pos + 4 : pos + 8], "big") != 0xDAA320A7 or size <= 0:
            break
        prev, pos = pos, pos + size
    if pos + 300 > len(data):
        return -1  # no room left in this file to fake it
    torn = bytearray(data[prev : prev + 150])
    torn[28:36] = (start + pos).to_bytes(8, "big")
    with open(files[-1], "r+b") as f:
        f.seek(pos)
        f.write(bytes(torn))
    return start + pos


async def run_crash_cycle(tmp_path: Path, children: list[Child], flush: str, batch: int) -> None:
    root = tmp_path / "store"
    child = Child(root, flush, batch)
    children.append(child)
    child.wait_for("READY", 0, 30)
    child.wait_for(None, 3000, 30)
    child.kill()
    acks = child.acks
    assert len(acks) >= 3000
    assert (root / "abort").exists()
    torn_at = append_torn_record(root, child_config(str(root), flush).mappedFileSizeCommitLog)

    store = DefaultMessageStore(child_config(str(root), flush))
    await store.start()
    try:
        assert not store.last_exit_ok
        if torn_at >= 0:
            # The fake torn record is cut off (or the log ends earlier, at a record the kill itself tore).
            assert store.get_commit_log_max_offset() <= torn_at
        records = scan_commit_log(store)
        counts: dict[str, int] = {}
        for m in records:
            counts[m.properties["UNIQ_KEY"]] = counts.get(m.properties["UNIQ_KEY"], 0) + 1
        assert all(c == 1 for c in counts.values())  # nothing duplicated
        by_uniq = {m.properties["UNIQ_KEY"]: m for m in records}
        for uniq, qid, qoff, phy in acks:  # every acknowledged record is there, where it was acked
            m = by_uniq.get(uniq)
            assert m is not None, uniq
            assert (m.queue_id, m.queue_offset, m.commit_log_offset) == (qid, qoff, phy)
        check_consistency(store, records)
        # Writing continues where the log ends, queue offsets continue.
        from .crash_child import message

        before = store.get_max_offset_in_queue("CrashTopic", 1)
        r = await store.put_message(message(10**7, 1))
        assert r.is_ok and r.append_result.logics_offset == before  # type: ignore[union-attr]
        assert await store.wait_dispatched(5)
        n_records = len(records) + 1
    finally:
        await store.shutdown()
    # A clean restart on top agrees too.
    store = DefaultMessageStore(child_config(str(root), flush))
    await store.start()
    try:
        assert store.last_exit_ok
        records = scan_commit_log(store)
        assert len(records) == n_records
        check_consistency(store, records)
    finally:
        await store.shutdown()


async def test_crash_async_flush(tmp_path: Path, children: list[Child]) -> None:
    await run_crash_cycle(tmp_path, children, "ASYNC_FLUSH", 8)


async def test_crash_sync_flush(tmp_path: Path, children: list[Child]) -> None:
    await run_crash_cycle(tmp_path, children, "SYNC_FLUSH", 1)


def killed_when_done(root: Path, children: list[Child], limit: int) -> Child:
    """A SYNC_FLUSH child that stored `limit` messages one at a time, then was SIGKILLed."""
    child = Child(root, "SYNC_FLUSH", 1, limit=limit)
    children.append(child)
    child.wait_for("READY", 0, 30)
    child.wait_for("DONE", 0, 60)
    child.kill()
    return child


async def test_crc_corruption_truncates_on_crash_recovery(tmp_path: Path, children: list[Child]) -> None:
    root = tmp_path / "store"
    acks = killed_when_done(root, children, 600).acks
    assert len(acks) == 600
    file_size = child_config(str(root), "SYNC_FLUSH").mappedFileSizeCommitLog
    last_file_start = max(phy for *_rest, phy in acks) // file_size * file_size
    in_last = [a for a in acks if a[3] >= last_file_start]
    assert len(in_last) >= 10
    victim = in_last[len(in_last) // 2]
    victim_phy = victim[3]
    # Flip one body byte of that record (offset 100 is inside the body for IPv4 hosts).
    path = root / "commitlog" / f"{last_file_start:020d}"
    with open(path, "r+b") as f:
        f.seek(victim_phy - last_file_start + 100)
        b = f.read(1)
        f.seek(victim_phy - last_file_start + 100)
        f.write(bytes([b[0] ^ 0xFF]))

    store = DefaultMessageStore(child_config(str(root), "SYNC_FLUSH"))
    await store.start()
    try:
        assert not store.last_exit_ok
        assert store.get_commit_log_max_offset() == victim_phy  # cut at the corrupt record
        records = scan_commit_log(store)
        kept = {a[0] for a in acks if a[3] < victim_phy}
        assert {m.properties["UNIQ_KEY"] for m in records} == kept
        check_consistency(store, records)
        for uniq, _q, _o, phy in acks:
            if phy >= victim_phy:
                assert store.query_message("CrashTopic", uniq, 32, 0, 1 << 62).message_buffers == []
                assert store.look_message_by_offset(phy) is None
        # New writes go where the corrupt record was and are served normally.
        from .crash_child import message

        q = victim[1]
        before = store.get_max_offset_in_queue("CrashTopic", q)
        r = await store.put_message(message(10**7, q))
        assert r.append_result is not None and r.append_result.wrote_offset == victim_phy
        assert r.append_result.logics_offset == before
        assert await store.wait_dispatched(5)
        res = store.get_message("g", "CrashTopic", q, before, 32)
        assert [m.properties["UNIQ_KEY"] for m in decode_messages(res.body())] == [f"U{10**7:08d}"]
    finally:
        await store.shutdown()
    assert not os.path.exists(root / "abort")


async def test_record_with_a_lost_sector_after_its_body_is_cut(tmp_path: Path, children: list[Child]) -> None:
    """A power cut can write a record's body but not the sector holding its properties' end; the body
    CRC passes, so recovery must see the zero sector (before: the record was kept with its UNIQ_KEY and
    part of its keys gone)."""
    root = tmp_path / "store"
    child = killed_when_done(root, children, 300)
    file_size = child_config(str(root), "SYNC_FLUSH").mappedFileSizeCommitLog
    # The last record whose last sector begins after its body ends: that sector holds only its topic
    # and properties (and nothing that comes after it is kept, as after a real cut).
    victim = None
    for _uniq, _q, _o, phy in sorted(child.acks, key=lambda a: a[3], reverse=True):
        path = root / "commitlog" / f"{phy // file_size * file_size:020d}"
        data = path.read_bytes()
        rec, size = decode_message(memoryview(data)[phy % file_size :])
        end = phy % file_size + size
        last_sector = (end - 1) // 512 * 512
        body_end = end - 2 - len(encode_properties(rec.properties)) - 1 - len(rec.topic.encode())
        if last_sector >= body_end:
            victim = (path, phy, last_sector)
            break
    assert victim is not None
    path, victim_phy, last_sector = victim
    with open(path, "r+b") as f:
        f.seek(last_sector)
        f.write(bytes(file_size - last_sector))
    store = DefaultMessageStore(child_config(str(root), "SYNC_FLUSH"))
    await store.start()
    try:
        assert store.get_commit_log_max_offset() == victim_phy
        records = scan_commit_log(store)
        assert all("UNIQ_KEY" in m.properties for m in records)
        check_consistency(store, records)
    finally:
        await store.shutdown()
