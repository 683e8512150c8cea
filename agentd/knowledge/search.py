"""Hybrid search over document chunks: the same FTS5 query building, vector spaces and fusion
as memory search (agentd.retrieval.fts / vectors / search), over the `doc_*` tables.

Keyword arm: BM25 over section and text (a match in a heading counts double: a chunk under
"Install > Linux" is about installing on Linux even when its text never says so). Fusion is
memory's keyword-first default, configured by `[memory]`'s fusion keys: with the built-in
hashing embedder, keyword search is the strong arm for documents as for memories.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from agentd.db.runner import Runner
from agentd.knowledge.store import DOC_VECTORS
from agentd.retrieval.embedders import Embedder
from agentd.retrieval.fts import build_fts_query
from agentd.retrieval.fusion import Arm, Fusion, SearchMode, hybrid_rank

Conn = Any

# bm25() column weights of doc_chunks_fts (section, text, fts_cjk).
_BM25_WEIGHTS = (2.0, 1.0, 1.0)


class DocHit(BaseModel):
    """One chunk found, with what a citation needs."""

    chunk_id: int
    doc_id: int
    title: str
    source: str
    kind: str  # file | url
    section: str
    text: str
    score: float
    keyword_rank: int | None = None
    vector_rank: int | None = None

    @property
    def citation(self) -> str:
        """How an answer should cite it: a Markdown link for a URL, title (path) for a file."""
        title = self.title or self.source
        if self.kind == "url":
            safe = title.replace("[", "(").replace("]", ")")
            return f"[{safe}]({self.source.replace(')', '%29').replace(' ', '%20')})"
        return f"{title} ({self.source})"


class DocScope(BaseModel):
    """Whose documents a search may return: the user's own (added in chat) and, if
    `library`, the owner's library (`agentd ingest`, stored with no `added_by`)."""

    user_id: int | None = None
    library: bool = True


DEPTH_PER_HIT = 4  # a scoped search ranks this many candidates per hit, then filters


def keyword_search(conn: Conn, text: str, limit: int) -> list[tuple[int, float]]:
    """(chunk_id, bm25) of chunks matching any query term, best first."""
    query = build_fts_query(text)
    if query is None or limit <= 0:
        return []
    weights = ", ".join(str(w) for w in _BM25_WEIGHTS)
    rows = conn.execute(
        f"SELECT rowid, bm25(doc_chunks_fts, {weights}) AS score FROM doc_chunks_fts"
        " WHERE doc_chunks_fts MATCH ? ORDER BY score, rowid LIMIT ?",
        (query, limit),
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def vector_search(
    conn: Conn, vector: Sequence[float], model_id: str, limit: int
) -> list[tuple[int, float]]:
    """(chunk_id, cosine distance) of the nearest chunks in the space of model_id."""
    return DOC_VECTORS.search(conn, vector, model_id, limit)


def _hits(
    conn: Conn, ranked: list[tuple[int, float]], scope: DocScope | None = None
) -> dict[int, tuple[Any, ...]]:
    where, params = "", ()
    if scope is not None:
        where = " AND ((d.added_by IS NULL AND ?) OR d.added_by = ?)"
        params = (int(scope.library), scope.user_id)
    rows = conn.execute(
        "SELECT c.id, c.doc_id, d.title, d.source, d.kind, c.section, c.text FROM doc_chunks c"
        " JOIN doc_documents d ON d.id = c.doc_id"
        f" WHERE c.id IN (SELECT value FROM json_each(?)){where}",
        (json.dumps([cid for cid, _ in ranked]), *params),
    ).fetchall()
    return {int(r[0]): tuple(r) for r in rows}


def search(
    conn: Conn,
    text: str,
    vector: Sequence[float] | None = None,
    model_id: str | None = None,
    *,
    k: int = 5,
    mode: SearchMode = "hybrid",
    fusion: Fusion | None = None,
    scope: DocScope | None = None,
) -> list[DocHit]:
    """The top-k chunks for a text (and its query vector, for the vector arm), best first;
    with a scope, only chunks of documents the scope may see."""
    vector_arm: Arm | None = None
    if vector is not None and model_id is not None:
        query_vector, space = vector, model_id

        def vector_arm(n: int) -> list[tuple[int, float]]:
            return vector_search(conn, query_vector, space, n)

    ranking = hybrid_rank(
        lambda n: keyword_search(conn, text, n),
        vector_arm,
        k=k if scope is None else k * DEPTH_PER_HIT,
        mode=mode,
        fusion=fusion or Fusion(),
    )
    rows = _hits(conn, ranking.ranked, scope)
    hits: list[DocHit] = []
    for chunk_id, score in ranking.ranked:
        if len(hits) >= k:
            break
        row = rows.get(chunk_id)
        if row is None:
            continue  # deleted meanwhile
        hits.append(
            DocHit(
                chunk_id=chunk_id,
                doc_id=row[1],
                title=row[2],
                source=row[3],
                kind=row[4],
                section=row[5],
                text=row[6],
                score=score,
                keyword_rank=ranking.keyword_rank.get(chunk_id),
                vector_rank=ranking.vector_rank.get(chunk_id),
            )
        )
    return hits


async def search_documents(
    db: Runner,
    embedder: Embedder | None,
    text: str,
    *,
    k: int = 5,
    mode: SearchMode = "hybrid",
    fusion: Fusion | None = None,
    scope: DocScope | None = None,
) -> list[DocHit]:
    """Embed the query (unless keyword mode or no embedder), then search; never raises on
    odd query text (FTS syntax is neutralised, an empty query finds nothing)."""
    vector = None
    if embedder is not None and mode != "keyword" and text.strip():
        vector = await embedder.embed_query(text)
    model_id = embedder.model_id if embedder is not None else None
    return await db.read(
        lambda c: search(c, text, vector, model_id, k=k, mode=mode, fusion=fusion, scope=scope)
    )
