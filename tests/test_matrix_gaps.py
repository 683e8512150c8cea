"""A cut /sync timeline read back through /messages (matrix/gaps.py), against a fake of the
endpoint that pages as Synapse does, and taken in by intake with the real database: each
message once, in order, and past the cap the owner told rather than nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentd.chat.notice import NOTICE_WORKFLOW, make_notice_workflow
from agentd.db import Database
from agentd.durable import Engine
from agentd.matrix import gaps
from agentd.matrix.client import MatrixError, MatrixFault
from agentd.matrix.gaps import Gap, limited_rooms, page_back
from agentd.matrix.intake import persist_sync, taken_events
from agentd.matrix.sync import Syncer
from tests.test_matrix_intake import BOT, ME, OWNER, ROOM, _engine, _member, _text, _turns


class FakeHistory:
    """One room's history as Synapse pages it (1.60 on): `GET /messages?dir=b` returns up to
    `limit` events older than `from`, newest first, none at or before `to`; an `end` token
    while it returned any, none once there is nothing left. `ignore_to`: a server that pages
    past `to` (intake must still stop where it was)."""

    def __init__(self, events: list[dict[str, Any]], *, ignore_to: bool = False) -> None:
        self.events = events  # oldest first; a token is a position in this list
        self.ignore_to = ignore_to
        self.calls = 0
        self.refuse: MatrixError | None = None

    async def messages(self, room_id: str, start: str, stop: str, limit: int) -> dict[str, Any]:
        assert room_id == ROOM and limit > 0
        self.calls += 1
        if self.refuse is not None:
            raise self.refuse
        upto, floor = int(start[1:]), 0 if self.ignore_to else int(stop[1:])
        chunk = self.events[max(floor, upto - limit) : upto][::-1]
        if not chunk:
            return {"chunk": [], "start": start}
        return {"chunk": chunk, "start": start, "end": f"p{upto - len(chunk)}"}

    def sync(self, since: int, limit: int = gaps.TIMELINE_LIMIT) -> dict[str, Any]:
        """The /sync answer since position `since`: the newest `limit` events, cut."""
        new = self.events[since:]
        timeline = {
            "events": new[-limit:],
            "limited": len(new) > limit,
            "prev_batch": f"p{len(self.events) - len(new[-limit:])}",
        }
        joined = {ROOM: {"state": {"events": []}, "timeline": timeline}}
        return {"next_batch": f"s{len(self.events)}", "rooms": {"join": joined}}


def _say(history: FakeHistory, count: int, prefix: str = "m") -> None:
    start = len(history.events)
    history.events += [_text(f"${prefix}{n}", f"{prefix} {n}") for n in range(start, start + count)]


async def _intake_engine(db: Database) -> Engine:
    engine = await _engine(db)
    engine.register(make_notice_workflow(db, None))  # type: ignore[arg-type]  # never run here
    return engine


async def _read_and_persist(
    db: Database, engine: Engine, history: FakeHistory, since: int
) -> dict[str, Gap]:
    """What the sync loop does with one answer: read each cut room back, then commit."""
    syncer = Syncer(history, db, engine, ME, on_callback=lambda c, p: "", on_command=_no_command)  # type: ignore[arg-type]
    response = history.sync(since)
    found = await syncer._read_gaps(response, f"s{since}")
    await db.write(
        persist_sync, response, ME, engine, lambda c, p: "", _no_command, first=False, gaps=found
    )
    return found


def _no_command(turn: Any, conn: Any) -> None:
    return None


async def _room_with_past(db: Database, engine: Engine, history: FakeHistory) -> int:
    """The bot in the room, three messages taken in; the sync position after them."""
    history.events += [_member(BOT), _member(OWNER)]
    _say(history, 3, "before")
    await db.write(
        persist_sync, history.sync(0), ME, engine, lambda c, p: "", _no_command, first=True
    )
    _say(history, 2, "taken")
    await _read_and_persist(db, engine, history, 5)
    return len(history.events)


def _texts(turns: list[dict[str, Any]]) -> list[str]:
    return [t["text"] for t in turns]


@pytest.mark.parametrize("ignore_to", [False, True])
async def test_a_cut_timeline_is_read_back_to_where_intake_was(
    db: Database, ignore_to: bool
) -> None:
    history = FakeHistory([], ignore_to=ignore_to)
    engine = await _intake_engine(db)
    since = await _room_with_past(db, engine, history)
    _say(history, 170, "down")
    found = await _read_and_persist(db, engine, history, since)
    assert found[ROOM].complete and len(found[ROOM].events) == 120
    turns = _texts(await _turns(db))
    assert turns == ["taken 5", "taken 6"] + [f"down {n}" for n in range(7, 177)]
    # The same answer again (a kill -9 before its commit was read): nothing twice.
    await _read_and_persist(db, engine, history, since)
    assert _texts(await _turns(db)) == turns


async def test_past_the_cap_the_owner_is_told_which_room(db: Database) -> None:
    history = FakeHistory([])
    engine = await _intake_engine(db)
    since = await _room_with_past(db, engine, history)
    _say(history, gaps.CAP + gaps.TIMELINE_LIMIT + 10, "flood")
    found = await _read_and_persist(db, engine, history, since)
    assert not found[ROOM].complete and len(found[ROOM].events) == gaps.CAP
    turns = _texts(await _turns(db))
    read = gaps.CAP + gaps.TIMELINE_LIMIT
    assert len(turns) == 2 + read and turns[2] == f"flood {7 + 10}"  # the 10 oldest unread
    [detail] = await db.read(
        lambda c: c.execute("SELECT detail FROM audit WHERE kind = 'matrix_gap'").fetchall()
    )
    assert json.loads(detail[0]) == {"room": ROOM, "read": read}
    [notice] = await db.read(
        lambda c: c.execute(
            "SELECT input FROM workflow_instances WHERE workflow = ?", (NOTICE_WORKFLOW,)
        ).fetchall()
    )
    told = json.loads(notice[0])
    assert told["user_id"] == ME.owner_id and "older messages were not read" in told["text"]
    assert "our direct room" in told["text"] and f"newest {read} events" in told["text"]


async def test_exactly_the_cap_is_read_whole_and_nobody_is_told(db: Database) -> None:
    history = FakeHistory([])
    engine = await _intake_engine(db)
    since = await _room_with_past(db, engine, history)
    _say(history, gaps.CAP + gaps.TIMELINE_LIMIT, "full")
    found = await _read_and_persist(db, engine, history, since)
    assert found[ROOM].complete and len(found[ROOM].events) == gaps.CAP
    assert len(await _turns(db)) == 2 + gaps.CAP + gaps.TIMELINE_LIMIT
    assert (
        await db.read(
            lambda c: c.execute("SELECT 1 FROM audit WHERE kind = 'matrix_gap'").fetchall()
        )
        == []
    )


async def test_paging_back_stops_at_the_bots_join(db: Database) -> None:
    """A room joined in the gap: what came before the join is its past, never answered."""
    history = FakeHistory([_member(OWNER)])
    _say(history, 5, "past")
    history.events.append(_member(BOT))
    _say(history, 60, "in")
    gap = await page_back(history, ROOM, "p16", "s0", BOT, _nothing_taken, page=7)
    assert gap.complete and gap.events[0] == _member(BOT) and len(gap.events) == 10


async def test_paging_back_goes_past_a_new_name_of_the_bot(db: Database) -> None:
    """The bot renamed in the gap (a membership `join` over `join`) is no join: the messages
    before it are read back too, not left as the past."""
    history = FakeHistory([_member(OWNER), _member(BOT)])
    _say(history, 5, "before")
    renamed = {
        **_member(BOT),
        "event_id": "$renamed",
        "unsigned": {"prev_content": {"membership": "join"}},
    }
    history.events.append(renamed)
    _say(history, 5, "after")
    gap = await page_back(history, ROOM, "p13", "s2", BOT, _nothing_taken, page=4)
    assert gap.complete and len(gap.events) == 11 and gap.events[0]["event_id"] == "$before2"


async def test_a_refused_read_still_takes_the_timeline_and_tells(db: Database) -> None:
    history = FakeHistory([])
    engine = await _intake_engine(db)
    since = await _room_with_past(db, engine, history)
    _say(history, 80, "late")
    history.refuse = MatrixError(MatrixFault(kind="permanent", reason="HTTP 403 M_FORBIDDEN"))
    found = await _read_and_persist(db, engine, history, since)
    assert found[ROOM] == Gap(complete=False)
    assert len(await _turns(db)) == 2 + gaps.TIMELINE_LIMIT
    history.refuse = MatrixError(MatrixFault(kind="transient", reason="HTTP 502"))
    with pytest.raises(MatrixError):  # an outage: the sync is tried again, nothing committed
        await _read_and_persist(db, engine, history, since)


async def test_the_first_sync_and_a_joining_timeline_read_nothing_back(db: Database) -> None:
    history = FakeHistory([_member(OWNER)])
    _say(history, 80, "old")
    engine = await _intake_engine(db)
    syncer = Syncer(history, db, engine, ME, on_callback=lambda c, p: "", on_command=_no_command)  # type: ignore[arg-type]
    assert await syncer._read_gaps(history.sync(0), None) == {}
    history.events.append(_member(BOT))
    assert limited_rooms(history.sync(0), BOT) == {}  # the join is in the timeline
    assert history.calls == 0


async def test_taken_events_reads_past_sqlites_parameter_bound(db: Database) -> None:
    engine = await _intake_engine(db)
    history = FakeHistory([])
    await _room_with_past(db, engine, history)
    asked = [f"$x{n}" for n in range(2000)] + ["$taken5"]
    assert await db.read(taken_events, asked) == {"$taken5"}


async def _nothing_taken(event_ids: list[str]) -> set[str]:
    return set()
