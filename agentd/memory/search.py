"""Hybrid memory search: FTS5 BM25 and vector KNN fused by weighted score (or rank) fusion.

Every query path filters by user: the keyword arm joins `memories` on `user_id`, the vector arm
reads only the user's vec0 partition and re-checks `user_id` when rescoring.

Vector arm: the vec0 table holds sign bits (`bit[dim]`); a hamming KNN over the user's partition
returns `candidates` ids, which are rescored by exact cosine distance on the float32 vectors.
When a user has fewer vectors than `candidates`, this is exact.

Vector arm candidates: the bit prefilter is split over VEC_SHARDS partitions per user
(vectors.py says why); at 100k clustered vectors, 128 candidates keep ~0.99 of the exact
top-10. The daemon passes a `BitCache` instead (memory/bits.py): an exact hamming scan of an
in-process copy of the user's bits, ~1 ms instead of ~15 ms at 100k, the same rescoring.

Fusion is tuned per embedder (TUNED_FUSION; config keys override), with
benchmarks/memory_retrieval.py --sweep on real LoCoMo conversations (locomo-dev.json: 3
conversations, 1451 turns, 495 questions; development figures, benchmarks/README.md), turns
stored with the turn they answer as context:

- e5-small (the default): keyword R@5 0.675, vector 0.567. Min-max stretching each arm's
  top-30 to [0, 1], weights 0.6/0.4, gives 0.708 (R@10 0.781), above keyword on each of the
  three conversations. The plateau spans weights 0.5-0.6 at depth 20-50 (0.702-0.715), so the
  middle was taken, not the peak. Max-normalised convex fusion (≤ 0.705) and RRF (≤ 0.711,
  with equal weights) do no better.
- hashing: its vectors carry little meaning (vector R@5 0.35), so any real say for them loses
  to keyword search; keyword-first RRF 1.0/0.05, rrf_k 10 ties keyword (0.675), where a vector
  bonus only re-orders near-ties and vector-only hits fill a list keyword search leaves short
  (typos, another script).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.memory.bits import BitCache
from agentd.memory.embedders import Embedder
from agentd.memory.fts import build_fts_query
from agentd.memory.store import MEMORY_VECTORS, Memory, Runner, get_memories

Conn = Any
SearchMode = Literal["hybrid", "keyword", "vector"]
FusionMethod = Literal["convex", "minmax", "rrf"]


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


# Fusion tuned per embedder (benchmarks/memory_retrieval.py --sweep, module docstring).
TUNED_FUSION: dict[str, Fusion] = {
    "e5-small": Fusion(method="minmax", keyword_weight=0.6, vector_weight=0.4, depth=30),
    "hashing": Fusion(method="rrf", keyword_weight=1.0, vector_weight=0.05, rrf_k=10, depth=20),
}


def fusion_from_config(config: Any) -> Fusion:
    """The Fusion a `MemoryConfig` asks for: the embedder's tuned one, with set keys overriding."""
    tuned = TUNED_FUSION.get(config.embedder, Fusion())
    keys = {
        "method": config.fusion,
        "keyword_weight": config.keyword_weight,
        "vector_weight": config.vector_weight,
        "rrf_k": config.rrf_k,
        "depth": config.fusion_depth,
    }
    return tuned.model_copy(update={k: v for k, v in keys.items() if v is not None})


# bm25() weights of memory_fts's columns (content, fts_cjk, context). A memory's context (the
# message a turn answered, a date) says what it is about but is not what it says: at half the
# content's weight a turn whose own words match ranks above one whose neighbour's do
# (benchmarks/README.md: 0.5 beat 1.0 and 0.3 on every dev conversation).
FTS_WEIGHTS = (1.0, 1.0, 0.5)


