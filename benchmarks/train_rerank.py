"""Train the re-ranker's weights (agentd/retrieval/rerank.py) on LoCoMo-format conversations,
cross-validate it, and write the weights file the package ships.

    python benchmarks/train_rerank.py --data ../shared/data/locomo-dev.json          # CV only
    python benchmarks/train_rerank.py --data ../shared/data/locomo-dev.json --write  # and ship

Indexes every turn as memory_retrieval.py does, runs each question through the production arms
(keyword_search, vector_search with the daemon's bit copy), fuses them with the embedder's tuned
fusion and computes each candidate's features with the production code (rerank_candidates,
feature_rows), so training sees exactly what search() will. A candidate is positive when it is
one of the question's evidence turns. The model: logistic regression on standardised features,
positives weighted up to balance the classes, L2 1e-3, plain gradient descent (numpy; a few
thousand rows need nothing more). Reported: for each conversation, R@5 of keyword, fused and
re-ranked when the weights are trained on the *other* conversations, pooled; then the in-sample
figure of the weights trained on all of them, which `--write` ships.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.config import Config
from agentd.db import Database
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.durable import SystemClock
from agentd.memory.search import keyword_search, rerank_candidates, vector_search
from agentd.memory.summarise import SummaryDeps
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import E5SmallEmbedder
from agentd.retrieval.fusion import TUNED_FUSION, fuse
from agentd.retrieval.rerank import FEATURES, Ranker, ranker_path, rerank
from benchmarks.memory_retrieval import _index, load_dataset
from benchmarks.memory_stored import ExtractiveLLM, build, covered
from benchmarks.recall_cv import CachedEmbedder

EMBEDDER = "e5-small"
STORES = {False: "turns", True: "stored"}
OVERRIDES: dict[str, Any] = {}  # --depth: the fusion settings the candidates are drawn with
L2 = 1e-3
STEPS = 300
RATE = 0.5


class Row:
    """One question: its conversation, the arms' lists, and each candidate's features and label."""

    def __init__(self, conv: str, text: str, evidence: Sequence[str], **lists: Any) -> None:
        self.conv, self.text, self.evidence = conv, text, list(evidence)
        self.kw, self.vec, self.fused = lists["kw"], lists["vec"], lists["fused"]
        self.candidates = lists["candidates"]
        self.covers: dict[int, set[str]] = lists["covers"]  # id → the turns it holds
        self.stored = lists.get("stored", False)  # summaries and facts, not turns


async def collect(path: str, cache: Path) -> list[Row]:
    conversations, _ = load_dataset(path)
    embedder = CachedEmbedder(E5SmallEmbedder(), cache)
    fusion = TUNED_FUSION[EMBEDDER].model_copy(update={"ranker": None, **OVERRIDES})
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_sync(Path(tmp) / "train.db")
        try:
            apply_migrations(conn)
            owner = await _index(conn, embedder, conversations)
            bits = BitCache()
            for user_id, conv in enumerate(conversations, start=1):
                for q in conv.questions:
                    qvec = await embedder.embed_query(q.question)
                    lists = _arms(conn, user_id, q.question, qvec, embedder.model_id, fusion, bits)
                    covers = {mid: {owner[mid]} for mid, _ in lists["fused"]}
                    rows.append(Row(conv.sample_id, q.question, q.evidence, covers=covers, **lists))
        finally:
            conn.close()
    embedder.save()
    return rows


async def collect_stored(path: str, cache: Path) -> list[Row]:
    """The same questions over memory as the daemon stores it: memory_stored.py's summarise
    steps (extractive fake model) turn each conversation into summaries and facts."""
    conversations, _ = load_dataset(path)
    embedder = CachedEmbedder(E5SmallEmbedder(), cache)
    fusion = TUNED_FUSION[EMBEDDER].model_copy(update={"ranker": None, **OVERRIDES})
    config = Config()
    tail_config = config.model_copy(
        update={
            "memory": config.memory.model_copy(
                update={"summary_threshold": 2, "summary_keep_recent": 0}
            )
        }
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "stored.db")
        llm, clock = ExtractiveLLM(), SystemClock()
        deps = SummaryDeps(config=config, db=db, llm=llm, embedder=embedder, clock=clock)
        tail = SummaryDeps(config=tail_config, db=db, llm=llm, embedder=embedder, clock=clock)
        try:
            dia = await build(db, deps, tail, conversations)
            units = await db.read(lambda c: covered(c, dia))
            for chat, conv in enumerate(conversations, start=1):
                for q in conv.questions:
                    qvec = await embedder.embed_query(q.question)
                    lists = await db.read(
                        lambda c, chat=chat, q=q, v=qvec: _arms(
                            c, chat, q.question, v, embedder.model_id, fusion
                        )
                    )
                    rows.append(
                        Row(
                            conv.sample_id,
                            q.question,
                            q.evidence,
                            covers=units,
                            stored=True,
                            **lists,
                        )
                    )
        finally:
            await db.close()
    embedder.save()
    return rows


def _arms(
    conn: Any,
    user_id: int,
    text: str,
    qvec: Any,
    model_id: str,
    fusion: Any,
    bits: BitCache | None = None,
) -> dict[str, Any]:
    """Both arms as search() runs them, fused, and the candidates' features' inputs."""
    kw = keyword_search(conn, user_id, text, fusion.depth)
    vec = vector_search(conn, user_id, qvec, model_id, fusion.depth, bits=bits)
    fused = fuse(kw, vec, fusion)
    candidates = rerank_candidates(conn, user_id, [mid for mid, _ in fused])
    return {"kw": kw, "vec": vec, "fused": fused, "candidates": candidates}


def matrix(rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray]:
    from agentd.retrieval.rerank import feature_rows

    xs: list[list[float]] = []
    ys: list[float] = []
    for row in rows:
        for mid, feats in feature_rows(
            row.text, row.kw, row.vec, row.fused, row.candidates
        ).items():
            xs.append(feats)
            ys.append(float(bool(row.covers.get(mid, set()) & set(row.evidence))))
    return np.array(xs), np.array(ys)


def train(rows: Sequence[Row], label: str) -> Ranker:
    """Logistic regression (module docstring), its weights mapped back to raw features."""
    x, y = matrix(rows)
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    z = (x - mean) / std
    balance = np.where(y > 0, (1 - y.mean()) / y.mean(), 1.0)
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(STEPS):
        p = 1 / (1 + np.exp(-(z @ w + b)))
        g = (p - y) * balance
        w -= RATE * (z.T @ g / len(y) + L2 * w)
        b -= RATE * float(g.mean())
    raw = w / std
    return Ranker(
        embedder=EMBEDDER,
        trained_on=label,
        weights={f: round(float(v), 6) for f, v in zip(FEATURES, raw, strict=True)},
        bias=round(b - float((raw * mean).sum()), 6),
    )


def recall5(order: Sequence[int], row: Row) -> float:
    top = set().union(*(row.covers.get(mid, set()) for mid in order[:5]))
    return sum(1 for e in row.evidence if e in top) / len(row.evidence)


def score(rows: Sequence[Row], ranker: Ranker) -> dict[str, float]:
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        ranked = rerank(ranker, row.text, row.kw, row.vec, row.fused, row.candidates)
        out["keyword"].append(recall5([m for m, _ in row.kw], row))
        out["fused"].append(recall5([m for m, _ in row.fused], row))
        out["reranked"].append(recall5([m for m, _ in ranked], row))
    return {k: float(np.mean(v)) for k, v in out.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", "--dataset", dest="dataset", required=True)
    parser.add_argument("--cache", default="/tmp/agentd-bench-e5-vectors.json")
    parser.add_argument("--write", action="store_true", help="ship the weights trained on all")
    parser.add_argument("--depth", type=int, help="candidates per arm (default: the tuned depth)")
    args = parser.parse_args(argv)
    if args.depth:
        OVERRIDES["depth"] = args.depth
    rows = asyncio.run(collect(args.dataset, Path(args.cache)))
    rows += asyncio.run(collect_stored(args.dataset, Path(args.cache)))
    convs = sorted({r.conv for r in rows})
    print(f"{len(rows)} questions × stores in {len(convs)} conversations")
    print(f"features: {', '.join(FEATURES)}")
    print(f"{'held out':12} {'store':7} {'n':>4} {'keyword':>8} {'fused':>8} {'reranked':>9}")
    pooled: dict[tuple[bool, str], list[float]] = defaultdict(list)
    for conv in convs:
        ranker = train([r for r in rows if r.conv != conv], f"all but {conv}")
        for stored in (False, True):
            test = [r for r in rows if r.conv == conv and r.stored == stored]
            figures = score(test, ranker)
            for k, v in figures.items():
                pooled[(stored, k)].extend([v] * len(test))
            print(
                f"{conv:12} {STORES[stored]:7} {len(test):4} "
                + " ".join(f"{figures[k]:8.3f}" for k in figures)
            )
    for stored in (False, True):
        cells = [np.mean(v) for (s, _), v in pooled.items() if s == stored]
        n = sum(1 for r in rows if r.stored == stored)
        print(f"{'pooled':12} {STORES[stored]:7} {n:4} " + " ".join(f"{c:8.3f}" for c in cells))
    name = Path(args.dataset).name
    questions = sum(1 for r in rows if not r.stored)
    ranker = train(
        rows, f"{name}: {', '.join(convs)} ({questions} questions, as turns and as stored)"
    )
    for stored in (False, True):
        inside = score([r for r in rows if r.stored == stored], ranker)
        figures = ", ".join(f"{k} {v:.3f}" for k, v in inside.items())
        print(f"trained on all, in-sample, {STORES[stored]}: {figures}")
    print(json.dumps(ranker.weights), f"bias {ranker.bias}")
    if args.write:
        path = ranker_path(EMBEDDER)
        path.write_text(ranker.model_dump_json(indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
