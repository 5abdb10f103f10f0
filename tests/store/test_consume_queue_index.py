"""ConsumeQueue and IndexFile/IndexService as units."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from remoting.message import java_string_hash
from store.consume_queue import ConsumeQueue
from store.index_service import INDEX_HEADER_SIZE, IndexFile, IndexService, index_key_hash


def new_cq(tmp_path: Path, units_per_file: int = 10) -> ConsumeQueue:
    return ConsumeQueue("T", 3, str(tmp_path / "cq"), units_per_file * 20)


def put(cq: ConsumeQueue, i: int, size: int = 100, tags: int = 0) -> None:
    if cq.need_new_file():
        cq.create_next_file_blocking(i)
    assert cq.put_message_position_info(i * 1000, size, tags, i)


def test_cq_layout_rolling_and_offsets(tmp_path: Path) -> None:
    cq = new_cq(tmp_path)
    for i in range(25):
        put(cq, i, tags=java_string_hash("TagA"))
    files = sorted(os.listdir(tmp_path / "cq" / "T" / "3"))
    assert files == ["00000000000000000000", "00000000000000000200", "00000000000000000400"]
    assert cq.get_max_offset_in_queue() == 25 and cq.get_min_offset_in_queue() == 0
    raw = (tmp_path / "cq" / "T" / "3" / files[1]).read_bytes()
    assert struct.unpack(">qiq", raw[:20]) == (10 * 1000, 100, java_string_hash("TagA"))
    assert cq.get_unit(24) == (24000, 100, java_string_hash("TagA"))
    assert cq.get_unit(25) is None
    mv, _mf = cq.get_index_buffer(12)  # type: ignore[misc]
    assert len(mv) == 8 * 20  # to the end of the written part of that file
    assert cq.roll_next_file(12) == 20
    # Replays are ignored.
    assert cq.put_message_position_info(5000, 100, 0, 5)
    assert cq.get_max_offset_in_queue() == 25
    cq.close_blocking()


def test_cq_recover_and_truncate(tmp_path: Path) -> None:
    cq = new_cq(tmp_path)
    for i in range(25):
        put(cq, i)
    cq.close_blocking()
    cq2 = new_cq(tmp_path)
    cq2.load_blocking()
    cq2.recover_blocking()
    assert cq2.get_max_offset_in_queue() == 25
    assert cq2.max_physic_offset == 24 * 1000 + 100
    # The commit log was cut at 12 500: units pointing at or past it go.
    cq2.truncate_dirty_logic_files_blocking(12500)
    assert cq2.get_max_offset_in_queue() == 13
    assert cq2.max_physic_offset == 12 * 1000 + 100
    assert sorted(os.listdir(tmp_path / "cq" / "T" / "3")) == ["00000000000000000000", "00000000000000000200"]
    mf = cq2.mapped_file_queue.mapped_files[-1]
    assert bytes(mf.mm[60:]) == b"\x00" * (200 - 60)  # the tail is zeroed, a later recovery can't see it
    cq2.close_blocking()


def test_a_queue_that_began_past_zero_takes_units_after_a_cut_to_its_blanks(tmp_path: Path) -> None:
    """A queue whose first file begins past offset 0 (its older files cleaned up) starts with blank units
    (0, INT_MAX). A cut that leaves only those blanks (recovery cut the commit log before the queue's
    first real unit) must leave the queue taking units again: the blank's INT_MAX end counted as the
    last record dispatched, so every later unit was skipped as already built, and the queue stayed
    empty for good (seen after a power cut with cleanup: 2 864 records a queue, none consumable)."""
    cq = new_cq(tmp_path)
    cq.create_next_file_blocking(0)
    cq.mapped_file_queue.mapped_files[-1].first_create_in_queue = True
    assert cq.put_message_position_info(5000, 100, 0, 5)  # the queue's first unit, at offset 5
    assert cq.get_min_offset_in_queue() == 5 and cq.get_max_offset_in_queue() == 6
    cq.truncate_dirty_logic_files_blocking(4000)  # the commit log was cut before offset 5's record
    assert cq.get_max_offset_in_queue() == 5
    assert cq.max_physic_offset < 4000
    assert cq.put_message_position_info(4000, 100, 7, 5)  # dispatched again after the cut
    assert cq.get_unit(5) == (4000, 100, 7)
    cq.close_blocking()
    cq2 = new_cq(tmp_path)  # and after a restart that finds only blanks and that unit
    cq2.load_blocking()
    cq2.recover_blocking()
    assert cq2.max_physic_offset == 4100
    cq2.truncate_dirty_logic_files_blocking(4000)
    assert cq2.max_physic_offset < 4000 and cq2.get_last_offset() < 4000
    cq2.close_blocking()


def _open_descriptors_of(path: Path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors through /proc/self/fd (Linux only)")
def test_cq_files_hold_one_descriptor_each_and_still_sync_and_truncate(tmp_path: Path) -> None:
    """Python's mmap keeps a duplicate of the descriptor it maps: keeping ours too made every queue file
    two open files, and a broker ran out of them at half the topics. A ConsumeQueue keeps only the
    mapping's; what needs a descriptor of its own opens the file for the call."""
    cq = new_cq(tmp_path)
    for i in range(25):
        put(cq, i)
    files = [tmp_path / "cq" / "T" / "3" / f for f in sorted(os.listdir(tmp_path / "cq" / "T" / "3"))]
    assert len(files) == 3 and [_open_descriptors_of(f) for f in files] == [1, 1, 1]
    mfq = cq.mapped_file_queue
    assert mfq.flush_blocking(0) is False and mfq.flushed_where == 200  # fdatasync through a fresh descriptor
    cq.truncate_dirty_logic_files_blocking(12500)  # ftruncate / fallocate through one
    assert cq.get_max_offset_in_queue() == 13
    assert [_open_descriptors_of(f) for f in files[:2]] == [1, 1] and _open_descriptors_of(files[2]) == 0
    cq.close_blocking()
    assert [_open_descriptors_of(f) for f in files[:2]] == [0, 0]


