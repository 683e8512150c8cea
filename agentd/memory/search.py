"""Hybrid memory search: FTS5 BM25 and vector KNN fused by weighted score (or rank) fusion.

Every query path filters by user: the keyword arm joins `memories` on `user_id`, the vector arm
reads only the user's vec0 partition and re-checks `user_id` when rescoring.

Vector arm: the vec0 table holds sign bits (`bit[dim]`); a hamming KNN over the user's partition
returns `candidates` ids, which are rescored by exact cosine distance on the float32 vectors.
When a user has fewer vectors than `candidates`, this is exact.

Vector arm candidates: the bit prefilter is split over VEC_SHARDS partitions per user
(vectors.py says why); at 100k clustered vectors, 128 candidates keep ~0.99 of the exact
top-10. The daemon passes a `BitCache` instead (memory/bits.py): an exact hamming scan of an
in-process copy of the user's bits, ~1 ms instead of ~15 ms at 100k, the same rescoring.

Fusion is tuned per embedder (TUNED_FUSION; config keys override), with
benchmarks/memory_retrieval.py --sweep on real LoCoMo conversations (locomo-dev.json: 3
conversations, 1451 turns, 495 questions; development figures, benchmarks/README.md), turns
stored with the turn they answer as context:

- e5-small (the default): keyword R@5 0.675, vector 0.567. Min-max stretching each arm's
  top-30 to [0, 1], weights 0.6/0.4, gives 0.708 (R@10 0.781), above keyword on each of the
  three conversations. The plateau spans weights 0.5-0.6 at depth 20-50 (0.702-0.715), so the
  middle was taken, not the peak. Max-normalised convex fusion (≤ 0.705) and RRF (≤ 0.711,
  with equal weights) do no better.
- Then the learned re-ranking (retrieval/rerank.py, `Fusion.ranker`; e5-small only): a linear
  model over both arms' scores and ranks, the best fused score beside each candidate, how much
  of the question its text and context hold, its length, whether it asks a question, and
  whether it is a summary or a fact, length and coverage also against the other candidates.
  Trained on the dev conversations as turns and as stored summaries and facts, and on four of
  REALTALK's real messaging-app chats as turns (benchmarks/train_rerank.py); on 7 LoCoMo
  conversations it never saw, turns: R@5 0.735 (keyword 0.610); on six REALTALK chats it never
  saw: 0.510 (keyword 0.458); ~1 ms per search.
- Before the vector arm searches, the query vector is moved by the embedder's query adapter
  (retrieval/query_adapter.py, `Fusion.query_adapter`; e5-small only): a learned linear map
  toward the messages that answer a question (vector arm R@5 on those six chats 0.356 → 0.396).
- hashing: its vectors carry little meaning (vector R@5 0.35), so any real say for them loses
  to keyword search; keyword-first RRF 1.0/0.05, rrf_k 10 ties keyword (0.675), where a vector
  bonus only re-orders near-ties and vector-only hits fill a list keyword search leaves short
  (typos, another script).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from datetime import UTC, date, datetime
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from agentd.db.runner import Runner
from agentd.memory.store import FACT_KINDS, MEMORY_VECTORS, Memory, get_memories
from agentd.memory.when import day_words
from agentd.retrieval.bits import BitCache
from agentd.retrieval.days import named_days
from agentd.retrieval.embedders import Embedder
from agentd.retrieval.fts import build_fts_query
from agentd.retrieval.fusion import Arm, Fusion, Rerank, SearchMode, arm_depth, hybrid_rank
from agentd.retrieval.query_adapter import adapt_query
from agentd.retrieval.rerank import Candidate, Shape, rerank, shipped_ranker

Conn = Any
Ranked = list[tuple[int, float]]


class MemoryHit(BaseModel):
    """One search result with why it was found."""

    memory: Memory
    score: float
    keyword_rank: int | None = None
    vector_rank: int | None = None
    vector_distance: float | None = None  # cosine distance, 0 = same direction


# bm25() weights of memory_fts's columns (content, fts_cjk, context). A memory's context (the
# message a turn answered, a date) says what it is about but is not what it says: at half the
# content's weight a turn whose own words match ranks above one whose neighbour's do
# (benchmarks/README.md: 0.5 beat 1.0 and 0.3 on every dev conversation).
FTS_WEIGHTS = (1.0, 1.0, 0.5)


def keyword_search(
    conn: Conn, user_id: int, text: str, limit: int, *, kinds: Sequence[str] | None = None
) -> list[tuple[int, float]]:
    """(memory_id, bm25) of the user's memories matching any query term, best first."""
    query = build_fts_query(text)
    if query is None or limit <= 0:
        return []
    kind_clause, params = _kind_clause(kinds)
    rows = conn.execute(
        f"SELECT m.id, bm25(memory_fts, {', '.join(map(str, FTS_WEIGHTS))}) AS score"
        " FROM memory_fts"
        " JOIN memories m ON m.id = memory_fts.rowid"
        f" WHERE memory_fts MATCH ? AND m.user_id = ?{kind_clause}"
        " ORDER BY score, m.id LIMIT ?",
        (query, user_id, *params, limit),
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def vector_search(
    conn: Conn,
    user_id: int,
    vector: Sequence[float],
    model_id: str,
    limit: int,
    *,
    kinds: Sequence[str] | None = None,
    candidates: int | None = None,
    bits: BitCache | None = None,
) -> list[tuple[int, float]]:
    """(memory_id, cosine distance) of the user's nearest memories in the space of model_id.

    With `bits`, the candidates come from its in-process copy of the user's sign bits (exact
    hamming, ~1 ms at 100k) instead of sqlite-vec's sharded KNN (~15 ms)."""
    prefilter = None
    if bits is not None:
        prefilter = partial(_bit_candidates, bits, conn, user_id, vector)
    # Only the user's partition is read, and the rescoring join re-checks the owner.
    return MEMORY_VECTORS.search(
        conn,
        vector,
        model_id,
        limit,
        partition=user_id,
        candidates=candidates,
        join=" CROSS JOIN memories m ON m.id = v.memory_id",
        # Only with kinds: "(:kinds IS NULL OR m.kind IN (…json_each…))" re-ran json_each for
        # each of the 128 candidates (+1 ms per search, benchmarks/README.md).
        where="m.user_id = :user"
        + (" AND m.kind IN (SELECT value FROM json_each(:kinds))" if kinds else ""),
        params={"user": user_id, "kinds": json.dumps(list(kinds)) if kinds else None},
        prefilter=prefilter,
    )


def _bit_candidates(
    bits: BitCache, conn: Conn, user_id: int, vector: Sequence[float], space: int, n: int
) -> list[int]:
    return bits.candidates(conn, space, user_id, vector, n)


def _vector_arm(
    conn: Conn,
    user_id: int,
    vector: Sequence[float],
    model_id: str,
    kinds: Sequence[str] | None,
    bits: BitCache | None,
    limit: int,
) -> list[tuple[int, float]]:
    return vector_search(conn, user_id, vector, model_id, limit, kinds=kinds, bits=bits)


def _kind_clause(kinds: Sequence[str] | None) -> tuple[str, list[Any]]:
    if not kinds:
        return "", []
    return " AND m.kind IN (SELECT value FROM json_each(?))", [json.dumps(list(kinds))]


def search(
    conn: Conn,
    user_id: int,
    text: str,
    vector: Sequence[float] | None = None,
    model_id: str | None = None,
    *,
    k: int = 5,
    mode: SearchMode = "hybrid",
    kinds: Sequence[str] | None = None,
    fusion: Fusion | None = None,
    bits: BitCache | None = None,
    keyword_hits: Sequence[tuple[int, float]] | None = None,
    today: date | None = None,
) -> list[MemoryHit]:
    """The user's top-k memories for a text (and its query vector, for vector/hybrid modes).

    The query vector is an argument, not computed here, so the daemon can embed inside a
    journaled step and then run this cheap, deterministic read. Without a vector (or model_id)
    the vector arm is empty and hybrid degrades to keyword search. `bits`: see vector_search.
    `keyword_hits`: the keyword arm already run (`arm_depth` deep), e.g. while embedding.
    `today`: the day it is asked on, so "yesterday" names a day (retrieval/days.py).
    """
    fusion = fusion or Fusion()
    vector_arm: Arm | None = None
    if vector is not None and model_id is not None:
        if fusion.query_adapter:
            vector = adapt_query(fusion.query_adapter, vector, model_id)
        vector_arm = partial(_vector_arm, conn, user_id, vector, model_id, kinds, bits)
    ranking = hybrid_rank(
        (lambda n: list(keyword_hits[:n]))
        if keyword_hits is not None
        else (lambda n: keyword_search(conn, user_id, text, n, kinds=kinds)),
        vector_arm,
        k=k,
        mode=mode,
        fusion=fusion,
        rerank=_reorder(conn, user_id, text, fusion, today),
    )
    memories = get_memories(conn, [mid for mid, _ in ranking.ranked])
    hits = []
    for mid, score in ranking.ranked:
        memory = memories.get(mid)
        if memory is None or memory.user_id != user_id:
            continue  # deleted meanwhile; and never another user's, whatever an index says
        hits.append(
            MemoryHit(
                memory=memory,
                score=score,
                keyword_rank=ranking.keyword_rank.get(mid),
                vector_rank=ranking.vector_rank.get(mid),
                vector_distance=ranking.distance.get(mid),
            )
        )
    return hits


# Kinds whose neighbours (the memory stored just before or after, same chat and kind) are the
# talk around them: a turn's surrounding turns, a summary's adjacent blocks. Facts are not.
SEQUENTIAL_KINDS = ("turn", "summary", "note")


def _reorder(
    conn: Conn, user_id: int, text: str, fusion: Fusion, today: date | None = None
) -> Rerank | None:
    """What re-orders the fused list: the embedder's trained ranker, else neighbour spreading
    when asked for, else nothing."""
    ranker = shipped_ranker(fusion.ranker) if fusion.ranker else None
    if ranker is not None:

        def learned(fused: Ranked, kw: Ranked, vec: Ranked) -> Ranked:
            pool, candidates = ranker_pool(conn, user_id, fused, ranker.expand)
            return rerank(ranker, text, kw, vec, pool, candidates, today)

        return learned
    if fusion.neighbours > 0:
        share = fusion.neighbours
        return lambda fused, kw, vec: spread_to_neighbours(conn, user_id, share, fused)
    return None


def _neighbour_rows(conn: Conn, user_id: int, ids: Sequence[int], columns: str) -> list[Any]:
    """(id, previous id, next id, *columns) of the user's memories among ids; the neighbours
    only for SEQUENTIAL_KINDS, stored in the same chat with the same kind."""
    return conn.execute(
        "SELECT m.id,"
        " CASE WHEN m.kind IN (SELECT value FROM json_each(:seq)) THEN"
        " (SELECT max(p.id) FROM memories p WHERE p.user_id = m.user_id AND p.kind = m.kind"
        "  AND p.id < m.id AND p.chat_id IS m.chat_id) END,"
        " CASE WHEN m.kind IN (SELECT value FROM json_each(:seq)) THEN"
        " (SELECT min(n.id) FROM memories n WHERE n.user_id = m.user_id AND n.kind = m.kind"
        "  AND n.id > m.id AND n.chat_id IS m.chat_id) END"
        f"{columns}"
        # From the ids to the rows by primary key: with "m.id IN (…) AND m.user_id = ?" the
        # planner walked the user's whole index (8.6 ms at 100k memories instead of 0.3).
        " FROM json_each(:ids) AS j CROSS JOIN memories m ON m.id = j.value"
        " WHERE m.user_id = :user",
        {
            "ids": json.dumps(list(ids)),
            "user": user_id,
            "seq": json.dumps(SEQUENTIAL_KINDS),
            "facts": json.dumps(FACT_KINDS),
        },
    ).fetchall()


def rerank_candidates(conn: Conn, user_id: int, ids: Sequence[int]) -> dict[int, Candidate]:
    """The user's memories among ids as the ranker sees them, in one read. A fact's neighbour is
    the summary of the talk it was drawn from (memory/summarise.py fact_meta), and a summary's
    are also its facts among ids: a hit on either lends to the other."""
    rows = _neighbour_rows(
        conn,
        user_id,
        ids,
        ", m.content, m.context, m.kind, m.chat_id, m.created_at,"
        " CASE WHEN m.kind IN (SELECT value FROM json_each(:facts))"
        " THEN json_extract(m.meta, '$.summary') END",
    )
    drawn: dict[int, list[int]] = {}  # summary id → its facts among ids
    for r in rows:
        if isinstance(r[8], int):
            drawn.setdefault(r[8], []).append(int(r[0]))
    return {
        int(r[0]): Candidate(
            content=r[3],
            context=r[4],
            shape=_shape(r[5]),
            neighbours=tuple(
                [int(x) for x in r[1:3] if x is not None]
                + ([r[8]] if isinstance(r[8], int) else [])
                + drawn.get(int(r[0]), [])
            ),
            session=session_of(r[5], r[6], r[7]),
            days=days_of(r[7], r[4]),
        )
        for r in rows
    }


SESSION_SECONDS = 86_400


def session_of(kind: str, chat_id: int | None, created_at: float) -> str | None:
    """The stretch of talk a stored turn belongs to: its chat's day (UTC). Only turns have
    one: a summary is a stretch of its own, and a fact or a note stands alone."""
    if kind != "turn":
        return None
    return f"{chat_id}:{int(created_at // SESSION_SECONDS)}"


def day_in(moment: float, zone: str) -> date:
    """The calendar day `moment` (seconds since the epoch) falls on in `zone`: the `today` a
    search is asked on, from the message's own time, so a replayed turn searches alike."""
    return datetime.fromtimestamp(moment, ZoneInfo(zone)).date()


def days_of(created_at: float, context: str | None) -> tuple[date, ...]:
    """The days a memory was said on or is about: its UTC day, and the dated days its context
    names (a summary's "Conversation of 8 May 2023", a fact's "(when: 3 August 2023, …)")."""
    said = datetime.fromtimestamp(created_at, UTC).date()
    named = {date(d.year, d.month, d.day) for d in named_days(context) if d.year is not None}
    return (said, *sorted(named - {said}))


def ranker_pool(
    conn: Conn, user_id: int, fused: Ranked, expand: int
) -> tuple[Ranked, dict[int, Candidate]]:
    """What the ranker orders: the fused list, plus the stored neighbours of its top `expand`
    hits that neither arm found (fused score 0), with every one's Candidate. A thought typed as
    several short messages, or an answer given over several turns, sits beside the message
    whose words matched, where neither arm may reach it."""
    candidates = rerank_candidates(conn, user_id, [mid for mid, _ in fused])
    seen = {mid for mid, _ in fused}
    extra: list[int] = []
    for mid, _ in fused[: max(0, expand)]:
        cand = candidates.get(mid)
        for near in cand.neighbours if cand is not None else ():
            if near not in seen:
                seen.add(near)
                extra.append(near)
    if extra:
        candidates.update(rerank_candidates(conn, user_id, extra))
    return [*fused, *((mid, 0.0) for mid in extra if mid in candidates)], candidates


def _shape(kind: str) -> Shape:
    if kind == "summary":
        return "summary"
    return "fact" if kind in FACT_KINDS else "talk"


def spread_to_neighbours(conn: Conn, user_id: int, share: float, ranked: Ranked) -> Ranked:
    """Each hit lends `share` of its fused score to its neighbours, which may join the list:
    an answer often sits beside the turn that matched the question's words (+0.012 R@5 held
    out on LoCoMo turns, benchmarks/README.md)."""
    if not ranked:
        return ranked
    rows = _neighbour_rows(conn, user_id, [mid for mid, _ in ranked], "")
    near = {int(r[0]): [int(x) for x in r[1:] if x is not None] for r in rows}
    scores = dict(ranked)
    for mid, score in ranked:
        for other in near.get(mid, ()):
            scores[other] = scores.get(other, 0.0) + share * score
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


async def search_memories(
    db: Runner,
    embedder: Embedder | None,
    user_id: int,
    text: str,
    *,
    k: int = 5,
    mode: SearchMode = "hybrid",
    kinds: Sequence[str] | None = None,
    fusion: Fusion | None = None,
    bits: BitCache | None = None,
    today: date | None = None,
) -> list[MemoryHit]:
    """Embed the query (unless keyword mode or no embedder) and search; for the CLI, tools and
    the daemon's recall (which pass the `bits` cache they keep for their database).

    In hybrid mode, with an embedder that `embeds_off_loop` (a model in a worker thread that
    releases the GIL, or a server), the keyword arm runs on the database thread meanwhile, so at
    100k memories its ~1 ms hides behind the embedding. With one that embeds on the loop
    (hashing) that would only add a database round trip, so it runs with the vector arm."""
    fusion = fusion or Fusion()
    model_id = embedder.model_id if embedder is not None else None
    vector = None
    keyword_hits = None
    if embedder is not None and mode != "keyword" and text.strip():
        if mode == "hybrid" and getattr(embedder, "embeds_off_loop", False):
            depth = arm_depth(k, mode, fusion)
            vector, keyword_hits = await _embed_beside_keyword(
                embedder.embed_query(text),
                db.read(lambda c: keyword_search(c, user_id, text, depth, kinds=kinds)),
            )
        else:
            vector = await embedder.embed_query(text)
    return await db.read(
        lambda c: search(
            c,
            user_id,
            text,
            vector,
            model_id,
            k=k,
            mode=mode,
            kinds=kinds,
            fusion=fusion,
            bits=bits,
            keyword_hits=keyword_hits,
            today=today,
        )
    )


async def _embed_beside_keyword(
    embed: Awaitable[list[float]], keyword: Awaitable[list[tuple[int, float]]]
) -> tuple[list[float], list[tuple[int, float]]]:
    """The query vector and the keyword arm's hits, the two awaited at once."""
    embedding = asyncio.ensure_future(embed)
    try:
        hits = await keyword
    except BaseException:
        embedding.cancel()  # and its outcome, if it had one, is nobody's to log
        embedding.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise
    return await embedding, hits


def format_recall(hits: Sequence[MemoryHit], budget_chars: int, zone: str = "UTC") -> str:
    """Recalled memories as prompt lines within a character budget (empty string if none fit),
    each with when it is from, so "when did…?" and "last summer" have a date to go by: a
    summary's conversation days (its context), else the day it was stored (an imported note:
    its original date), in the owner's zone.

    The caller wraps this in a block that marks it as data, not instructions.
    """
    lines: list[str] = []
    used = 0
    for hit in hits:
        content = " ".join(hit.memory.content.split())
        line = f"- [{hit.memory.kind} #{hit.memory.id}] ({_dated(hit.memory, zone)}) {content}"
        if used + len(line) + 1 > budget_chars:
            room = budget_chars - used - 1
            if room >= 80 and not lines:
                lines.append(line[: room - 1] + "…")  # one long memory still says something
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def _dated(memory: Memory, zone: str) -> str:
    if memory.kind == "summary" and memory.context:
        return memory.context  # "Conversation of 8 May 2023 to 9 May 2023"
    return day_words(datetime.fromtimestamp(memory.created_at, ZoneInfo(zone)))
