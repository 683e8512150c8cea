"""`agentd automations`: what your automations folder declares, and loading it again into the
running daemon without a restart."""

from __future__ import annotations

from typing import Annotated

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    err,
    fail,
    out,
    print_json,
    transaction,
)
from agentd.config import Config

app = typer.Typer(
    help="Your automations: list them, reload them into the running daemon.",
    no_args_is_help=True,
)
EXIT_PROBLEMS = 1


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """The automations the configured folder and modules declare, and what failed to load
    (the same as `agentd workflows automations`)."""
    from agentd.cli.workflows import automations

    automations(json=json, config=config)


@app.command("reload")
def reload(
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the daemon.", min=1)] = 60,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Load the automations folder and modules again in the running daemon, as a restart
    would, without one (chats and running automations carry on). Exit 1 when a file failed
    to load, no daemon answered, or the config names automations the daemon does not read."""
    import time

    from agentd.automations.catalog import RELOAD_WORKFLOW
    from agentd.automations.runs import instance_id_for
    from agentd.durable import store
    from agentd.runtime import lease

    cfg = config_or_exit(config)
    iid = instance_id_for(RELOAD_WORKFLOW, None)
    with database(cfg, write=True) as conn:
        if lease.holder_pid(cfg.db_path, conn) is None:
            err.print("No daemon runs on this database: `agentd run` loads the folder as it is.")
            return
        with transaction(conn):
            store.insert_instance(
                conn,
                instance_id=iid,
                workflow=RELOAD_WORKFLOW,
                key=iid,
                input_json="{}",
                now=time.time(),
            )
    deadline = time.monotonic() + timeout
    while True:
        with database(cfg) as conn:
            inst = store.get_instance(conn, iid)
        if inst.status in store.FINAL_STATUSES:
            break
        if time.monotonic() >= deadline:
            fail(
                f"the daemon did not reload within {timeout:g} s (is it still starting? see its "
                f"log); the request stays queued as {iid}"
            )
        time.sleep(0.1)
    if inst.status != "complete" or not inst.output:
        fail(f"the reload failed: {inst.error or inst.status} (`agentd workflows show {iid}`)")
    _report(inst.output, json, _not_loaded(cfg, inst.output))


def _not_loaded(cfg: Config, raw: str) -> list[str]:
    """What the config names now that the reload did not load: the daemon reads [automations]
    folder and modules when it starts, so a reload cannot follow a change to them."""
    import json as jsonlib

    from agentd.cli.workflows import _catalog

    loaded = jsonlib.loads(raw)["automations"]
    return [name for name in _catalog(cfg).names() if name not in loaded]


def _report(raw: str, json: bool, not_loaded: list[str]) -> None:
    import json as jsonlib

    result = jsonlib.loads(raw)
    if not_loaded:
        result["not_loaded"] = not_loaded
    if json:
        print_json(result)
    else:
        loaded = result["automations"]
        names = ", ".join(f"{n} ({', '.join(v)})" for n, v in sorted(loaded.items()))
        out.print(f"Reloaded: {names or 'no automations'}", highlight=False)
        from rich.markup import escape

        for problem in result["problems"]:
            err.print(f"[red]problem:[/] {escape(problem)}", highlight=False, markup=True)
        if not_loaded:
            err.print(
                f"Not loaded: {', '.join(not_loaded)}, in the config as it is now but not where "
                "the daemon looks: it reads [automations] folder and modules when it starts. "
                "Restart it to load them.",
                highlight=False,
                soft_wrap=True,
            )
    if result["problems"] or not_loaded:
        raise typer.Exit(EXIT_PROBLEMS)
