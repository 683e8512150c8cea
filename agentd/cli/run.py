"""`agentd run`: the daemon. The only command that imports aiogram and anthropic."""

from __future__ import annotations

import asyncio

from agentd.cli.common import (
    EXIT_ALREADY_RUNNING,
    EXIT_CONFIG,
    ConfigOption,
    config_or_exit,
    err,
    fail,
)


def run(config: ConfigOption = None) -> None:
    """Run the agent: long-poll Telegram and answer, until SIGTERM."""
    import typer

    cfg = config_or_exit(config)  # before the heavy imports: a bad config fails in a blink
    if not cfg.telegram.allowed_user_ids:
        fail(
            "telegram.allowed_user_ids is empty, so nobody would be answered; add your numeric "
            f"Telegram user id to it in {cfg.source or './agentd.toml'} (or set "
            "AGENTD_TELEGRAM__ALLOWED_USER_IDS='[id]')",
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
