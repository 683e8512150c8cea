"""A learned re-ranking of the fused candidates: a linear model over what both arms said about a
candidate and what the candidate itself looks like.

Fusion alone weighs two scores; but in a talk-like memory the answer is often the turn *beside*
the one whose words matched, a short "thanks!" or a question back is rarely what was asked for,
a hit matching every word of the question beats one matching its rarest word alone, and what
counts as long or short depends on whether it is a turn, a summary or a fact, and on how the
owner writes: length and coverage are also read against the other candidates of the same
search, since a chat of short messages and one of paragraphs differ in both. Each candidate of
the fused list (both arms' top `depth`) gets the features below; a logistic regression, trained
by benchmarks/train_rerank.py on the LoCoMo dev conversations stored as turns and as the daemon
stores them (summaries and facts), and on four of REALTALK's real messaging-app chats as turns,
weighs them (a synthetic rendering of LoCoMo as chat fitted itself and lost on real chat),
with each question's vector moved by a query adapter that never saw its conversation, as
search() moves it with the shipped one (query_adapter.py).
The weights are data shipped with the package (rerank_<embedder>.json, like the e5 centre), so
re-ranking costs no model call and nothing is fetched: ~1 ms per search (benchmarks/README.md).
They are trained per embedder, since the vector features mean what its scores mean.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agentd.retrieval.days import named_days, near_named_day
from agentd.retrieval.fts import query_terms, text_terms
from agentd.retrieval.fusion import stretch
from agentd.retrieval.places import asks_place, names_place

# What each feature says of a candidate; the names key the weights file.
FEATURES = (
    "keyword",  # its BM25 stretched to [0, 1] over the keyword arm's list (0 when absent)
    "vector",  # its cosine similarity stretched over the vector arm's list (0 when absent)
    "in_keyword",  # 1 when the keyword arm found it
    "in_vector",  # 1 when the vector arm found it
    "keyword_rr",  # 1 / its rank in the keyword arm (0 when absent)
    "vector_rr",  # 1 / its rank in the vector arm
    "neighbour",  # the best fused score of the memories stored just before and after it
    "cover_content",  # share of the query's terms its own text contains
    "cover_context",  # share of the query's terms its context contains
    "cover_best",  # its cover_content over the best cover_content among the candidates
    "length",  # log(1 + words of its text)
    "longer",  # length minus the mean length of the candidates (chats differ in message length)
    "question",  # 1 when its text asks a question
    "summary",  # 1 for a summary of a stretch of talk (long, and covering many things)
    "fact",  # 1 for a fact, preference or task: one short statement
    "session_cover",  # share of the query's terms its session's candidates hold together
    "near_day",  # 1 when the query names a day and it was said near it, or is about it (days.py)
    "names_place",  # 1 when the query asks for a place and its text names one (places.py)
)
# What a candidate is, as far as its length and reach go (the memory package maps its kinds).
Shape = Literal["talk", "summary", "fact"]


@dataclass(frozen=True)
class Candidate:
    """What re-ranking needs of one stored memory besides the arms' scores."""

    content: str
    context: str | None
    shape: Shape
    neighbours: tuple[int, ...]  # ids stored just before and after it (same chat and kind)
    # Which stretch of talk it belongs to (a chat's day, memory/search.py); None: none known.
    session: str | None = None
    # The days it was said on or is about (its date, days its context names).
    days: tuple[date, ...] = ()


class Ranker(BaseModel):
    """A linear model over FEATURES: score = bias + Σ weight · feature."""

    embedder: str
    trained_on: str
    weights: dict[str, float]
    bias: float
    # How many of the fused list's top hits lend their stored neighbours as candidates
    # (memory/search.py ranker_pool); 0 ranks the fused list alone.
    expand: int = Field(default=0, ge=0, le=100)

    def score(self, row: Sequence[float]) -> float:
        return self.bias + sum(
            self.weights.get(f, 0.0) * x for f, x in zip(FEATURES, row, strict=True)
        )


def ranker_path(embedder: str) -> Path:
    return Path(__file__).with_name(f"rerank_{embedder.replace('-', '_')}.json")


