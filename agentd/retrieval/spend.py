"""What a remote embedder's calls cost, in the ledger: `[memory] embedder = "http"` sends every
memory, document and query to a server that may bill by the token. Each answered request is
counted, with the tokens the API's `usage` says it read (0 where it says nothing), and written
to `llm_usage` (purpose "embedding", model `http:<model>`, no chat) once a minute and at
shutdown: one row a minute, not one commit per query on the turn's path.

Priced at 0 unless `[llm.prices."http:<model>"]` sets a price (llm/pricing.py). Not held by the
`[limits]` budgets, which are the chat models' (access/ratelimit.py): an ingested book's
embeddings would otherwise use a day's budget at a fraction of a cent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from agentd.ledger import usage
from agentd.ledger.pricing import Tokens

log = logging.getLogger("agentd.memory.embedders")

PURPOSE = usage.EMBEDDING
FLUSH_SECONDS = 60.0


class EmbeddingSpend:
    """Requests answered and tokens read since the last `take`."""

    def __init__(self) -> None:
        self.requests = 0
        self.tokens = 0

    def add(self, answer: Any) -> None:
        """One answered request; its tokens from the OpenAI-style `usage` when it has one."""
        self.requests += 1
        said = answer.get("usage") if isinstance(answer, dict) else None
        if isinstance(said, dict):
            tokens = said.get("prompt_tokens", said.get("total_tokens"))
            if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
                self.tokens += tokens

    def take(self) -> tuple[int, int]:
        taken = self.requests, self.tokens
        self.requests = self.tokens = 0
        return taken


def record(conn: Any, model_id: str, requests: int, tokens: int) -> None:
    usage.record(conn, Tokens(input_tokens=tokens), model=model_id, purpose=PURPOSE, calls=requests)


async def flush(db: Any, embedder: Any) -> None:
    """Write what the embedder spent since the last flush (nothing for one that runs here)."""
    spend = getattr(embedder, "spent", None)
    if not isinstance(spend, EmbeddingSpend):
        return
    requests, tokens = spend.take()
    if requests:
        await db.write(record, embedder.model_id, requests, tokens)


async def keep_flushing(db: Any, embedder: Any, seconds: float = FLUSH_SECONDS) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            await flush(db, embedder)
        except Exception:  # counted again next time is better than a dead loop
            log.exception("could not write the embedder's usage")


def counted(db: Any, embedder: Any, stack: contextlib.AsyncExitStack) -> None:
    """Flush the embedder's spending while the daemon runs, and the rest when its stack closes
    (after the engine stopped, before the database closes)."""
    if not isinstance(getattr(embedder, "spent", None), EmbeddingSpend):
        return
    task = asyncio.create_task(keep_flushing(db, embedder), name="embedding-usage")

    async def last() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await flush(db, embedder)

    stack.push_async_callback(last)
