"""`agentd tasks`: background tasks with progress and cost; cancel one (and what it started)."""

from __future__ import annotations

import time
from typing import Annotated

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

app = typer.Typer(help="Background tasks (delegate, /task): ls, cancel.", no_args_is_help=True)
Opt = typer.Option


@app.command("ls")
def ls(
    chat: Annotated[int | None, Opt(help="Only this chat's.")] = None,
    open_: Annotated[bool, Opt("--open", help="Only those still running.")] = False,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """List tasks, newest first: status, model calls of the step limit, tokens, cost."""
    from agentd.tasks.store import list_tasks

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        rows = list_tasks(conn, chat_id=chat, open_only=open_, prices=cfg.llm.prices)
    if json:
        print_json([{**r.model_dump(), "created_at": iso(r.created_at)} for r in rows])
        return
    table = Table("id", "status", "steps", "tokens", "cost", "parent", "task")
    for r in rows:
        table.add_row(
            r.id,
            r.status,
            f"{r.model_calls}/{r.max_steps}",
            f"{r.tokens:,}/{r.token_budget:,}",
            f"${r.cost_usd:.4f}",
            r.parent,
            clip(r.text, 60),
        )
    print_table(table, drop=("parent", "task"), empty="No background tasks.")


@app.command("cancel")
def cancel(task_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Cancel a task and every task it started; the daemon stops them within a second."""
    from agentd.durable import store
    from agentd.tasks.store import cancel_tree

    cfg = config_or_exit(config)
    with database(cfg) as conn, transaction(conn):
        inst = store.find_instance(conn, task_id)
        if inst is None or inst.workflow != "task":
            fail(f"no task {task_id!r}; see `agentd tasks ls`")
        cancelled = cancel_tree(conn, task_id, time.time())
    if json:
        print_json({"cancelled": cancelled})
        return
    if not cancelled:
        out.print(f"{task_id} had already ended.", highlight=False)
        return
    out.print(f"Cancelled {', '.join(cancelled)}.", highlight=False)
