"""A turn that ends without its answer ends its draft (agent/streaming.py `end_unanswered`),
unless its answer's send began: that send may have taken the draft's place already. The
marker is in the user's language; a draft left open when the process died is ended at the
next start (`end_left_drafts`)."""

from __future__ import annotations

import json
from typing import Any

from agentd.agent.streaming import STOPPED, answer_draft, end_left_drafts, end_unanswered
from agentd.chat import locale
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.db import Database
from agentd.durable import store

EN = STOPPED["en"]


class Drafts:
    def __init__(self, fail: bool = False, left: list[tuple[int, int]] | None = None) -> None:
        self.ended: list[tuple[int, int, str]] = []
        self.fail = fail
        self.left = left or []

    async def end_draft(
        self, chat_id: int, draft_id: int, note: str, *, earlier: bool = False
    ) -> None:
        self.ended.append((chat_id, draft_id, note))
        if self.fail:
            raise RuntimeError("the homeserver is down")

    async def open_drafts(self) -> list[tuple[int, int]]:
        return self.left


async def _turn(
    db: Database,
    status: str,
    steps: tuple[str, ...] = (),
    instance_id: str = "t1",
    told: str = "",
) -> Any:
    def write(conn: Any) -> None:
        given = {"chat_id": 5, "user_id": 7, "language_code": told}
        store.insert_instance(
            conn,
            instance_id=instance_id,
            workflow=TURN_WORKFLOW,
            key=chat_key(5),
            input_json=json.dumps(given),
            now=1.0,
        )
        for ordinal, name in enumerate(steps):
            store.begin_step(conn, instance_id, ordinal, name, "do", 1.0)
        store.set_status(conn, instance_id, status, 2.0)

    await db.write(write)
    return await db.read(store.get_instance, instance_id)


async def test_a_cancelled_turn_ends_its_draft(db: Database) -> None:
    drafts = Drafts()
    await end_unanswered(db, drafts, await _turn(db, "cancelled", ("call-llm",)))  # type: ignore[arg-type]
    assert drafts.ended == [(5, answer_draft("t1"), EN)]


async def test_a_turn_whose_answer_began_to_go_keeps_its_draft(db: Database) -> None:
    drafts = Drafts()
    await end_unanswered(db, drafts, await _turn(db, "cancelled", ("send#1",)))  # type: ignore[arg-type]
    assert drafts.ended == []


async def test_a_failed_end_fails_nothing(db: Database) -> None:
    drafts = Drafts(fail=True)
    await end_unanswered(db, drafts, await _turn(db, "errored"))  # type: ignore[arg-type]
    assert drafts.ended == [(5, answer_draft("t1"), EN)]


async def test_the_marker_is_in_the_language_the_user_chose(db: Database) -> None:
    """/language wins over what the client said; a regional tag reads its language's."""
    await db.write(locale.choose, 7, "pt-br", 1.0)
    drafts = Drafts()
    await end_unanswered(db, drafts, await _turn(db, "cancelled", told="de"))  # type: ignore[arg-type]
    assert drafts.ended == [(5, answer_draft("t1"), STOPPED["pt"])]


async def test_the_marker_follows_the_client_else_is_english(db: Database) -> None:
    drafts = Drafts()
    await end_unanswered(db, drafts, await _turn(db, "cancelled", told="de"))  # type: ignore[arg-type]
    await end_unanswered(db, drafts, await _turn(db, "errored", instance_id="t2", told="tlh"))  # type: ignore[arg-type]
    assert [note for *_, note in drafts.ended] == [STOPPED["de"], EN]
    assert STOPPED["de"] != EN


async def test_at_start_only_drafts_of_turns_that_ended_unanswered_are_ended(
    db: Database,
) -> None:
    """A cancelled turn's draft is ended; one whose turn is open is left to it, one whose
    answer began to go is the answer's. One no turn names any more (retention removed its
    turn) is ended too, in the language of the chat's user: no answer will come for it."""
    await db.write(locale.choose, 7, "de", 1.0)
    await _turn(db, "cancelled", ("call-llm",), instance_id="stopped")
    await _turn(db, "running", instance_id="open")
    await _turn(db, "errored", ("send#1",), instance_id="answered")
    left = [(5, answer_draft(i)) for i in ("stopped", "open", "answered", "pruned")]
    drafts = Drafts(left=left)
    assert await end_left_drafts(db, drafts) == 2  # type: ignore[arg-type]
    assert drafts.ended == [
        (5, answer_draft("stopped"), STOPPED["de"]),
        (5, answer_draft("pruned"), STOPPED["de"]),
    ]


async def test_a_draft_of_a_chat_with_no_turn_left_ends_in_english(db: Database) -> None:
    drafts = Drafts(left=[(6, answer_draft("pruned"))])
    assert await end_left_drafts(db, drafts) == 1  # type: ignore[arg-type]
    assert drafts.ended == [(6, answer_draft("pruned"), EN)]
