"""`agentd docs reindex`: give every document chunk a vector of the configured embedder."""

from __future__ import annotations

from collections.abc import Callable

from agentd.db.runner import Runner
from agentd.knowledge.store import DOC_VECTORS, chunks_to_embed, set_chunk_vectors
from agentd.retrieval.embedders import Embedder
from agentd.retrieval.reembed import ReindexReport, reembed


async def reindex_documents(
    db: Runner,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ReindexReport:
    """Re-embed chunks lacking a current vector (all with `force`), then drop other spaces."""
    model_id, dim = embedder.model_id, embedder.dim
    return await reembed(
        db,
        embedder,
        fetch=lambda c, after, limit: chunks_to_embed(
            c, model_id, dim, after_id=after, limit=limit, force=force
        ),
        save=lambda c, pairs: set_chunk_vectors(c, model_id, pairs),
        drop_other_spaces=DOC_VECTORS.drop_other_spaces,
        batch_size=batch_size,
        progress=progress,
    )
