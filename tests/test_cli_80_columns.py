"""Every CLI table at COLUMNS=80: no value cut short ("0.0…", "comp…"), no line
wider than the terminal, left-out columns said, and an empty table gives a hint."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.durable import store
from agentd.ledger import audit, usage
from agentd.ledger.pricing import Tokens

runner = CliRunner()
CHAT, USER = -1001234567890, 987654321


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENTD_CONFIG", "")  # restored after the test: --config sets it


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "agentd.toml"
    path.write_text('[storage]\npath = "agentd.db"\n[access]\nallowed_user_ids = [42]\n')
    conn = open_sync(tmp_path / "agentd.db")
    apply_migrations(conn)
    conn.close()
    yield path


def fill(path: Path) -> None:
    conn = open_sync(path)
    with conn:
        tokens = Tokens(
            input_tokens=123456,
            output_tokens=7890,
            cache_read_tokens=456789,
            cache_write_tokens=34567,
        )
        usage.record(conn, tokens, model="claude-sonnet-4-5", purpose="turn", chat_id=CHAT)
        audit.record(
            conn,
            "approval_requested",
            chat_id=CHAT,
            user_id=USER,
            instance_id="tg-update-123456789",
            detail={"tool": "delete_file", "reason": "a high-risk tool " * 4},
        )
        now = time.time()
        store.insert_instance(
            conn,
            instance_id="sched-f0c9c224aa-1795622418-turn",
            workflow="schedule",
            key="schedule-f0c9c224aa",
            input_json="{}",
            now=now,
        )
        error = "StepFailed: send#1 failed: Telegram refused the message"
        store.set_status(conn, "sched-f0c9c224aa-1795622418-turn", "errored", now, error=error)
    conn.close()


def run80(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    for line in result.output.splitlines():
        assert len(line) <= 80, line
    assert "…" not in result.output, result.output
    return result.output


def test_usage_audit_and_workflows_fit_80_columns_whole(config: Path) -> None:
    fill(config.parent / "agentd.db")
    out = run80("usage", "--config", str(config))
    for value in ("123456", "7890", str(CHAT)):
        assert value in out
    assert re.search(r"\d+\.\d{4}", out)  # the cost, whole
    assert "[llm.prices]" in out  # the override hint is not eaten as markup
    out = run80("audit", "--config", str(config))
    assert "approval_requested" in out and "tool=delete_file" in out
    detail = next(line for line in out.splitlines() if "tool=delete_file" in line)
    assert len(detail.split("│")[-2].strip()) >= 15  # the detail is readable, not 3 wide
    out = run80("workflows", "ls", "--config", str(config))
    assert "sched-f0c9c224aa-1795622418-turn" in out and "errored" in out
    assert "Telegram refused" in " ".join(out.replace("│", " ").split())  # wrapped, kept


def test_each_command_prints_at_the_width_it_runs_in(config: Path) -> None:
    """One process, several commands (as in a test run): a wide one first leaves no wide
    console behind for the next."""
    fill(config.parent / "agentd.db")
    wide = runner.invoke(app, ["usage", "--config", str(config)], env={"COLUMNS": "200"})
    assert wide.exit_code == 0 and max(map(len, wide.output.splitlines())) > 80, wide.output
    run80("usage", "--config", str(config))


def test_empty_tables_say_so(config: Path) -> None:
    assert "No model calls" in run80("usage", "--config", str(config))
    assert "No audit entries yet" in run80("audit", "--config", str(config))
    assert "agentd run" in run80("workflows", "ls", "--config", str(config))
    assert "agentd schedule add" in run80("schedule", "ls", "--config", str(config))
    assert "No memories yet" in run80("memory", "ls", "--config", str(config))


def _groups(path: list[str], commands: dict[str, Any]) -> Iterator[tuple[list[str], dict]]:
    """Every group under `path` with its commands by name, `path` first."""
    yield path, commands
    for name, sub in commands.items():
        if getattr(sub, "commands", None):
            yield from _groups([*path, name], sub.commands)


def test_every_command_list_shows_each_summary_unbroken() -> None:
    """A docstring's first paragraph, wrapped in the source, is one sentence in a group's list
    of commands: wrapped by the terminal, never broken where the source line ended."""
    import inspect

    from agentd.cli.app import COMMANDS, load_command

    for path, commands in _groups([], {n: load_command(n) for n in COMMANDS}):
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        for name, command in commands.items():
            summary = " ".join(inspect.cleandoc(command.help or "").split("\n\n")[0].split())
            assert any(summary in line for line in lines), (path, name, summary)


def test_every_help_at_80_columns_keeps_each_type_on_one_line() -> None:
    """An option's type (`<status>`, `<int range>`) is one token: a list of choices as the
    type came out broken mid-word at 80 columns ("<queued|…|sl" / "eeping|…")."""
    from agentd.cli.app import COMMANDS, load_command

    for path, commands in _groups([], {n: load_command(n) for n in COMMANDS}):
        for name in commands:
            result = runner.invoke(app, [*path, name, "--help"], env={"COLUMNS": "80"})
            assert result.exit_code == 0, result.output
            for line in result.output.splitlines():
                assert len(line) <= 80, line
                # an opened `<type` with no `>` after it on the line was broken
                assert not re.search(r"(^|\s)<[a-z][^<>]*$", line), ([*path, name], line)
