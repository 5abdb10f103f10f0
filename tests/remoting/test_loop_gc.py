"""remoting.loop's collector policy: what survives a full collection is frozen; a rescan bounds what that keeps."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from remoting.loop import LongLivedFreezer, run


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    other: Node | None = None


@pytest.fixture
def clock() -> Iterator[Clock]:
    c = Clock()
    yield c
    gc.unfreeze()  # leave the test process's collector as it found it
    gc.collect()


def test_what_survives_a_full_collection_is_frozen(clock: Clock) -> None:
    freezer = LongLivedFreezer(rescan_interval_s=600, clock=clock)
    freezer.install()
    try:
        # (read first: a full collection the allocations below set off may already freeze some of them)
        before = gc.get_freeze_count()
        held = [[] for _ in range(5000)]  # long-lived state made after start-up (lists are always tracked)
        gc.collect()
        assert freezer.freezes >= 1
        assert gc.get_freeze_count() >= before + 5000
        walked = {id(o) for o in gc.get_objects()}  # every generation a collection walks
        assert id(held) not in walked and id(held[0]) not in walked
        made_later = [[]]
        assert id(made_later) in {id(o) for o in gc.get_objects()}
    finally:
        freezer.uninstall()
    assert freezer._on_gc not in gc.callbacks


def test_a_frozen_cycle_dropped_later_is_collected_after_the_rescan(clock: Clock) -> None:
    freezer = LongLivedFreezer(rescan_interval_s=600, clock=clock)
    freezer.install()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        gc.collect()  # survives: frozen
        del a, b
        gc.collect()
        assert alive() is not None  # the price: a frozen cycle waits for the rescan
        clock.now += 601
        gc.collect()  # due: the frozen objects go back
        assert freezer.rescans == 1
        gc.collect()  # walks everything once
        assert alive() is None
        assert freezer.freezes >= 2  # and what survived that is frozen again
    finally:
        freezer.uninstall()


def test_full_collections_further_apart_than_the_interval_still_freeze_after_each_rescan(clock: Clock) -> None:
    """An idle process's full collections can come more than rescan_interval_s apart: each one then found the
    rescan due, unfroze, and nothing was ever frozen again (the start-up freeze undone for good)."""
    freezer = LongLivedFreezer(rescan_interval_s=600, clock=clock)
    freezer.install()
    try:
        held = [[] for _ in range(2000)]
        for _ in range(4):
            clock.now += 700
            gc.collect()
        assert freezer.rescans == 2 and freezer.freezes == 2  # unfreeze, freeze, unfreeze, freeze
        assert gc.get_freeze_count() >= len(held)
    finally:
        freezer.uninstall()


def test_run_installs_the_freezer_for_its_coroutine_only(clock: Clock) -> None:
    def installed() -> bool:
        return any(isinstance(getattr(cb, "__self__", None), LongLivedFreezer) for cb in gc.callbacks)

    async def main() -> bool:
        return installed()

    assert not installed()
    assert run(main()) is True
    assert not installed()
