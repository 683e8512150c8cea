"""`agentd schedule add` and `agentd briefing` without --user act for the owner (access/owners),
who need not be the first of allowed_user_ids."""

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


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_")):
            monkeypatch.delenv(name)
    path = tmp_path / "agentd.toml"
    path.write_text(
        '[agent]\ntimezone = "Europe/Berlin"\n'
        "[access]\nallowed_user_ids = [42, 7]\nowner_id = 7\n"
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n'
    )
    conn = open_sync(tmp_path / "agentd.db")
    apply_migrations(conn)
    conn.close()
    return path


def cli(config: Path, *args: str) -> dict[str, object]:
    result = runner.invoke(app, [*args, "--json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_schedule_add_and_briefing_default_to_the_owner(config: Path) -> None:
    added = cli(config, "schedule", "add", "--message", "tea", "--after", "1h")
    assert (added["user_id"], added["chat_id"]) == (7, 7)
    briefing = cli(config, "briefing", "enable", "--at", "07:30")
    assert (briefing["user_id"], briefing["chat_id"]) == (7, 7)


def test_a_rule_from_the_command_line_is_searched_with_a_budget(config: Path) -> None:
    # A weekday rule is found and stored; February 30th is refused with what to change.
    added = cli(
        config, "schedule", "add", "--message", "standup", "--rrule", "FREQ=WEEKLY;BYDAY=MO"
    )
    assert added["recurrence"]["rule"] == "FREQ=WEEKLY;BYDAY=MO"
    args = ["schedule", "add", "--message", "rent", "--rrule", "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"]
    result = runner.invoke(app, [*args, "--config", str(config)])
    assert result.exit_code == 1
    said = ("no run of the rule", "has no occurrence after now")
    assert "not scheduled" in result.output and any(w in result.output for w in said)
