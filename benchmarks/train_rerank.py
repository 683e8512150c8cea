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
from agentd.memory.search import keyword_search, ranker_pool, vector_search
from agentd.memory.summarise import SummaryDeps
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import E5SmallEmbedder
from agentd.retrieval.fts import query_terms, text_terms
from agentd.retrieval.fusion import TUNED_FUSION, fuse
from agentd.retrieval.query_adapter import QueryAdapter
from agentd.retrieval.rerank import FEATURES, Ranker, ranker_path, rerank
from benchmarks import memory_stored, train_adapter
from benchmarks.memory_retrieval import _index, load_dataset, spread
from benchmarks.memory_stored import ExtractiveLLM, build, covered
from benchmarks.recall_cv import CachedEmbedder

EMBEDDER = "e5-small"
STORES = {False: "turns", True: "stored"}
OVERRIDES: dict[str, Any] = {}  # --depth: the fusion settings the candidates are drawn with
EXPAND = {"n": 0}  # --expand: how many top fused hits lend their neighbours as candidates
CONTEXT = {"turns": "previous"}  # --context: what a stored turn carries (memory_retrieval)
STORED_WEIGHT = {"n": 1}  # --stored-weight
REPICK = {"spread": 0.0, "top": 0.0, "gain": 0.0}  # --top-spread, --cover-gain (repick)
DROP: set[str] = set()  # --drop: features left out (their column zeroed, so weighted 0)
# --adapter folds: per conversation, the query adapter trained without it (train_adapter.py);
# under train_adapter.ALL the one trained on all, for conversations of --test.
ADAPTERS: dict[str, QueryAdapter] = {}


def query_vector(conv: str, qvec: Any) -> Any:
    """The question's vector as search() would use it, the adapter never having seen `conv`."""
    adapter = ADAPTERS.get(conv) or ADAPTERS.get(train_adapter.ALL)
    return adapter.apply(qvec) if adapter is not None else qvec


L2 = 1e-3
STEPS = 300
RATE = 0.5


class Row:
    """One question: its conversation, the arms' lists, and each candidate's features and label."""

    def __init__(self, conv: str, text: str, evidence: Sequence[str], **lists: Any) -> None:
        self.conv, self.text, self.evidence = conv, text, list(evidence)
        self.kw, self.vec, self.fused = lists["kw"], lists["vec"], lists["fused"]
        self.pool = lists["pool"]  # what the ranker orders: fused, plus neighbours
        self.candidates = lists["candidates"]
        self.data = lists.get("data", "")  # which data set (file stem) it came from
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
            owner = await _index(conn, embedder, conversations, context=CONTEXT["turns"])
            bits = BitCache()
            for user_id, conv in enumerate(conversations, start=1):
                for q in conv.questions:
                    qvec = query_vector(conv.sample_id, await embedder.embed_query(q.question))
                    lists = _arms(conn, user_id, q.question, qvec, embedder.model_id, fusion, bits)
                    covers = {mid: {owner[mid]} for mid, _ in lists["pool"]}
                    rows.append(
                        Row(
                            conv.sample_id,
                            q.question,
                            q.evidence,
                            covers=covers,
                            data=Path(path).stem,
                            **lists,
                        )
                    )
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
                    qvec = query_vector(conv.sample_id, await embedder.embed_query(q.question))
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
                            data=Path(path).stem,
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
    pool, candidates = ranker_pool(conn, user_id, fused, EXPAND["n"])
    return {"kw": kw, "vec": vec, "fused": fused, "pool": pool, "candidates": candidates}


def matrix(rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray]:
    from agentd.retrieval.rerank import feature_rows

    xs: list[list[float]] = []
    ys: list[float] = []
    for row in rows:
        for mid, feats in feature_rows(row.text, row.kw, row.vec, row.pool, row.candidates).items():
            xs.append([0.0 if f in DROP else x for f, x in zip(FEATURES, feats, strict=True)])
            ys.append(float(bool(row.covers.get(mid, set()) & set(row.evidence))))
    return np.array(xs), np.array(ys)


