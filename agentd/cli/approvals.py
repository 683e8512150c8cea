"""`agentd pending`, `agentd approve`, `agentd deny` (R-TOOL-3): decide from the shell."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from agentd.access import approvals
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


def pending(json: JsonOption = False, config: ConfigOption = None) -> None:
    """List tool calls waiting for approval."""
    cfg = config_or_exit(config)
    with database(cfg) as conn:
        waiting = approvals.pending(conn)
    if json:
        print_json([{**a.model_dump(), "created_at": iso(a.created_at),
                     "expires_at": iso(a.expires_at)} for a in waiting])  # fmt: skip
        return
    if not waiting:
        out.print("Nothing is waiting for approval.")
        return
    table = new_table("id", "tool", "risk", "chat", "arguments", "expires (UTC)")
    for a in waiting:
        table.add_row(a.id, a.tool, a.risk, str(a.chat_id), a.args_preview[:80], iso(a.expires_at))
    print_table(table, empty="No approvals are waiting.")


def _decide(approval_id: str, approve: bool, reason: str | None, json: bool, config) -> None:  # type: ignore[no-untyped-def]
    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        result = approvals.decide(
            conn, approval_id, approve=approve, by=f"cli:{getpass.getuser()}", reason=reason
        )
    if json:
        print_json(result.model_dump())
    if not result.ok:
        fail(result.message)
    if not json:
        out.print(f"{result.message} The waiting turn continues within a second or two.")


def approve(approval_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Approve a waiting tool call."""
    _decide(approval_id, True, None, json, config)


def deny(
    approval_id: str,
    reason: Annotated[str | None, typer.Option(help="Told to the model, and logged.")] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Deny a waiting tool call; it is not run."""
    _decide(approval_id, False, reason, json, config)
