"""A /sync timeline that did not hold everything: what was written between the last sync and
the timeline's first event, fetched back so intake takes it like the rest.

The sync asks for TIMELINE_LIMIT events a room, so an ordinary burst fits. A room whose
timeline still comes `limited` (agentd was down, or a long burst) is paged back through
`GET /rooms/{room}/messages?dir=b` from its `prev_batch` to the token the sync was asked
since, and no further than an event intake already took, the bot's own join of the room, or
CAP events. Nothing here writes: intake (matrix/intake.py) records the fetched events before
the timeline's, in the transaction that moves the sync token, so a kill -9 while paging reads
the same gap again on the next start and takes each event once.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from pydantic import BaseModel, Field

log = logging.getLogger("agentd.matrix")

TIMELINE_LIMIT = 50  # events a room per sync: a burst of this many needs no paging at all
PAGE = 100  # events a /messages request
CAP = 300  # events paged back a room per sync; past it the owner is told (intake.py)
SYNC_FILTER = json.dumps({"room": {"timeline": {"limit": TIMELINE_LIMIT}}}, separators=(",", ":"))


class History(Protocol):
    """What paging back needs of the client (client.MatrixClient.messages)."""

    async def messages(self, room_id: str, start: str, stop: str, limit: int) -> dict[str, Any]:
        """One page, newest first, from `start` back towards `stop`."""
        ...


class Gap(BaseModel):
    """A room's events between the last sync and its timeline, oldest first."""

    events: list[dict[str, Any]] = Field(default_factory=list)
    complete: bool = True  # False: CAP was reached and older events were left unread


def joins(event: Any, bot: str) -> bool:
    """The bot's own join of the room. A new name or picture of the bot is a membership
    event `join` too, in every room it is in, with `join` before it: that is no join, and
    what was written before it is no past (it would go unanswered)."""
    return (
        isinstance(event, dict)
        and event.get("type") == "m.room.member"
        and event.get("state_key") == bot
        and _obj(event.get("content")).get("membership") == "join"
        and _previous_membership(event) != "join"
    )


def _previous_membership(event: dict[str, Any]) -> Any:
    """The membership a member event replaced, as the server says it (`unsigned.prev_content`;
    older servers put `prev_content` at the top)."""
    before = _obj(event.get("unsigned")).get("prev_content", event.get("prev_content"))
    return _obj(before).get("membership")


def limited_rooms(response: dict[str, Any], bot: str) -> dict[str, str]:
    """Each joined room whose timeline was cut, with the token to page back from. A room whose
    timeline holds the bot's join is left out: what came before the join is the room's past,
    which intake never answers."""
    joined = _obj(_obj(response.get("rooms")).get("join"))
    cut: dict[str, str] = {}
    for room_id, data in joined.items():
        timeline = _obj(_obj(data).get("timeline"))
        start = timeline.get("prev_batch")
        if timeline.get("limited") is not True or not isinstance(start, str) or not start:
            continue
        events = timeline.get("events")
        if isinstance(events, list) and any(joins(event, bot) for event in events):
            continue
        cut[str(room_id)] = start
    return cut


async def page_back(
    history: History,
    room_id: str,
    start: str,
    since: str,
    bot: str,
    taken: Any,
    *,
    cap: int = CAP,
    page: int = PAGE,
) -> Gap:
    """The room's events from `start` back to `since`, oldest first. `taken(event_ids)` says
    which of them intake already recorded (an async callable): the first such event ends the
    gap, as the bot's join does, in case a server pages further back than `since`."""
    fetched: list[dict[str, Any]] = []  # newest first, as the server pages
    token = start
    while True:
        # One more than the cap allows, so a full cap with nothing older is not a cut.
        answer = await history.messages(room_id, token, since, min(page, cap - len(fetched) + 1))
        chunk = [event for event in _list(answer.get("chunk")) if isinstance(event, dict)]
        known = await taken([str(event.get("event_id") or "") for event in chunk])
        for event in chunk:
            if str(event.get("event_id") or "") in known:
                return _gap(fetched, complete=True)
            if len(fetched) >= cap:
                return _gap(fetched, complete=False)
            fetched.append(event)
            if joins(event, bot):
                return _gap(fetched, complete=True)
        end = answer.get("end")
        if not chunk or not isinstance(end, str) or not end or end == token:
            return _gap(fetched, complete=True)  # the server has nothing older before `since`
        token = end


def _gap(newest_first: list[dict[str, Any]], *, complete: bool) -> Gap:
    return Gap(events=newest_first[::-1], complete=complete)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
