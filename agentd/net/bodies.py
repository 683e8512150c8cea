"""Reading an HTTP body no further than a limit, one way for every door that reads one.

aiohttp's `StreamReader.read(n)` returns whatever has arrived so far, not `n` bytes: a body
that comes in several packets must be read until its end or the limit.
"""

from __future__ import annotations

import aiohttp


async def read_at_most(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The body, or its first `limit` bytes (ask for one more than allowed to tell a body
    over the limit from one that fills it)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
