"""Facts: a contradicting fact replaces the older one; the prompt section keeps its budget."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.db.runner import ConnRunner
from agentd.memory import (
    ExtractedFact,
    ExtractedFacts,
    HashingEmbedder,
    apply_extracted_facts,
    facts_for_prompt,
    forget,
    list_facts,
    normalise_slot,
    remember_facts,
    search_memories,
)


def test_normalise_slot() -> None:
    assert normalise_slot("Home City ") == "home_city"
    assert normalise_slot("home-city") == "home_city"
    assert normalise_slot("  ") is None
    assert normalise_slot(None) is None


async def test_contradicting_fact_replaces_older(conn: Any) -> None:
    emb, db = HashingEmbedder(), ConnRunner(conn)
    first = await remember_facts(
        db, emb, 7, ExtractedFacts(facts=[ExtractedFact(key="home city", content="Lives in Paris")])
    )
    second = await remember_facts(
        db, emb, 7, ExtractedFacts(facts=[ExtractedFact(key="Home-City", content="Lives in Lyon")])
    )
    assert first[0].action == "added" and second[0].action == "replaced"
    assert second[0].memory_id == first[0].memory_id and second[0].previous == "Lives in Paris"
    assert [f.content for f in list_facts(conn, 7)] == ["Lives in Lyon"]
    # The index follows: the old text is not found any more, by either arm.
    for mode in ("keyword", "vector", "hybrid"):
        hits = await search_memories(db, emb, 7, "Paris", mode=mode)
        assert all("Paris" not in h.memory.content for h in hits)
    assert (await search_memories(db, emb, 7, "Lyon"))[0].memory.content == "Lives in Lyon"


def test_same_key_for_another_user_is_separate(conn: Any) -> None:
    apply_extracted_facts(
        conn, 1, ExtractedFacts(facts=[ExtractedFact(key="diet", content="Vegan")])
    )
    apply_extracted_facts(
        conn, 2, ExtractedFacts(facts=[ExtractedFact(key="diet", content="Keto")])
    )
    assert [f.content for f in list_facts(conn, 1)] == ["Vegan"]
    assert [f.content for f in list_facts(conn, 2)] == ["Keto"]


def test_unkeyed_duplicates_do_not_pile_up_and_retract_works(conn: Any) -> None:
    facts = ExtractedFacts(
        facts=[
            ExtractedFact(kind="task", content="Call mum on Sunday"),
            ExtractedFact(kind="task", content="call mum on sunday."),
            ExtractedFact(kind="preference", key="reply_language", content="Prefers French"),
        ]
    )
    changes = apply_extracted_facts(conn, 1, facts)
    assert [c.action for c in changes] == ["added", "unchanged", "added"]
    changes = apply_extracted_facts(conn, 1, ExtractedFacts(retract_keys=["Reply language"]))
    assert [c.action for c in changes] == ["retracted"]
    assert [f.kind for f in list_facts(conn, 1)] == ["task"]


def test_facts_for_prompt_respects_budget_and_order(conn: Any) -> None:
    facts = [
        ExtractedFact(kind="fact", key=f"k{i}", content=f"Fact number {i} " + "x" * 40)
        for i in range(20)
    ]
    facts.append(ExtractedFact(kind="preference", key="tone", content="Likes short answers"))
    apply_extracted_facts(conn, 1, ExtractedFacts(facts=facts))
    text = facts_for_prompt(conn, 1, 300)
    assert 0 < len(text) <= 300
    assert text.splitlines()[0] == "- [preference] Likes short answers (key: tone)"
    assert facts_for_prompt(conn, 1, 0) == ""
    assert facts_for_prompt(conn, 2, 1000) == ""
    full = facts_for_prompt(conn, 1, 100_000)
    assert len(full.splitlines()) == 21


def test_forgetting_a_fact_frees_its_slot(conn: Any) -> None:
    (change,) = apply_extracted_facts(
        conn, 1, ExtractedFacts(facts=[ExtractedFact(key="pet", content="Has a cat")])
    )
    assert forget(conn, change.memory_id, user_id=1)
    (again,) = apply_extracted_facts(
        conn, 1, ExtractedFacts(facts=[ExtractedFact(key="pet", content="Has a dog")])
    )
    assert again.action == "added"


def test_vectors_must_match_facts() -> None:
    with pytest.raises(ValueError):
        apply_extracted_facts(None, 1, ExtractedFacts(facts=[]), vectors=[[0.1]])


def test_extracted_facts_schema_is_llm_friendly() -> None:
    schema = ExtractedFacts.model_json_schema()
    assert "facts" in schema["properties"]
    fact = schema["$defs"]["ExtractedFact"]["properties"]
    assert "description" in fact["key"] and "description" in fact["content"]


def test_outside_words_neither_replace_nor_retract_the_owners_fact(conn: Any) -> None:
    """A page, a mail or a forwarded message the summariser read may carry an instruction:
    its facts are outside content, and they never replace or remove a fact the owner's own
    conversation established. The outside value is kept beside it, unkeyed."""
    said = ExtractedFacts(facts=[ExtractedFact(key="home city", content="Lives in Paris")])
    (own,) = apply_extracted_facts(conn, 1, said)
    page = ExtractedFact(key="home city", content="Lives in Pyongyang")
    (beside,) = apply_extracted_facts(conn, 1, ExtractedFacts(facts=[page]), origin="outside")
    assert beside.action == "added" and beside.slot is None
    assert (
        apply_extracted_facts(conn, 1, ExtractedFacts(retract_keys=["home_city"]), origin="outside")
        == []
    )
    facts = {f.content: (f.slot, f.origin) for f in list_facts(conn, 1)}
    assert facts == {
        "Lives in Paris": ("home_city", "model"),
        "Lives in Pyongyang": (None, "outside"),
    }
    # The owner's own conversation still changes and retracts it as before.
    moved = ExtractedFacts(facts=[ExtractedFact(key="home city", content="Lives in Lyon")])
    (change,) = apply_extracted_facts(conn, 1, moved)
    assert change.action == "replaced" and change.memory_id == own.memory_id
    (gone,) = apply_extracted_facts(conn, 1, ExtractedFacts(retract_keys=["home city"]))
    assert gone.action == "retracted"


def test_outside_words_still_update_an_outside_fact(conn: Any) -> None:
    mail = ExtractedFacts(facts=[ExtractedFact(key="parcel", content="Parcel due Monday")])
    apply_extracted_facts(conn, 1, mail, origin="outside")
    later = ExtractedFacts(facts=[ExtractedFact(key="parcel", content="Parcel due Tuesday")])
    (change,) = apply_extracted_facts(conn, 1, later, origin="outside")
    assert change.action == "replaced"
    (gone,) = apply_extracted_facts(
        conn, 1, ExtractedFacts(retract_keys=["parcel"]), origin="outside"
    )
    assert gone.action == "retracted"
