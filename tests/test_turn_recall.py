"""A turn's recall embeds the message only when the user has something to recall.

With the default model a query embedding is ~12 ms of a turn; a user's first turns (before any
summary) have nothing to find, and facts are listed whole, not searched.
"""

from __future__ import annotations

from typing import Any

from agentd.agent.turn import recall_memories
from agentd.chat.inputs import TurnInput
from agentd.config import Config
from agentd.db import Database
from agentd.memory.store import NewMemory, remember
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import HashingEmbedder


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    async def embed_query(self, text: str) -> Any:
        self.queries.append(text)
        return await super().embed_query(text)


class Deps:
    def __init__(self, db: Database, embedder: CountingEmbedder) -> None:
        self.db, self.embedder, self.config = db, embedder, Config()
        self.memory_bits = BitCache()  # as the daemon's TurnDeps has


def message(user: int, text: str) -> TurnInput:
    return TurnInput(
        update_id=1,
        chat_id=user,
        chat_kind="private",
        user_id=user,
        message_id=1,
        date=0,
        kind="text",
        text=text,
    )


async def test_no_query_embedding_until_there_is_a_memory_to_find(db: Database) -> None:
    embedder = CountingEmbedder()
    deps: Any = Deps(db, embedder)
    await remember(db, embedder, NewMemory(user_id=7, kind="fact", content="Lives in Lyon"))
    first = await recall_memories(deps, message(7, "where do I live?"))
    assert embedder.queries == []  # a fact is listed in full, never searched for
    assert "Lyon" in first.facts and first.memories == ""

    await remember(db, embedder, NewMemory(user_id=8, kind="summary", content="Talked about tea"))
    assert (await recall_memories(deps, message(7, "tea?"))).memories == ""  # another user's
    assert embedder.queries == []

    await remember(db, embedder, NewMemory(user_id=7, kind="summary", content="Loves green tea"))
    found = await recall_memories(deps, message(7, "which tea do I like?"))
    assert embedder.queries == ["which tea do I like?"]
    assert "green tea" in found.memories
