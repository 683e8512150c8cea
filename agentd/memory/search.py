"""Hybrid memory search: FTS5 BM25 and vector KNN fused by weighted rank (or score) fusion.

Every query path filters by user: the keyword arm joins `memories` on `user_id`, the vector arm
reads only the user's vec0 partition and re-checks `user_id` when rescoring.

Vector arm: the vec0 table holds sign bits (`bit[dim]`); a hamming KNN over the user's partition
returns `candidates` ids, which are rescored by exact cosine distance on the float32 vectors.
When a user has fewer vectors than `candidates`, this is exact.

Vector arm candidates: the bit prefilter is split over VEC_SHARDS partitions per user
(store.py says why); at 100k clustered vectors, 128 candidates keep ~0.99 of the exact top-10.

Fusion, measured with benchmarks/memory_retrieval.py --sweep on tests/data, whose conversations
carry small-talk distractors as real ones do: keyword search (BM25, porter) is the strong arm
(R@5 0.66); the built-in hashing embedder has no IDF and loses to it (0.47), as MiniLM and a
hashed embedder did on a public benchmark (API-NOTES). Equal-weight RRF and every convex (score)
fusion tried fell below keyword alone at k ≤ 10 (RRF 1:1 0.58, convex 0.5:0.5 0.60). So the
default is keyword-first RRF: weights 1.0 / 0.15, rrf_k 10. A vector rank-1 bonus (0.15/11) is
worth two or three keyword places mid-list, so the vector arm re-orders near-ties, and
vector-only hits rank below every keyword hit, so they fill the list when keyword search finds
little (typos, paraphrase, another script). That ties keyword at R@5 and R@10 there, never
below either arm; the plateau spans vector weights 0.1-0.2 at rrf_k 5-10. With a stronger
embedder, run the sweep on your data and raise `memory.vector_weight`, or try
`memory.fusion = "convex"` (max-normalised scores), which the sweep also reports.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.memory.embedders import Embedder
from agentd.memory.fts import build_fts_query
from agentd.memory.store import (
    VEC_SHARDS,
    Memory,
    Runner,
    bq_table,
    find_space,
    get_memories,
    pack_vector,
)

Conn = Any
SearchMode = Literal["hybrid", "keyword", "vector"]
FusionMethod = Literal["convex", "rrf"]

# Candidates the bit-vector prefilter hands to exact rescoring, split evenly over the user's
# VEC_SHARDS partitions. 128 keeps 0.996 of the exact top-10 at 100k clustered vectors.
MIN_CANDIDATES = 128
CANDIDATES_PER_RESULT = 4


class Fusion(BaseModel):
    """How the keyword and vector lists are combined (see the module docstring)."""

    method: FusionMethod = "rrf"
    keyword_weight: float = Field(default=1.0, ge=0)
    vector_weight: float = Field(default=0.15, ge=0)
    rrf_k: int = Field(default=10, ge=1)  # only for method "rrf"
    depth: int = Field(default=20, ge=1, le=1000)  # how deep each arm's list is fused


class MemoryHit(BaseModel):
    """One search result with why it was found."""

    memory: Memory
    score: float
    keyword_rank: int | None = None
    vector_rank: int | None = None
    vector_distance: float | None = None  # cosine distance, 0 = same direction


def fusion_from_config(config: Any) -> Fusion:
    """The Fusion a `MemoryConfig` asks for."""
    return Fusion(
        method=config.fusion,
        keyword_weight=config.keyword_weight,
        vector_weight=config.vector_weight,
        rrf_k=config.rrf_k,
    )


def keyword_search(
    conn: Conn, user_id: int, text: str, limit: int, *, kinds: Sequence[str] | None = None
) -> list[tuple[int, float]]:
    """(memory_id, bm25) of the user's memories matching any query term, best first."""
    query = build_fts_query(text)
    if query is None or limit <= 0:
        return []
    kind_clause, params = _kind_clause(kinds)
    rows = conn.execute(
        "SELECT m.id, bm25(memory_fts) AS score FROM memory_fts"
        " JOIN memories m ON m.id = memory_fts.rowid"
        f" WHERE memory_fts MATCH ? AND m.user_id = ?{kind_clause}"
        " ORDER BY score, m.id LIMIT ?",
        (query, user_id, *params, limit),
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def vector_search(
    conn: Conn,
    user_id: int,
    vector: Sequence[float],
    model_id: str,
    limit: int,
    *,
    kinds: Sequence[str] | None = None,
    candidates: int | None = None,
) -> list[tuple[int, float]]:
    """(memory_id, cosine distance) of the user's nearest memories in the space of model_id."""
    if limit <= 0 or not any(vector) or not all(math.isfinite(x) for x in vector):
        return []  # an empty text embeds to zeros: no direction, nothing to rank
    space = find_space(conn, model_id, len(vector))
    if space is None:
        return []
    n = candidates or max(MIN_CANDIDATES, limit * CANDIDATES_PER_RESULT)
    per_shard = min(4096, max(1, -(-max(n, limit) // VEC_SHARDS)))
    table = bq_table(space)
    shards = " UNION ALL ".join(
        f"SELECT rowid AS id FROM (SELECT rowid FROM {table} WHERE embedding MATCH"
        f" vec_quantize_binary(:q) AND k = :k AND part = :p{s})"
        for s in range(VEC_SHARDS)
    )
    params: dict[str, Any] = {
        "q": pack_vector(vector),
        "k": per_shard,
        "space": space,
        "user": user_id,
        "limit": limit,
        **{f"p{s}": user_id * VEC_SHARDS + s for s in range(VEC_SHARDS)},
        "kinds": json.dumps(list(kinds)) if kinds else None,
    }
    rows = conn.execute(
        f"WITH cand AS ({shards})"
        " SELECT v.memory_id, vec_distance_cosine(v.embedding, :q) AS d"
        " FROM cand JOIN memory_vectors v ON v.memory_id = cand.id"
        " JOIN memories m ON m.id = v.memory_id"
        " WHERE v.space_id = :space AND m.user_id = :user"
        " AND (:kinds IS NULL OR m.kind IN (SELECT value FROM json_each(:kinds)))"
        " ORDER BY d, v.memory_id LIMIT :limit",
        params,
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def _kind_clause(kinds: Sequence[str] | None) -> tuple[str, list[Any]]:
    if not kinds:
        return "", []
    return " AND m.kind IN (SELECT value FROM json_each(?))", [json.dumps(list(kinds))]


def fuse(
    keyword: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    fusion: Fusion,
) -> list[tuple[int, float]]:
    """Fuse (id, bm25) and (id, cosine distance) lists, best first; ties broken by id.

    convex: w_kw · bm25/max(bm25) + w_vec · sim/max(sim), sim = cosine similarity clamped at 0
    ("theoretical min-max" normalisation: both scores have a floor of 0, so dividing by the
    list's best puts the arms on one scale while keeping how far ahead each top hit is, which
    rank fusion throws away).
    rrf: Σ w / (rrf_k + rank).
    """
    keyword, vector = keyword[: fusion.depth], vector[: fusion.depth]
    scores: dict[int, float] = {}
    if fusion.method == "rrf":
        for weight, ranked in ((fusion.keyword_weight, keyword), (fusion.vector_weight, vector)):
            for rank, (memory_id, _) in enumerate(ranked, start=1):
                scores[memory_id] = scores.get(memory_id, 0.0) + weight / (fusion.rrf_k + rank)
    else:
        best = max((-bm25 for _, bm25 in keyword), default=0.0)
        for memory_id, bm25 in keyword:
            norm = -bm25 / best if best > 0 else 1.0
            scores[memory_id] = scores.get(memory_id, 0.0) + fusion.keyword_weight * norm
        top = max((1.0 - distance for _, distance in vector), default=0.0)
        for memory_id, distance in vector:
            norm = max(0.0, 1.0 - distance) / top if top > 0 else 0.0
            scores[memory_id] = scores.get(memory_id, 0.0) + fusion.vector_weight * norm
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def search(
    conn: Conn,
    user_id: int,
    text: str,
    vector: Sequence[float] | None = None,
    model_id: str | None = None,
    *,
    k: int = 5,
    mode: SearchMode = "hybrid",
    kinds: Sequence[str] | None = None,
    fusion: Fusion | None = None,
) -> list[MemoryHit]:
    """The user's top-k memories for a text (and its query vector, for vector/hybrid modes).

    The query vector is an argument, not computed here, so the daemon can embed inside a
    journaled step and then run this cheap, deterministic read. Without a vector (or model_id)
    the vector arm is empty and hybrid degrades to keyword search.
    """
    fusion = fusion or Fusion()
    depth = max(k, fusion.depth)
    kw: list[tuple[int, float]] = []
    vec: list[tuple[int, float]] = []
    if mode in ("hybrid", "keyword"):
        kw = keyword_search(conn, user_id, text, depth if mode == "hybrid" else k, kinds=kinds)
    if mode in ("hybrid", "vector") and vector is not None and model_id is not None:
        vec = vector_search(
            conn, user_id, vector, model_id, depth if mode == "hybrid" else k, kinds=kinds
        )
    kw_rank = {mid: i for i, (mid, _) in enumerate(kw, start=1)}
    vec_rank = {mid: i for i, (mid, _) in enumerate(vec, start=1)}
    distance = dict(vec)
    if mode == "keyword":
        ranked = [(mid, -score) for mid, score in kw]  # bm25: lower is better
    elif mode == "vector":
        ranked = [(mid, 1.0 - d) for mid, d in vec]
    else:
        ranked = fuse(kw, vec, fusion)
    ranked = ranked[:k]
    memories = get_memories(conn, [mid for mid, _ in ranked])
    hits = []
    for mid, score in ranked:
        memory = memories.get(mid)
        if memory is None or memory.user_id != user_id:
            continue  # deleted meanwhile; and never another user's, whatever an index says
        hits.append(
            MemoryHit(
                memory=memory,
                score=score,
                keyword_rank=kw_rank.get(mid),
                vector_rank=vec_rank.get(mid),
                vector_distance=distance.get(mid),
            )
        )
    return hits


async def search_memories(
    db: Runner,
    embedder: Embedder | None,
    user_id: int,
    text: str,
    *,
    k: int = 5,
    mode: SearchMode = "hybrid",
    kinds: Sequence[str] | None = None,
    fusion: Fusion | None = None,
) -> list[MemoryHit]:
    """Embed the query (unless keyword mode or no embedder) and search; for the CLI and tools."""
    vector = None
    if embedder is not None and mode != "keyword" and text.strip():
        vector = await embedder.embed_query(text)
    model_id = embedder.model_id if embedder is not None else None
    return await db.read(
        lambda c: search(
            c, user_id, text, vector, model_id, k=k, mode=mode, kinds=kinds, fusion=fusion
        )
    )


def format_recall(hits: Sequence[MemoryHit], budget_chars: int) -> str:
    """Recalled memories as prompt lines within a character budget (empty string if none fit).

    The caller wraps this in a block that marks it as data, not instructions.
    """
    lines: list[str] = []
    used = 0
    for hit in hits:
        content = " ".join(hit.memory.content.split())
        line = f"- [{hit.memory.kind} #{hit.memory.id}] {content}"
        if used + len(line) + 1 > budget_chars:
            room = budget_chars - used - 1
            if room >= 80 and not lines:
                lines.append(line[: room - 1] + "…")  # one long memory still says something
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)
