"""The model's schedule tools: `schedule` (medium risk), `list_schedules`, `cancel_schedule`.

Every tool is bound to the calling user: nobody sees or cancels another user's schedules.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from pydantic import BaseModel, Field

from agentd.config import Config
from agentd.db import Database
from agentd.schedule import store
from agentd.schedule.create import (
    TAINT_MARK,
    ScheduleRequest,
    create,
    local_iso,
    summary,
    timing_bounded,
)
from agentd.schedule.recurrence import ScheduleError
from agentd.tools import Tool, ToolContext, ToolError, Toolset
from agentd.tools.policy import asks_outside_private


class NoArgs(BaseModel):
    """list_schedules takes nothing: it lists the caller's own schedules."""


class CancelArgs(BaseModel):
    schedule_id: str = Field(min_length=1, max_length=40, description="An id from list_schedules.")


def tool_schedule_id(instance_id: str, tool_use_id: str) -> str:
    """Derived from the tool call, so running the call again creates nothing new."""
    return hashlib.sha256(f"{instance_id}:{tool_use_id}".encode()).hexdigest()[:10]


def created_by(ctx: ToolContext) -> str:
    """Who set a schedule up, as stored: the turn, its user, and what outside content it had
    read (so the task says so when it runs; creator_words reads it back)."""
    by = f"tool:{ctx.instance_id}:user:{ctx.user_id}"
    if ctx.tainted_by:
        by += TAINT_MARK + "; ".join(ctx.tainted_by)[:500]
    return by


def schedule_tools(db: Database, config: Config, kick: Callable[[str], None]) -> list[Tool]:
    # A new calendar rule is searched in a bounded child (8 s at most), which may first wait
    # for a slot behind a page or a mail being parsed.
    schedules = Toolset(timeout=30)
    _create_tool(schedules, db, config, kick)
    _own_tools(schedules, db)
    return schedules.tools()


def _create_tool(
    schedules: Toolset, db: Database, config: Config, kick: Callable[[str], None]
) -> None:
    # A scheduled prompt is an instruction left behind: egress (asks in a tainted turn).
    @schedules.tool(
        risk="medium",
        egress=True,
        assess=asks_outside_private("schedule leaves a task behind that runs as the user"),
        description="Schedule a reminder (message, sent as is) or a task (prompt, run by "
        "you with your tools) once, at an interval, or on a calendar rule, in the owner's "
        "time zone unless timezone is given.",
    )
    async def schedule(ctx: ToolContext, args: ScheduleRequest) -> str:
        sid = tool_schedule_id(ctx.instance_id, ctx.tool_use_id)
        now = ctx.now()
        try:
            sched = await db.read(lambda conn: store.find(conn, sid))  # the call, run again
            if sched is None:
                rec = await timing_bounded(
                    args, now=now, config=config.schedule, default_timezone=ctx.timezone
                )
                sched, _ = await db.write(
                    lambda conn: create(
                        conn,
                        args,
                        rec,
                        schedule_id=sid,
                        user_id=ctx.user_id,
                        chat_id=ctx.chat_id,
                        chat_kind=ctx.chat_kind,
                        now=now,
                        config=config.schedule,
                        by=created_by(ctx),
                    )
                )
        except ScheduleError as exc:
            raise ToolError(f"Not scheduled: {exc}.") from None
        kick(store.schedule_key(sid))
        upcoming = sched.recurrence.upcoming(ctx.now(), 3)
        runs = ", ".join(local_iso(t, sched.timezone) for t in upcoming)
        return f"Scheduled {summary(sched)}. Next runs: {runs}."


def _own_tools(schedules: Toolset, db: Database) -> None:
    """The caller's own schedules: listed and cancelled by their user id, nobody else's."""

    @schedules.tool(
        risk="low",
        description="List the user's active and paused reminders and recurring tasks with "
        "their ids and next run times.",
    )
    async def list_schedules(ctx: ToolContext, args: NoArgs) -> str:
        found = await db.read(store.list_schedules, user_id=ctx.user_id)
        if not ctx.private:  # every member reads the answer: only what was set up here
            found = [s for s in found if s.chat_id == ctx.chat_id]
        if not found:
            return "No active schedules."
        return "\n".join(summary(s) for s in found)

    # Cancelling changes the owner's reminders: it asks while outside content is in view.
    @schedules.tool(
        risk="medium",
        egress=True,
        assess=asks_outside_private("cancel_schedule changes the user's own reminders"),
    )
    async def cancel_schedule(ctx: ToolContext, args: CancelArgs) -> str:
        """Cancel one of the user's reminders or recurring tasks by id."""

        def cancel(conn: object) -> store.Schedule:
            sched = store.get(conn, args.schedule_id, user_id=ctx.user_id)
            if sched.state == "cancelled":
                return sched
            return store.set_state(conn, sched, "cancelled", ctx.now(), by=f"tool:{ctx.user_id}")

        try:
            sched = await db.write(cancel)
        except (store.NotFound, ValueError) as exc:
            raise ToolError(f"{exc}. Call list_schedules for the ids.") from None
        return f"Cancelled {sched.id} (“{sched.text[:60]}”)."
