"""`agentd run`: the daemon. The only command that imports aiogram and anthropic."""

from __future__ import annotations

import asyncio

from agentd.cli.common import EXIT_ALREADY_RUNNING, EXIT_CONFIG, ConfigOption, config_or_exit, fail


def run(config: ConfigOption = None) -> None:
    """Run the agent: long-poll Telegram and answer, until SIGTERM."""
    import typer

    cfg = config_or_exit(config)  # before the heavy imports: a bad config fails in a blink
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
