"""Retrieval over memory as agentd stores it: block summaries and facts, not raw turns.

    .venv/bin/python benchmarks/memory_stored.py --dataset locomo-dev.json [--embedder hashing]

Each conversation becomes one chat (speaker A is the user, speaker B the assistant): its turns
are inserted as `messages` in order and, whenever the real `summary_due` says the chat is past
`memory.summary_threshold`, the summarise workflow's own steps run (select_block,
summarise_block, embed, store), exactly as the workflow body calls them, minus the journal. At
the end the remaining tail is summarised too, so every turn is in long-term memory. The LLM is a
deterministic extractive fake that answers the forced `record_summary` tool call:

- summary: the lead sentence of every message in the block (≤ 120 characters each), in order,
  within the 4000-character limit of SummaryResult;
- facts: first-person sentences of the user's messages ("I …", "my …"), ≤ 30 per block, each
  keyed by its message (so a fact is credited to the turn it came from).

A question's evidence turn counts as found when a top-k memory covers it: a summary covers the
turns of its block, a fact the turn it was taken from. Reported per arm and category, with the
average number of turns a unit covers (a 40-turn summary in the top 5 "finds" a lot; compare
with turn-level figures of memory_retrieval.py with that in mind).
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.config import Config
from agentd.db import Database
from agentd.durable import SystemClock
from agentd.llm.types import LLMRequest, LLMResponse, ToolUseBlock, Usage
from agentd.memory.search import search
from agentd.memory.summarise import (
    SummaryDeps,
    SummaryInput,
    embed,
    select_block,
    store,
    summarise_block,
    summary_due,
    texts_to_embed,
)
from agentd.retrieval.embedders import E5SmallEmbedder, Embedder, HashingEmbedder
from agentd.retrieval.fusion import TUNED_FUSION, Fusion
from benchmarks.memory_retrieval import (
    ARMS,
    CATEGORY_NAMES,
    KS,
    Conversation,
    Turn,
    _pct,
    _recall,
    load_dataset,
)

MINUTE = 60.0
# Whether the fake model names each fact's message, as the prompt asks (--unlinked: it does not).
LINKED = True
_LINE = re.compile(r"^\[(?:#(\d+) )?(\d{4}-\d\d-\d\d \d\d:\d\d)\] (User|Assistant): (.*)$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|I'll|my|My|me)\b")


class ExtractiveLLM:
    """Answers record_summary from the <data> block alone; counts tokens as characters / 4."""

    model = "extractive-fake"

    async def complete(
        self, req: LLMRequest, on_text: Any = None, *, cut: Any = None
    ) -> LLMResponse:
        block = str(req.messages[0].content)
        summary: list[str] = []
        facts: list[dict[str, str]] = []
        used = 0
        for line in block.splitlines():
            m = _LINE.match(line)
            if m is None:
                continue
            msg, when, who, text = m.groups()
            minute = calendar.timegm(time.strptime(when, "%Y-%m-%d %H:%M")) // 60
            sentences = [s for s in _SENTENCE.split(text) if s.strip()]
            lead = sentences[0][:120] if sentences else text[:120]
            if used + len(lead) + 1 <= 3900:
                summary.append(lead)
                used += len(lead) + 1
            if who == "User" and len(facts) < 30:
                mine = next((s for s in sentences if _FIRST_PERSON.search(s)), None)
                if mine is not None:
                    fact = {"kind": "fact", "key": f"turn {minute}", "content": mine[:300]}
                    facts.append(fact | ({"messages": [int(msg)]} if msg and LINKED else {}))
        name = req.tools[0].name if req.tools else "record_summary"
        use = ToolUseBlock(
            id="toolu_fake",
            name=name,
            input={"summary": " ".join(summary) or "(empty)", "facts": facts},
        )
        return LLMResponse(
            model=self.model,
            content=[use],
            stop_reason="tool_use",
            usage=Usage(input_tokens=len(block) // 4, output_tokens=used // 4),
        )

    async def close(self) -> None:
        return None


class ObservedLLM(ExtractiveLLM):
    """The same extractive summary, but the facts are LoCoMo's own `observation`s: what a model
    (the data set's authors') extracted from each session, each tied to the turn it came from.
    Up to 30 a block (the SummaryResult limit), in the block's order."""

    model = "locomo-observations"

    def __init__(self, by_minute: dict[int, list[str]]) -> None:
        self.by_minute = by_minute

    async def complete(
        self, req: LLMRequest, on_text: Any = None, *, cut: Any = None
    ) -> LLMResponse:
        answer = await super().complete(req, on_text, cut=cut)
        facts: list[dict[str, Any]] = []
        for line in str(req.messages[0].content).splitlines():
            m = _LINE.match(line)
            if m is None:
                continue
            minute = calendar.timegm(time.strptime(m.group(2), "%Y-%m-%d %H:%M")) // 60
            for j, text in enumerate(self.by_minute.get(minute, [])):
                if len(facts) < 30:
                    fact = {"kind": "fact", "key": f"turn {minute} {j}", "content": text}
                    msg = m.group(1)
                    facts.append(fact | ({"messages": [int(msg)]} if msg and LINKED else {}))
        use = answer.content[0]
        assert isinstance(use, ToolUseBlock)
        use.input["facts"] = facts
        return answer


