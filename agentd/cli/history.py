"""`agentd history`: the stored conversation (R-MEM-2)."""

from __future__ import annotations

from typing import Annotated

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    iso,
    new_table,
    print_json,
    print_table,
)
from agentd.memory.history import history as load_history


def history(
    chat: Annotated[int | None, typer.Option("--chat", help="Only this chat id.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="How many messages.")] = 50,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Print the conversation, oldest first."""
    cfg = config_or_exit(config)
    with database(cfg) as conn:
        messages = load_history(conn, chat_id=chat, limit=limit)
    if json:
        print_json(
            [
                {**m.model_dump(exclude={"created_at"}), "created_at": iso(m.created_at)}
                for m in messages
            ]
        )
        return
    table = new_table("time (UTC)", "chat", "role", "message", show_lines=False)
    for m in messages:
        table.add_row(iso(m.created_at), str(m.chat_id), m.role, m.content)
    print_table(table, empty="No messages yet.")
