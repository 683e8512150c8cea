"""Recall searches the whole message: its text, the message replied to, the images seen."""

from __future__ import annotations

from typing import Any

from agentd.agent.recall_query import REPLY_CHARS, recall_query
from agentd.agent.turn import recall_memories
from agentd.chat.inputs import ReplyContext, TurnInput
from agentd.db import Database
from agentd.media.vision import SeenImage, VisionSummary
from agentd.memory.store import NewMemory, remember
from agentd.retrieval.embedders import HashingEmbedder
from tests.test_turn_recall import CountingEmbedder, Deps


def message(text: str = "", **extra: Any) -> TurnInput:
    base: dict[str, Any] = {
        "origin": "chat",
        "update_id": 1,
        "chat_id": 7,
        "chat_kind": "private",
        "user_id": 7,
        "message_id": 2,
        "date": 0,
        "kind": "text",
        "text": text,
    }
    return TurnInput.model_validate(base | extra)


def seen(summary: str, entities: list[str] | None = None) -> SeenImage:
    return SeenImage(
        file_id="f",
        sha256="0" * 64,
        summary=VisionSummary(summary=summary, entities=entities or []),
        cached=False,
    )


def test_plain_text_is_its_own_query() -> None:
    assert recall_query(message("which tea do I like?")) == "which tea do I like?"


def test_a_reply_adds_the_replied_to_text_after_the_users_words() -> None:
    long = "x" * (REPLY_CHARS * 3)
    inp = message("and this?", reply_to=ReplyContext(message_id=1, text=long))
    query = recall_query(inp)
    assert query.startswith("and this?\n") and len(query) == len("and this?\n") + REPLY_CHARS


def test_images_add_their_summary_and_entities() -> None:
    inp = message("", kind="photo", photo_file_id="f")
    query = recall_query(inp, [seen("A receipt for two coffees.", ["Café Lumière"])])
    assert query == "A receipt for two coffees. Café Lumière"


def test_nothing_to_search_is_an_empty_query() -> None:
    assert recall_query(message("")) == ""


async def test_a_bare_reply_recalls_through_the_replied_to_text(db: Database) -> None:
    embedder = CountingEmbedder()
    deps: Any = Deps(db, embedder)
    await remember(db, embedder, NewMemory(user_id=7, kind="summary", content="Loves oolong tea"))
    inp = message("really?", reply_to=ReplyContext(message_id=1, text="oolong tea is best"))
    assert (await recall_memories(deps, inp)).memories == ""  # the text alone finds nothing
    found = await recall_memories(deps, inp, recall_query(inp))
    assert "oolong" in found.memories
    assert embedder.queries[-1] == "really?\noolong tea is best"


async def test_a_photo_without_caption_recalls_through_its_summary(db: Database) -> None:
    embedder = HashingEmbedder()
    deps: Any = Deps(db, embedder)  # type: ignore[arg-type]
    note = NewMemory(user_id=7, kind="note", content="Receipts from Café Lumière go to expenses")
    await remember(db, embedder, note)
    inp = message("", kind="photo", photo_file_id="f")
    found = await recall_memories(deps, inp, recall_query(inp, [seen("A receipt", ["Lumière"])]))
    assert "Lumière" in found.memories


def test_a_reply_in_its_own_words_is_its_own_query() -> None:
    text = "which tea did I say I liked best last spring?"
    inp = message(text, reply_to=ReplyContext(message_id=1, text="the weather in Lyon"))
    assert recall_query(inp) == text


def test_a_message_leaning_on_the_recent_turns_carries_their_names() -> None:
    recent = ["Caroline went to the support group on Sunday.", "That sounds lovely."]
    assert recall_query(message("what did she say?"), recent=recent) == (
        "what did she say? Caroline Sunday"
    )
    assert recall_query(message("which tea do I like best?"), recent=recent) == (
        "which tea do I like best?"
    )