def observations(path: str, convs: list[Conversation]) -> dict[int, list[str]]:
    """LoCoMo's observations (in either layout) by the minute of their turn as build() stores
    it; observations naming no turn of the conversation are left out."""
    from benchmarks.memory_retrieval import _entries, parse_evidence

    found: dict[str, dict[str, list[str]]] = {}
    for entry, stem in _entries(Path(path)):
        if not isinstance(entry, dict):
            continue
        sid = entry.get("sample_id") or f"conv-{stem}"
        obs = entry.get("observation") if "observation" in entry else entry
        per: dict[str, list[str]] = {}
        for key, value in (obs or {}).items():
            if not key.endswith("_observation") or not isinstance(value, dict):
                continue
            for items in value.values():
                for item in items if isinstance(items, list) else []:
                    if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
                        for dia_id in parse_evidence(item[1])[:1]:
                            per.setdefault(dia_id, []).append(item[0])
        found[str(sid)] = per
    by_minute: dict[int, list[str]] = {}
    for conv in convs:
        per = found.get(conv.sample_id, {})
        for i, turn in enumerate(conv.turns):
            if turn.dia_id in per:
                by_minute.setdefault(int(_when(turn, i) // MINUTE), []).extend(per[turn.dia_id])
    return by_minute


async def _summarise(deps: SummaryDeps, chat: int, up_to: int, n: int) -> None:
    """The summarise workflow's steps, in its order (summarise.make_summary_workflow)."""
    inp = SummaryInput(chat_id=chat, user_id=chat, up_to_id=up_to)
    iid = f"bench-{chat}-{n}"
    block = await select_block(deps, inp)
    if not block:
        return
    result = await summarise_block(deps, inp, block, iid)
    texts = texts_to_embed(block, result, deps.config.agent.timezone)
    vectors = await embed(deps, texts)
    await store(deps, inp, iid, block, result, vectors)


def _when(turn: Turn, i: int) -> float:
    """A turn's time: its session's start (LoCoMo dates them) plus a minute per turn so far."""
    return (turn.session_start or 0.0) + i * MINUTE


async def build(db: Database, deps: SummaryDeps, tail: SummaryDeps, convs: list[Conversation]):
    """Insert every conversation as a chat and summarise it; message id → dia_id."""
    dia: dict[int, str] = {}
    cfg = deps.config.memory
    for chat, conv in enumerate(convs, start=1):
        first = conv.turns[0].text.split(":", 1)[0]
        summaries = 0
        for i, turn in enumerate(conv.turns):
            role = "user" if turn.text.split(":", 1)[0] == first else "assistant"
            at = _when(turn, i)
            mid = await db.write(
                lambda c, t=turn.text, r=role, at=at, chat=chat: (
                    c.execute(
                        "INSERT INTO messages (chat_id, user_id, role, content, created_at)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (chat, chat, r, t, at),
                    ).lastrowid
                )
            )
            dia[int(mid)] = turn.dia_id
            up_to = await db.read(
                lambda c, chat=chat: summary_due(
                    c, chat, cfg.summary_threshold, cfg.summary_keep_recent
                )
            )
            if up_to is not None:
                summaries += 1
                await _summarise(deps, chat, up_to, summaries)
        last = max(dia)
        await _summarise(tail, chat, last, summaries + 1)
    return dia


def covered(conn: Any, dia: dict[int, str]) -> dict[int, set[str]]:
    """Memory id → the dia_ids it covers (a summary: its block; a fact: its turn)."""
    out: dict[int, set[str]] = {}
    rows = conn.execute("SELECT id, kind, slot, meta, chat_id FROM memories").fetchall()
    for mid, kind, slot, meta, chat in rows:
        if kind == "summary":
            m = json.loads(meta)
            ids = range(m["first_message"], m["last_message"] + 1)
            out[mid] = {dia[i] for i in ids if i in dia}
        elif slot and slot.startswith("turn_"):
            minute = int(slot.split("_")[1])  # turn_<minute>, or turn_<minute>_<n>
            out[mid] = set()
            # The fact's turn: messages are a minute apart (from their session's start).
            for (msg_id,) in conn.execute(
                "SELECT id FROM messages WHERE chat_id = ? AND created_at = ?",
                (chat, minute * MINUTE),
            ):
                if msg_id in dia:
                    out[mid].add(dia[msg_id])
    return out


async def run(
    convs: list[Conversation],
    embedder: Embedder,
    fusion: Fusion,
    tmp: Path,
    llm: ExtractiveLLM | None = None,
) -> str:
    config = Config()
    tail_config = config.model_copy(
        update={
            "memory": config.memory.model_copy(
                update={"summary_threshold": 2, "summary_keep_recent": 0}
            )
        }
    )
    db = await Database.open(tmp / "stored.db")
    llm = llm or ExtractiveLLM()
    deps = SummaryDeps(config=config, db=db, llm=llm, embedder=embedder, clock=SystemClock())
    tail = SummaryDeps(config=tail_config, db=db, llm=llm, embedder=embedder, clock=SystemClock())
    try:
        t0 = time.perf_counter()
        dia = await build(db, deps, tail, convs)
        build_s = time.perf_counter() - t0
        units = await db.read(lambda c: covered(c, dia))
        counts = await db.read(
            lambda c: dict(c.execute("SELECT kind, count(*) FROM memories GROUP BY kind"))
        )
        unsummarised = await db.read(
            lambda c: c.execute("SELECT count(*) FROM messages WHERE summarised = 0").fetchone()[0]
        )
        rows: dict[str, list[tuple[str, dict[int, float]]]] = {arm: [] for arm in ARMS}
        latency: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for chat, conv in enumerate(convs, start=1):
            for q in conv.questions:
                qvec = await embedder.embed_query(q.question)
                for arm in ARMS:
                    t0 = time.perf_counter()
                    hits = await db.read(
                        lambda c, a=arm, v=qvec, chat=chat, q=q: search(
                            c,
                            chat,
                            q.question,
                            v,
                            embedder.model_id,
                            k=max(KS),
                            mode=a,
                            fusion=fusion,
                        )
                    )
                    latency[arm].append((time.perf_counter() - t0) * 1000)
                    found = [units.get(h.memory.id, set()) for h in hits]
                    rows[arm].append((q.category, {k: _recall(found, q.evidence, k) for k in KS}))
    finally:
        await db.close()
    sizes = [len(v) for mid, v in units.items()]
    summary_sizes = [len(units[m]) for m in units if len(units[m]) > 1]
    lines = [
        f"embedder {embedder.model_id}/{embedder.dim}; fusion {fusion.method} "
        f"{fusion.keyword_weight}/{fusion.vector_weight} depth {fusion.depth}; "
        f"ranker {fusion.ranker or 'none'}; facts by {llm.model}",
        f"stored: {counts} from {len(dia)} turns in {build_s:.1f} s; "
        f"{unsummarised} turns left unsummarised; a summary covers "
        f"{statistics.fmean(summary_sizes) if summary_sizes else 0:.1f} turns on average, "
        f"a unit {statistics.fmean(sizes) if sizes else 0:.1f}",
        "",
        f"{'arm':<8} {'R@5':>6} {'R@10':>6} {'p50 ms':>8}",
    ]
    for arm in ARMS:
        r = rows[arm]
        lines.append(
            f"{arm:<8} {statistics.fmean(x[1][5] for x in r):>6.3f} "
            f"{statistics.fmean(x[1][10] for x in r):>6.3f} {_pct(latency[arm], 0.5):>8.2f}"
        )
    lines += ["", "by category (R@5):"]
    by_cat: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for arm in ARMS:
        for cat, rec in rows[arm]:
            by_cat[cat][arm].append(rec[5])
    for cat in sorted(by_cat):
        cells = "  ".join(f"{arm} {statistics.fmean(by_cat[cat][arm]):.3f}" for arm in ARMS)
        n = len(by_cat[cat]["hybrid"])
        lines.append(f"  {cat} {CATEGORY_NAMES.get(cat, cat):<12} n={n:<4} {cells}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--embedder", choices=["e5-small", "hashing"], default="e5-small")
    ap.add_argument("--no-rerank", action="store_true", help="fusion alone, no learned ranker")
    ap.add_argument(
        "--facts",
        choices=["extractive", "observations"],
        default="extractive",
        help="the fake model's facts: first-person sentences, or LoCoMo's own observations",
    )
    args = ap.parse_args()
    fusion = TUNED_FUSION[args.embedder]
    if args.no_rerank:
        fusion = fusion.model_copy(update={"ranker": None})
    convs, _ = load_dataset(args.dataset)
    embedder: Embedder = E5SmallEmbedder() if args.embedder == "e5-small" else HashingEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        llm = ObservedLLM(observations(args.dataset, convs)) if args.facts != "extractive" else None
        print(asyncio.run(run(convs, embedder, fusion, Path(tmp), llm)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