def keyword_search(
    conn: Conn, user_id: int, text: str, limit: int, *, kinds: Sequence[str] | None = None
) -> list[tuple[int, float]]:
    """(memory_id, bm25) of the user's memories matching any query term, best first."""
    query = build_fts_query(text)
    if query is None or limit <= 0:
        return []
    kind_clause, params = _kind_clause(kinds)
    rows = conn.execute(
        f"SELECT m.id, bm25(memory_fts, {', '.join(map(str, FTS_WEIGHTS))}) AS score"
        " FROM memory_fts"
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
    bits: BitCache | None = None,
) -> list[tuple[int, float]]:
    """(memory_id, cosine distance) of the user's nearest memories in the space of model_id.

    With `bits`, the candidates come from its in-process copy of the user's sign bits (exact
    hamming, ~1 ms at 100k) instead of sqlite-vec's sharded KNN (~15 ms)."""
    prefilter = None
    if bits is not None:
        prefilter = partial(_bit_candidates, bits, conn, user_id, vector)
    # Only the user's partition is read, and the rescoring join re-checks the owner.
    return MEMORY_VECTORS.search(
        conn,
        vector,
        model_id,
        limit,
        partition=user_id,
        candidates=candidates,
        join=" CROSS JOIN memories m ON m.id = v.memory_id",
        # Only with kinds: "(:kinds IS NULL OR m.kind IN (…json_each…))" re-ran json_each for
        # each of the 128 candidates (+1 ms per search, benchmarks/README.md).
        where="m.user_id = :user"
        + (" AND m.kind IN (SELECT value FROM json_each(:kinds))" if kinds else ""),
        params={"user": user_id, "kinds": json.dumps(list(kinds)) if kinds else None},
        prefilter=prefilter,
    )


def _bit_candidates(
    bits: BitCache, conn: Conn, user_id: int, vector: Sequence[float], space: int, n: int
) -> list[int]:
    return bits.candidates(conn, space, user_id, vector, n)


def _vector_arm(
    conn: Conn,
    user_id: int,
    vector: Sequence[float],
    model_id: str,
    kinds: Sequence[str] | None,
    bits: BitCache | None,
    limit: int,
) -> list[tuple[int, float]]:
    return vector_search(conn, user_id, vector, model_id, limit, kinds=kinds, bits=bits)


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
    minmax: w_kw · (bm25 - min)/(max - min) + w_vec · (sim - min)/(max - min) over each arm's
    list: a dense model's similarities bunch (e5: 0.75-0.9), so dividing by the best alone
    leaves the vector arm almost flat; stretching each list to [0, 1] gives both arms a say.
    rrf: Σ w / (rrf_k + rank).
    """
    keyword, vector = keyword[: fusion.depth], vector[: fusion.depth]
    scores: dict[int, float] = {}
    if fusion.method == "minmax":
        for weight, arm in (
            (fusion.keyword_weight, [(mid, -bm25) for mid, bm25 in keyword]),
            (fusion.vector_weight, [(mid, 1.0 - distance) for mid, distance in vector]),
        ):
            for memory_id, norm in _stretch(arm):
                scores[memory_id] = scores.get(memory_id, 0.0) + weight * norm
    elif fusion.method == "rrf":
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


def _stretch(scored: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Scores mapped onto [0, 1] by the list's min and max (all 1.0 when they are equal)."""
    if not scored:
        return []
    low, high = min(v for _, v in scored), max(v for _, v in scored)
    span = high - low
    return [(mid, (v - low) / span if span > 0 else 1.0) for mid, v in scored]


@dataclass(frozen=True)
class Ranking:
    """Fused ids, best first, with where each came from (for hits that explain themselves)."""

    ranked: list[tuple[int, float]]
    keyword_rank: dict[int, int]
    vector_rank: dict[int, int]
    distance: dict[int, float]


Arm = Callable[[int], list[tuple[int, float]]]


def arm_depth(k: int, mode: SearchMode, fusion: Fusion) -> int:
    """How many hits each arm returns: in hybrid mode `fusion.depth`, so fusion can re-order."""
    return max(k, fusion.depth) if mode == "hybrid" else k


