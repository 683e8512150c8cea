"""`agentd run`: the daemon. The only command that imports aiogram and anthropic."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agentd.cli.common import EXIT_ALREADY_RUNNING, EXIT_CONFIG, ConfigOption, config_or_exit, fail


def run(config: ConfigOption = None) -> None:
    """Run the agent: long-poll Telegram and answer, until SIGTERM."""
    import typer

    started = time.monotonic() - _process_age()
    say = _terminal_line()
    say(f"agentd: starting (pid {os.getpid()})…")
    cfg = config_or_exit(config)  # before the heavy imports: a bad config fails in a blink
    from agentd import daemon
    from agentd.db import DatabaseError
    from agentd.lease import LeaseHeld
    from agentd.llm import LLMError

    def ready(bot_username: str) -> None:
        say(f"agentd: ready in {time.monotonic() - started:.1f} s as @{bot_username}")

    try:
        code = asyncio.run(daemon.run(cfg, on_ready=ready))
    except (LLMError, daemon.ConfigProblem) as exc:
        fail(str(exc), EXIT_CONFIG)
    except LeaseHeld as exc:
        fail(str(exc), EXIT_ALREADY_RUNNING)
    except (DatabaseError, daemon.StartupError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


def _terminal_line() -> Callable[[str], None]:
    """Human lines go to a terminal only; under systemd the JSON log says the same."""
    if not sys.stderr.isatty():
        return lambda _text: None
    return lambda text: print(text, file=sys.stderr, flush=True)


def _process_age() -> float:
    """Seconds since this process began (Linux), so "ready in" counts interpreter start too."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
