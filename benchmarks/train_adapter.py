"""Train the query adapter (agentd/retrieval/query_adapter.py) on LoCoMo-format conversations,
cross-validate it, and write the matrix the package ships.

    python benchmarks/train_adapter.py --data ../shared/data/locomo-dev.json --data realtalk-dev/
    python benchmarks/train_adapter.py --data … --data … --write

Every turn is embedded as memory_retrieval.py stores it (the message before, then the turn) and
every question as a query, by the production e5-small embedder (vectors cached in --cache). The
adapter maps a query q to q + qA; A is trained so that, among all the turns of the question's
conversation, the evidence turns get the softmax of the cosines (temperature TAU): the mean
negative log-probability of the evidence, plus LAM · |A|², full-batch Adam from A = 0 for STEPS
steps (numpy; a few thousand questions need nothing more). LAM was chosen on these dev sets
(0.01 over-fits LoCoMo, 1.0 gives up 0.034 of real chat's 0.083; docs/benchmarks-history.md).

Reported: the vector arm alone (exact cosine over the conversation's turns), R@5 and R@30
(what reaches the ranker's pool), per data set, with the raw query and with the adapter trained
on the *other* conversations. train_rerank.py uses the same out-of-fold adapters for the rows it
trains the ranker on (`fold_adapters`), so the ranker learns from vectors like the ones it will
meet; `--write` ships the adapter trained on all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.memory.store import embedding_text
from agentd.retrieval.embedders import E5SmallEmbedder
from agentd.retrieval.query_adapter import QueryAdapter, adapter_path, save_adapter
from benchmarks.memory_retrieval import load_dataset
from benchmarks.recall_cv import CachedEmbedder

EMBEDDER = "e5-small"
TAU = 0.05
LAM = 0.1
STEPS = 200
RATE = 2e-3
ALL = "*"  # the key of the adapter trained on every conversation


@dataclass
class Conv:
    """One conversation's vectors: its turns (rows of `docs`), questions and their evidence."""

    id: str
    data: str
    docs: Any  # turns × dim, as stored
    queries: Any  # questions × dim, as asked
    positives: list[list[int]]  # per question: the rows of its evidence turns
    ids: list[str] = field(default_factory=list)  # each row's dia_id
    # --negatives pool: per question, the rows the softmax runs over (the ranker's pool and
    # the evidence); None: every turn of the conversation
    pools: list[list[int]] | None = None


async def embed(paths: Sequence[str], cache: Path) -> list[Conv]:
    embedder = CachedEmbedder(E5SmallEmbedder(), cache)
    out: list[Conv] = []
    for path in paths:
        conversations, _ = load_dataset(path)
        for conv in conversations:
            texts = [embedding_text(t.text, t.context) for t in conv.turns]
            docs = []
            for start in range(0, len(texts), 256):
                docs += await embedder.embed_documents(texts[start : start + 256])
            queries = [await embedder.embed_query(q.question) for q in conv.questions]
            row = {t.dia_id: i for i, t in enumerate(conv.turns)}
            out.append(
                Conv(
                    id=conv.sample_id,
                    data=Path(path).stem,
                    docs=np.asarray(docs, dtype=np.float32),
                    queries=np.asarray(queries, dtype=np.float32).reshape(-1, embedder.dim),
                    positives=[[row[e] for e in q.evidence if e in row] for q in conv.questions],
                    ids=[t.dia_id for t in conv.turns],
                )
            )
    embedder.save()
    await embedder.inner.aclose()
    return out


def gradient(conv: Conv, a: Any) -> tuple[Any, float]:
    """d loss / dA summed over the conversation's questions, and the loss."""
    d_moved, loss = moved_gradient(conv, conv.queries + conv.queries @ a)
    return conv.queries.T @ d_moved, loss


def moved_gradient(conv: Conv, moved: Any) -> tuple[Any, float]:
    """d loss / d(the moved query vectors), and the loss."""
    norm = np.linalg.norm(moved, axis=1, keepdims=True)
    unit = moved / norm
    logits = unit @ conv.docs.T / TAU
    if conv.pools is not None:  # the softmax over the pool alone: the rest is never a candidate
        outside = np.ones_like(logits, dtype=bool)
        for i, rows in enumerate(conv.pools):
            outside[i, rows] = False
        logits[outside] = -np.inf
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    target = np.zeros_like(p)
    loss = 0.0
    for i, rows in enumerate(conv.positives):
        target[i, rows] = 1.0 / len(rows)
        loss -= float(np.log(p[i, rows] + 1e-12).mean())
    d_unit = (p - target) / TAU @ conv.docs
    d_moved = (d_unit - unit * (d_unit * unit).sum(axis=1, keepdims=True)) / norm
    return d_moved, loss


