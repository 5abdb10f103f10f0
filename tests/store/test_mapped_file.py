"""MappedFile / MappedFileQueue: naming, append/select, flush positions, truncation, loading."""

from __future__ import annotations

import asyncio
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from store.mapped_file import MappedFile, offset_to_file_name
from store.mapped_file_queue import MappedFileQueue
from store.message_store import DefaultMessageStore

from .conftest import make_msg, small_config


def test_file_name_is_20_digit_offset() -> None:
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"


def test_append_select_and_bounds(tmp_path: Path) -> None:
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(4096)), 4096)
    try:
        assert mf.file_from_offset == 4096 and os.path.getsize(mf.file_name) == 4096
        assert mf.append(b"abc") and mf.append(b"defg")
        assert mf.wrote_position == 7
        assert bytes(mf.select(1, 4)) == b"bcde"  # type: ignore[arg-type]
        assert mf.select(5, 3) is None  # past the written part
        assert bytes(mf.select_to_end(3)) == b"defg"  # type: ignore[arg-type]
        view = mf.select(0, 3)
        assert view is not None and view.readonly
        assert not mf.append(b"x" * 5000)
        mf.fsync_blocking()
    finally:
        mf.destroy_blocking()
    assert not os.path.exists(mf.file_name)


def test_no_temp_files_left_and_sparse_option(tmp_path: Path) -> None:
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(0)), 1 << 20, preallocate=False)
    mf.close_blocking()
    assert sorted(os.listdir(tmp_path)) == [offset_to_file_name(0)]
    assert os.stat(mf.file_name).st_blocks * 512 < (1 << 20)  # sparse


def test_zero_tail(tmp_path: Path) -> None:
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(0)), 8192)
    try:
        mf.append(b"\xff" * 8192)
        mf.zero_tail_blocking(100)
        assert bytes(mf.mm[:100]) == b"\xff" * 100
        assert bytes(mf.mm[100:]) == b"\x00" * 8092
    finally:
        mf.destroy_blocking()


def test_close_with_live_slice_keeps_mapping(tmp_path: Path) -> None:
    mf = MappedFile.create_blocking(str(tmp_path / offset_to_file_name(0)), 4096)
    mf.append(b"keepme")
    view = mf.select(0, 6)
    mf.destroy_blocking()  # a reader still holds `view`: no crash, data still readable
    assert bytes(view) == b"keepme"  # type: ignore[arg-type]
    assert mf.select(0, 1) is None


def test_queue_rolls_finds_and_truncates(tmp_path: Path) -> None:
    q = MappedFileQueue(str(tmp_path / "q"), 1024)
    for _ in range(3):
        mf = q.get_last_mapped_file_blocking()
        assert mf is not None
        mf.append(b"z" * 1024)
    q.get_last_mapped_file_blocking().append(b"y" * 10)  # type: ignore[union-attr]
    assert [mf.file_from_offset for mf in q.mapped_files] == [0, 1024, 2048, 3072]
    assert q.get_max_offset() == 3072 + 10 and q.get_min_offset() == 0
    assert q.find_mapped_file_by_offset(2047).file_from_offset == 1024  # type: ignore[union-attr]
    assert q.find_mapped_file_by_offset(99999) is None
    assert q.roll_next_file(1500) == 2048

    q.truncate_dirty_files_blocking(1500)
    assert [mf.file_from_offset for mf in q.mapped_files] == [0, 1024]
    assert q.get_max_offset() == 1500
    assert bytes(q.mapped_files[1].mm[476:]) == b"\x00" * (1024 - 476)
    assert sorted(os.listdir(tmp_path / "q")) == [offset_to_file_name(0), offset_to_file_name(1024)]
    q.close_blocking()

    q2 = MappedFileQueue(str(tmp_path / "q"), 1024)
    q2.load_blocking()
    assert [mf.file_from_offset for mf in q2.mapped_files] == [0, 1024]
    q2.destroy_blocking()
    assert not (tmp_path / "q").exists()


