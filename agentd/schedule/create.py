"""Creating a schedule from structured fields (the tool and `agentd schedule add` share this)."""

from __future__ import annotations

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
    zone_or_error,
)
from agentd.schedule.store import CatchUp, Schedule
from agentd.schedule.timing import Gap, checked, checked_bounded

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
        description="Runs missed while agentd was down: 'skip', the latest 'once' (default), "
        "or 'all'.",
    )


def _gap(config: ScheduleConfig) -> Gap:
    return Gap(config.min_interval, "runs", "schedule.min_interval")


def timing(
    req: ScheduleRequest, *, now: float, config: ScheduleConfig, default_timezone: str
) -> Recurrence:
    """When the request runs, checked, in this process: for rules the daemon writes itself
    (the briefing's). A rule from the model or the command line goes to `timing_bounded`."""
    return checked(req, req.timezone or default_timezone, now, _gap(config))


async def timing_bounded(
    req: ScheduleRequest, *, now: float, config: ScheduleConfig, default_timezone: str
) -> Recurrence:
    """`timing` with a calendar rule searched in a child with a CPU budget (`timing.SEARCH`)."""
    return await checked_bounded(req, req.timezone or default_timezone, now, _gap(config))


def create(
    conn: Any,
    req: ScheduleRequest,
    rec: Recurrence,
    *,
    schedule_id: str,
    user_id: int,
    chat_id: int,
    chat_kind: ChatKind,
    now: float,
    config: ScheduleConfig,
    by: str,
) -> tuple[Schedule, bool]:
    """Store a schedule whose `timing` was checked, with its first occurrence; (schedule,
    newly created)."""
    found = store.find(conn, schedule_id)
    if found is not None:
        return found, False  # the same tool call, run again
    texts = [(k, v.strip()) for k, v in (("message", req.message), ("prompt", req.prompt)) if v]
    if len(texts) != 1 or not texts[0][1]:
        raise ScheduleError("give exactly one of: message (sent as is) or prompt (run by you)")
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
        timezone=rec.timezone,
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
