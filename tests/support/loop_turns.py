"""Counting the event loop's turns while a coroutine runs: does it let other tasks in between its slices?"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class LoopTurns:
    """`turns`: how many times another task got the loop so far."""

    def __init__(self) -> None:
        self.turns = 0
        self.stopped = False

    async def _tick(self) -> None:
        while not self.stopped:
            self.turns += 1
            await asyncio.sleep(0)


@asynccontextmanager
async def counting_loop_turns() -> AsyncIterator[LoopTurns]:
    """A task that counts one each time it gets the loop, for the block's duration (started before it)."""
    counter = LoopTurns()
    task = asyncio.get_running_loop().create_task(counter._tick())
    await asyncio.sleep(0)
    try:
        yield counter
    finally:
        counter.stopped = True
        await task