def test_sparse_cq_files_stay_sparse_through_recovery_and_truncation(tmp_path: Path) -> None:
    """A store's queue files are sparse, as Java's. Recovery zeroed each queue's tail and then allocated it
    (posix_fallocate): every restart gave every queue its whole file on disk, 24 GB for 1 000 topics x 4
    queues of 6 MB files, and a restart with 2 500 topics filled this machine's disk."""
    size = 20 * 100_000  # 2 MB files

    def sparse_cq() -> ConsumeQueue:
        return ConsumeQueue("T", 3, str(tmp_path / "cq"), size, preallocate=False)

    def allocated(cq: ConsumeQueue) -> int:
        return sum(os.stat(mf.file_name).st_blocks * 512 for mf in cq.mapped_file_queue.mapped_files)

    cq = sparse_cq()
    for i in range(25):
        put(cq, i)
    assert allocated(cq) < 256 * 1024
    cq.close_blocking()
    cq2 = sparse_cq()
    cq2.load_blocking()
    cq2.recover_blocking()
    assert cq2.get_max_offset_in_queue() == 25
    assert allocated(cq2) < 256 * 1024
    cq2.truncate_dirty_logic_files_blocking(12500)
    assert cq2.get_max_offset_in_queue() == 13
    assert allocated(cq2) < 256 * 1024
    mf = cq2.mapped_file_queue.mapped_files[-1]
    assert bytes(mf.mm[13 * 20 : 40 * 20]) == bytes(27 * 20)  # the stale units are gone all the same
    cq2.close_blocking()


def test_cq_min_offset_correction_and_expiry(tmp_path: Path) -> None:
    cq = new_cq(tmp_path)
    for i in range(25):
        put(cq, i)
    cq.correct_min_offset(7000)
    assert cq.get_min_offset_in_queue() == 7
    expired = cq.files_expired_by_offset(15000)
    assert [mf.file_from_offset for mf in expired] == [0]  # second file's last unit is at 19000
    assert cq.get_index_buffer(3) is None  # below the min offset
    cq.close_blocking()


def test_cq_offset_by_time(tmp_path: Path) -> None:
    cq = new_cq(tmp_path)
    for i in range(20):
        put(cq, i)
    times = {i * 1000: 1_000_000 + i * 10 for i in range(20)}

    def pick(phy: int, size: int) -> int:
        return times[phy]

    assert cq.get_offset_in_queue_by_time(0, pick, 0) == 0
    assert cq.get_offset_in_queue_by_time(1_000_050, pick, 0) == 5
    assert cq.get_offset_in_queue_by_time(1_000_051, pick, 0) == 6
    assert cq.get_offset_in_queue_by_time(9_999_999, pick, 0) == 20
    cq.close_blocking()