def test_consume_queue_tail_file_follows_its_last_file(tmp_path: Path) -> None:
    """The dispatcher appends to ConsumeQueue.tail_file: it must be the queue's last file after every
    change to the list (create, load, truncate, delete the last, remove head files, destroy)."""
    from store.consume_queue import ConsumeQueue

    def tail_is_last(cq: ConsumeQueue) -> bool:
        files = cq.mapped_file_queue.mapped_files
        return cq.tail_file is (files[-1] if files else None)

    cq = ConsumeQueue("T", 0, str(tmp_path), 40)
    mfq = cq.mapped_file_queue
    assert cq.tail_file is None
    for _ in range(3):
        mf = mfq.get_last_mapped_file_blocking()
        assert mf is not None and cq.tail_file is mf and tail_is_last(cq)
        mf.append(b"u" * 40)
    assert [mf.file_from_offset for mf in mfq.mapped_files] == [0, 40, 80]
    mfq.truncate_dirty_files_blocking(60)
    assert cq.tail_file is not None and cq.tail_file.file_from_offset == 40 and tail_is_last(cq)
    mfq.delete_last_mapped_file_blocking()
    assert cq.tail_file is not None and cq.tail_file.file_from_offset == 0 and tail_is_last(cq)
    mfq.close_blocking()

    loaded = ConsumeQueue("T", 0, str(tmp_path), 40)
    loaded.load_blocking()
    assert loaded.tail_file is not None and loaded.tail_file.file_from_offset == 0 and tail_is_last(loaded)
    head = loaded.mapped_file_queue.mapped_files[0]
    loaded.mapped_file_queue.remove_first_files([head])
    assert loaded.tail_file is None and tail_is_last(loaded)
    head.destroy_blocking()
    again = loaded.mapped_file_queue.get_last_mapped_file_blocking(80)
    assert again is not None and loaded.tail_file is again
    loaded.mapped_file_queue.destroy_blocking()
    assert loaded.tail_file is None and tail_is_last(loaded)


def test_queue_load_rejects_wrong_size(tmp_path: Path) -> None:
    d = tmp_path / "q"
    d.mkdir()
    (d / offset_to_file_name(0)).write_bytes(b"short")
    (d / (offset_to_file_name(1024) + ".tmp")).write_bytes(b"leftover")
    q = MappedFileQueue(str(d), 1024)
    with pytest.raises(ValueError, match="does not match"):
        q.load_blocking()
    assert not (d / (offset_to_file_name(1024) + ".tmp")).exists()


def test_flush_positions(tmp_path: Path) -> None:
    q = MappedFileQueue(str(tmp_path / "q"), 64 * 1024)
    mf = q.get_last_mapped_file_blocking()
    assert mf is not None
    mf.append(b"a" * 5000)
    assert q.flush_target(4) is None  # fewer than 4 dirty pages
    assert q.flush_target(1) is not None
    assert not q.flush_blocking(0)
    assert q.flushed_where == 5000 and q.remain_how_many_data_to_flush() == 0
    assert q.flush_blocking(0)  # nothing left
    q.destroy_blocking()


async def test_slow_commit_log_preallocation_does_not_hold_up_dispatch(
    make_store: Callable[..., DefaultMessageStore],
) -> None:
    """The next CommitLog file is made ahead of time on its own thread: while that is slow (1 GiB
    fallocate + page-cache read on a first start), the dispatcher still creates the consume queue and
    index files it needs and indexes new messages."""
    store = make_store()
    await store.start()
    assert (await store.put_message(make_msg(topic="First"))).is_ok  # the first file exists
    gate = threading.Event()
    store.commit_log_alloc_executor.submit(gate.wait, 5)  # the preallocation thread is busy
    try:
        for q in range(3):  # new queues: each needs a consume queue file
            assert (await store.put_message(make_msg(topic="SlowAlloc", queue_id=q))).is_ok
        assert await store.wait_dispatched(2), "dispatch waited behind the CommitLog preallocation"
        assert all(store.get_max_offset_in_queue("SlowAlloc", q) == 1 for q in range(3))
    finally:
        gate.set()


