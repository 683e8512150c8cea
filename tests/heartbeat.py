"""A task ticking on the event loop, to show whether some work held the loop.

A healthy loop lets it tick every 10 ms; work that runs on the loop (or holds the GIL from a
thread, as one long `re` match does) shows as a long gap between two ticks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# Seconds the loop may be held at most: the inputs the tests use held it for 5 s and more.
LIMIT = 1.0


class Beat:
    largest = 0.0


@asynccontextmanager
async def heartbeat() -> AsyncIterator[Beat]:
    """A task ticking every 10 ms; `largest` is the longest gap between two of its ticks."""
    beat = Beat()

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            beat.largest = max(beat.largest, now - last)
            last = now

    task = asyncio.create_task(tick())
    await asyncio.sleep(0.05)  # ticking before the work starts
    try:
        yield beat
    finally:
        await asyncio.sleep(0.05)  # one tick after the work, so its gap is counted
        task.cancel()
