"""DeadlineFifos: one loop timer for many deadlines, entries answered early taken out at once."""

from __future__ import annotations

import asyncio
import sys
import time

from remoting.deadlines import DeadlineFifos


class Entry:
    __slots__ = ("name", "deadline", "finished")

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.deadline = time.monotonic() + timeout_s
        self.finished = False

    def again(self, timeout_s: float) -> Entry:
        """The same object used for a later request (as a reused request state is)."""
        self.deadline = time.monotonic() + timeout_s
        self.finished = False
        return self


async def until(cond, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_entries_expire_in_deadline_order_and_discarded_ones_never() -> None:
    expired: list[str] = []
    fifos: DeadlineFifos[Entry] = DeadlineFifos(lambda es, _now: expired.extend(e.name for e in es))
    a, b, c, d = Entry("a", 0.03), Entry("b", 0.05), Entry("c", 0.06), Entry("d", 0.04)
    for e in (a, b, c):
        fifos.add(50, e)
    fifos.add(40, d)  # another time-out value: its own order
    b.finished = True
    fifos.discard(50, b)  # answered: gone at once
    assert len(fifos) == 3
    await until(lambda: len(expired) == 3)
    assert sorted(expired) == ["a", "c", "d"] and expired.index("a") < expired.index("c")  # b: never
    assert len(fifos) == 0


async def test_answered_entries_behind_a_waiting_one_are_not_kept() -> None:
    """The head waits long; everything behind it is answered: only the head stays tracked (a FIFO that
    dropped finished entries at its head only kept them all until a compaction)."""
    fifos: DeadlineFifos[Entry] = DeadlineFifos(lambda es, _now: None)
    fifos.add(15000, Entry("idle", 15))
    for i in range(10000):
        e = Entry(str(i), 15)
        fifos.add(15000, e)
        e.finished = True
        fifos.discard(15000, e)
    assert len(fifos) == 1
    fifos.clear()


async def test_finished_but_not_discarded_entries_are_dropped_by_the_scan() -> None:
    expired: list[str] = []
    fifos: DeadlineFifos[Entry] = DeadlineFifos(lambda es, _now: expired.extend(e.name for e in es))
    quiet = Entry("quiet", 0.02)
    fifos.add(20, quiet)
    fifos.add(20, Entry("late", 0.04))
    quiet.finished = True  # finished without telling the FIFO
    await until(lambda: expired == ["late"])
    assert len(fifos) == 0


async def test_a_reused_entry_moves_to_the_back_with_its_new_deadline() -> None:
    """An entry answered and started again must not keep its old place with its new, later deadline: the
    entries behind it would expire only when it does."""
    expired: list[tuple[str, float]] = []
    fifos: DeadlineFifos[Entry] = DeadlineFifos(
        lambda es, now: expired.extend((e.name, now - e.deadline) for e in es))
    reused = Entry("reused", 0.3)
    fifos.add(300, reused)
    await asyncio.sleep(0.1)
    other = Entry("other", 0.3)
    fifos.add(300, other)
    await asyncio.sleep(0.1)
    reused.finished = True  # answered without a discard (a caller relying on the scan)...
    fifos.add(300, reused.again(0.3))  # ...and started again: now due 100 ms after `other`
    await until(lambda: len(expired) == 1)
    name, late_by = expired[0]
    assert name == "other" and late_by < 0.06  # not at reused's new deadline, 100 ms later
    await until(lambda: len(expired) == 2)
    assert expired[1][0] == "reused" and len(fifos) == 0


async def test_a_drained_burst_gives_its_memory_back_at_the_next_scan() -> None:
    """A dict keeps its size when entries leave: after a burst the scan copies what is left into one sized for it."""
    fifos: DeadlineFifos[Entry] = DeadlineFifos(lambda es, _now: None)
    fifos.add(5000, Entry("keeper", 60))  # still waiting when the scan runs
    burst = [Entry(str(i), 60) for i in range(50_000)]
    for e in burst:
        fifos.add(5000, e)
    for e in burst:
        e.finished = True
        fifos.discard(5000, e)
    big = sys.getsizeof(fifos._queues[5000])
    assert big > 1024 * 1024 and len(fifos) == 1
    fifos.add(5000, Entry("soon", 0.02))  # out of deadline order on purpose: it makes the scan run now
    await until(lambda: sys.getsizeof(fifos._queues[5000]) < 64 * 1024)
    assert len(fifos) == 2
    fifos.clear()