@cache
def shipped_ranker(embedder: str) -> Ranker | None:
    """The ranker trained for an embedder, or None when there is none (re-ranking is skipped)."""
    path = ranker_path(embedder)
    if not path.is_file():
        return None
    return Ranker.model_validate(json.loads(path.read_text(encoding="utf-8")))


def feature_rows(
    text: str,
    keyword: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    fused: Sequence[tuple[int, float]],
    candidates: Mapping[int, Candidate],
    today: date | None = None,
) -> dict[int, list[float]]:
    """FEATURES of every fused id that has a Candidate. `keyword`: (id, bm25) as the arm ranked
    them, `vector`: (id, cosine distance), `fused`: (id, fused score), each as deep as fused;
    `today`: the day the question is asked on, for the days it names relative to it."""
    kw = dict(stretch([(mid, -bm25) for mid, bm25 in keyword]))
    vec = dict(stretch([(mid, 1.0 - distance) for mid, distance in vector]))
    kw_rank = {mid: rank for rank, (mid, _) in enumerate(keyword, start=1)}
    vec_rank = {mid: rank for rank, (mid, _) in enumerate(vector, start=1)}
    fused_score = dict(fused)
    wanted = set(query_terms(text))
    lengths = {
        mid: math.log1p(len(cand.content.split()))
        for mid, _ in fused
        if (cand := candidates.get(mid)) is not None
    }
    mean_length = sum(lengths.values()) / len(lengths) if lengths else 0.0
    # The query's terms each candidate's text and context hold, each text read once.
    held = {mid: _held(wanted, candidates[mid].content) for mid in lengths}
    held_context = {mid: _held(wanted, candidates[mid].context) for mid in lengths}
    share = 1.0 / len(wanted) if wanted else 0.0
    covers = {mid: len(held[mid]) * share for mid in lengths}
    best_cover = max(covers.values(), default=0.0)
    by_session = _session_covers(share, candidates, held, held_context)
    named = named_days(text, today)
    place = asks_place(text)
    rows: dict[int, list[float]] = {}
    for mid, _ in fused:
        cand = candidates.get(mid)
        if cand is None:
            continue
        rows[mid] = [
            kw.get(mid, 0.0),
            vec.get(mid, 0.0),
            float(mid in kw),
            float(mid in vec),
            1.0 / kw_rank[mid] if mid in kw_rank else 0.0,
            1.0 / vec_rank[mid] if mid in vec_rank else 0.0,
            max((fused_score.get(n, 0.0) for n in cand.neighbours), default=0.0),
            covers[mid],
            len(held_context[mid]) * share,
            covers[mid] / best_cover if best_cover > 0 else 0.0,
            lengths[mid],
            lengths[mid] - mean_length,
            float("?" in cand.content),
            float(cand.shape == "summary"),
            float(cand.shape == "fact"),
            by_session.get(mid, covers[mid]),
            float(bool(named) and near_named_day(cand.days, named)),
            float(place and names_place(cand.content)),
        ]
    return rows


def _held(wanted: set[str], text: str | None) -> set[str]:
    return wanted & text_terms(text) if wanted and text else set()


def _session_covers(
    share: float,
    candidates: Mapping[int, Candidate],
    held: Mapping[int, set[str]],
    held_context: Mapping[int, set[str]],
) -> dict[int, float]:
    """For each candidate with a session, the share of the query's terms held by the text and
    context of all the candidates of that session together: a question whose words were said
    over several messages of one talk lifts each of them, where each alone holds a part."""
    terms: dict[str, set[str]] = {}
    for mid in held:
        session = candidates[mid].session
        if session is not None:
            terms.setdefault(session, set()).update(held[mid], held_context[mid])
    return {
        mid: len(terms[session]) * share
        for mid in held
        if (session := candidates[mid].session) is not None
    }


def rerank(
    ranker: Ranker,
    text: str,
    keyword: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    fused: Sequence[tuple[int, float]],
    candidates: Mapping[int, Candidate],
    today: date | None = None,
) -> list[tuple[int, float]]:
    """The fused ids ordered by the ranker's score, best first; ties broken by id. An id without
    a Candidate (deleted meanwhile) is dropped. `today`: see feature_rows."""
    rows = feature_rows(text, keyword, vector, fused, candidates, today)
    scored = [(mid, ranker.score(row)) for mid, row in rows.items()]
    return sorted(scored, key=lambda item: (-item[1], item[0]))
