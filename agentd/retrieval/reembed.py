"""Re-embedding rows after a change of embedding model: one loop for memories and documents.

Each batch is embedded outside any transaction and written in its own, so an interrupted run
keeps what it did and a re-run picks up only rows still lacking a current vector. Other models'
vectors are dropped at the end, never mixed into a search meanwhile (each space is separate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from agentd.db.runner import Runner
from agentd.retrieval.embedders import Embedder

Conn = Any
# (conn, after_id, limit) → [(row id, text to embed)], ids ascending.
Fetch = Callable[[Conn, int, int], list[tuple[int, str]]]
# (conn, [(row id, vector)]) → stores them, skipping rows deleted meanwhile.
Save = Callable[[Conn, list[tuple[int, Sequence[float]]]], Any]


class ReindexReport(BaseModel):
    model_id: str
    dim: int
    embedded: int
    dropped_spaces: list[str]


async def reembed(
    db: Runner,
    embedder: Embedder,
    *,
    fetch: Fetch,
    save: Save,
    drop_other_spaces: Callable[[Conn, str, int], list[str]],
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> ReindexReport:
    """Embed every row `fetch` yields in batches, `save` each, then drop the other spaces."""
    done, after = 0, 0
    while True:
        batch = await db.read(lambda c, a=after: fetch(c, a, batch_size))
        if not batch:
            break
        vectors = await embedder.embed_documents([text for _, text in batch])
        pairs = [(row_id, vec) for (row_id, _), vec in zip(batch, vectors, strict=True)]
        await db.write(lambda c, p=pairs: save(c, p))
        done += len(batch)
        after = batch[-1][0]
        if progress is not None:
            progress(len(batch))
    model_id, dim = embedder.model_id, embedder.dim
    dropped = await db.write(lambda c: drop_other_spaces(c, model_id, dim))
    return ReindexReport(model_id=model_id, dim=dim, embedded=done, dropped_spaces=dropped)