def _smaps(path: str) -> dict[str, list[str]]:
    """The proc(5) smaps fields of this process's (first) mapping of `path`: name -> the words after it."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(" " + path):
            fields: dict[str, list[str]] = {}
            for rest in lines[i + 1:]:
                name, _, value = rest.partition(":")
                fields[name] = value.split()
                if name == "VmFlags":  # the last field of a mapping
                    return fields
    raise AssertionError(f"{path} is not mapped")


def _vm_flags(path: str) -> list[str]:
    """The kernel's VmFlags of this process's mapping of `path` (proc(5): "rr" = MADV_RANDOM)."""
    return _smaps(path)["VmFlags"]


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_consume_queue_files_fault_one_page_at_a_time(tmp_path: Path) -> None:
    """ConsumeQueue maps (created or loaded) are advised random, so a write into a new page reads that
    page only, not the disk's read-ahead window around it (with 4 000 queues crossing a page together
    that paged in whole files: 40 000 sends took 20 s). CommitLog maps keep read-ahead."""
    from store.consume_queue import ConsumeQueue

    cq = ConsumeQueue("T", 0, str(tmp_path / "consumequeue"), 6000)
    mf = cq.mapped_file_queue.create_file_blocking(0)
    log = MappedFileQueue(str(tmp_path / "commitlog"), 8192)
    lf = log.create_file_blocking(0)
    try:
        assert "rr" in _vm_flags(mf.file_name)
        assert "rr" not in _vm_flags(lf.file_name)
        # Not in huge pages: 4 000 queues would hold a 2 MiB stretch of page cache each (8 GB).
        assert "hg" not in _vm_flags(mf.file_name)
    finally:
        mf.close_blocking()
        lf.close_blocking()
    loaded = ConsumeQueue("T", 0, str(tmp_path / "consumequeue"), 6000)
    loaded.load_blocking()
    try:
        assert "rr" in _vm_flags(loaded.mapped_file_queue.mapped_files[0].file_name)
    finally:
        for f in loaded.mapped_file_queue.mapped_files:
            f.close_blocking()


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_index_files_fault_one_page_at_a_time(tmp_path: Path) -> None:
    """IndexFile maps (created or loaded) are advised random too: hash slots are written at random and
    entries 20 bytes at a time, on the event loop, and a fault there must not zero-fill the read-ahead
    window (8 MiB on some hosts) of the sparse file around the page. They are advised huge pages as
    well (store.mapped_file.map_in_huge_pages): the slot table is accessed at random."""
    from store.index_service import IndexFile

    path = str(tmp_path / "index" / "20261123000000000")
    f = IndexFile.create_blocking(path, 64, 256, 0, 0)
    hugepage = hasattr(mmap, "MADV_HUGEPAGE")
    try:
        flags = _vm_flags(path)
        assert "rr" in flags and ("hg" in flags) == hugepage  # a new file is the live one
        f.set_live(False)  # rolled past: a key query's cold slot must not read 2 MiB
        flags = _vm_flags(path)
        assert "hg" not in flags and ("nh" in flags) == hugepage
    finally:
        f.close_blocking()
    loaded = IndexFile.open_blocking(path, 64, 256)
    try:
        flags = _vm_flags(path)
        assert "rr" in flags and "hg" not in flags
    finally:
        loaded.close_blocking()


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE") or not Path("/proc/self/smaps").exists(),
                    reason="needs Linux madvise(MADV_HUGEPAGE) and /proc")
def test_only_the_live_index_file_is_in_huge_pages(tmp_path: Path) -> None:
    """IndexService maps the file it writes in huge pages, the ones it has rolled past (or loaded
    full) in 4 KiB pages: loaded, then rolled."""
    from store.index_service import IndexService

    d = str(tmp_path / "index")
    svc = IndexService(d, 64, 256, 32)
    svc.roll_blocking()
    first = svc.index_file_list[0]
    first.put_key_hash(12345, 1000, 1763800000000)  # an entry: the next roll makes a new file
    first.commit_header()
    for f in svc.index_file_list:
        f.close_blocking()
    again = IndexService(d, 64, 256, 32)
    again.load_blocking()
    try:
        (loaded,) = again.index_file_list
        assert "hg" in _vm_flags(loaded.file_name)  # it has room: the live one
        again.roll_blocking()
        old, live = again.index_file_list
        assert "hg" not in _vm_flags(old.file_name) and "hg" in _vm_flags(live.file_name)
    finally:
        for f in again.index_file_list:
            f.close_blocking()


def _rss_kb(path: str) -> int:
    """Resident kB of this process's mapping of `path`."""
    return int(_smaps(path)["Rss"][0])