def train(rows: Sequence[Row], label: str) -> Ranker:
    """Logistic regression (module docstring), its weights mapped back to raw features. Stored
    rows count STORED_WEIGHT times: they are what the daemon recalls, and turn rows of several
    data sets would otherwise outvote them."""
    rows = [*rows, *(r for r in rows if r.stored for _ in range(STORED_WEIGHT["n"] - 1))]
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
        expand=EXPAND["n"],
        weights={f: round(float(v), 6) for f, v in zip(FEATURES, raw, strict=True)},
        bias=round(b - float((raw * mean).sum()), 6),
    )


def recall_at(order: Sequence[int], row: Row, k: int) -> float:
    top = set().union(*(row.covers.get(mid, set()) for mid in order[:k]))
    return sum(1 for e in row.evidence if e in top) / len(row.evidence)


def recall5(order: Sequence[int], row: Row) -> float:
    return recall_at(order, row, 5)


ORDERS = ("keyword", "fused", "reranked")


def repick(row: Row, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """--spread / --top-spread / --cover-gain, tried on the ranked list (not shipped), picked
    greedily: each pick loses `spread` per pick already taken from its session, or `top` when
    it shares the best hit's session; and gains `gain` × the share of the question's terms it
    holds that the picks before it did not."""
    spread, top, gain = REPICK["spread"], REPICK["top"], REPICK["gain"]
    if not (spread or top or gain) or not ranked:
        return ranked
    wanted = set(query_terms(row.text))
    terms = {
        mid: wanted & text_terms(f"{c.content} {c.context or ''}")
        for mid, _ in ranked
        if (c := row.candidates.get(mid)) is not None
    }
    left, out, held = list(ranked), [], set()
    first_session = None
    taken: dict[Any, int] = defaultdict(int)
    while left:
        values = []
        for mid, score in left:
            cand = row.candidates.get(mid)
            if cand is not None and top and first_session and cand.session == first_session:
                score -= top
            if cand is not None and spread and cand.session is not None:
                score -= spread * taken[cand.session]
            if gain and wanted:
                score += gain * len(terms.get(mid, set()) - held) / len(wanted)
            values.append(score)
        best = left.pop(values.index(max(values)))
        cand = row.candidates.get(best[0])
        if cand is not None and first_session is None:
            first_session = cand.session
        if cand is not None and cand.session is not None:
            taken[cand.session] += 1
        held |= terms.get(best[0], set())
        out.append(best)
    return out


def orders(row: Row, ranker: Ranker) -> dict[str, list[int]]:
    ranked = repick(row, rerank(ranker, row.text, row.kw, row.vec, row.pool, row.candidates))
    return {
        "keyword": [m for m, _ in row.kw],
        "fused": [m for m, _ in row.fused],
        "reranked": [m for m, _ in ranked],
    }


def figures(row: Row, ranker: Ranker) -> dict[str, float]:
    """R@5 and R@10 of each order, and R@5 again under "<order> several" when the evidence was
    said in more than one session."""
    out: dict[str, float] = {}
    several = spread(row.evidence) == "several sessions"
    for name, order in orders(row, ranker).items():
        out[f"{name} R@5"] = recall_at(order, row, 5)
        out[f"{name} R@10"] = recall_at(order, row, 10)
        if several:
            out[f"{name} several"] = out[f"{name} R@5"]
    return out


def score(rows: Sequence[Row], ranker: Ranker) -> dict[str, float]:
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for key, value in figures(row, ranker).items():
            out[key].append(value)
    return {k: float(np.mean(v)) for k, v in out.items()}


def _line(label: str, store: str, rows: Sequence[Row], values: dict[str, list[float]]) -> str:
    cells = " ".join(
        f"{float(np.mean(values[f'{o} R@5'])):.3f}/{float(np.mean(values[f'{o} R@10'])):.3f}/"
        + (f"{float(np.mean(values[f'{o} several'])):.3f}" if values.get(f"{o} several") else "-")
        for o in ORDERS
    )
    return f"{label:24} {store:7} {len(rows):5} {cells}"


def report(title: str, scored: Sequence[tuple[Row, dict[str, float]]]) -> None:
    """Pooled figures per data set and store (R@5/R@10/several-sessions R@5 per order)."""
    print(f"\n{title}")
    print(f"{'data':24} {'store':7} {'n':>5} " + " ".join(f"{o:>17}" for o in ORDERS))
    groups: dict[tuple[str, bool], list[tuple[Row, dict[str, float]]]] = defaultdict(list)
    for row, values in scored:
        groups[(row.data, row.stored)].append((row, values))
    for (data, stored), items in sorted(groups.items()):
        values: dict[str, list[float]] = defaultdict(list)
        for _, v in items:
            for key, x in v.items():
                values[key].append(x)
        several = sum(1 for r, _ in items if spread(r.evidence) == "several sessions")
        print(
            _line(data, STORES[stored], [r for r, _ in items], values) + f"  (several: {several})"
        )


def _collect_all(datasets: Sequence[str], caches: Sequence[str], stored: str) -> list[Row]:
    """Rows of every data set as turns, and as stored summaries and facts for all of them
    (`stored` "all"), the first only ("first") or none ("none")."""
    rows: list[Row] = []
    for i, path in enumerate(datasets):
        cache = Path(caches[min(i, len(caches) - 1)])
        rows += asyncio.run(collect(path, cache))
        if stored == "all" or (stored == "first" and i == 0):
            rows += asyncio.run(collect_stored(path, cache))
    return rows


def pool_negatives(convs: Sequence[train_adapter.Conv], rows: Sequence[Row]) -> None:
    """Give each conversation's questions the rows of their pool, from `rows` collected with
    the raw question vectors (what the ranker would order before any adapter)."""
    by_conv: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_conv[row.conv].append(row)
    for conv in convs:
        index = {dia: i for i, dia in enumerate(conv.ids)}
        pools = []
        for row, positives in zip(by_conv[conv.id], conv.positives, strict=True):
            held = {dia for mid, _ in [*row.kw, *row.vec] for dia in row.covers.get(mid, ())}
            pools.append(sorted({index[d] for d in held if d in index} | set(positives)))
        conv.pools = pools


def dump(path: Path, scored: Sequence[tuple[str, Row, dict[str, float]]]) -> None:
    """One JSON line per question and store: where it was scored, and its figures."""
    with path.open("w", encoding="utf-8") as out:
        for phase, row, values in scored:
            key = {"phase": phase, "data": row.data, "conv": row.conv, "stored": row.stored}
            out.write(json.dumps({**key, "question": row.text, **values}) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", "--dataset", dest="dataset", action="append", required=True, help="repeatable"
    )
    parser.add_argument(
        "--cache",
        action="append",
        help="vector cache per --data, in order (default /tmp/agentd-bench-e5-vectors.json)",
    )
    parser.add_argument(
        "--test",
        action="append",
        default=[],
        help="also train on all of --data and score these files (conversations in --data left out)",
    )
    parser.add_argument("--test-cache", action="append", help="vector cache per --test")
    parser.add_argument("--write", action="store_true", help="ship the weights trained on all")
    parser.add_argument("--depth", type=int, help="candidates per arm (default: the tuned depth)")
    parser.add_argument(
        "--expand", type=int, default=0, help="top fused hits whose neighbours join the candidates"
    )
    parser.add_argument(
        "--stored",
        choices=["all", "first", "none"],
        default="all",
        help="which --data files are also stored as summaries and facts (memory_stored.py)",
    )
    parser.add_argument("--context", choices=["previous", "window"], default="previous")
    parser.add_argument("--stored-weight", type=int, default=1, help="stored rows count n times")
    parser.add_argument("--spread", type=float, default=0.0, help="session spread penalty")
    parser.add_argument("--drop", action="append", default=[], choices=FEATURES)
    parser.add_argument("--top-spread", type=float, default=0.0)
    parser.add_argument("--cover-gain", type=float, default=0.0)
    parser.add_argument(
        "--unlinked", action="store_true", help="the fake summariser names no fact's messages"
    )
    parser.add_argument(
        "--negatives",
        choices=["all", "pool"],
        default="all",
        help="the adapter's softmax over every turn of the conversation (shipped) or over the "
        "pool the ranker orders (keyword's and the raw vector arm's top, with the evidence)",
    )
    parser.add_argument("--map", choices=["linear", "tanh"], default="linear")
    parser.add_argument("--rank", type=int, default=64, help="--map tanh: hidden units")
    parser.add_argument("--dump", help="write each question's figures here (JSON lines)")
    parser.add_argument(
        "--adapter",
        choices=["folds", "none"],
        default="folds",
        help="the question's vector moved by the query adapter trained without its conversation "
        "(folds, as search() moves it with the shipped one) or as embedded (none)",
    )
    args = parser.parse_args(argv)
    memory_stored.LINKED = not args.unlinked
    REPICK.update(spread=args.spread, top=args.top_spread, gain=args.cover_gain)
    DROP.update(args.drop)
    STORED_WEIGHT["n"] = max(1, args.stored_weight)
    if args.depth:
        OVERRIDES["depth"] = args.depth
    EXPAND["n"] = args.expand
    CONTEXT["turns"] = args.context
    caches = args.cache or ["/tmp/agentd-bench-e5-vectors.json"]
    train_adapter.MAP.update(kind=args.map, rank=args.rank)
    if args.adapter == "folds":
        convs = asyncio.run(train_adapter.embed(args.dataset, Path(caches[0])))
        if args.negatives == "pool":
            pool_negatives(convs, _collect_all(args.dataset, caches, "none"))
        model_id = E5SmallEmbedder().model_id
        ADAPTERS.update(train_adapter.fold_adapters([c for c in convs if c.positives], model_id))
    rows = _collect_all(args.dataset, caches, args.stored)
    convs = sorted({r.conv for r in rows})
    print(f"{len(rows)} questions × stores × data sets in {len(convs)} conversations")
    print(f"features: {', '.join(f for f in FEATURES if f not in DROP)}; expand {EXPAND['n']}")
    print(f"re-picked: {REPICK}")
    # Cross-validated by conversation: a conversation's clean and noisy renderings are held out
    # together, so no fold trains on the conversation it is scored on.
    scored: list[tuple[Row, dict[str, float]]] = []
    for conv in convs:
        ranker = train([r for r in rows if r.conv != conv], f"all but {conv}")
        scored += [(r, figures(r, ranker)) for r in rows if r.conv == conv]
    report("cross-validated by conversation (R@5/R@10/several-sessions R@5)", scored)
    dumped = [("cv", r, v) for r, v in scored]
    names = ", ".join(Path(d).name for d in args.dataset)
    ranker = train(rows, f"{names}: {', '.join(convs)} ({len(rows)} questions as turns or stored)")
    report("trained on all, in-sample", [(r, figures(r, ranker)) for r in rows])
    if args.test:
        test = _collect_all(args.test, args.test_cache or caches, "none")
        test = [r for r in test if r.conv not in convs]
        tested = [(r, figures(r, ranker)) for r in test]
        report(f"trained on all, scored on --test ({len(test)} questions)", tested)
        dumped += [("test", r, v) for r, v in tested]
    if args.dump:
        dump(Path(args.dump), dumped)
    print(json.dumps(ranker.weights), f"bias {ranker.bias}")
    if args.write:
        path = ranker_path(EMBEDDER)
        path.write_text(ranker.model_dump_json(indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
