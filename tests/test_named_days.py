"""The days a question names (retrieval/days.py) and what re-ranking makes of them."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime
from typing import Any

import pytest

from agentd.memory import HashingEmbedder, NewMemory, add_memory, search
from agentd.memory.search import day_in, days_of, rerank_candidates
from agentd.retrieval.days import NamedDay, named_days, near_named_day
from agentd.retrieval.fusion import TUNED_FUSION
from agentd.retrieval.rerank import FEATURES, Candidate, feature_rows, rerank, shipped_ranker


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("Which recipe did Paola try on 21.01.2024?", {(2024, 1, 21)}),
        ("Where was Kate on 31 Dec 2023?", {(2023, 12, 31)}),
        ("What did Gina find for her store on 1 February, 2023?", {(2023, 2, 1)}),
        ("What did Melanie paint on October 13, 2023?", {(2023, 10, 13)}),
        ("what did I say on 2024-01-21", {(2024, 1, 21)}),
        ("the 5th of may", {(None, 5, 5)}),
        ("Jan 21st?", {(None, 1, 21)}),
        ("on 21/1/24", {(2024, 1, 21)}),
        # Day first or month first: both, when both are dates.
        ("05/01/2024", {(2024, 1, 5), (2024, 5, 1)}),
        ("Conversation of 8 May 2023 to 9 May 2023", {(2023, 5, 8), (2023, 5, 9)}),
        ("(when: 3 August 2023, August 2023, summer 2023)", {(2023, 8, 3)}),
    ],
)
def test_the_written_forms_of_a_day_are_read(text: str, days: set[tuple]) -> None:
    assert named_days(text) == {NamedDay(*d) for d in days}


@pytest.mark.parametrize(
    "text",
    [
        "What could Kevin and Paola do together?",
        "Which 3 cities did she visit?",
        "I may 3 times",  # the verb
        "31.02.2024",  # no such day
        "01.01.0000",  # nor a year 0, which is not "any year" either
        "call 555-12-2024",
        "version 1.2.3",
        "junk 5",
        None,
        "",
    ],
)
def test_what_is_no_day_names_none(text: str | None) -> None:
    assert named_days(text) == frozenset()


def test_with_today_the_days_a_message_names_relative_to_it_are_read() -> None:
    wednesday = date(2024, 1, 24)

    def days(text: str) -> set[tuple[int | None, int, int]]:
        return set(named_days(text, wednesday))

    assert days("what did I say yesterday?") == {(2024, 1, 23)}
    assert days("the day before yesterday") == {(2024, 1, 22)}  # not also yesterday
    assert days("3 days ago") == days("three days ago") == {(2024, 1, 21)}
    assert days("last Friday") == {(2024, 1, 19)}
    assert days("last wednesday") == {(2024, 1, 17)}  # the one before today
    assert days("on 21.01.2024, and yesterday") == {(2024, 1, 21), (2024, 1, 23)}
    # Said of plans as often as of the past: no day, or every such message lifts the last days.
    assert days("remind me today") == days("dinner tonight") == days("on Monday") == set()
    assert named_days("what did I say yesterday?") == frozenset()  # no today: none


def test_near_is_the_day_before_to_three_days_after() -> None:
    named = named_days("on 10 March 2024")
    said = [date(2024, 3, 9), date(2024, 3, 10), date(2024, 3, 13)]
    assert all(near_named_day([day], named) for day in said)
    assert not near_named_day([date(2024, 3, 8)], named)
    assert not near_named_day([date(2024, 3, 14)], named)
    assert not near_named_day([date(2023, 3, 10)], named)  # another year
    assert near_named_day([date(2021, 3, 11)], named_days("March 10"))  # no year: any
    assert not near_named_day([date(2023, 3, 1)], named_days("29 Feb"))  # no 29th that year
    assert not near_named_day([], named)


def _at(day: str) -> float:
    return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()


def test_a_memory_is_on_the_day_it_was_said_and_the_days_its_context_names(conn: Any) -> None:
    assert days_of(_at("2024-01-21T23:30"), None) == (date(2024, 1, 21),)
    summary = days_of(_at("2024-02-01T09:00"), "Conversation of 8 May 2023 to 9 May 2023")
    assert summary == (date(2024, 2, 1), date(2023, 5, 8), date(2023, 5, 9))
    assert days_of(_at("2024-01-21T10:00"), "on 5 May (no year)") == (date(2024, 1, 21),)
    mid = add_memory(conn, NewMemory(user_id=1, kind="turn", content="made carbonara", chat_id=1))
    conn.execute("UPDATE memories SET created_at = ? WHERE id = ?", (_at("2024-01-21T20:00"), mid))
    assert rerank_candidates(conn, 1, [mid])[mid].days == (date(2024, 1, 21),)


def _said(text: str, day: str) -> Candidate:
    return Candidate(
        content=text, context=None, shape="talk", neighbours=(), days=(date.fromisoformat(day),)
    )


def test_a_question_naming_a_day_lifts_what_was_said_near_it() -> None:
    """Two messages about pasta, each the top of one arm; the question names the day of the
    second. Without the day the first, the better keyword match, leads; with it, the one said
    that day does. A ranker that ignores the day, or a feature that never fires, fails here."""
    candidates = {
        1: _said("Paola: I love making pasta, carbonara is my favourite pasta", "2024-01-10"),
        2: _said("Paola: made carbonara tonight, so good", "2024-01-21"),
    }
    fused, kw, vec = [(1, 1.0), (2, 0.9)], [(1, -6.0), (2, -5.0)], [(2, 0.30), (1, 0.32)]
    near = FEATURES.index("near_day")
    dated = "Which pasta did Paola make on 21.01.2024?"
    rows = feature_rows(dated, kw, kw, fused, candidates)
    assert rows[2][near] == 1.0 and rows[1][near] == 0.0
    plain = feature_rows("Which pasta did Paola make?", kw, kw, fused, candidates)
    assert plain[1][near] == plain[2][near] == 0.0
    ranker = shipped_ranker("e5-small")
    assert ranker is not None and ranker.weights["near_day"] > 0

    def first(text: str) -> int:
        return rerank(ranker, text, kw, vec, fused, candidates)[0][0]

    assert first("Which pasta did Paola make?") == 1
    assert first(dated) == 2


def test_recall_asked_about_yesterday_finds_what_was_said_yesterday(conn: Any) -> None:
    """Through search(): the day a search is asked on turns "yesterday" into a day, and the
    shipped ranker lifts what was said then over an older, closer match."""
    embedder = HashingEmbedder()
    said = {
        "we made pasta with the kids, pasta carbonara again": "2024-01-10T18:00",
        "made pasta tonight": "2024-01-23T19:00",
    }
    ids = {}
    for text, when in said.items():
        vec = asyncio.run(embedder.embed_documents([text]))[0]
        memory = NewMemory(user_id=1, kind="turn", content=text, chat_id=1)
        ids[when] = add_memory(conn, memory, vec, embedder.model_id, now=_at(when))
    fusion = TUNED_FUSION["hashing"].model_copy(update={"ranker": "e5-small"})
    question = "what pasta did we make yesterday?"
    qvec = asyncio.run(embedder.embed_query(question))

    def first(today: date | None) -> int:
        hits = search(conn, 1, question, qvec, embedder.model_id, k=2, fusion=fusion, today=today)
        return hits[0].memory.id

    assert first(None) == ids["2024-01-10T18:00"]
    assert first(date(2024, 1, 24)) == ids["2024-01-23T19:00"]
    assert day_in(_at("2024-01-24T02:00"), "America/New_York") == date(2024, 1, 23)
