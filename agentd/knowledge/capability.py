"""The documents capability: search_docs over the owner's library and each user's documents."""

from __future__ import annotations

from agentd.config import Config
from agentd.tools.capability import Check, Checks, Context, Contribution, Probe, Simple


async def _build(ctx: Context) -> Contribution:
    from agentd.knowledge.tools import docs_tools

    return Contribution(
        tools=docs_tools(ctx.db, ctx.shared["embedder"], ctx.config),
        about="search the documents you gave me",
    )


def _doctor(config: Config, probe: Probe) -> list[Check]:
    """Warn when document chunks lack a vector of the active embedder (`[memory]`'s)."""
    from agentd.knowledge.store import chunk_vector_counts
    from agentd.retrieval.embedders import EmbedderError, build_embedder

    try:
        embedder = build_embedder(config.memory, probe.secrets)
    except EmbedderError:
        return []  # the embedder check says why
    model_id, dim = embedder.model_id, embedder.dim
    found = probe.read(lambda conn: chunk_vector_counts(conn, model_id, dim))
    if found is None:
        return []
    chunks, current = found
    stale = chunks - current
    results = Checks()
    results.add(
        "document vectors",
        True,
        f"{stale} of {chunks} document chunks lack a {model_id} vector: run `agentd docs reindex`"
        if stale
        else f"{chunks} chunks, all current",
        warn=bool(stale),
    )
    return results


def capability() -> Simple:
    return Simple("documents", build=_build, doctor=_doctor)
