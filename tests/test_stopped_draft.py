"""A turn that ends without its answer ends its draft (agent/streaming.py `end_unanswered`),
unless its answer's send began: that send may have taken the draft's place already."""

from __future__ import annotations

import json
from typing import Any

from agentd.agent.streaming import answer_draft, end_unanswered
from agentd.chat.names import TURN_WORKFLOW
from agentd.db import Database
from agentd.durable import store


class Drafts:
    def __init__(self, fail: bool = False) -> None:
        self.ended: list[tuple[int, int]] = []
        self.fail = fail

    async def end_draft(self, chat_id: int, draft_id: int) -> None:
        self.ended.append((chat_id, draft_id))
        if self.fail:
            raise RuntimeError("the homeserver is down")


async def _ended(db: Database, status: str, steps: tuple[str, ...] = ()) -> Any:
    def write(conn: Any) -> None:
        store.insert_instance(
            conn,
            instance_id="t1",
            workflow=TURN_WORKFLOW,
            key="chat:5",
            input_json=json.dumps({"chat_id": 5}),
            now=1.0,
        )
        for ordinal, name in enumerate(steps):
            store.begin_step(conn, "t1", ordinal, name, "do", 1.0)
        store.set_status(conn, "t1", status, 2.0)

    await db.write(write)
    return await db.read(store.get_instance, "t1")


async def test_a_cancelled_turn_ends_its_draft(db: Database) -> None:
    drafts = Drafts()
    await end_unanswered(db, drafts, await _ended(db, "cancelled", ("call-llm",)))  # type: ignore[arg-type]
    assert drafts.ended == [(5, answer_draft("t1"))]


async def test_a_turn_whose_answer_began_to_go_keeps_its_draft(db: Database) -> None:
    drafts = Drafts()
    await end_unanswered(db, drafts, await _ended(db, "cancelled", ("send#1",)))  # type: ignore[arg-type]
    assert drafts.ended == []


async def test_a_failed_end_fails_nothing(db: Database) -> None:
    drafts = Drafts(fail=True)
    await end_unanswered(db, drafts, await _ended(db, "errored"))  # type: ignore[arg-type]
    assert drafts.ended == [(5, answer_draft("t1"))]