# ------------------------------------------------------------------------------------------ index


def test_index_key_hash() -> None:
    assert index_key_hash("TopicTest#k1") == abs(java_string_hash("TopicTest#k1"))
    assert index_key_hash("polygenelubricants") == 0  # Integer.MIN_VALUE
    assert IndexService.key_hash("TopicTest", "k1") == index_key_hash("TopicTest#k1")


def test_index_file_layout_and_query(tmp_path: Path) -> None:
    path = str(tmp_path / "idx" / "20240101000000000")
    f = IndexFile.create_blocking(path, 8, 50, 0, 0)
    assert os.path.getsize(path) == 40 + 8 * 4 + 50 * 20
    base = 1_700_000_000_000
    for i in range(30):
        assert f.put_key(f"T#k{i % 5}", 1000 + i, base + i * 1000)
    f.commit_header()
    header = struct.unpack_from(">qqqqii", f.mm, 0)
    assert header[0] == base and header[1] == base + 29_000
    assert header[2] == 1000 and header[3] == 1029
    assert header[5] == 31  # index count starts at 1
    out: list[int] = []
    f.select_phy_offsets(out, "T#k3", 32, 0, 1 << 62)
    assert out == [1028, 1023, 1018, 1013, 1008, 1003]  # newest first
    out = []
    f.select_phy_offsets(out, "T#k3", 2, 0, 1 << 62)
    assert out == [1028, 1023]
    out = []
    f.select_phy_offsets(out, "T#k3", 32, base + 10_000, base + 20_000)
    assert out == [1018, 1013]
    # Entry layout: [keyHash][phyOffset][timeDiff s][prevIndex].
    slot = index_key_hash("T#k3") % 8
    last = struct.unpack_from(">i", f.mm, INDEX_HEADER_SIZE + slot * 4)[0]
    assert struct.unpack_from(">iqii", f.mm, 40 + 8 * 4 + last * 20)[1:3] == (1028, 28)
    f.close_blocking()

    g = IndexFile.open_blocking(path, 8, 50)
    assert g.index_count == 31 and g.end_phy_offset == 1029
    for i in range(30, 49):
        assert g.put_key("T#x", 2000 + i, base + i * 1000)
    assert g.is_write_full() and not g.put_key("T#x", 1, base)
    g.destroy_blocking()


def test_index_file_rolls_forward_lazy_header(tmp_path: Path) -> None:
    path = str(tmp_path / "20240101000000000")
    f = IndexFile.create_blocking(path, 8, 50, 0, 0)
    base = 1_700_000_000_000
    for i in range(10):
        f.put_key(f"T#k{i}", 500 + i, base + i * 1000)
    # Simulate a crash: the header (written lazily) still says 2 entries.
    struct.pack_into(">i", f.mm, 36, 2)
    f.mm.flush()
    os.close(f._fd)  # drop without committing the in-memory header
    f._closed = True
    g = IndexFile.open_blocking(path, 8, 50)
    assert g.index_count == 11 and g.end_phy_offset == 509
    out: list[int] = []
    g.select_phy_offsets(out, "T#k7", 10, 0, 1 << 62)
    assert out == [507]
    g.close_blocking()


def test_index_torn_slot_update_heals(tmp_path: Path) -> None:
    path = str(tmp_path / "20240101000000000")
    f = IndexFile.create_blocking(path, 1, 50, 0, 0)  # one slot: every key chains together
    f.put_key("T#a", 1, 1000)
    f.put_key("T#b", 2, 1000)
    # Torn put: entry 3 and the slot written, count not incremented.
    count = f.index_count
    struct.pack_into(">iqii", f.mm, 40 + 4 + count * 20, index_key_hash("T#c"), 3, 0, 2)
    struct.pack_into(">i", f.mm, 40, count)
    out: list[int] = []
    f.select_phy_offsets(out, "T#a", 10, 0, 1 << 62)
    assert out == [1]  # the uncommitted entry is skipped, the chain is intact
    f.put_key("T#c", 3, 1000)  # the replay
    out = []
    f.select_phy_offsets(out, "T#a", 10, 0, 1 << 62)
    assert out == [1]
    out = []
    f.select_phy_offsets(out, "T#c", 10, 0, 1 << 62)
    assert out == [3]
    f.destroy_blocking()


