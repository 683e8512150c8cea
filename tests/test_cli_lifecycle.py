"""`agentd schedule|watch pause|resume|cancel|rm`: one shared state change, each command's
outcome, refusal and JSON checked for both kinds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations

runner = CliRunner()


@pytest.fixture(autouse=True)
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_")):
            monkeypatch.delenv(name)
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n[access]\nallowed_user_ids = [42]\n'
    )
    conn = open_sync(tmp_path / "agentd.db")
    apply_migrations(conn)
    conn.close()
    monkeypatch.setenv("AGENTD_CONFIG", str(path))
    return path


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def added(*args: str) -> str:
    code, output = run(*args, "--json")
    assert code == 0, output
    return json.loads(output)["id"]


def test_schedule_pause_resume_cancel() -> None:
    sid = added("schedule", "add", "--message", "stretch", "--every", "1d")
    assert run("schedule", "resume", sid) == (1, f"error: {sid} is not paused\n")
    code, output = run("schedule", "pause", sid, "--json")
    assert code == 0 and json.loads(output)["state"] == "paused", output
    code, output = run("schedule", "resume", sid)
    assert code == 0 and "stretch" in output, output
    code, output = run("schedule", "cancel", sid, "--json")
    assert code == 0 and json.loads(output)["state"] == "cancelled", output
    code, output = run("schedule", "pause", "nosuch")
    assert code == 1 and "nosuch" in output, output


def test_watch_pause_resume_rm() -> None:
    wid = added(
        "watch", "add", "--label", "notes", "--if", "it changes", "--file", "n.txt", "--every", "1h"
    )
    code, output = run("watch", "resume", wid)
    assert code == 1 and "neither paused nor capped" in output, output
    code, output = run("watch", "pause", wid, "--json")
    data = json.loads(output)
    assert code == 0 and data["state"] == "paused" and "forecast" in data, output
    code, output = run("watch", "resume", wid)
    assert code == 0 and "notes" in output, output
    code, output = run("watch", "rm", wid, "--json")
    assert code == 0 and json.loads(output)["state"] == "removed", output
    code, output = run("watch", "rm", "nosuch")
    assert code == 1 and "nosuch" in output, output


@pytest.mark.parametrize("group", ["schedule", "watch"])
def test_the_rrule_example_in_help_runs_on_the_hour(group: str) -> None:
    """A rule without BYMINUTE takes the minute it was made at (RFC 5545): the example a
    reader copies from `--help` must say the minute it means."""
    import re

    from agentd.cli.app import load_command

    add = load_command(group).commands["add"]  # type: ignore[attr-defined]
    rrule_help = next(p.help for p in add.params if p.name == "rrule")
    [rule] = re.findall(r"'(FREQ=[^']+)'", rrule_help)
    code, output = run(
        "schedule",
        "add",
        "--message",
        "x",
        "--rrule",
        rule,
        "--start",
        "2030-01-01T06:37",
        "--json",
    )
    assert code == 0, output
    assert json.loads(output)["next_run"] == "2030-01-01T08:00:00Z"
