"""`agentd run`: the daemon. The only command that imports aiogram and anthropic."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agentd.cli.common import (
    EXIT_ALREADY_RUNNING,
    EXIT_CONFIG,
    ConfigOption,
    config_or_exit,
    err,
    fail,
)


def _pairing_possible(db_path: Path) -> bool:
    """Someone has paired, or a pairing code is waiting to be used."""
    if not db_path.exists():
        return False
    from agentd.db import open_sync

    conn = open_sync(db_path, readonly=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        if "paired_users" not in tables:
            return False
        return bool(conn.execute(
            "SELECT EXISTS (SELECT 1 FROM paired_users) OR EXISTS (SELECT 1 FROM pairing_codes "
            "WHERE used_by IS NULL AND expires_at > ?)", (time.time(),),
        ).fetchone()[0])  # fmt: skip
    finally:
        conn.close()


def run(config: ConfigOption = None) -> None:
    """Run the agent: long-poll Telegram and answer, until SIGTERM."""
    import typer

    cfg = config_or_exit(config)  # before the heavy imports: a bad config fails in a blink
    if not cfg.telegram.allowed_user_ids and not _pairing_possible(cfg.db_path):
        fail(
            "nobody would be answered: telegram.allowed_user_ids is empty and nobody has paired; "
            "run `agentd pair` (then send the code to your bot), or add your numeric Telegram "
            f"user id to telegram.allowed_user_ids in {cfg.source or './agentd.toml'}",
            EXIT_CONFIG,
        )
    # Importing the Telegram and model stacks takes seconds on a small box: say so first.
    err.print(f"agentd: starting (config: {cfg.source or 'defaults'}, database: "
              f"{cfg.db_path.resolve()})…", highlight=False)  # fmt: skip
    from agentd import daemon
    from agentd.db import DatabaseError
    from agentd.lease import LeaseHeld
    from agentd.llm import LLMError
    from agentd.telegram.bot import TokenMissing

    try:
        code = asyncio.run(daemon.run(cfg))
    except (TokenMissing, LLMError, daemon.TokenRejected) as exc:
        fail(str(exc), EXIT_CONFIG)
    except LeaseHeld as exc:
        fail(str(exc), EXIT_ALREADY_RUNNING)
    except (DatabaseError, daemon.StartupError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)
