"""`agentd workflows`: list, inspect, cancel and retry durable instances (R-DUR-5)."""

from __future__ import annotations

import json as jsonlib
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    clip,
    config_missing,
    config_or_exit,
    database,
    err,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)
from agentd.config import Config
from agentd.durable import InstanceNotFound, store

if TYPE_CHECKING:
    from agentd.automations.catalog import Catalog

app = typer.Typer(
    help="Durable workflow instances: start, signal, wait, list, show, cancel, retry.",
    no_args_is_help=True,
)
EXIT_WAIT_ERRORED = 1
EXIT_WAIT_CANCELLED = 4
EXIT_WAIT_TIMEOUT = 124  # as timeout(1) says it


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
    # The choices go in the help, which wraps between words; as the type they made one
    # 60-character token that 80 columns broke mid-word ("sl / eeping").
    status: Annotated[
        Status | None,
        typer.Option(metavar="<status>", help=f"Only this status: {', '.join(Status)}."),
    ] = None,
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
        table.add_row(r.id, r.workflow, r.key, r.status, iso(r.created_at), clip(r.error, 60))
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
        version = _version(conn, instance_id)
    by_step: dict[int, list[dict[str, object]]] = {}
    for a in attempts:
        duration = (a.finished_at - a.started_at) * 1000 if a.finished_at else None
        by_step.setdefault(a.ordinal, []).append(
            {
                "attempt": a.attempt,
                "outcome": a.outcome,
                "error": a.error,
                "started_at": iso(a.started_at),
                "duration_ms": duration,
            }
        )
    step_list = [
        {
            "ordinal": s.ordinal,
            "name": s.name,
            "kind": s.kind,
            "status": s.status,
            "delivery": s.delivery,
            "error": s.error,
            "attempts": by_step.get(s.ordinal, []),
            "duration_ms": _step_ms(s),
        }
        for s in steps.values()
    ]
    if json:
        print_json({**_instance_json(inst), "version": version, "steps": step_list})
        return
    shown = f"  version={version}" if version else ""
    from rich.markup import escape

    head = f"{inst.workflow}{shown}  key={inst.key}  status={inst.status}"
    out.print(f"[bold]{escape(inst.id)}[/]  {escape(head)}", markup=True)
    if inst.error:
        out.print(f"[red]error:[/] {escape(inst.error)}", highlight=False, markup=True)
    table = new_table("#", "step", "kind", "status", "attempts", "ms", "last error")
    for s in step_list:
        tries = s["attempts"]
        # A step that completed after failed attempts is fine: its attempts column says it
        # was retried, --json has their errors.
        errors = [a["error"] for a in tries if a["error"]]  # type: ignore[index]
        last_error = errors[-1] if errors and s["status"] != "complete" else ""
        table.add_row(
            str(s["ordinal"]),
            str(s["name"]),
            str(s["kind"]),
            str(s["status"]),
            str(len(tries)),
            "" if s["duration_ms"] is None else f"{s['duration_ms']:.0f}",
            clip(str(last_error or ""), 60),
        )  # type: ignore[arg-type]
    print_table(table, drop=("kind",))


def _step_ms(step: store.StepRecord) -> float | None:
    """How long the step took (a sleep or wait: how long it slept or waited)."""
    if step.finished_at is None:
        return None
    return round((step.finished_at - step.started_at) * 1000, 1)


