"""The "typing…" indicator of a turn, on any channel: renewed until the answer is there.

A channel's indicator fades after a few seconds, so it is sent again every `every` seconds
while the body runs. The first is sent only after `delay`: an answer that is there sooner needs
no indicator (and the platform two requests fewer). A channel supplies its one "send typing"
call and, where the platform has one, the call that clears it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

Call = Callable[[], Awaitable[None]]


@contextlib.asynccontextmanager
async def typing_while(
    send: Call, *, every: float, delay: float = 0.0, clear: Call | None = None
) -> AsyncIterator[None]:
    """Show "typing…" by `send` while the body runs; `clear` it after, if one was shown.

    `send` and `clear` are best effort: a failing one must not fail the turn, so an exception
    from either is the channel's to swallow (the renewal stops on one that escapes)."""
    shown = False

    async def renew() -> None:
        nonlocal shown
        if delay:
            await asyncio.sleep(delay)
        while True:
            shown = True
            await send()
            await asyncio.sleep(every)

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if shown and clear is not None:
            await clear()