def hybrid_rank(
    keyword: Arm, vector: Arm | None, *, k: int, mode: SearchMode, fusion: Fusion
) -> Ranking:
    """Run the keyword arm (id, bm25) and vector arm (id, cosine distance) and rank: the one
    ranking used by every hybrid search (memories, documents). Each arm gets a limit; in
    hybrid mode both go `fusion.depth` deep so fusion has something to re-order."""
    depth = arm_depth(k, mode, fusion)
    kw = keyword(depth) if mode in ("hybrid", "keyword") else []
    vec = vector(depth) if mode in ("hybrid", "vector") and vector is not None else []
    if mode == "keyword":
        ranked = [(rid, -score) for rid, score in kw]  # bm25: lower is better
    elif mode == "vector":
        ranked = [(rid, 1.0 - d) for rid, d in vec]
    else:
        ranked = fuse(kw, vec, fusion)
    return Ranking(
        ranked=ranked[:k],
        keyword_rank={rid: i for i, (rid, _) in enumerate(kw, start=1)},
        vector_rank={rid: i for i, (rid, _) in enumerate(vec, start=1)},
        distance=dict(vec),
    )


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
    bits: BitCache | None = None,
    keyword_hits: Sequence[tuple[int, float]] | None = None,
) -> list[MemoryHit]:
    """The user's top-k memories for a text (and its query vector, for vector/hybrid modes).

    The query vector is an argument, not computed here, so the daemon can embed inside a
    journaled step and then run this cheap, deterministic read. Without a vector (or model_id)
    the vector arm is empty and hybrid degrades to keyword search. `bits`: see vector_search.
    `keyword_hits`: the keyword arm already run (`arm_depth` deep), e.g. while embedding.
    """
    vector_arm: Arm | None = None
    if vector is not None and model_id is not None:
        vector_arm = partial(_vector_arm, conn, user_id, vector, model_id, kinds, bits)
    ranking = hybrid_rank(
        (lambda n: list(keyword_hits[:n]))
        if keyword_hits is not None
        else (lambda n: keyword_search(conn, user_id, text, n, kinds=kinds)),
        vector_arm,
        k=k,
        mode=mode,
        fusion=fusion or Fusion(),
    )
    memories = get_memories(conn, [mid for mid, _ in ranking.ranked])
    hits = []
    for mid, score in ranking.ranked:
        memory = memories.get(mid)
        if memory is None or memory.user_id != user_id:
            continue  # deleted meanwhile; and never another user's, whatever an index says
        hits.append(
            MemoryHit(
                memory=memory,
                score=score,
                keyword_rank=ranking.keyword_rank.get(mid),
                vector_rank=ranking.vector_rank.get(mid),
                vector_distance=ranking.distance.get(mid),
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
    bits: BitCache | None = None,
) -> list[MemoryHit]:
    """Embed the query (unless keyword mode or no embedder) and search; for the CLI, tools and
    the daemon's recall (which pass the `bits` cache they keep for their database).

    In hybrid mode, with an embedder that `embeds_off_loop` (a model in a worker thread that
    releases the GIL, or a server), the keyword arm runs on the database thread meanwhile, so at
    100k memories its ~1 ms hides behind the embedding. With one that embeds on the loop
    (hashing) that would only add a database round trip, so it runs with the vector arm."""
    fusion = fusion or Fusion()
    model_id = embedder.model_id if embedder is not None else None
    vector = None
    keyword_hits = None
    if embedder is not None and mode != "keyword" and text.strip():
        if mode == "hybrid" and getattr(embedder, "embeds_off_loop", False):
            depth = arm_depth(k, mode, fusion)
            vector, keyword_hits = await _embed_beside_keyword(
                embedder.embed_query(text),
                db.read(lambda c: keyword_search(c, user_id, text, depth, kinds=kinds)),
            )
        else:
            vector = await embedder.embed_query(text)
    return await db.read(
        lambda c: search(
            c,
            user_id,
            text,
            vector,
            model_id,
            k=k,
            mode=mode,
            kinds=kinds,
            fusion=fusion,
            bits=bits,
            keyword_hits=keyword_hits,
        )
    )


async def _embed_beside_keyword(
    embed: Awaitable[list[float]], keyword: Awaitable[list[tuple[int, float]]]
) -> tuple[list[float], list[tuple[int, float]]]:
    """The query vector and the keyword arm's hits, the two awaited at once."""
    embedding = asyncio.ensure_future(embed)
    try:
        hits = await keyword
    except BaseException:
        embedding.cancel()  # and its outcome, if it had one, is nobody's to log
        embedding.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise
    return await embedding, hits


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
