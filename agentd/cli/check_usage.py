"""The tokens a model check spends, in the ledger: `agentd models --test`, `agentd doctor`'s
model checks and `agentd init`'s one-token message are model calls the account pays for, so
`agentd usage` shows them (purpose "check", no chat) and the day's total includes them.

[limits] does not refuse them: the owner runs them by hand, often to find out why the agent
stopped answering, and a check refused because today's budget is spent would hide the answer.
They serve no user, so they count toward `daily_tokens_total` and never toward one user's
`daily_tokens`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.ledger import usage

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.ledger.pricing import Tokens

CHECK = "check"
Spent = list[tuple[str, "Tokens"]]  # (the model as configuration names it, its tokens)


def record_checks(cfg: Config, spent: Spent) -> str:
    """Write each check's tokens to the daemon's database (made, as pairing makes it, when the
    daemon has not run yet); "" when written, else why not, for the owner to read."""
    from agentd.cli.common import config_missing, foreign_owner
    from agentd.db import DatabaseError

    if not spent:
        return ""
    path = cfg.db_path
    if config_missing(cfg):  # which database the daemon uses is not known: make no stray one
        return not_counted("no config file names the daemon's database")
    if not path.exists() and not _own(path.parent):  # root's database would lock a user out
        return not_counted(f"{path} does not exist yet, and {path.parent} is another user's")
    if path.exists() and (owner := foreign_owner(path)) is not None:
        return not_counted(f"{path} belongs to {owner}; run the command as {owner}")
    try:
        conn = _open(cfg)
    except DatabaseError as exc:
        return not_counted(str(exc))
    try:
        conn.execute("BEGIN IMMEDIATE")
        for model, tokens in spent:
            usage.record(conn, tokens, model=model, purpose=CHECK)
        conn.execute("COMMIT")
    except Exception as exc:  # a locked or read-only database: the check's answer still stands
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return not_counted(f"{path}: {exc}")
    finally:
        conn.close()
    return ""


def _own(folder: Path) -> bool:
    if not hasattr(os, "geteuid"):
        return True
    try:
        return folder.stat().st_uid == os.geteuid()
    except OSError:  # no such folder: open_sync says so
        return True


def _open(cfg: Config) -> Any:
    from agentd.channels import migrations
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations

    conn = open_sync(cfg.db_path)
    try:
        apply_migrations(conn, migrations())
    except BaseException:
        conn.close()
        raise
    return conn


def not_counted(why: str) -> str:
    return f"the check's tokens are not in `agentd usage`: {why}"
