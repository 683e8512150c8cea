"""`agentd workflows`: list, inspect, cancel and retry durable instances (R-DUR-5)."""

from __future__ import annotations

import json as jsonlib
from enum import StrEnum
from typing import Annotated

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)
from agentd.durable import InstanceNotFound, store

app = typer.Typer(
    help="Durable workflow instances: list, show, cancel, retry.", no_args_is_help=True
)


def _instance_json(inst: store.InstanceRecord) -> dict[str, object]:
    data = inst.model_dump(exclude={"input", "output"})
    data.update(
        input=jsonlib.loads(inst.input),
        output=jsonlib.loads(inst.output) if inst.output else None,
        created_at=iso(inst.created_at),
        updated_at=iso(inst.updated_at),
        finished_at=iso(inst.finished_at),
        wake_at=iso(inst.wake_at),
    )
    return data


Status = StrEnum("Status", {s: s for s in (*store.OPEN_STATUSES, *store.FINAL_STATUSES)})


@app.command("ls")
def ls(
    status: Annotated[Status | None, typer.Option(help="Only this status.")] = None,
    workflow: Annotated[str | None, typer.Option(help="Only this workflow.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1)] = 50,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """List instances, newest first."""
    cfg = config_or_exit(config)
    with database(cfg) as conn:
        rows = store.list_instances(
            conn, status=status.value if status else None, workflow=workflow, limit=limit
        )
    if json:
        print_json([_instance_json(r) for r in rows])
        return
    table = new_table("id", "workflow", "key", "status", "created (UTC)", "error")
    for r in rows:
        table.add_row(r.id, r.workflow, r.key, r.status, iso(r.created_at), (r.error or "")[:60])
    print_table(
        table,
        drop=("key", "created (UTC)", "workflow"),
        empty="No workflow instances yet: they appear once `agentd run` gets a message.",
    )


@app.command("show")
def show(instance_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Show one instance with its steps and every attempt."""
    cfg = config_or_exit(config)
    with database(cfg) as conn:
        try:
            inst = store.get_instance(conn, instance_id)
        except InstanceNotFound as exc:
            fail(str(exc))
        steps = store.load_steps(conn, instance_id)
        attempts = store.load_attempts(conn, instance_id)
    by_step: dict[int, list[dict[str, object]]] = {}
    for a in attempts:
        duration = (a.finished_at - a.started_at) * 1000 if a.finished_at else None
        by_step.setdefault(a.ordinal, []).append(
            {"attempt": a.attempt, "outcome": a.outcome, "error": a.error,
             "started_at": iso(a.started_at), "duration_ms": duration}
        )  # fmt: skip
    step_list = [
        {"ordinal": s.ordinal, "name": s.name, "kind": s.kind, "status": s.status,
         "delivery": s.delivery, "error": s.error, "attempts": by_step.get(s.ordinal, []),
         "duration_ms": _step_ms(s)}
        for s in steps.values()
    ]  # fmt: skip
    if json:
        print_json({**_instance_json(inst), "steps": step_list})
        return
    out.print(f"[bold]{inst.id}[/]  {inst.workflow}  key={inst.key}  status={inst.status}")
    if inst.error:
        out.print(f"[red]error:[/] {inst.error}", highlight=False)
    table = new_table("#", "step", "kind", "status", "attempts", "ms", "last error")
    for s in step_list:
        tries = s["attempts"]
        last_error = next((a["error"] for a in reversed(tries) if a["error"]), "")  # type: ignore[index]
        table.add_row(
            str(s["ordinal"]),
            str(s["name"]),
            str(s["kind"]),
            str(s["status"]),
            str(len(tries)),
            "" if s["duration_ms"] is None else f"{s['duration_ms']:.0f}",
            str(last_error or "")[:60],
        )  # type: ignore[arg-type]
    print_table(table, drop=("kind",))


def _step_ms(step: store.StepRecord) -> float | None:
    """How long the step took (a sleep or wait: how long it slept or waited)."""
    if step.finished_at is None:
        return None
    return round((step.finished_at - step.started_at) * 1000, 1)


@app.command("cancel")
def cancel(instance_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Cancel an instance (a running one is stopped by the daemon within a second)."""
    cfg = config_or_exit(config)
    import time

    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                before = store.get_instance(conn, instance_id).status
                status = store.request_cancel(conn, instance_id, time.time())
        except InstanceNotFound as exc:
            fail(str(exc))
    if before in store.FINAL_STATUSES:
        fail(f"{instance_id} already finished ({before}); there is nothing to cancel")
    if json:
        print_json({"id": instance_id, "result": status})
    else:
        out.print(f"{instance_id}: {status.replace('_', ' ')}")


@app.command("retry")
def retry(instance_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Run an errored or cancelled instance again; finished steps are not repeated."""
    cfg = config_or_exit(config)
    import time

    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                store.reset_for_retry(conn, instance_id, time.time())
        except InstanceNotFound as exc:
            fail(str(exc))
        except ValueError as exc:
            fail(str(exc))
    if json:
        print_json({"id": instance_id, "result": "queued"})
    else:
        out.print(f"{instance_id}: queued; the running daemon picks it up within a second")
