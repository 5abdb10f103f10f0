"""Power cuts, not only SIGKILLs (power_loss.py): after each, the store must recover to a well-formed
log whose consume queues and index agree with it, and with SYNC_FLUSH it must hold every message it
acknowledged, at the queue and offsets it acknowledged. Each cut is followed by another run of the store
on what the cut left, recovering it itself (with its durability calls recorded too) before the next cut,
so what recovery writes must be durable as well. With cleanup, what the store had deleted before a cut
is excused (a cut may also bring some of it back)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path

import pytest

from store.message_store import DefaultMessageStore

from .crash_child import child_config
from .power_loss import crash_image, start_shadow
from .test_crash import Child, check_consistency, children, scan_commit_log

__all__ = ["children"]  # the fixture, shared with test_crash

Ack = tuple[int, int, int]  # queue id, queue offset, commit log offset


def sent_properties(body: bytes) -> dict[str, str]:
    """The properties crash_child.message(i) gave the message with this body."""
    i = int(body.split(b"-", 2)[1])
    return {"TAGS": f"Tag{i % 3}", "KEYS": f"K{i}", "UNIQ_KEY": f"U{i:08d}"}


async def check_image(
    image: Path, flush: str, acked: dict[str, Ack], durable: dict[str, int], context: str,
    expired_below: int | None = None,
) -> dict[str, int]:
    """Recover a copy of `image` in process; returns the messages it holds (id -> commit log offset).
    `durable`: what an earlier cut left (every later cut must keep it). `expired_below`: the store had
    deleted its log files below this offset (cleanup); what lay there may be gone."""
    root = image.parent / (image.name + "-check")
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(image, root)
    store = DefaultMessageStore(child_config(str(root), flush))
    await store.start()
    try:
        records = scan_commit_log(store)
        torn = [m.commit_log_offset for m in records if m.properties != sent_properties(m.body)]
        assert not torn, f"{context}: records kept with their properties cut, at {torn}"
        by_uniq = {m.properties["UNIQ_KEY"]: m for m in records}
        assert len(by_uniq) == len(records), f"{context}: a message stored twice"
        must = dict(durable)
        if flush == "SYNC_FLUSH":
            must.update((u, a[2]) for u, a in acked.items())
        lost = sorted(u for u, phy in must.items() if u not in by_uniq and phy >= (expired_below or 0))
        assert not lost, f"{context}: {len(lost)} acknowledged or durable messages lost, first {lost[:3]}"
        for uniq, m in by_uniq.items():
            if uniq in acked:
                assert (m.queue_id, m.queue_offset, m.commit_log_offset) == acked[uniq], f"{context}: {uniq} moved"
        check_consistency(store, records, expired_below)
        return {u: m.commit_log_offset for u, m in by_uniq.items()}
    finally:
        await store.shutdown()
        shutil.rmtree(root)


async def power_cut_cycles(
    tmp_path: Path, children: list[Child], flush: str, batch: int, seed: int, cycles: int = 3,
    cleanup: bool = False,
) -> None:
    rng = random.Random(seed)
    live = tmp_path / "live0"
    shadow = tmp_path / "shadow"
    start_shadow(shadow)
    acked: dict[str, Ack] = {}
    durable: dict[str, int] = {}
    first = 0
    for cycle in range(cycles):
        child = Child(live, flush, batch, limit=4000, first=first, shadow=shadow, cleanup=cleanup)
        children.append(child)
        child.wait_for("READY", 0, 30)
        child.wait_for(None, rng.randrange(200, 1200), 60)
        await asyncio.sleep(rng.uniform(0, 0.5))  # flushes and checkpoints under way, or (done) all idle
        child.kill()
        for uniq, qid, qoff, phy in child.acks:
            acked[uniq] = (qid, qoff, phy)
        first += 100_000
        keep = rng.choice([None, None, 0.0, 0.5, 0.95])
        expired_below = min(int(n) for n in os.listdir(live / "commitlog") if n.isdigit()) if cleanup else None
        image = tmp_path / f"image{cycle}"
        stats = crash_image(live, shadow, image, rng, keep)
        (image / "abort").write_text("the boot before the cut")  # (its fsynced name is in every image)
        context = f"seed {seed} cycle {cycle} keep {keep} acks {len(child.acks)} {stats}"
        durable = await check_image(image, flush, acked, durable, context, expired_below)
        # What the cut lost is gone for good (ASYNC_FLUSH); the next run starts from what it left.
        acked = {u: a for u, a in acked.items() if u in durable}
        live = tmp_path / f"live{cycle + 1}"
        shutil.copytree(image, live)
        start_shadow(shadow, durable_root=live)
        shutil.rmtree(tmp_path / f"live{cycle}")


@pytest.mark.parametrize("seed", range(6))
async def test_power_cut_sync_flush(tmp_path: Path, children: list[Child], seed: int) -> None:
    await power_cut_cycles(tmp_path, children, "SYNC_FLUSH", 1, seed)


@pytest.mark.parametrize("seed", range(6))
async def test_power_cut_async_flush(tmp_path: Path, children: list[Child], seed: int) -> None:
    await power_cut_cycles(tmp_path, children, "ASYNC_FLUSH", 8, seed)


@pytest.mark.parametrize("seed", range(3))
async def test_power_cut_sync_flush_with_cleanup(tmp_path: Path, children: list[Child], seed: int) -> None:
    """The store deletes expired files all along (every CommitLog file but the last expires at once)."""
    await power_cut_cycles(tmp_path, children, "SYNC_FLUSH", 1, 100 + seed, cleanup=True)


@pytest.mark.parametrize("seed", range(3))
async def test_power_cut_async_flush_with_cleanup(tmp_path: Path, children: list[Child], seed: int) -> None:
    await power_cut_cycles(tmp_path, children, "ASYNC_FLUSH", 8, 100 + seed, cleanup=True)