def _dirty_kb(path: str) -> int:
    """Dirty kB (shared and private) of this process's mapping of `path`."""
    fields = _smaps(path)
    return int(fields["Shared_Dirty"][0]) + int(fields["Private_Dirty"][0])


def _can_populate_for_write() -> bool:
    from store.mapped_file import populate_mapping_blocking

    m = mmap.mmap(-1, 8192)
    try:
        return populate_mapping_blocking(m, 0, 8192)
    finally:
        m.close()


needs_populate_write = pytest.mark.skipif(not Path("/proc/self/smaps").exists() or not _can_populate_for_write(),
                                          reason="checks resident pages in /proc/self/smaps after MADV_POPULATE_WRITE (Linux 5.14+ only)")


@needs_populate_write
def test_live_index_file_is_faulted_in_by_the_creating_or_loading_thread(tmp_path: Path) -> None:
    """IndexFile.create_blocking (the allocation thread) faults in the header, the whole hash slot table and
    the first ENTRIES_AHEAD of entries, so the event loop's first writes there take no zero-filling fault;
    the rest of the (sparse) file stays out. The contents stay zeros and the file stays usable. Loaded
    again as the live file, its slot table is read in at load (from disk, the page cache dropped), dirtying
    nothing."""
    from store.index_service import ENTRIES_AHEAD, INDEX_HEADER_SIZE, IndexFile, IndexService

    slots, entries = 1 << 20, 1 << 20  # a 4 MiB slot table, 20 MiB of entries
    path = str(tmp_path / "index" / "20261123000000000")
    f = IndexFile.create_blocking(path, slots, entries, 0, 0)
    try:
        warm = INDEX_HEADER_SIZE + slots * 4 + ENTRIES_AHEAD
        assert f.warmed_to == warm
        rss = _rss_kb(path) * 1024
        assert warm - 4096 <= rss <= warm + 2 * 1024 * 1024  # (huge folios may round it up to 2 MiB)
        assert rss < f.file_size // 2
        assert f.mm[:INDEX_HEADER_SIZE] != bytes(INDEX_HEADER_SIZE)  # the header is written ...
        assert f.mm[INDEX_HEADER_SIZE:warm] == bytes(warm - INDEX_HEADER_SIZE)  # ... the rest still zeros
        assert f.put_key("T#k1", 1000, 1763800000000)
        found: list[int] = []
        f.select_phy_offsets(found, "T#k1", 4, 0, 1 << 62)
        assert found == [1000]
        f.commit_header()
    finally:
        f.close_blocking()
    # Loaded as the live file (room left): its slot table is read in at load, without dirtying anything.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the page cache dropped: read from disk
    finally:
        os.close(fd)
    svc = IndexService(str(tmp_path / "index"), slots, entries, 32)
    svc.load_blocking()
    try:
        (live,) = svc.index_file_list
        rss = _rss_kb(path) * 1024
        assert INDEX_HEADER_SIZE + slots * 4 - 4096 <= rss < live.file_size // 2
        assert _dirty_kb(path) == 0
        found = []
        live.select_phy_offsets(found, "T#k1", 4, 0, 1 << 62)
        assert found == [1000]
    finally:
        live.close_blocking()


