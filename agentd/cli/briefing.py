"""`agentd briefing`: turn the morning briefing on (at a time, daily or on weekdays) or off."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    fail,
    out,
    print_json,
    transaction,
)

app = typer.Typer(help="The morning briefing: enable, run, disable, status.", no_args_is_help=True)


def _owner(cfg, user: int | None) -> int:  # type: ignore[no-untyped-def]
    from agentd.access import owners

    owner = user if user is not None else owners.resolve(cfg.access).owner_id
    if owner is None:
        fail("no --user given and no owner (access.owner_id, allowed_user_ids) is configured")
    return int(owner)  # type: ignore[arg-type]


@app.command("enable")
def enable(
    at: Annotated[str, typer.Option(help="Local time of day, HH:MM (agent.timezone).")] = "07:30",
    weekdays: Annotated[bool, typer.Option("--weekdays", help="Monday to Friday only.")] = False,
    user: Annotated[int | None, typer.Option(help="Whose briefing (default: the owner).")] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Run the briefing every day (or weekday) at --at; replaces an earlier briefing."""
    from agentd.schedule import briefing
    from agentd.schedule.create import local_iso, summary
    from agentd.schedule.recurrence import ScheduleError

    cfg = config_or_exit(config)
    owner = _owner(cfg, user)
    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                sched = briefing.enable(
                    conn, cfg, owner=owner, at=at, weekdays=weekdays, now=time.time()
                )
        except ScheduleError as exc:
            fail(f"not scheduled: {exc}")
    if json:
        print_json(sched.model_dump())
        return
    out.print(f"briefing on: {summary(sched)}", highlight=False)
    out.print(
        f"next: {local_iso(sched.next_run, sched.timezone)}; its cost: agentd usage "
        f"--schedule {sched.id} (every briefing's: agentd usage --schedule briefing)",
        highlight=False,
    )


@app.command("run")
def run(
    after: Annotated[str, typer.Option(help="Delay before it runs: 10s, 5m.")] = "5s",
    user: Annotated[int | None, typer.Option(help="Whose briefing (default: the owner).")] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Run the briefing once, now (the running daemon picks it up): see what mornings bring."""
    from agentd.schedule import briefing
    from agentd.schedule.recurrence import ScheduleError

    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                sched = briefing.run_once(
                    conn, cfg, owner=_owner(cfg, user), after=after, now=time.time()
                )
        except ScheduleError as exc:
            fail(f"not scheduled: {exc}")
    if json:
        print_json(sched.model_dump())
        return
    out.print(
        f"briefing {sched.id} runs in {after}; its cost: agentd usage --schedule {sched.id} "
        "(every briefing's, daily and once: agentd usage --schedule briefing)",
        highlight=False,
    )


@app.command("disable")
def disable(
    user: Annotated[int | None, typer.Option(help="Whose briefing (default: the owner).")] = None,
    config: ConfigOption = None,
) -> None:
    """Stop the briefing."""
    from agentd.schedule import briefing

    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        stopped = briefing.disable(conn, _owner(cfg, user), time.time())
    out.print("briefing off" if stopped else "no briefing was on", highlight=False)


@app.command("status")
def status(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Show the briefing schedule, if any."""
    from agentd.schedule import briefing
    from agentd.schedule.create import summary

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        found = briefing.active(conn)
    if json:
        print_json([s.model_dump() for s in found])
        return
    none = "No briefing: `agentd briefing enable --at 07:30` starts one."
    out.print("\n".join(summary(s) for s in found) or none, highlight=False)
