"""The morning briefing: a prompt schedule that gathers today's events, unread important mail
and the reminders due today in one turn (`agentd briefing enable --at 07:30 [--weekdays]`)."""

from __future__ import annotations

import re
import secrets
from typing import Any

from agentd.chat.names import BRIEFING_ONCE_PREFIX, BRIEFING_PREFIX
from agentd.config import Config
from agentd.schedule import store
from agentd.schedule.create import ScheduleRequest, create, timing
from agentd.schedule.recurrence import ScheduleError
from agentd.schedule.store import Schedule

PREFIX = BRIEFING_PREFIX
# `agentd briefing run`: once, soon; not the daily schedule. Its id shares PREFIX so that
# `agentd usage --schedule briefing` counts every briefing, daily and once.
ONCE_PREFIX = BRIEFING_ONCE_PREFIX
PROMPT = (
    "Morning briefing. In one short message: (1) today's calendar events in order (use "
    "calendar_list for today, if you have it); (2) unread mail that matters — from people, "
    "not newsletters or notifications — with sender and a one-line gist (mail_search with "
    "unread=true, since yesterday); (3) reminders due today (list_schedules). Skip a section "
    "you have no tool for. Do not reply to, send, move or mark any mail."
)
_AT = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


def rule_for(at: str, weekdays: bool) -> str:
    """The RRULE of a daily (or Monday-to-Friday) run at HH:MM local time."""
    match = _AT.match(at.strip())
    if not match:
        raise ScheduleError(f"--at takes a time like 07:30, not {at!r}")
    hour, minute = int(match.group(1)), int(match.group(2))
    days = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR" if weekdays else "FREQ=DAILY"
    return f"{days};BYHOUR={hour};BYMINUTE={minute};BYSECOND=0"


def active(conn: Any, user_id: int | None = None) -> list[Schedule]:
    found = store.list_schedules(conn, user_id=user_id, states=("active", "paused"))
    return [s for s in found if s.id.startswith(PREFIX) and not s.id.startswith(ONCE_PREFIX)]


def enable(
    conn: Any, config: Config, *, owner: int, at: str, weekdays: bool, now: float
) -> Schedule:
    """Replace the owner's briefing (if any) with one at `at` in agent.timezone."""
    req = ScheduleRequest(prompt=PROMPT, rrule=rule_for(at, weekdays), catch_up="once")
    for old in active(conn, owner):
        store.set_state(conn, old, "cancelled", now, by="briefing")
    # The briefing's own rule: a plain daily time, found at once, so inside the transaction.
    rec = timing(req, now=now, config=config.schedule, default_timezone=config.agent.timezone)
    sched, _ = create(
        conn,
        req,
        rec,
        schedule_id=f"{PREFIX}{secrets.token_hex(4)}",
        user_id=owner,
        chat_id=owner,
        chat_kind="private",
        now=now,
        config=config.schedule,
        by="briefing",
    )
    return sched


def disable(conn: Any, owner: int | None, now: float) -> list[Schedule]:
    return [store.set_state(conn, s, "cancelled", now, by="briefing") for s in active(conn, owner)]


def run_once(conn: Any, config: Config, *, owner: int, after: str, now: float) -> Schedule:
    """The briefing once, `after` from now (to see what the mornings will bring)."""
    req = ScheduleRequest(prompt=PROMPT, after=after)
    rec = timing(req, now=now, config=config.schedule, default_timezone=config.agent.timezone)
    sched, _ = create(
        conn,
        req,
        rec,
        schedule_id=f"{ONCE_PREFIX}{secrets.token_hex(4)}",
        user_id=owner,
        chat_id=owner,
        chat_kind="private",
        now=now,
        config=config.schedule,
        by="briefing",
    )
    return sched
