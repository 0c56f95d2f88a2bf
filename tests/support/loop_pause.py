"""How long the running event loop stood still while a piece of work was awaited."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")
TICK = 0.02  # seconds between the watcher's wake-ups


async def longest_pause(work: Awaitable[T]) -> tuple[T, float]:
    """``work``'s result, and the longest time between two wake-ups of a task that asks to
    wake every TICK meanwhile: about TICK while the loop goes on, the whole block if a call
    holds the loop up."""
    woke = [time.monotonic()]  # the watcher's wake-ups

    async def watch() -> None:
        while True:
            await asyncio.sleep(TICK)
            woke.append(time.monotonic())

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)  # the watcher's first wake-up is asked for before the work starts
    try:
        result = await work
    finally:
        watcher.cancel()
    woke.append(time.monotonic())  # a block that ended the work counts too
    return result, max(b - a for a, b in itertools.pairwise(woke))
