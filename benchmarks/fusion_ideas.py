"""Fusion and re-ranking ideas, each cross-validated across conversations like `--cv`.

    python benchmarks/fusion_ideas.py --data ../shared/data/locomo-dev.json

Indexes the file as memory_retrieval.py does (e5-small, vectors cached), keeps each question's
keyword and vector lists 50 deep, and re-ranks them offline per family of settings: min-max (the
default method), z-score normalisation, weighted RRF, min-max plus a bonus for hits both arms
found, plus recency (newer memories up, by their rank in time among the candidates), plus
neighbours (a hit lends a share of its score to the memories stored just before and after it:
for turns of one conversation, the surrounding talk). For each family: the weights chosen on
all conversations but one, R@5 on that one, pooled; and the best in-sample figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.memory.search import keyword_search, vector_search
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import E5SmallEmbedder
from benchmarks.memory_retrieval import _index, load_dataset
from benchmarks.recall_cv import CachedEmbedder, recall_at

Lists = tuple[list[tuple[int, float]], list[tuple[int, float]]]
Ranker = Callable[[list[tuple[int, float]], list[tuple[int, float]]], list[int]]


def _stretch(xs: Sequence[tuple[int, float]]) -> dict[int, float]:
    if not xs:
        return {}
    lo, hi = min(v for _, v in xs), max(v for _, v in xs)
    return {m: (v - lo) / (hi - lo) if hi > lo else 1.0 for m, v in xs}


def _z(xs: Sequence[tuple[int, float]]) -> dict[int, float]:
    if len(xs) < 2:  # an id only the other arm found scores as this arm's one hit: 0
        return defaultdict(float, {m: 0.0 for m, _ in xs})
    mu, sd = statistics.fmean(v for _, v in xs), statistics.pstdev([v for _, v in xs]) or 1.0
    floor = min((v - mu) / sd for _, v in xs)
    return defaultdict(lambda: floor, {m: (v - mu) / sd for m, v in xs})


def ranker(a: float, depth: int, norm: str = "minmax", extra: str = "", w: float = 0.0) -> Ranker:
    def rank(kw: list[tuple[int, float]], vec: list[tuple[int, float]]) -> list[int]:
        k_s, v_s = [(m, -s) for m, s in kw[:depth]], [(m, 1 - d) for m, d in vec[:depth]]
        if norm == "rrf":
            kn = {m: 1 / (w + r) for r, (m, _) in enumerate(k_s, 1)}
            vn = {m: 1 / (w + r) for r, (m, _) in enumerate(v_s, 1)}
        else:
            kn, vn = (_z(k_s), _z(v_s)) if norm == "z" else (_stretch(k_s), _stretch(v_s))
        ids = {m for m, _ in k_s} | {m for m, _ in v_s}
        zero = 0.0 if norm != "z" else None
        score = {
            m: a * (kn.get(m, zero) if zero is not None else kn[m])
            + (1 - a) * (vn.get(m, zero) if zero is not None else vn[m])
            for m in ids
        }
        if extra == "both":
            score = {m: s + w * (m in dict(k_s) and m in dict(v_s)) for m, s in score.items()}
        elif extra == "recency" and ids:
            lo, hi = min(ids), max(ids)
            score = {m: s + w * ((m - lo) / (hi - lo) if hi > lo else 0) for m, s in score.items()}
        elif extra == "neighbours":
            spread = defaultdict(float, score)
            for m, s in score.items():
                spread[m - 1] += w * s
                spread[m + 1] += w * s
            score = spread
        return [m for m, _ in sorted(score.items(), key=lambda x: (-x[1], x[0]))]

    return rank


def families() -> dict[str, list[Ranker]]:
    ws, ds = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7), (10, 20, 30, 50)
    return {
        "min-max (default method)": [ranker(a, d) for a in ws for d in ds],
        "z-score": [ranker(a, d, "z") for a in ws for d in ds],
        "weighted RRF": [
            ranker(a, d, "rrf", w=k)
            for a in (0.4, 0.5, 0.6, 0.7)
            for d in (20, 50)
            for k in (1, 5, 10, 30, 60)
        ],
        "min-max + both-arms bonus": [
            ranker(a, d, extra="both", w=b)
            for a in (0.5, 0.55, 0.6)
            for d in (20, 30, 50)
            for b in (0, 0.05, 0.1, 0.2)
        ],
        "min-max + recency": [
            ranker(a, d, extra="recency", w=r)
            for a in (0.5, 0.55, 0.6)
            for d in (30, 50)
            for r in (0, 0.05, 0.1, 0.15, 0.2, 0.3)
        ],
        "min-max + neighbours": [
            ranker(a, d, extra="neighbours", w=s)
            for a in (0.55, 0.6)
            for d in (30, 50)
            for s in (0, 0.1, 0.2, 0.3)
        ],
    }


def evaluate(rows: list, owner: dict[int, str], grid: list[Ranker]) -> tuple[float, float]:
    """(pooled held-out R@5, best in-sample R@5) of a family."""
    per: list[dict[str, list[float]]] = []
    for rank in grid:
        scores: dict[str, list[float]] = defaultdict(list)
        for conv, evidence, kw, vec in rows:
            scores[conv].append(recall_at(rank(kw, vec), owner, evidence, 5))
        per.append(scores)
    convs = sorted(per[0])
    held = []
    for out in convs:
        best = max(per, key=lambda s: statistics.fmean(x for c in convs if c != out for x in s[c]))
        held += best[out]
    in_sample = max(statistics.fmean(x for v in s.values() for x in v) for s in per)
    return statistics.fmean(held), in_sample


async def arm_lists(path: str, cache: Path) -> tuple[list, dict[int, str]]:
    conversations, _ = load_dataset(path)
    embedder = CachedEmbedder(E5SmallEmbedder(), cache)
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_sync(Path(tmp) / "ideas.db")
        apply_migrations(conn)
        owner = await _index(conn, embedder, conversations)
        bits, rows = BitCache(), []
        for user_id, conv in enumerate(conversations, start=1):
            for q in conv.questions:
                qvec = await embedder.embed_query(q.question)
                kw = keyword_search(conn, user_id, q.question, 50)
                vec = vector_search(conn, user_id, qvec, embedder.model_id, 50, bits=bits)
                rows.append((conv.sample_id, q.evidence, kw, vec))
        conn.close()
    embedder.save()
    return rows, owner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--cache", default="/tmp/agentd-bench-e5-vectors.json")
    args = parser.parse_args()
    rows, owner = asyncio.run(arm_lists(args.data, Path(args.cache)))
    print(f"{'family':<28} {'held-out R@5':>12} {'in-sample best':>15}")
    for name, grid in families().items():
        held, best = evaluate(rows, owner, grid)
        print(f"{name:<28} {held:>12.3f} {best:>15.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