def _version(conn: Any, instance_id: str) -> str | None:
    """The version an automation's instance runs on (None: not an automation, or an older
    database the daemon has not migrated yet)."""
    try:
        row = conn.execute(
            "SELECT version FROM automation_runs WHERE instance_id = ?", (instance_id,)
        ).fetchone()
    except Exception:
        return None
    return row[0] if row else None


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
def retry(
    instance_id: str,
    from_step: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Forget the journal from this step on and re-run it, on "
            "the automation's code loaded now.",
        ),
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Run an errored or cancelled instance again; finished steps are not repeated."""
    cfg = config_or_exit(config)
    import time

    version = None
    if from_step is not None:
        with database(cfg) as conn:
            try:
                workflow = store.get_instance(conn, instance_id).workflow
            except InstanceNotFound as exc:
                fail(str(exc))
        catalog = _catalog(cfg)
        if workflow in catalog.versions:
            version = catalog.current(workflow).version
    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                if from_step is None:
                    store.reset_for_retry(conn, instance_id, time.time())
                else:
                    from agentd.automations import runs

                    runs.retry_from(conn, instance_id, from_step, version, time.time())
        except InstanceNotFound as exc:
            fail(str(exc))
        except ValueError as exc:
            fail(str(exc))
    if json:
        print_json({"id": instance_id, "result": "queued", "version": version})
    else:
        out.print(f"{instance_id}: queued; the running daemon picks it up within a second")


def _catalog(cfg: Config) -> Catalog:
    import logging

    from agentd.automations.catalog import builtin_names, load_catalog
    from agentd.runtime.gc_pause import paused

    # The commands print the problems themselves; the loader's log lines would repeat them.
    logging.getLogger("agentd.automations").setLevel(logging.CRITICAL)
    with paused():
        return load_catalog(cfg, builtin_names())


def _json_arg(value: str, what: str) -> Any:
    """JSON text, or @path of a file holding it ("-" after @ reads stdin)."""
    import sys
    from pathlib import Path

    if value.startswith("@"):
        name = value[1:]
        try:
            value = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"{what}: cannot read {name}: {exc.strerror}")
        except UnicodeDecodeError:
            fail(f"{what}: {name} is not UTF-8 text; save it as UTF-8 JSON")
    try:
        return jsonlib.loads(value)
    except jsonlib.JSONDecodeError as exc:
        fail(f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:  # json's decoder recurses per nesting level
        fail(f"{what} nests too deeply to read as JSON")


@app.command("automations")
def automations(json: JsonOption = False, config: ConfigOption = None) -> None:
    """The automations the configured folder and modules declare, and what failed to load."""
    cfg = config_or_exit(config)
    catalog = _catalog(cfg)
    daemon = _daemon_loaded(cfg)
    rows = []
    for name in catalog.names():
        current = catalog.current(name)
        tool = f"run_{name} ({current.tool.risk})" if current.tool else None
        rows.append(
            {
                "name": name,
                "current": current.version,
                "versions": sorted(catalog.versions[name]),
                "description": current.description,
                "source": current.source,
                "tool": tool,
                "daemon": _in_daemon(daemon, name, current.version),
            }
        )
    if json:
        print_json({"automations": rows, "problems": catalog.problems})
        return
    table = new_table("name", "version", "also loaded", "model tool", "running daemon")
    for r in rows:
        others = ", ".join(v for v in r["versions"] if v != r["current"])  # type: ignore[attr-defined]
        shown = str(r["daemon"] or "")
        table.add_row(str(r["name"]), str(r["current"]), others, str(r["tool"] or ""), shown)
    print_table(table, empty=_no_automations(cfg))
    from rich.markup import escape

    for problem in catalog.problems:
        out.print(f"[red]problem:[/] {escape(problem)}", highlight=False, markup=True)
    if any(r["daemon"] in ("not loaded", "older version") for r in rows):
        out.print("The running daemon loads them with: agentd automations reload", highlight=False)


def _no_automations(cfg: Config) -> str:
    """Where automations come from, for a list that has none."""
    where = cfg.automations
    if not where.folder and not where.modules:
        return (
            "No automations are configured: write them as *.py files in a folder and name it "
            'in the config, [automations] folder = "…" (or list importable modules in '
            "[automations] modules); see docs/workflows.md."
        )
    named = " and ".join(
        part
        for part in (where.folder and f"the folder {where.folder}", ", ".join(where.modules))
        if part
    )
    return f"No automations: no @workflow is declared in {named} (docs/workflows.md)."


def _daemon_loaded(cfg: Config) -> dict[str, set[str]] | None:
    """What the daemon running on this database loaded; None when none runs (or it is still
    starting, or there is no database yet)."""
    from agentd.automations import runs
    from agentd.runtime import lease

    if config_missing(cfg) or not cfg.db_path.exists():
        return None
    with database(cfg) as conn:
        pid = lease.holder_pid(cfg.db_path, conn)
        return runs.loaded_by(conn, pid) if pid else None


def _in_daemon(daemon: dict[str, set[str]] | None, name: str, version: str) -> str | None:
    if daemon is None:
        return None
    if name not in daemon:
        return "not loaded"
    return "loaded" if version in daemon[name] else "older version"


@app.command("start")
def start(
    name: str,
    input: Annotated[str, typer.Option("--input", "-i", help="JSON or @file.")] = "{}",
    key: Annotated[
        str | None,
        typer.Option(
            help="Idempotency key: starting again with the same key starts nothing "
            "new and prints the same instance id."
        ),
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Start an automation; the running daemon picks it up within a second."""
    import time

    from agentd.automations import runs
    from agentd.durable import InvalidInput, WorkflowNotFound

    cfg = config_or_exit(config)
    payload = _json_arg(input, "--input")
    catalog = _catalog(cfg)
    instance_id = runs.instance_id_for(name, key)
    with database(cfg, write=True) as conn:
        running = _daemon_refuses(cfg, conn, catalog, name)
        try:
            with transaction(conn):
                started = runs.start(
                    conn,
                    catalog,
                    name,
                    payload,
                    instance_id=instance_id,
                    source="cli",
                    now=time.time(),
                )
        except WorkflowNotFound as exc:
            problems = "".join(f"\n  {p}" for p in catalog.problems)
            fail(f"{exc}{problems}")
        except (InvalidInput, ValueError) as exc:
            fail(str(exc))
    if json:
        print_json(started.model_dump())
    elif started.created:
        out.print(started.instance_id)
    else:
        out.print(f"{started.instance_id} (already started with this key; nothing new)")
    if not running:
        err.print("No daemon runs on this database: it starts when `agentd run` does.")


