"""Facts that keep where and when they were said, and turns read by the talk they belong to:
a fact stores its messages, its summary and the date it means; search links a fact and its
summary both ways; a turn's session lends the query terms its session's candidates hold."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentd.config import Config
from agentd.db import Database
from agentd.durable import SystemClock
from agentd.memory import HashingEmbedder, NewMemory, add_memory
from agentd.memory.facts import ExtractedFact, ExtractedFacts, apply_extracted_facts
from agentd.memory.search import rerank_candidates, session_of
from agentd.memory.store import get_memory
from agentd.memory.summarise import (
    BlockMessage,
    SummaryDeps,
    SummaryFact,
    SummaryInput,
    SummaryResult,
    _render,
    fact_context,
    fact_meta,
    store,
)
from agentd.retrieval.rerank import FEATURES, Candidate, feature_rows

FRIDAY = datetime(2023, 5, 12, 18, 0, tzinfo=UTC).timestamp()  # Friday 12 May 2023


def _block() -> list[BlockMessage]:
    return [
        BlockMessage(id=41, role="user", content="hi", created_at=FRIDAY - 86_400 * 3),
        BlockMessage(
            id=42,
            role="user",
            content="I ran my first 10k race last Tuesday!",
            created_at=FRIDAY,
            origin="user",
        ),
        BlockMessage(id=43, role="assistant", content="Congratulations!", created_at=FRIDAY),
    ]


def test_the_summariser_sees_each_messages_id_and_a_fact_is_dated_by_its_message() -> None:
    block = _block()
    said = block[1]
    assert f"[#{said.id} 2023-05-12 18:00] User: I ran my first 10k" in _render(block)
    fact = SummaryFact(key="running", content="Ran a first 10k race", messages=[said.id, 999])
    # "last Tuesday" in the message, said on Friday 12 May: Tuesday 9 May, not the block's day.
    context = fact_context(block, fact, "UTC")
    assert context is not None and "9 May 2023" in context
    assert fact_meta(block, fact, summary_id=7) == {"summary": 7, "messages": [said.id]}
    # Without messages named, the block's last day anchors it; no time named: no context.
    assert fact_context(block, SummaryFact(content="Likes tea"), "UTC") is None
    assert fact_meta(block, SummaryFact(content="Likes tea"), 7) == {"summary": 7}
    # The remember tool's facts carry no message ids: its schema stays as it was.
    assert "messages" not in ExtractedFact.model_json_schema()["properties"]


def test_a_fact_stores_its_context_and_where_it_came_from_and_a_supersede_replaces_them(
    conn: Any,
) -> None:
    facts = ExtractedFacts(facts=[ExtractedFact(key="race", content="Ran a 10k race")])
    apply_extracted_facts(
        conn, 1, facts, contexts=["(when: 9 May 2023)"], metas=[{"summary": 3, "messages": [42]}]
    )
    (change,) = apply_extracted_facts(
        conn,
        1,
        ExtractedFacts(facts=[ExtractedFact(key="race", content="Ran a half marathon")]),
        contexts=["(when: 2 June 2023)"],
        metas=[{"summary": 8, "messages": [90]}],
    )
    memory = get_memory(conn, change.memory_id or 0)
    assert memory is not None and change.action == "replaced"
    assert memory.context == "(when: 2 June 2023)" and memory.meta == {
        "summary": 8,
        "messages": [90],
    }


def test_the_store_step_links_each_fact_to_its_summary_and_messages(tmp_path: Path) -> None:
    async def run() -> tuple[Any, Any]:
        db = await Database.open(tmp_path / "a.db")
        try:
            embedder = HashingEmbedder()
            deps = SummaryDeps(
                config=Config(), db=db, llm=None, embedder=embedder, clock=SystemClock()
            )  # type: ignore[arg-type]
            result = SummaryResult(
                summary="The user ran a race.",
                facts=[SummaryFact(key="race", content="Ran a 10k race", messages=[42])],
            )
            vectors = await embedder.embed_documents(["The user ran a race.", "Ran a 10k race"])
            out = await store(
                deps,
                SummaryInput(chat_id=5, user_id=1, up_to_id=43),
                "i1",
                _block(),
                result,
                vectors,
            )
            summary = await db.read(lambda c: get_memory(c, out.memory_id or 0))
            facts = await db.read(
                lambda c: c.execute("SELECT id FROM memories WHERE kind = 'fact'").fetchall()
            )
            fact = await db.read(lambda c: get_memory(c, int(facts[0][0])))
            return summary, fact
        finally:
            await db.close()

    summary, fact = asyncio.run(run())
    assert fact.meta == {"summary": summary.id, "messages": [42]}
    assert fact.context is not None and "9 May 2023" in fact.context


def test_a_hit_on_a_fact_lends_to_its_summary_and_back(conn: Any) -> None:
    summary = add_memory(conn, NewMemory(user_id=1, kind="summary", content="talk", chat_id=1))
    other = add_memory(conn, NewMemory(user_id=1, kind="summary", content="later", chat_id=1))
    fact = add_memory(
        conn,
        NewMemory(user_id=1, kind="fact", content="Ran a 10k", meta={"summary": summary}),
    )
    loose = add_memory(conn, NewMemory(user_id=1, kind="fact", content="Likes tea"))
    candidates = rerank_candidates(conn, 1, [summary, fact, loose])
    assert candidates[fact].neighbours == (summary,)
    assert fact in candidates[summary].neighbours and other in candidates[summary].neighbours
    assert candidates[loose].neighbours == ()
    # Its summary read alone (the fact not among the candidates) has only its stored neighbour.
    assert rerank_candidates(conn, 1, [summary])[summary].neighbours == (other,)


def _turn(text: str, session: str | None) -> Candidate:
    return Candidate(content=text, context=None, shape="talk", neighbours=(), session=session)


def test_a_session_lends_the_terms_its_candidates_hold_together() -> None:
    text = "Which city did Melanie move to for the pottery class?"
    candidates = {
        1: _turn("Melanie: we move to Lisbon in June", "a"),
        2: _turn("Melanie: signed up for a pottery class", "a"),
        3: _turn("Melanie: a pottery class!", "b"),
        4: _turn("Melanie: moved to Lisbon", None),
    }
    fused = [(1, 1.0), (2, 0.9), (3, 0.8), (4, 0.7)]
    rows = feature_rows(text, fused, fused, fused, candidates)
    col, own = FEATURES.index("session_cover"), FEATURES.index("cover_content")
    assert rows[1][col] == rows[2][col] > rows[1][own]  # together: city, melanie, pottery, …
    assert rows[3][col] == rows[3][own] < rows[1][col]  # alone in its session
    assert rows[4][col] == rows[4][own]  # no session known: its own share


def test_a_turns_session_is_its_chats_day_and_only_turns_have_one(conn: Any) -> None:
    day = 19_500 * 86_400.0
    assert session_of("turn", 3, day + 10) == session_of("turn", 3, day + 80_000) == "3:19500"
    assert session_of("turn", 3, day + 90_000) != session_of("turn", 3, day)
    assert session_of("turn", 4, day) != session_of("turn", 3, day)
    assert session_of("fact", 3, day) is None and session_of("summary", 3, day) is None
    mid = add_memory(conn, NewMemory(user_id=1, kind="turn", content="hi", chat_id=3), now=day)
    assert rerank_candidates(conn, 1, [mid])[mid].session == "3:19500"