def train(convs: Sequence[Conv], dim: int) -> Any:
    a = np.zeros((dim, dim), dtype=np.float32)
    m, v = np.zeros_like(a), np.zeros_like(a)
    n = sum(len(c.positives) for c in convs)
    for step in range(1, STEPS + 1):
        g = sum(gradient(c, a)[0] for c in convs) / n + 2 * LAM * a
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        a -= RATE * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return a


@dataclass
class TanhAdapter:
    """--map tanh (not shipped): q → q + tanh(q W1) W2, normalised; QueryAdapter's apply()."""

    w1: Any
    w2: Any

    def apply(self, vector: Any) -> list[float]:
        q = np.asarray(vector, dtype=np.float32)
        moved = q + np.tanh(q @ self.w1) @ self.w2
        return (moved / np.linalg.norm(moved)).tolist()


MAP = {"kind": "linear", "rank": 64, "sigma": 0.1}  # --map, --rank, --sigma


def train_tanh(convs: Sequence[Conv], dim: int) -> TanhAdapter:
    """The nonlinear map started near a low-rank linear one (W1 small, W2 = 0), λ on both."""
    rng = np.random.default_rng(0)
    w = [rng.normal(0, MAP["sigma"], (dim, MAP["rank"])).astype(np.float32)]
    w.append(np.zeros((MAP["rank"], dim), dtype=np.float32))
    m, v = [np.zeros_like(x) for x in w], [np.zeros_like(x) for x in w]
    n = sum(len(c.positives) for c in convs)
    for step in range(1, STEPS + 1):
        g = [np.zeros_like(x) for x in w]
        for c in convs:
            h = np.tanh(c.queries @ w[0])
            d_moved, _ = moved_gradient(c, c.queries + h @ w[1])
            g[1] += h.T @ d_moved
            g[0] += c.queries.T @ ((d_moved @ w[1].T) * (1 - h * h))
        for i in range(2):
            gi = g[i] / n + 2 * LAM * w[i]
            m[i] = 0.9 * m[i] + 0.1 * gi
            v[i] = 0.999 * v[i] + 0.001 * gi * gi
            step_size = (m[i] / (1 - 0.9**step)) / (np.sqrt(v[i] / (1 - 0.999**step)) + 1e-8)
            w[i] -= RATE * step_size
    return TanhAdapter(w[0], w[1])


def fit(convs: Sequence[Conv], dim: int, model_id: str) -> Any:
    if MAP["kind"] == "tanh":
        return train_tanh(convs, dim)
    return QueryAdapter(model_id, train(convs, dim))


def fold_adapters(convs: Sequence[Conv], model_id: str) -> dict[str, Any]:
    """Per conversation, the adapter trained on all the others; under ALL, on every one."""
    dim = convs[0].docs.shape[1]
    out = {ALL: fit(convs, dim, model_id)}
    for conv in convs:
        out[conv.id] = fit([c for c in convs if c is not conv], dim, model_id)
    return out


def adapted(adapter: QueryAdapter, queries: Any) -> Any:
    return np.asarray([adapter.apply(q) for q in queries], dtype=np.float32)


def recall(conv: Conv, queries: Any, k: int) -> list[float]:
    top = np.argsort(-(queries @ conv.docs.T), axis=1, kind="stable")[:, :k]
    return [len(set(t) & set(p)) / len(p) for t, p in zip(top, conv.positives, strict=True)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", dest="dataset", action="append", required=True)
    parser.add_argument("--cache", default="/tmp/agentd-bench-e5-vectors.json")
    parser.add_argument("--write", action="store_true", help="ship the adapter trained on all")
    args = parser.parse_args(argv)
    convs = [c for c in asyncio.run(embed(args.dataset, Path(args.cache))) if c.positives]
    model_id = E5SmallEmbedder().model_id
    adapters = fold_adapters(convs, model_id)
    print(f"{len(convs)} conversations; vector arm alone, exact cosine (R@5 / R@30)")
    for data in sorted({c.data for c in convs}):
        mine = [c for c in convs if c.data == data]
        cells = []
        for label, pick in (("raw", None), ("adapted, out of fold", "fold")):
            r5, r30 = [], []
            for c in mine:
                q = c.queries if pick is None else adapted(adapters[c.id], c.queries)
                r5 += recall(c, q, 5)
                r30 += recall(c, q, 30)
            cells.append(f"{label} {np.mean(r5):.3f} / {np.mean(r30):.3f}")
        print(
            f"  {data:24} {sum(len(c.positives) for c in mine):5} questions  " + "   ".join(cells)
        )
    if args.write:
        path = adapter_path(EMBEDDER)
        save_adapter(path, adapters[ALL])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