def _daemon_refuses(cfg: Config, conn: Any, catalog: Catalog, name: str) -> bool:
    """Refuse at the door an automation the running daemon would not run (it loaded its
    folder before the file came or changed); return whether a daemon runs at all."""
    from agentd.automations import runs
    from agentd.chat.markup import literal
    from agentd.runtime import lease

    pid = lease.holder_pid(cfg.db_path, conn)
    if pid is None:
        return False
    loaded = runs.loaded_by(conn, pid) if pid else None
    if loaded is None or name not in catalog.versions:
        return True  # still starting, or a name nobody has: runs.start says so
    reload = "load it without a restart: `agentd automations reload`, then start it again"
    version = catalog.current(name).version
    if name not in loaded:
        why = f"the running daemon (pid {pid}) has not loaded the automation {name!r}"
    elif version not in loaded[name]:
        runs_on = ", ".join(sorted(loaded[name]))
        why = (
            f"{name!r} changed since the running daemon (pid {pid}) loaded it (it has version "
            f"{runs_on}, the file is version {version})"
        )
    else:
        return True
    _tell_owner(
        cfg,
        conn,
        f"notice-not-loaded-{pid}-{name}-{version}",
        # In the notice (Markdown) the name is shown as written; the error keeps its repr.
        f"⚠️ A start of {why.replace(repr(name), literal(name))} was refused; nothing was "
        f"started. To run it, {reload}.",
    )
    fail(f"{why}: {reload}")


def _tell_owner(cfg: Config, conn: Any, notice_id: str, text: str) -> None:
    """A notice in the owner's chat, sent by the running daemon (once per id): a script that
    starts automations is not the only one to learn that one was refused."""
    import time

    from agentd.access import owners
    from agentd.chat.notice import NOTICE_WORKFLOW

    owner = owners.resolve(cfg.access).owner_id
    if owner is None:
        return
    body = jsonlib.dumps({"user_id": owner, "text": text})  # where the owner is reached
    with transaction(conn):
        store.insert_instance(
            conn,
            instance_id=notice_id,
            workflow=NOTICE_WORKFLOW,
            key=notice_id,
            input_json=body,
            now=time.time(),
        )


@app.command("signal")
def signal(
    instance_id: str,
    event: str,
    data: Annotated[str, typer.Option("--data", "-d", help="JSON object, or @file.")] = "{}",
    event_id: Annotated[
        str | None, typer.Option(help="Deliver at most once: a repeat with this id is ignored.")
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Send an event to a waiting instance (step.wait_for_event); it wakes within a second."""
    import time

    from agentd.automations import runs
    from agentd.durable import InvalidInput

    cfg = config_or_exit(config)
    payload = _json_arg(data, "--data")
    if not isinstance(payload, dict):
        fail("--data must be a JSON object")
    with database(cfg) as conn:  # an automation's event models: loaded only for one
        checked = not event.startswith(runs.ANSWER_PREFIX) and runs.version_of(conn, instance_id)
    catalog = _catalog(cfg) if checked else None  # a malformed event is refused here
    with database(cfg, write=True) as conn:
        try:
            with transaction(conn):
                stored = runs.signal(
                    conn, instance_id, event, payload, time.time(), event_id, catalog=catalog
                )
        except (InstanceNotFound, InvalidInput) as exc:
            fail(str(exc))
        except ValueError as exc:
            fail(str(exc))
    if json:
        print_json({"id": instance_id, "event": event, "delivered": stored})
    else:
        out.print(f"{instance_id}: {event} " + ("delivered" if stored else "was delivered before"))


@app.command("wait")
def wait(
    instance_id: str,
    timeout: Annotated[float, typer.Option(help="Seconds; 0 waits for ever.", min=0)] = 0,
    config: ConfigOption = None,
) -> None:
    """Wait until the instance finishes and print its output as JSON. Exit code: 0 complete,
    1 errored, 4 cancelled, 124 still running at --timeout."""
    import time

    cfg = config_or_exit(config)
    deadline = time.monotonic() + timeout if timeout else None
    delay = 0.05
    while True:
        with database(cfg) as conn:
            try:
                inst = store.get_instance(conn, instance_id)
            except InstanceNotFound as exc:
                fail(str(exc))
        if inst.status in store.FINAL_STATUSES:
            break
        if deadline is not None and time.monotonic() >= deadline:
            fail(f"{instance_id} is still {inst.status}", EXIT_WAIT_TIMEOUT)
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)  # quick for short runs, one read a second for long ones
    result = {
        "id": inst.id,
        "status": inst.status,
        "error": inst.error,
        "output": jsonlib.loads(inst.output) if inst.output else None,
    }
    print_json(result)
    if inst.status == "errored":
        raise typer.Exit(EXIT_WAIT_ERRORED)
    if inst.status == "cancelled":
        raise typer.Exit(EXIT_WAIT_CANCELLED)
