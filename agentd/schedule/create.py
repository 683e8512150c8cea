"""Creating a schedule from structured fields (the tool and `agentd schedule add` share this)."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from pydantic import Field

from agentd.chat.inputs import ChatKind
from agentd.config import ScheduleConfig
from agentd.ledger import audit
from agentd.schedule import store
from agentd.schedule.recurrence import (
    Recurrence,
    ScheduleError,
    When,
    format_duration,
    resolve,
    zone_or_error,
)
from agentd.schedule.store import CatchUp, Schedule

MAX_TEXT_CHARS = 4000


class ScheduleRequest(When):
    """What to do (a message or a prompt) and when; the tool's and the CLI's arguments."""

    message: str | None = Field(
        default=None,
        max_length=MAX_TEXT_CHARS,
        description="Text sent as is at each run (a reminder). No model call.",
    )
    prompt: str | None = Field(
        default=None,
        max_length=MAX_TEXT_CHARS,
        description="A request the agent carries out at each run, with its tools, e.g. "
        "'summarise today's calendar'. Costs a model call per run.",
    )
    timezone: str | None = Field(
        default=None, description="IANA time zone for the times; defaults to the owner's."
    )
    catch_up: CatchUp | None = Field(
        default=None,
        description="Runs missed while the agent was down: 'skip' them, run the latest 'once' "
        "(default, if not too late), or run 'all'.",
    )


def _check_interval(rec: Recurrence, now: float, minimum: float) -> None:
    times = [now, *rec.upcoming(now, 6)] if rec.kind == "rrule" else []
    gaps = [b - a for a, b in itertools.pairwise(times[1:])]
    if rec.kind == "interval":
        gaps = [float(rec.every or 0)]
    if gaps and min(gaps) < minimum:
        raise ScheduleError(
            f"runs would be {format_duration(min(gaps))} apart; the minimum is "
            f"{format_duration(minimum)} (schedule.min_interval)"
        )


def create(
    conn: Any,
    req: ScheduleRequest,
    *,
    schedule_id: str,
    user_id: int,
    chat_id: int,
    chat_kind: ChatKind,
    now: float,
    config: ScheduleConfig,
    default_timezone: str,
    by: str,
) -> tuple[Schedule, bool]:
    """Validate and store a schedule with its first occurrence; (schedule, newly created)."""
    try:
        return store.get(conn, schedule_id), False  # the same tool call, run again
    except store.NotFound:
        pass
    texts = [(k, v.strip()) for k, v in (("message", req.message), ("prompt", req.prompt)) if v]
    if len(texts) != 1 or not texts[0][1]:
        raise ScheduleError("give exactly one of: message (sent as is) or prompt (run by you)")
    timezone = req.timezone or default_timezone
    rec = resolve(req, timezone, now)
    _check_interval(rec, now, config.min_interval)
    active = store.count_active(conn, user_id)
    if active >= config.max_active_per_user:
        raise ScheduleError(
            f"you already have {active} active schedules (the limit is "
            f"{config.max_active_per_user}); cancel one first"
        )
    first = rec.next_after(now)
    if first is None:
        raise ScheduleError("this schedule would never run; give a future time")
    sched = Schedule(
        id=schedule_id,
        user_id=user_id,
        chat_id=chat_id,
        chat_kind=chat_kind,
        action=texts[0][0],  # type: ignore[arg-type]
        text=texts[0][1],
        recurrence=rec,
        timezone=timezone,
        catch_up=req.catch_up or config.default_catch_up,
        state="active",
        next_run=first,
        created_at=now,
        updated_at=now,
        created_by=by,
    )
    store.insert(conn, sched)
    store.start_occurrence(conn, sched, first, now)
    audit.record(
        conn,
        "schedule_created",
        chat_id=chat_id,
        user_id=user_id,
        detail={
            "schedule": schedule_id,
            "action": sched.action,
            "by": by,
            "recurrence": rec.describe(),
        },
        at=now,
    )
    return sched, True


# In `created_by`, what follows this is the outside content the setting-up turn had read.
TAINT_MARK = " after:"


def creator_words(created_by: str) -> tuple[str, str]:
    """(who set the schedule up, in words; the outside content its turn had read, or "")."""
    by, _, after = created_by.partition(TAINT_MARK)
    if by == "cli":
        return "the owner, from the command line", after
    if by.startswith("tool:"):
        user = by.rpartition(":user:")[2] if ":user:" in by else ""
        who = f"user {user}" if user else "the user"
        return f"the assistant in a conversation with {who}", after
    return by or "the owner", after


def local_iso(ts: float | None, timezone: str) -> str:
    """A run time as the owner reads it: 'Tue 2026-11-24 08:00 CET'."""
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, zone_or_error(timezone)).strftime("%a %Y-%m-%d %H:%M %Z")


def summary(sched: Schedule) -> str:
    """One line: id, what, when, next run in the schedule's zone."""
    what = sched.text if len(sched.text) <= 60 else sched.text[:57] + "…"
    kind = "reminder" if sched.action == "message" else "task"
    when = sched.recurrence.describe()
    state = "" if sched.state == "active" else f" [{sched.state}]"
    return (
        f"{sched.id}: {kind} “{what}” — {when}; next {local_iso(sched.next_run, sched.timezone)}"
        f"{state}"
    )
