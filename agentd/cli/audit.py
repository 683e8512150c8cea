"""`agentd audit` (R-AUD-1): turns, tool calls, approvals, rejected access, errors."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Annotated

import typer

from agentd.cli.common import (
    EXIT_USAGE,
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    err,
    fail,
    iso,
    new_table,
    print_json,
    print_table,
)
from agentd.ledger import audit as audit_log

DETAIL_CHARS = 100  # a table row stays a few lines at 80 columns; --json has the rest
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(value: str, now: float) -> float:
    """'90m', '24h', '7d' ago, or an ISO date/time."""
    match = re.fullmatch(r"(\d+)([smhdw])", value.strip())
    if match:
        return now - int(match[1]) * _UNITS[match[2]]
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ValueError(f"--since {value!r}: use 90m, 24h, 7d or an ISO date") from None


def audit(
    since: Annotated[str | None, typer.Option(help="e.g. 24h, 7d, 2026-11-01")] = None,
    kind: Annotated[
        str | None, typer.Option(help=f"Only this kind: {', '.join(audit_log.KINDS)}.")
    ] = None,
    chat: Annotated[int | None, typer.Option("--chat", help="Only this chat id.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1)] = 100,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Show the audit log, oldest first."""
    cfg = config_or_exit(config)
    try:
        start = parse_since(since, time.time()) if since else None
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    with database(cfg) as conn:
        if kind is not None and kind not in audit_log.known_kinds(conn):
            fail(
                f"--kind {kind!r} is not an audit kind; use one of: "
                f"{', '.join(sorted(audit_log.known_kinds(conn)))}",
                EXIT_USAGE,
            )
        entries = audit_log.entries(conn, since=start, kind=kind, chat_id=chat, limit=limit)
    if json:
        print_json([{**e.model_dump(), "at": iso(e.at)} for e in entries])
        return
    from rich.text import Text

    table = new_table("time (UTC)", "kind", "chat", "user", "instance", "detail")
    cut = False
    for e in entries:
        detail = ", ".join(f"{k}={v}" for k, v in e.detail.items())
        if len(detail) > DETAIL_CHARS:
            detail, cut = detail[: DETAIL_CHARS - 1] + "…", True
        table.add_row(
            iso(e.at),
            e.kind,
            str(e.chat_id or ""),
            str(e.user_id or ""),
            e.instance_id or "",
            Text(detail),  # commands and paths, never markup: "[a-z]*" stays as typed
        )
    print_table(
        table,
        drop=("instance", "user", "chat"),
        empty="No audit entries" + (" match these filters." if since or kind or chat else " yet."),
    )
    if cut:
        err.print(
            f"(a detail ending in … is cut at {DETAIL_CHARS} characters; --json shows it whole)",
            highlight=False,
        )
