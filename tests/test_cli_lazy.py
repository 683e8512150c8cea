"""The `agentd` command imports only the subcommand it runs; help still lists every command."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from agentd.cli.app import COMMANDS, app, command_names
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.memory.history import save_message

runner = CliRunner()


def _summary(name: str) -> str:
    """The first words of a command's own help, read from its module (not from the table)."""
    module, attribute = COMMANDS[name].split(":")
    target = getattr(importlib.import_module(module), attribute)
    text = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target)
    assert text, f"{name} has no help text"
    return text.split("[")[0][:30]  # before any rich markup, which help renders away


def test_help_lists_every_command_with_its_own_help() -> None:
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    listed = [line.split()[1] for line in result.output.splitlines() if line.startswith("│ ")]
    assert [n for n in command_names() if n in listed] == command_names()
    for name in COMMANDS:
        line = next(line for line in result.output.splitlines() if line.startswith(f"│ {name} "))
        assert _summary(name) in line, (name, line)


def test_every_command_module_was_registered_under_its_name() -> None:
    for name in COMMANDS:
        result = runner.invoke(app, [name, "--help"], env={"COLUMNS": "250"})
        assert result.exit_code == 0, (name, result.output)
        assert f"agentd {name}" in result.output or f" {name} [OPTIONS]" in result.output


def test_a_typo_is_answered_with_the_nearest_command() -> None:
    result = runner.invoke(app, ["histroy"])
    assert result.exit_code == 2
    assert "Did you mean 'history'" in result.output


def test_history_imports_only_its_own_command_module(tmp_path: Path) -> None:
    db = tmp_path / "agentd.db"
    conn = open_sync(db)
    apply_migrations(conn)
    save_message(conn, chat_id=42, user_id=42, role="user", content="hi", source_key="k1")
    conn.close()
    code = (
        "import sys\n"
        "from agentd.cli.app import main\n"
        "sys.argv = ['agentd', 'history', '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "mods = [m for m in sys.modules if m.startswith(('agentd.cli.', 'rich', 'aiogram',"
        " 'anthropic', 'agentd.daemon'))]\n"
        "print(sorted(mods), file=sys.stderr)\n"
    )
    env = {"AGENTD_STORAGE__PATH": str(db), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert [m["content"] for m in json.loads(result.stdout)] == ["hi"], result.stderr
    loaded = result.stderr.strip().splitlines()[-1]
    assert loaded == str(["agentd.cli.app", "agentd.cli.common", "agentd.cli.history"])
