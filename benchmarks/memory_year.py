"""A simulated year of daily use: does recall stay right, and does the prompt stay small?

    python benchmarks/memory_year.py [--days 365] [--embedder hashing|e5-small] [--json]

Every day the owner's chat leaves a dated note of what they did and, now and then, a fact about
them that changes during the year (they move, change jobs, go vegetarian…), stored the way the
summariser stores them: facts with a key through `apply_extracted_facts` (a new value
supersedes the old one), notes as memories; now and then a fact is said again without its key,
a duplicate that must merge. Two pins. At the end, for each fact, the
question the owner would ask: recall is right when the current value is in the top 5 and no
superseded value is; the prompt is the facts section (pinned first, 1,500-character budget) plus
the top-5 recall block (1,200), measured in characters and ~tokens (chars / 4).
The same year stored without keys (every fact a new note) is the baseline.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.db.runner import ConnRunner
from agentd.memory.facts import ExtractedFact, ExtractedFacts, facts_for_prompt, remember_facts
from agentd.memory.manage import set_pinned
from agentd.memory.search import format_recall, search_memories
from agentd.memory.store import NewMemory, add_memories, count_memories, embedding_text
from agentd.retrieval.embedders import E5SmallEmbedder, Embedder, HashingEmbedder
from agentd.retrieval.fusion import TUNED_FUSION

USER = 1
DAY = 86_400.0
START = 1_767_225_600.0  # 2026-01-01 UTC
# key, question, the values it takes during the year (each replaces the one before)
FACTS: list[tuple[str, str, list[str]]] = [
    (
        "home_city",
        "Which city do I live in?",
        ["Lives in Lyon", "Lives in Grenoble", "Lives in Annecy"],
    ),
    ("employer", "Where do I work?", ["Works at Acme Robotics", "Works at Globex Energy"]),
    ("diet", "What is my diet?", ["Eats everything", "Is vegetarian"]),
    ("partner", "Who is my partner?", ["Partner is Sam", "Partner is Alex"]),
    ("car", "What car do I drive?", ["Drives a Renault Clio", "Drives a Tesla Model 3"]),
    ("gym_day", "Which day do I go to the gym?", ["Gym on Mondays", "Gym on Thursdays"]),
    ("phone", "Which phone do I use?", ["Uses a Pixel 7", "Uses an iPhone 15"]),
    ("language", "Which language am I learning?", ["Learning Spanish", "Learning Japanese"]),
]
ACTIVITIES = [
    "went running by the river",
    "cooked a curry for friends",
    "fixed the bike's brakes",
    "read two chapters of a novel",
    "had a long call with mum",
    "worked late on the quarterly report",
    "visited the farmers market",
    "watched a documentary about whales",
    "repotted the basil",
    "went to a concert",
    "cleaned the flat",
    "tried a new bakery",
    "played chess online",
]


def simulate(days: int, seed: int = 7) -> list[tuple[float, str, Any]]:
    """(time, "fact" | "restated" | "note", payload) for each day, in order."""
    rng = random.Random(seed)
    events: list[tuple[float, str, Any]] = []
    changes = {key: sorted(rng.sample(range(1, days), len(vals) - 1)) for key, _, vals in FACTS}
    for day in range(days):
        t = START + day * DAY
        events.append((t, "note", f"Day {day + 1}: {rng.choice(ACTIVITIES)}."))
        for key, _, values in FACTS:
            index = sum(1 for c in changes[key] if c <= day)
            if day == 0 or day in changes[key]:
                events.append((t + 60, "fact", (key, values[index])))
            elif rng.random() < 0.01:
                events.append((t + 120, "restated", values[index]))
    return events


def _date(conn: Any, when: float) -> None:
    """Date the memory just stored as the day it was said (add_memories dates it now)."""
    conn.execute(
        "UPDATE memories SET created_at = ?, updated_at = ? WHERE id = last_insert_rowid()",
        (when, when),
    )


async def store_year(db: ConnRunner, embedder: Embedder, days: int, keyed: bool) -> None:
    for t, kind, payload in simulate(days):
        if kind == "note" or (kind == "fact" and not keyed):
            text = payload if kind == "note" else payload[1]
            vec = (await embedder.embed_documents([embedding_text(text, None)]))[0]
            memory = NewMemory(
                user_id=USER, kind="note" if kind == "note" else "fact", content=text
            )
            await db.write(add_memories, [(memory, vec)], embedder.model_id)
            await db.write(_date, t)
            continue
        key, text = payload if kind == "fact" else (None, payload)
        facts = ExtractedFacts(facts=[ExtractedFact(key=key, content=text)])
        await remember_facts(db, embedder, USER, facts, source="summary", now=t)


async def measure(conn: Any, embedder: Embedder, days: int) -> dict[str, Any]:
    db = ConnRunner(conn)
    name = "e5-small" if isinstance(embedder, E5SmallEmbedder) else "hashing"
    fusion = TUNED_FUSION[name]
    right_recall, right_prompt, prompt_chars, ms = 0, 0, [], []
    events = simulate(days)
    facts_block = facts_for_prompt(conn, USER, 1500)
    for key, question, _ in FACTS:
        said = [p[1] for _, k, p in events if k == "fact" and p[0] == key]
        current, old = said[-1], set(said[:-1])
        t0 = time.perf_counter()
        hits = await search_memories(db, embedder, USER, question, k=5, fusion=fusion)
        ms.append((time.perf_counter() - t0) * 1000)
        texts = [h.memory.content for h in hits]
        right_recall += current in texts and not old & set(texts)
        prompt = f"{facts_block}\n{format_recall(hits, 1200)}"
        right_prompt += current in prompt and not any(o in prompt for o in old)
        prompt_chars.append(len(prompt))
    return {
        "memories": count_memories(conn, USER),
        "right_in_recall": f"{right_recall}/{len(FACTS)}",
        "right_in_prompt": f"{right_prompt}/{len(FACTS)}",
        "prompt_chars_max": max(prompt_chars),
        "prompt_tokens_max": max(prompt_chars) // 4,
        "recall_ms_mean": round(sum(ms) / len(ms), 2),
        "pinned_in_prompt": "Allergic to peanuts" in facts_for_prompt(conn, USER, 1500),
    }


async def run(days: int, embedder: Embedder, keyed: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_sync(Path(tmp) / "year.db")
        apply_migrations(conn)
        db = ConnRunner(conn)
        await store_year(db, embedder, days, keyed)
        pin = ExtractedFacts(facts=[ExtractedFact(key="allergy", content="Allergic to peanuts")])
        change = (await remember_facts(db, embedder, USER, pin, now=START))[0]
        await db.write(lambda c: set_pinned(c, int(change.memory_id or 0), True))
        result = await measure(conn, embedder, days)
        conn.close()
    return {"facts": "keyed (supersede, merge)" if keyed else "unkeyed (pile up)", **result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--embedder", choices=["hashing", "e5-small"], default="hashing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    embedder: Embedder = HashingEmbedder() if args.embedder == "hashing" else E5SmallEmbedder()
    rows = [asyncio.run(run(args.days, embedder, keyed)) for keyed in (True, False)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        print(
            f"{row['facts']:<26} memories {row['memories']:>4}  right: top-5 "
            f"{row['right_in_recall']}, prompt {row['right_in_prompt']}  prompt "
            f"≤ {row['prompt_chars_max']} chars (~{row['prompt_tokens_max']} tokens)  recall "
            f"{row['recall_ms_mean']} ms  pin in prompt: {row['pinned_in_prompt']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
