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


def _show(cfg, approval_id: str, json: bool) -> None:  # type: ignore[no-untyped-def]
    """One approval with its whole call, exactly as it will run (never cut)."""
    with database(cfg) as conn:
        found = approvals.get(conn, approval_id)
    if found is None:
        fail(f"no approval {approval_id}; see `agentd pending`")
    if json:
        print_json(
            {
                **found.model_dump(),
                "created_at": iso(found.created_at),
                "expires_at": iso(found.expires_at),
            }
        )
        return
    asker = f"user {found.user_id}" if found.user_id is not None else "a schedule"
    head = f"{found.id}: {found.tool} from {found.tool_source or '?'} ({found.risk} risk)"
    out.print(f"{head}, {found.status}; asked by {asker} in chat {found.chat_id}", highlight=False)
    if found.why:
        out.print(f"why: {found.why}", highlight=False)
    if found.tool_fingerprint:
        out.print(f"tool fingerprint: {found.tool_fingerprint}", highlight=False)
    # print(), not rich: rich would wrap and interpret markup in the call.
    print(found.call_json or found.args_preview)


def pending(
    show: Annotated[str | None, typer.Option("--show", help="One approval's whole call.")] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """List tool calls waiting for approval (--show ID: one call, whole)."""
    cfg = config_or_exit(config)
    if show is not None:
        _show(cfg, show, json)
        return
    with database(cfg) as conn:
        waiting = approvals.pending(conn)
    if json:
        print_json(
            [
                {**a.model_dump(), "created_at": iso(a.created_at), "expires_at": iso(a.expires_at)}
                for a in waiting
            ]
        )
        return
    if not waiting:
        out.print("Nothing is waiting for approval.")
        return
    table = new_table("id", "tool", "risk", "chat", "arguments", "expires (UTC)")
    for a in waiting:
        call = a.call_json or a.args_preview
        shown = call if len(call) <= 80 else f"{call[:79]}… (--show {a.id})"
        table.add_row(a.id, a.tool, a.risk, str(a.chat_id), shown, iso(a.expires_at))
    print_table(table, empty="No approvals are waiting.")


def _decide(approval_id: str, approve: bool, reason: str | None, json: bool, config) -> None:  # type: ignore[no-untyped-def]
    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        result = approvals.decide(
            conn, approval_id, approve=approve, by=f"cli:{getpass.getuser()}", reason=reason
        )
    if json:
        print_json(result.model_dump())
    if not result.ok and result.approval is None:
        # The shared message suits a chat button; here the owner can list the real ids.
        fail(f"no approval {approval_id}; `agentd pending` lists those waiting, with their ids")
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
