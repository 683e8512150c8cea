"""`agentd pair` and `agentd users ls|rm`: who the agent serves, without hunting for user ids."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    refuse_foreign_database,
    transaction,
)
from agentd.config import Config

app = typer.Typer(help="Users the agent serves: list, remove.", no_args_is_help=True)


def _open_or_create(cfg: Config) -> Any:
    """Pairing may come before the first `agentd run`: create the database (0600) if needed."""
    from agentd.db import DatabaseError, open_sync
    from agentd.db.migrations import apply_migrations

    refuse_foreign_database(cfg.db_path)
    try:
        conn = open_sync(cfg.db_path)
        apply_migrations(conn)
    except DatabaseError as exc:
        fail(str(exc))
    return conn


def pair(
    minutes: Annotated[float, typer.Option(help="How long the code is valid.", min=1)] = 10,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until it is used.")] = True,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Print a one-time code; whoever sends `/start CODE` to the bot is served from then on."""
    from agentd.access import pairing

    cfg = config_or_exit(config)
    conn = _open_or_create(cfg)
    try:
        with transaction(conn):
            code = pairing.new_code(conn, ttl=minutes * 60, created_by="cli")
        if json:
            print_json({"code": code, "expires_in_s": minutes * 60})
            return
        out.print(f"Send this to your bot in Telegram within {minutes:g} minutes:\n\n"
                  f"    /start {code}\n", highlight=False)  # fmt: skip
        if not wait:
            return
        out.print("Waiting for it (the daemon must be running: `agentd run`); Ctrl-C to stop.")
        deadline = time.time() + minutes * 60
        while time.time() < deadline:
            row = conn.execute(
                "SELECT p.user_id, p.username FROM pairing_codes c JOIN paired_users p "
                "ON p.user_id = c.used_by WHERE c.code_hash = ?",
                (pairing._hash(code),),
            ).fetchone()
            if row:
                who = f"@{row[1]}" if row[1] else "user"
                out.print(f"Paired: {who} (id {row[0]}) is now served.", highlight=False)
                return
            time.sleep(1)
        fail("the code expired unused; run `agentd pair` again")
    finally:
        conn.close()


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Everyone served: from telegram.allowed_user_ids and from pairing."""
    from agentd.access import pairing

    cfg = config_or_exit(config)
    conn = _open_or_create(cfg)
    try:
        paired = pairing.list_paired(conn)
    finally:
        conn.close()
    users = [{"user_id": u, "source": "config", "username": "", "paired_at": None}
             for u in cfg.telegram.allowed_user_ids]  # fmt: skip
    users += [{"user_id": p.user_id, "source": "paired", "username": p.username,
               "paired_at": iso(p.paired_at)} for p in paired
              if p.user_id not in cfg.telegram.allowed_user_ids]  # fmt: skip
    if json:
        print_json(users)
        return
    if not users:
        out.print("Nobody is served yet: run `agentd pair`.")
        return
    table = new_table("user id", "source", "username", "paired (UTC)")
    for u in users:
        table.add_row(str(u["user_id"]), str(u["source"]), str(u["username"] or ""),
                      str(u["paired_at"] or ""))  # fmt: skip
    print_table(
        table, empty="No users yet: add your id to telegram.allowed_user_ids, or run `agentd pair`."
    )


@app.command("rm")
def rm(user_id: int, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Stop serving a paired user (the daemon notices with its next batch of updates)."""
    from agentd.access import pairing

    cfg = config_or_exit(config)
    conn = _open_or_create(cfg)
    try:
        with transaction(conn):
            removed = pairing.remove(conn, user_id)
    finally:
        conn.close()
    if not removed:
        if user_id in cfg.telegram.allowed_user_ids:
            fail(f"user {user_id} is in telegram.allowed_user_ids in {cfg.source}; remove it there")
        fail(f"user {user_id} is not a paired user; see `agentd users ls`")
    if json:
        print_json({"removed": user_id})
    else:
        out.print(f"User {user_id} is no longer served.")
