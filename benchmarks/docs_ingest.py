"""Ingestion throughput: a generated Markdown corpus through `agentd.knowledge.ingest`.

    python benchmarks/docs_ingest.py                 # 200 files, default [docs] settings
    python benchmarks/docs_ingest.py --files 1000 --edit 0.05

Each file has a title, 3-8 sections and 2-5 paragraphs of 40-120 Zipf-distributed words per
section (about 6 KB, like a README or a wiki page). The database is a real file (WAL,
synchronous=FULL, as the CLI opens it) and the embedder the default hashing one. Reported, as
JSON: the first ingest (chunks/s end to end, and the embedder's own share), a re-ingest with
nothing changed, and one after editing one paragraph in a fraction of the files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.config import DocsConfig
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.db.runner import ConnRunner
from agentd.knowledge.ingest import ingest
from agentd.retrieval.embedders import HashingEmbedder


class TimedEmbedder(HashingEmbedder):
    """The default embedder, timing its own work so ingestion overhead can be told apart."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    async def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return await super().embed_documents(texts)
        finally:
            self.seconds += time.perf_counter() - started


def make_corpus(folder: Path, files: int, seed: int) -> None:
    rnd = random.Random(seed)
    vocab = [f"{rnd.choice('bcdfgklmnprstvz')}{rnd.choice('aeiou')}{i:x}" for i in range(8000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]

    def sentence() -> str:
        words = rnd.choices(vocab, weights=weights, k=rnd.randint(6, 18))
        return " ".join(words).capitalize() + "."

    for n in range(files):
        lines = [f"# Document {n}", ""]
        for s in range(rnd.randint(3, 8)):
            lines += [f"## Section {s} {rnd.choice(vocab)}", ""]
            for _ in range(rnd.randint(2, 5)):
                paragraph = " ".join(sentence() for _ in range(rnd.randint(3, 8)))
                lines += [paragraph, ""]
        sub = folder / f"part{n % 10}"
        sub.mkdir(exist_ok=True)
        (sub / f"doc{n:05d}.md").write_text("\n".join(lines), encoding="utf-8")


def edit_some(folder: Path, fraction: float, seed: int) -> int:
    rnd = random.Random(seed + 1)
    files = sorted(folder.rglob("*.md"))
    chosen = rnd.sample(files, max(1, round(len(files) * fraction)))
    for path in chosen:
        text = path.read_text(encoding="utf-8")
        paragraphs = text.split("\n\n")
        i = rnd.randrange(2, len(paragraphs))
        paragraphs[i] = paragraphs[i] + " An edited sentence."
        path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return len(chosen)


async def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        make_corpus(corpus, args.files, args.seed)
        size = sum(p.stat().st_size for p in corpus.rglob("*.md"))
        conn = open_sync(Path(tmp) / "bench.db")
        apply_migrations(conn)
        db = ConnRunner(conn)
        config = DocsConfig()
        embedder = TimedEmbedder()

        first = await ingest(db, embedder, config, paths=[corpus])
        assert not first.failed, first.failed
        embed_seconds = embedder.seconds
        chunks = conn.execute("SELECT count(*) FROM doc_chunks").fetchone()[0]

        again = await ingest(db, embedder, config, paths=[corpus])
        edited_files = edit_some(corpus, args.edit, args.seed)
        embedder.seconds = 0.0
        edited = await ingest(db, embedder, config, paths=[corpus])
        conn.close()
        return {
            "files": args.files,
            "corpus_bytes": size,
            "chunks": chunks,
            "chunk_chars": config.chunk_chars,
            "first_ingest": {
                "seconds": first.seconds,
                "chunks_per_s": round(chunks / first.seconds, 1),
                "files_per_s": round(args.files / first.seconds, 1),
                "embedder_share": round(embed_seconds / first.seconds, 3),
            },
            "unchanged_reingest": {
                "seconds": again.seconds,
                "files_per_s": round(args.files / again.seconds, 1),
                "chunks_embedded": again.chunks_embedded,
            },
            "edited_reingest": {
                "files_edited": edited_files,
                "changed": len(edited.changed),
                "chunks_embedded": edited.chunks_embedded,
                "seconds": edited.seconds,
            },
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--edit", type=float, default=0.1, help="fraction of files edited")
    parser.add_argument("--seed", type=int, default=1)
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
