"""`agentd watch`: add, ls, show, pause, resume and rm watches ("check X, tell me only if Y")."""

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
    help="Watches: check a source, tell only if a condition holds (ls, add, show, pause, "
    "resume, rm).",
    no_args_is_help=True,
)
Opt = typer.Option


def _json(conn: Any, cfg: Any, w: Any) -> dict[str, Any]:
    from agentd.watch import budget, store
    from agentd.watch.create import model_price

    label, price = model_price(cfg)
    data = w.model_dump(exclude={"seen"})
    data.update(
        next_run=iso(w.next_run),
        created_at=iso(w.created_at),
        updated_at=iso(w.updated_at),
        stats=store.stats(conn, w.id).model_dump(),
        model=label,
        forecast=budget.forecast(conn, cfg, w, price, time.time()).model_dump(),
    )
    return data


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """List the watches with their checks, silences, messages and cost."""
    from agentd.watch import store
    from agentd.watch.create import report

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        found = store.list_watches(conn)
        if json:
            print_json([_json(conn, cfg, w) for w in found])
            return
        lines = [report(conn, cfg, w, time.time()) for w in found]
    if not lines:
        out.print("No watches. Add one with `agentd watch add` or ask the bot.")
    for line in lines:
        out.print(line, highlight=False)


@app.command("add")
def add(
    label: Annotated[str, Opt(help="What is watched, in a few words.")],
    condition: Annotated[str, Opt("--if", help="Tell me only if … (the owner's words).")],
    url: Annotated[str | None, Opt(help="Watch this web page.")] = None,
    mail: Annotated[str | None, Opt(help="Watch this mail folder: ACCOUNT/FOLDER.")] = None,
    calendar: Annotated[str | None, Opt(help="Watch this calendar (its name; '' first).")] = None,
    command: Annotated[str | None, Opt(help="Watch a shell command's output (sandbox).")] = None,
    file: Annotated[str | None, Opt(help="Watch a workspace file.")] = None,
    automation: Annotated[str | None, Opt(help="Watch an automation's results.")] = None,
    focus: Annotated[str, Opt(help="Only lines with these words count: 'price|stock'.")] = "",
    every: Annotated[str | None, Opt(help="Check interval: 15m, 1h, 1d.")] = None,
    rrule: Annotated[
        str | None, Opt(help="Or a calendar rule: 'FREQ=DAILY;BYHOUR=8;BYMINUTE=0'.")
    ] = None,
    daily_tokens: Annotated[int | None, Opt(help="This watch's token cap per day.")] = None,
    chat: Annotated[
        int | None, Opt(help="Group chat to tell, a page watch only (default: the owner's).")
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Add a watch; the running daemon checks it at once and then at each interval."""
    from pydantic import ValidationError

    from agentd.access import owners
    from agentd.schedule import ScheduleError
    from agentd.watch.create import WatchRequest, create, report, timing_bounded
    from agentd.watch.model import Source

    cfg = config_or_exit(config)
    owner = owners.resolve(cfg.access).owner_id
    if owner is None:
        fail("no owner (access.owner_id, allowed_user_ids) is configured to tell")
    fields = _source_fields(
        focus,
        url=url,
        mail=mail,
        calendar=calendar,
        command=command,
        file=file,
        automation=automation,
    )
    try:
        req = WatchRequest(
            label=label,
            condition=condition,
            source=Source(**fields),
            every=every,
            rrule=rrule,
            daily_tokens=daily_tokens,
        )
    except ValidationError as exc:
        fail(f"invalid watch: {exc.errors(include_url=False)[0]['msg']}")
    now = time.time()
    try:  # before the transaction: a rule that never fires is searched for seconds
        rec = asyncio.run(timing_bounded(req, now=now, config=cfg))
    except ScheduleError as exc:
        fail(f"not added: {exc}")
    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                w, _ = create(
                    conn,
                    req,
                    rec,
                    watch_id="w" + secrets.token_hex(4),
                    user_id=owner,
                    chat_id=chat if chat is not None else owner,
                    # A chat named here is taken as a group, as `agentd schedule add` does.
                    chat_kind="private" if chat is None else "group",
                    now=now,
                    config=cfg,
                    by="cli",
                )
        except ScheduleError as exc:
            fail(f"not added: {exc}")
        if json:
            print_json(_json(conn, cfg, w))
            return
        out.print(f"watching {report(conn, cfg, w, time.time())}", highlight=False)


def _source_fields(focus: str, **given_or_none: str | None) -> dict[str, Any]:
    """The one source the options name, as `Source` fields; exit when none or several."""
    given = {k: v for k, v in given_or_none.items() if v is not None}
    if len(given) != 1:
        fail(
            "give exactly one source: --url, --mail, --calendar, --command, --file or --automation"
        )
    [(kind, value)] = given.items()
    fields: dict[str, Any] = {"focus": focus}
    if kind == "url":
        fields.update(kind="page", url=value)
    elif kind == "mail":
        account, _, folder = value.partition("/")
        fields.update(kind="mail", account=account, folder=folder or "INBOX")
    elif kind == "calendar":
        fields.update(kind="calendar", account=value)
    elif kind == "file":
        fields.update(kind="file", path=value)
    else:
        fields.update(kind=kind, **{kind: value})
    return fields


@app.command("show")
def show(watch_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Show one watch: its cost and its last checks with their outcomes."""
    from agentd.schedule.create import local_iso
    from agentd.watch import store
    from agentd.watch.create import report

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        try:
            w = store.get(conn, watch_id)
        except store.NotFound as exc:
            fail(str(exc))
        past = store.checks(conn, watch_id, limit=50)
        if json:
            data = _json(conn, cfg, w)
            data["checks"] = [{**c.model_dump(), "due": iso(c.due), "at": iso(c.at)} for c in past]
            print_json(data)
            return
        out.print(report(conn, cfg, w, time.time()), highlight=False)
    table = Table("due", "outcome", "tokens", "detail")
    for c in past:
        table.add_row(local_iso(c.due, w.recurrence.timezone), c.outcome, str(c.tokens), c.detail)
    print_table(table, empty="No checks yet.")


def _apply(conn: Any, watch_id: str, state: str) -> Any:
    from agentd.watch import store

    try:
        w = store.get(conn, watch_id)
    except store.NotFound as exc:
        fail(str(exc))
    if state == "active" and w.state == "active" and not w.capped_day:
        fail(f"{watch_id} is neither paused nor capped")
    return store.set_state(conn, w, state, time.time(), by="cli")  # type: ignore[arg-type]


def _summary(w: Any) -> str:
    from agentd.watch.create import summary

    return summary(w)


add_state_commands(
    app,
    StateChange(_apply, _json, _summary),
    "watch_id",
    [
        StateCommand(
            "pause",
            "paused",
            "Pause a watch: no checks until resumed (paused checks are not caught up).",
        ),
        StateCommand(
            "resume", "active", "Resume a paused watch, or lift today's cap of a capped one."
        ),
        StateCommand(
            "rm",
            "removed",
            "Remove a watch; a sleeping check is stopped by the daemon within a second.",
        ),
    ],
)
