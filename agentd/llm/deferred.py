"""An LLM whose SDK is still importing, so start-up can poll Telegram meanwhile.

Importing the provider SDK costs seconds of CPU; the daemon starts that in a thread and hands
turns this stand-in, whose calls wait for the real adapter. A turn started by a message that was
waiting at start-up thus gets persisted and runs its first steps while the import finishes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agentd.llm import LLM
from agentd.llm.types import LLMRequest, LLMResponse


class DeferredLLM:
    """Forwards to the adapter `build` returns; `build` runs once, in a worker thread."""

    def __init__(self, model: str, build: Callable[[], LLM]) -> None:
        self.model = model
        self._task = asyncio.create_task(asyncio.to_thread(build), name="import-llm")

    async def ready(self) -> LLM:
        """The real adapter (raises what building it raised: a missing key, a broken install)."""
        return await asyncio.shield(self._task)

    async def complete(
        self, req: LLMRequest, on_text: Callable[[str], Awaitable[None]] | None = None
    ) -> LLMResponse:
        return await (await self.ready()).complete(req, on_text)

    async def close(self) -> None:
        # A thread cannot be cancelled: wait for it so the adapter it built is closed too.
        try:
            llm = await self._task
        except Exception:
            return
        await llm.close()
