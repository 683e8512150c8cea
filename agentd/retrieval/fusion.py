"""Hybrid ranking: a keyword arm (FTS5 BM25) and a vector arm (cosine distance) fused by
weighted score or rank, tuned per embedder. Used by memory and document search alike; the
figures behind TUNED_FUSION are in memory/search.py's docstring and benchmarks/README.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

SearchMode = Literal["hybrid", "keyword", "vector"]


FusionMethod = Literal["convex", "minmax", "rrf"]


class Fusion(BaseModel):
    """How the keyword and vector lists are combined (see the module docstring)."""

    method: FusionMethod = "rrf"
    keyword_weight: float = Field(default=1.0, ge=0)
    vector_weight: float = Field(default=0.15, ge=0)
    rrf_k: int = Field(default=10, ge=1)  # only for method "rrf"
    depth: int = Field(default=20, ge=1, le=1000)  # how deep each arm's list is fused
    # Share of a hit's fused score lent to the memories stored just before and after it in the
    # same chat (memory/search.py); 0 turns it off.
    neighbours: float = Field(default=0.0, ge=0, le=1)
    # The learned re-ranking of the fused list (retrieval/rerank.py) trained for this embedder;
    # None fuses only. When set, it decides the order and `neighbours` is not used.
    ranker: str | None = None
    # The learned map of the query vector trained for this embedder (retrieval/query_adapter.py);
    # None searches with the query vector as embedded.
    query_adapter: str | None = None


# Fusion tuned per embedder (benchmarks/memory_retrieval.py --sweep, module docstring).
TUNED_FUSION: dict[str, Fusion] = {
    "e5-small": Fusion(
        method="minmax",
        keyword_weight=0.6,
        vector_weight=0.4,
        depth=30,
        ranker="e5-small",
        query_adapter="e5-small",
    ),
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
    fusion = tuned.model_copy(update={k: v for k, v in keys.items() if v is not None})
    if getattr(config, "rerank", None) is False:  # the learned parts, trained together
        fusion = fusion.model_copy(update={"ranker": None, "query_adapter": None})
    return fusion


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
            for memory_id, norm in stretch(arm):
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


def stretch(scored: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
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


# (fused list, keyword arm's list, vector arm's list) → the order to cut k from.
Rerank = Callable[
    [list[tuple[int, float]], list[tuple[int, float]], list[tuple[int, float]]],
    list[tuple[int, float]],
]


def hybrid_rank(
    keyword: Arm,
    vector: Arm | None,
    *,
    k: int,
    mode: SearchMode,
    fusion: Fusion,
    rerank: Rerank | None = None,
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
        if rerank is not None:
            ranked = rerank(ranked, kw, vec)  # the whole fused list, before the cut to k
    return Ranking(
        ranked=ranked[:k],
        keyword_rank={rid: i for i, (rid, _) in enumerate(kw, start=1)},
        vector_rank={rid: i for i, (rid, _) in enumerate(vec, start=1)},
        distance=dict(vec),
    )
