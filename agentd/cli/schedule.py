"""`agentd schedule`: list, add, show, pause, resume and cancel reminders (R-SCHED-1)."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Annotated, Any

import typer
from rich.table import Table

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    clip,
    config_or_exit,
    database,
    fail,
    iso,
    out,
    print_json,
    print_table,
    transaction,
)
from agentd.cli.lifecycle import StateChange, StateCommand, add_state_commands

app = typer.Typer(
    help="Reminders and recurring tasks: ls, add, show, pause, resume, cancel.",
    no_args_is_help=True,
)
Opt = typer.Option


def _json(sched: Any) -> dict[str, Any]:
    data = sched.model_dump()
    data.update(
        next_run=iso(sched.next_run),
        created_at=iso(sched.created_at),
        updated_at=iso(sched.updated_at),
        recurrence=sched.recurrence.model_dump(),
    )
    return data


@app.command("ls")
def ls(
    all_: Annotated[bool, Opt("--all", help="Include done and cancelled schedules.")] = False,
    user: Annotated[
        int | None, Opt(help="Only this user's (an id `agentd users ls` lists).")
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """List schedules (active and paused unless --all), soonest first."""
    from agentd.schedule import store
    from agentd.schedule.create import local_iso

    cfg = config_or_exit(config)
    states = ("active", "paused", "done", "cancelled") if all_ else ("active", "paused")
    with database(cfg) as conn:
        found = store.list_schedules(conn, user_id=user, states=states)
    if json:
        print_json([_json(s) for s in found])
        return
    table = Table("id", "user", "state", "kind", "text", "when", "next run")
    for s in found:
        table.add_row(
            s.id,
            str(s.user_id),
            s.state,
            s.action,
            clip(s.text, 40),
            s.recurrence.describe(),
            local_iso(s.next_run, s.timezone),
        )
    print_table(
        table,
        drop=("user", "when"),
        empty="No schedules"
        + ("" if all_ else " active (--all shows finished ones)")
        + ". Ask the bot to remind you, or use `agentd schedule add`.",
    )


@app.command("add")
def add(
    message: Annotated[str | None, Opt(help="Text sent as is at each run.")] = None,
    prompt: Annotated[str | None, Opt(help="A request the agent carries out at each run.")] = None,
    at: Annotated[str | None, Opt(help="One-off at this local ISO date-time.")] = None,
    after: Annotated[str | None, Opt(help="One-off after a delay: 20m, 2h, 1h30m.")] = None,
    every: Annotated[str | None, Opt(help="Repeat at this interval: 90m, 1d.")] = None,
    rrule: Annotated[
        str | None, Opt(help="RFC 5545 rule: 'FREQ=DAILY;BYHOUR=8;BYMINUTE=0'.")
    ] = None,
    start: Annotated[str | None, Opt(help="First run of every/rrule (local ISO).")] = None,
    tz: Annotated[str | None, Opt("--tz", help="IANA zone; default agent.timezone.")] = None,
    catch_up: Annotated[str | None, Opt(help="skip | once | all (default from config).")] = None,
    user: Annotated[int | None, Opt(help="Whose schedule (default: the owner).")] = None,
    chat: Annotated[
        int | None, Opt(help="Group chat to run in (default: the user's private chat).")
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Add a schedule; the running daemon picks it up within a second."""
    from pydantic import ValidationError

    from agentd.access import owners
    from agentd.schedule import store
    from agentd.schedule.create import ScheduleRequest, create, local_iso, summary, timing_bounded
    from agentd.schedule.recurrence import ScheduleError

    cfg = config_or_exit(config)
    whose = user if user is not None else owners.resolve(cfg.access).owner_id
    if whose is None:
        fail("no --user given and no owner (access.owner_id, allowed_user_ids) is configured")
    try:
        req = ScheduleRequest(
            message=message,
            prompt=prompt,
            at=at,
            after=after,
            every=every,
            rrule=rrule,
            start=start,
            timezone=tz,
            catch_up=catch_up,
        )  # type: ignore[arg-type]
    except ValidationError as exc:
        fail(f"invalid schedule: {exc.errors(include_url=False)[0]['msg']}")
    now = time.time()
    try:  # before the transaction: a rule that never fires is searched for seconds
        rec = asyncio.run(
            timing_bounded(req, now=now, config=cfg.schedule, default_timezone=cfg.agent.timezone)
        )
    except ScheduleError as exc:
        fail(f"not scheduled: {exc}")
    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                sched, _ = create(
                    conn,
                    req,
                    rec,
                    schedule_id=secrets.token_hex(5),
                    user_id=whose,
                    chat_id=chat if chat is not None else whose,
                    # A chat named here is taken as a group: nothing private is recalled in it.
                    chat_kind="private" if chat is None else "group",
                    now=now,
                    config=cfg.schedule,
                    by="cli",
                )
        except ScheduleError as exc:
            fail(f"not scheduled: {exc}")
        sched = store.get(conn, sched.id)
    if json:
        print_json(_json(sched))
        return
    out.print(f"scheduled {summary(sched)}", highlight=False)
    upcoming = sched.recurrence.upcoming(time.time(), 3)
    out.print("next runs: " + ", ".join(local_iso(t, sched.timezone) for t in upcoming))


@app.command("show")
def show(schedule_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Show one schedule: its next runs and its past runs with their outcomes."""
    from agentd.schedule import store
    from agentd.schedule.create import local_iso, summary

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        try:
            sched = store.get(conn, schedule_id)
        except store.NotFound as exc:
            fail(str(exc))
        past = store.runs(conn, schedule_id, limit=50)
    upcoming = sched.recurrence.upcoming(time.time(), 5) if sched.state == "active" else []
    if json:
        print_json(
            {
                **_json(sched),
                "upcoming": [iso(t) for t in upcoming],
                "runs": [{**r.model_dump(), "due": iso(r.due), "at": iso(r.at)} for r in past],
            }
        )
        return
    out.print(summary(sched), highlight=False)
    for t in upcoming:
        out.print(f"  next: {local_iso(t, sched.timezone)}")
    table = Table("due", "outcome", "at (UTC)", "turn", "detail")
    for r in past:
        turn = f"{r.instance_id} ({r.turn_status})" if r.instance_id else ""
        table.add_row(
            local_iso(r.due, sched.timezone), r.outcome, iso(r.at), turn, clip(r.detail, 50)
        )
    print_table(table, drop=("at (UTC)",), empty="No runs yet.")


def _apply(conn: Any, schedule_id: str, state: str) -> Any:
    from agentd.schedule import store

    try:
        sched = store.get(conn, schedule_id)
        if state == "active" and sched.state == "active":
            fail(f"{schedule_id} is not paused")
        return store.set_state(conn, sched, state, time.time(), by="cli")  # type: ignore[arg-type]
    except (store.NotFound, ValueError) as exc:
        fail(str(exc))


def _summary(sched: Any) -> str:
    from agentd.schedule.create import summary

    return summary(sched)


add_state_commands(
    app,
    StateChange(_apply, lambda _conn, _cfg, sched: _json(sched), _summary),
    "schedule_id",
    [
        StateCommand(
            "pause",
            "paused",
            "Pause a schedule: no runs until resumed (paused runs are not caught up).",
        ),
        StateCommand(
            "resume", "active", "Resume a paused schedule from its next occurrence after now."
        ),
        StateCommand(
            "cancel",
            "cancelled",
            "Cancel a schedule; a sleeping occurrence is stopped by the daemon within a second.",
        ),
    ],
)