def test_index_service_rolls_and_queries_across_files(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 16, 10, 64)
    for i in range(25):
        if not svc.has_room(1):
            svc.roll_blocking()
        svc.build_index("T", 100 * i, 1_700_000_000_000 + i, 0, None, f"U{i % 3}")
    assert len(svc.index_file_list) == 3
    r = svc.query_offset("T", "U1", 32, 0, 1 << 62)
    assert r.phy_offsets == [100 * i for i in range(25) if i % 3 == 1][::-1]
    assert r.index_last_update_phyoffset == 2400
    assert svc.query_offset("T", "U1", 3, 0, 1 << 62).phy_offsets == [2200, 1900, 1600]
    assert svc.query_offset("Other", "U1", 32, 0, 1 << 62).phy_offsets == []
    # Replaying an indexed record is a no-op.
    svc.build_index("T", 2400, 1_700_000_000_024, 0, None, "U0")
    assert svc.query_offset("T", "U0", 32, 0, 1 << 62).phy_offsets.count(2400) == 1
    # Rollback records are not indexed.
    svc.build_index("T", 2500, 1_700_000_000_025, 0xC, "K", None)
    assert svc.query_offset("T", "K", 32, 0, 1 << 62).phy_offsets == []
    expired = svc.files_expired_by_offset(1500)
    assert len(expired) == 1
    # The commit log was cut at 2000: the last file (1800..2500) goes, rebuild from its first record.
    assert svc.truncate_past_blocking(2000) == 1800
    assert len(svc.index_file_list) == 2 and svc.dispatch_progress() == 1700
    assert svc.truncate_past_blocking(5000) is None
    svc.close_blocking()


def test_the_next_index_file_is_made_ahead_and_published_at_the_roll(tmp_path: Path) -> None:
    """Made at the roll, a new index file (its slot table faulted in: 50-90 ms here) held up the dispatcher
    every index_num keys. Once the live file is NEXT_AHEAD_FULL full the next one is made under its temporary
    name; the roll gives it its name and where the last one ended; a crash before that leaves a .tmp only."""
    root = tmp_path / "index"
    svc = IndexService(str(root), 16, 20, 64)
    svc.roll_blocking()
    i = 0
    while svc.index_file_list[-1].index_count < 20 * 0.75:
        assert not svc.next_wanted()
        svc.build_index("T", 100 * i, 1_700_000_000_000 + i, 0, None, f"U{i}")
        i += 1
    assert svc.next_wanted() and not svc.next_wanted()  # claimed once
    svc.prepare_next_blocking()
    ahead = svc._next
    assert ahead is not None and not svc.next_wanted()
    assert sorted(os.listdir(root)) == sorted([os.path.basename(svc.index_file_list[0].file_name),
                                               os.path.basename(ahead.file_name) + ".tmp"])
    while svc.has_room(1):
        svc.build_index("T", 100 * i, 1_700_000_000_000 + i, 0, None, f"U{i}")
        i += 1
    last = svc.index_file_list[-1]
    svc.roll_blocking()
    assert svc.index_file_list[-1] is ahead and svc._next is None
    assert ahead.begin_phy_offset == last.end_phy_offset and ahead.begin_timestamp == last.end_timestamp
    assert not [n for n in os.listdir(root) if n.endswith(".tmp")] and os.path.exists(ahead.file_name)
    svc.build_index("T", 100 * i, 1_700_000_000_000 + i, 0, None, "After")
    assert svc.query_offset("T", "After", 32, 0, 1 << 62).phy_offsets == [100 * i]
    assert svc.query_offset("T", "U3", 32, 0, 1 << 62).phy_offsets == [300]
    # Made ahead, then a crash: the restart removes the .tmp and keeps the two files.
    while svc.index_file_list[-1].index_count < 20 * 0.75:
        i += 1
        svc.build_index("T", 100 * i, 1_700_000_000_000 + i, 0, None, f"U{i}")
    assert svc.next_wanted()
    svc.prepare_next_blocking()
    assert len([n for n in os.listdir(root) if n.endswith(".tmp")]) == 1
    again = IndexService(str(root), 16, 20, 64)  # a restart after a crash (svc never closed)
    again.load_blocking()
    assert len(again.index_file_list) == 2 and not [n for n in os.listdir(root) if n.endswith(".tmp")]
    again.close_blocking()
    svc.close_blocking()
    # A clean close drops a file made ahead.
    svc2 = IndexService(str(tmp_path / "index2"), 16, 20, 64)
    svc2.roll_blocking()
    svc2.prepare_next_blocking()
    svc2.close_blocking()
    assert os.listdir(tmp_path / "index2") == [os.path.basename(svc2.index_file_list[0].file_name)]


