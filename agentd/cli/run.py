"""`agentd run`: the daemon. The only command that imports aiogram and anthropic."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agentd.cli.common import (
    EXIT_ALREADY_RUNNING,
    EXIT_CONFIG,
    EXIT_ERROR,
    NO_CONFIG,
    ConfigOption,
    config_or_exit,
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
        return bool(
            conn.execute(
                "SELECT EXISTS (SELECT 1 FROM paired_users) OR EXISTS (SELECT 1 FROM pairing_codes "
                "WHERE used_by IS NULL AND expires_at > ?)",
                (time.time(),),
            ).fetchone()[0]
        )
    finally:
        conn.close()


def _already_running(db_path: Path) -> str | None:
    """Who holds the runner lock, asked before the seconds of imports (after them, a second
    `agentd run` would take ~8 s to say so). The daemon takes the lock for real later."""
    if not db_path.exists():
        return None
    from agentd.runtime import lease

    probe = lease.RunnerLock(db_path)
    try:
        probe.acquire(lambda: "")
    except lease.LeaseHeld:
        from agentd.db import open_sync

        conn = open_sync(db_path, readonly=True)
        try:
            return lease.describe_holder(lease.current(conn))
        except Exception:  # an old database without the lease table: still running
            return lease.describe_holder(None)
        finally:
            conn.close()
    probe.release()
    return None


def _stop_during_start_up(signum: int, frame: object) -> None:
    """SIGTERM or Ctrl-C before the daemon's own handlers are in place: a clean stop (exit 0),
    not a failure (exit 1, "failed" in systemd). The daemon replaces this once it runs."""
    raise SystemExit(0)


def run(config: ConfigOption = None) -> None:
    """Run the agent: follow its chats (Telegram, Matrix, web), answer, until SIGTERM or Ctrl-C."""
    import signal

    import typer

    started = time.monotonic() - _process_age()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_during_start_up)
    say = _terminal_line()
    cfg = config_or_exit(config)  # before the heavy imports: a bad config fails in a blink
    if (holder := _already_running(cfg.db_path)) is not None:
        fail(holder, EXIT_ALREADY_RUNNING)
    if not cfg.access.allowed_user_ids and not _pairing_possible(cfg.db_path):
        if cfg.source is None:  # most likely run from another folder than `agentd init`'s
            fail(NO_CONFIG, EXIT_CONFIG)
        fail(
            "nobody would be answered: access.allowed_user_ids is empty and nobody has paired; "
            "run `agentd pair` (then send the code to your bot), or add your numeric Telegram "
            f"user id to access.allowed_user_ids in {cfg.source or './agentd.toml'}",
            EXIT_CONFIG,
        )
    # Importing the Telegram and model stacks takes seconds on a small box: say so first.
    say(
        f"agentd: starting (pid {os.getpid()}; config: {cfg.source or 'defaults'}; "
        f"database: {cfg.db_path.resolve()})…"
    )
    from agentd.runtime.gc_pause import paused

    with paused():
        from agentd import daemon
    from agentd.daemon.startup import StoppedDuringStartUp, set_up_logging
    from agentd.db import DatabaseError
    from agentd.llm import LLMError
    from agentd.runtime.lease import LeaseHeld

    def ready(bot_username: str) -> None:
        say(f"agentd: ready in {time.monotonic() - started:.1f} s as @{bot_username}")

    # The daemon's one redactor, made here so that what the process says on its way out
    # (a failure's message, a traceback) is hidden like every log line, learned values too.
    redact = set_up_logging(cfg)
    try:
        code = asyncio.run(daemon.run(cfg, on_ready=ready, redactor=redact))
    except (LLMError, daemon.ConfigProblem) as exc:
        fail(redact(str(exc)), EXIT_CONFIG)
    except LeaseHeld as exc:
        fail(redact(str(exc)), EXIT_ALREADY_RUNNING)
    except StoppedDuringStartUp:
        code = 0  # systemctl stop while waiting for Telegram: not "failed"
    except (DatabaseError, daemon.StartupError) as exc:
        fail(redact(str(exc)))
    except KeyboardInterrupt:
        code = 0
    except Exception:
        # Not Python's own print: its traceback would skip the redactor.
        logging.getLogger("agentd").exception("agentd stopped on an unexpected error")
        code = EXIT_ERROR
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