@needs_populate_write
def test_index_entries_are_faulted_in_ahead_of_the_writer(tmp_path: Path) -> None:
    """warm_range hands out the next ENTRIES_AHEAD of entries once the writer is within half of it of what
    was faulted in, once (claimed), and never past the file's end; populate_blocking faults that in."""
    from store.index_service import ENTRIES_AHEAD, INDEX_SIZE, IndexFile

    path = str(tmp_path / "index" / "20261123000000000")
    f = IndexFile.create_blocking(path, 1024, 1 << 20, 0, 0)  # 20 MiB of entries
    try:
        first = f.warmed_to
        assert f.warm_range() is None  # the writer is at the start: far from the end of what is faulted in
        entries_pos = first - ENTRIES_AHEAD
        f.index_count = (ENTRIES_AHEAD // 2) // INDEX_SIZE + 1  # past the half: time for the next stretch
        rng = f.warm_range()
        assert rng == (first, first + ENTRIES_AHEAD)
        assert f.warm_range() is None  # claimed
        before = _rss_kb(path)
        assert f.populate_blocking(*rng)
        assert _rss_kb(path) - before >= ENTRIES_AHEAD // 1024 - 4
        assert f.mm[rng[0]:rng[1]] == bytes(ENTRIES_AHEAD)
        f.index_count = (f.file_size - entries_pos) // INDEX_SIZE - 1  # the writer near the file's end
        rng = f.warm_range()
        assert rng is not None and rng[1] == f.file_size
        assert f.warm_range() is None
    finally:
        f.close_blocking()
    assert f.warm_range() is None and not f.populate_blocking(0, 4096)  # closed


async def test_dispatch_faults_in_the_live_index_files_next_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatcher asks the live index file for its next stretch after each round and has the allocation
    thread fault it in: what is faulted in stays ahead of the writer as keys are added."""
    import store.index_service as index_service

    monkeypatch.setattr(index_service, "ENTRIES_AHEAD", 4096)  # ~200 entries: a stretch every ~100 keys
    store = DefaultMessageStore(small_config(tmp_path / "store", maxHashSlotNum=1024, maxIndexNum=100_000))
    await store.start()
    try:
        for i in range(600):
            assert (await store.put_message(make_msg(body=b"x", uniq=f"U{i:06d}"))).is_ok
            if i % 50 == 0:
                assert await store.wait_dispatched(5)
        assert await store.wait_dispatched(5)
        f = store.index_service.index_file_list[-1]
        assert f.index_count > 600
        writer = f._entries_pos + f.index_count * index_service.INDEX_SIZE
        for _ in range(100):  # the last stretch is faulted in on the allocation thread: bounded wait
            if f.warmed_to > writer:
                break
            await asyncio.sleep(0.01)
        assert writer < f.warmed_to <= writer + 4096 + 4096
    finally:
        await store.shutdown()


class _AppendedMeanwhile(list):  # type: ignore[type-arg]
    """A file list that, the first time it is read, gets `late` appended right after that read: the
    allocation thread's append landing in the middle of a removal on the loop."""

    def __init__(self, items: list[object], late: object) -> None:
        super().__init__(items)
        self.late: object | None = late

    def _appended(self) -> None:
        late, self.late = self.late, None
        if late is not None:
            list.append(self, late)

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from list.__iter__(self)
        self._appended()

    def __len__(self) -> int:
        n = list.__len__(self)
        self._appended()
        return n


def test_removing_head_files_keeps_a_file_appended_meanwhile(tmp_path: Path) -> None:
    """ConsumeQueue and index files are appended on the allocation thread while the loop removes
    expired ones: the removal must edit the list in place, not swap in a copy missing the append."""
    from store.index_service import IndexService

    class F:
        pass

    old = [F(), F(), F()]
    new = F()
    mfq = MappedFileQueue(str(tmp_path / "q"), 1024)
    mfq.mapped_files = _AppendedMeanwhile(old, new)  # type: ignore[assignment]
    mfq.remove_first_files(old[:2])  # type: ignore[arg-type]
    assert [*list.__iter__(mfq.mapped_files)] == [old[2], new]

    idx = IndexService.__new__(IndexService)
    idx.index_file_list = _AppendedMeanwhile(old, new)  # type: ignore[assignment]
    idx.remove_files(old[:1])  # type: ignore[arg-type]
    assert [*list.__iter__(idx.index_file_list)] == [old[1], old[2], new]