def test_a_file_made_ahead_that_cannot_be_published_is_dropped_and_the_roll_makes_one(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 16, 20, 64)
    svc.roll_blocking()
    svc.build_index("T", 100, 1_700_000_000_000, 0, None, "U0")
    svc.prepare_next_blocking()
    ahead = svc._next
    assert ahead is not None
    os.unlink(ahead.file_name + ".tmp")  # the rename at the roll fails
    svc.roll_blocking()
    assert svc._next is None and len(svc.index_file_list) == 2 and svc.index_file_list[-1] is not ahead
    assert ahead._closed and os.path.exists(svc.index_file_list[-1].file_name)
    svc.build_index("T", 200, 1_700_000_000_001, 0, None, "U1")
    assert svc.query_offset("T", "U1", 32, 0, 1 << 62).phy_offsets == [200]
    svc.close_blocking()


def test_a_fresh_first_index_file_survives_a_recovery_cut_at_zero(tmp_path: Path) -> None:
    """The store makes its first index file at start; a recovery whose CommitLog ends at 0 has nothing past
    the cut in it, and dropping it only made the file again."""
    svc = IndexService(str(tmp_path / "index"), 16, 20, 64)
    svc.roll_blocking()
    first = svc.index_file_list[0]
    assert svc.truncate_past_blocking(0) is None and svc.index_file_list == [first]
    svc.build_index("T", 0, 1_700_000_000_000, 0, None, "U0")  # a record at 0: a cut at 0 drops it
    assert svc.truncate_past_blocking(0) == 0 and svc.index_file_list == []
    svc.close_blocking()


def test_index_replay_adds_only_missing_keys(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 16, 100, 64)
    svc.roll_blocking()
    svc.build_index("T", 0, 1_700_000_000_000, 0, "A", "U0")
    # Crash after the UNIQ_KEY entry of the record at 500, before its KEYS entries.
    f = svc.index_file_list[-1]
    f.put_key_hash(svc.key_hash("T", "U1"), 500, 1_700_000_000_001)
    svc.build_index("T", 500, 1_700_000_000_001, 0, "B C", "U1")  # the replay
    for key, expect in (("U1", [500]), ("B", [500]), ("C", [500]), ("A", [0]), ("U0", [0])):
        assert svc.query_offset("T", key, 32, 0, 1 << 62).phy_offsets == expect, key
    svc.close_blocking()


def test_index_truncate_rewinds_keyless_progress(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 16, 100, 64)
    svc.roll_blocking()
    svc.build_index("T", 0, 1_700_000_000_000, 0, None, None)  # keyless records only move the mark
    svc.build_index("T", 700, 1_700_000_000_001, 0, None, None)
    assert svc.dispatch_progress() == 700
    assert svc.truncate_past_blocking(500) == 0  # the log now ends before the mark: redo from the start
    assert svc.index_file_list == []
    svc.close_blocking()


def test_cq_new_file_gets_its_first_page_off_the_writer(tmp_path: Path) -> None:
    """A new (sparse) consume queue file has the page its first unit goes to allocated by the creating
    (worker) thread, not by the loop's first write through the mapping; the rest stays a hole."""
    cq = ConsumeQueue("T", 0, str(tmp_path / "cq"), 3000 * 20, preallocate=False)  # sparse, as the store makes them
    cq.create_next_file_blocking(1000)  # a queue whose first unit is unit 1000 (byte 20 000: page 4)
    path = tmp_path / "cq" / "T" / "0" / "00000000000000000000"
    st = os.stat(path)
    assert st.st_size == 3000 * 20
    assert 0 < st.st_blocks * 512 <= 3 * 4096  # that page (plus fs metadata rounding), not the file
    with open(path, "rb") as f:
        assert f.read() == bytes(3000 * 20)  # contents unchanged: still all zeros
    cq.close_blocking()
