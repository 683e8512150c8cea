"""A Matrix draft's end and its row (matrix/output.py `end_draft`): the row goes once the
homeserver took the end, or refused it for good; one the homeserver could not take now (down,
overloaded) is tried again in the process, and stays meanwhile, for the next start's sweep
(agent/streaming.py `end_left_drafts`), and retention leaves it (matrix/kept.py). A draft
with no row whose first send may have gone out is looked for among the bot's messages."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentd.db import Database
from agentd.matrix import ids
from agentd.matrix.client import MatrixError, MatrixFault
from agentd.matrix.output import MatrixOutbox, _draft_txn, _save_draft


class Homeserver:
    """The client's send, refusing the first `times` sends with `fault` (None: taking them),
    and the bot's messages as Synapse shows them to the device that sent them."""

    def __init__(self, fault: MatrixFault | None, times: int = 1_000) -> None:
        self.fault = fault
        self.times = times
        self.sent: list[dict[str, Any]] = []
        self.mine: list[dict[str, Any]] = []  # newest first
        self.looked = 0
        self.took = asyncio.Event()

    async def send(self, room_id: str, event_type: str, content: dict[str, Any], txn: str) -> str:
        self.sent.append(content)
        if self.fault is not None and self.times > 0:
            self.times -= 1
            raise MatrixError(self.fault)
        self.took.set()
        return "$edit"

    async def own_messages(self, room_id: str, limit: int) -> list[dict[str, Any]]:
        self.looked += 1
        return self.mine[:limit]


def _outbox(db: Database, server: Homeserver) -> MatrixOutbox:
    outbox = MatrixOutbox(server, max_message_chars=4000, max_file_bytes=1, end_waits=[0.01] * 3)  # type: ignore[arg-type]
    outbox.bind(db)
    return outbox


def _sent_with(txn: str, event_id: str) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "content": {"body": "Part 1"},
        "unsigned": {"transaction_id": txn},
    }


DOWN = MatrixFault(kind="transient", reason="HTTP 502")
LEFT = MatrixFault(kind="permanent", reason="HTTP 403 M_FORBIDDEN")


@pytest.mark.parametrize(("fault", "kept"), [(None, 0), (DOWN, 1), (LEFT, 0)])
async def test_a_drafts_row_stays_only_while_its_end_can_still_be_made(
    db: Database, fault: MatrixFault | None, kept: int
) -> None:
    chat = await db.write(ids.local_id, "room", "!room:agentd.test")
    await db.write(_save_draft, chat, 9, "$draft")
    server = Homeserver(fault)
    outbox = MatrixOutbox(server, max_message_chars=4000, max_file_bytes=1, end_waits=[])  # type: ignore[arg-type]
    outbox.bind(db)
    await outbox.end_draft(chat, 9, "_(stopped)_")
    assert [c["m.relates_to"]["event_id"] for c in server.sent] == ["$draft"]
    rows = await db.read(lambda c: c.execute("SELECT event_id FROM matrix_drafts").fetchall())
    assert len(rows) == kept


async def _rows(db: Database) -> list[Any]:
    return await db.read(lambda c: c.execute("SELECT event_id FROM matrix_drafts").fetchall())


async def test_an_end_the_homeserver_could_not_take_is_tried_again_in_the_process(
    db: Database,
) -> None:
    """Down for the end and two tries after it: the third try again ends the draft, and its
    row goes, with no restart."""
    chat = await db.write(ids.local_id, "room", "!room:agentd.test")
    await db.write(_save_draft, chat, 9, "$draft")
    server = Homeserver(DOWN, times=3)
    outbox = _outbox(db, server)
    await outbox.end_draft(chat, 9, "_(stopped)_")
    assert len(await _rows(db)) == 1  # kept while it is tried again
    await asyncio.wait_for(server.took.wait(), 10)
    async with asyncio.timeout(10):
        while await _rows(db):
            await asyncio.sleep(0.01)
    assert [c["m.relates_to"]["event_id"] for c in server.sent] == ["$draft"] * 4
    await outbox.close()


async def test_ends_tried_again_stop_with_the_process_and_leave_the_row(db: Database) -> None:
    chat = await db.write(ids.local_id, "room", "!room:agentd.test")
    await db.write(_save_draft, chat, 9, "$draft")
    server = Homeserver(DOWN)
    outbox = _outbox(db, server)
    await outbox.end_draft(chat, 9, "_(stopped)_")
    await outbox.close()
    assert len(server.sent) <= 4 and len(await _rows(db)) == 1


@pytest.mark.parametrize("found", [True, False], ids=["sent", "never-sent"])
async def test_an_earlier_processs_unrecorded_first_draft_is_found_and_ended_or_nothing_sent(
    db: Database, found: bool
) -> None:
    """A turn that began before this process ends unanswered with no row for its draft:
    the bot's messages are read for its first draft's transaction id; the draft found is
    ended, and without it nothing is sent (not under that id, which would make a message)."""
    chat = await db.write(ids.local_id, "room", "!room:agentd.test")
    server = Homeserver(None)
    server.mine = [_sent_with("agentd-other", "$help")]
    if found:
        server.mine.append(_sent_with(_draft_txn(chat, 9), "$draft"))
    outbox = _outbox(db, server)
    await outbox.end_draft(chat, 9, "_(stopped)_", earlier=True)
    assert server.looked == 1
    assert [c["m.relates_to"]["event_id"] for c in server.sent] == (["$draft"] if found else [])
    if found:  # what the draft said, read from the event found, then the marker
        assert server.sent[0]["m.new_content"]["body"] == "Part 1\n\n(stopped)"


async def test_a_turn_of_this_process_with_no_draft_reads_nothing(db: Database) -> None:
    chat = await db.write(ids.local_id, "room", "!room:agentd.test")
    server = Homeserver(None)
    server.mine = [_sent_with(_draft_txn(chat, 9), "$draft")]
    await _outbox(db, server).end_draft(chat, 9, "_(stopped)_")
    assert server.looked == 0 and server.sent == []


async def test_a_first_draft_whose_send_was_lost_in_this_process_is_found_and_ended(
    db: Database,
) -> None:
    """Synapse took the first draft and every answer to it was lost: no row, the process
    unsure of it. The turn then stops: the draft is found, and ends as what it said."""
    chat = await db.write(ids.local_id, "room", "!room:agentd.test")
    server = Homeserver(DOWN, times=1)
    server.mine = [_sent_with(_draft_txn(chat, 9), "$draft")]
    outbox = _outbox(db, server)
    assert await outbox.send_draft(chat, 9, "Part 1") is False
    await outbox.end_draft(chat, 9, "_(stopped)_")
    assert server.looked == 1
    assert server.sent[-1]["m.relates_to"]["event_id"] == "$draft"
    assert server.sent[-1]["m.new_content"]["body"] == "Part 1\n\n(stopped)"
