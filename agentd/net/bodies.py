"""Reading an HTTP body no further than a limit, one way for every door that reads one.

aiohttp's `StreamReader.read(n)` returns whatever has arrived so far, not `n` bytes: a body
that comes in several packets must be read until its end or the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp


@dataclass
class Arrived:
    """How far an answer had come, for a deadline that cuts it to say: a server that sent
    nothing differs from one that drips its body a byte at a time."""

    answered: bool = False  # its status and headers arrived
    body_bytes: int = 0

    def said(self) -> str:
        if not self.answered:
            return "the server had not begun its answer"
        unit = "byte" if self.body_bytes == 1 else "bytes"
        return f"{self.body_bytes} {unit} of its body had arrived"


async def read_at_most(
    stream: aiohttp.StreamReader, limit: int, arrived: Arrived | None = None
) -> bytes:
    """The body, or its first `limit` bytes (ask for one more than allowed to tell a body
    over the limit from one that fills it); `arrived` counts the bytes as they come."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if arrived is not None:
            arrived.body_bytes = size
    return b"".join(chunks)
