"""`agentd briefing`: a prompt schedule at a local time, replaced on re-enable, its cost per run
in `agentd usage --schedule`."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.ledger import usage
from agentd.llm.types import Usage
from agentd.schedule.briefing import PROMPT, rule_for
from agentd.schedule.recurrence import ScheduleError

runner = CliRunner()


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_")):
            monkeypatch.delenv(name)
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'[agent]\ntimezone = "Europe/Berlin"\n[access]\nallowed_user_ids = [42]\n'
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n'
    )
    return path


def cli(config: Path, *args: str) -> str:
    result = runner.invoke(app, [*args, "--config", str(config)])
    assert result.exit_code == 0, result.output
    return result.output


def test_rule_for_times() -> None:
    assert rule_for("07:30", False) == "FREQ=DAILY;BYHOUR=7;BYMINUTE=30;BYSECOND=0"
    assert rule_for("7:05", True).startswith("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=7;")
    with pytest.raises(ScheduleError, match="like 07:30"):
        rule_for("25:00", False)


def test_enable_replace_disable_and_usage_per_run(config: Path, tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "agentd.db")  # the daemon's database, as `agentd run` leaves it
    apply_migrations(conn)
    conn.close()
    first = json.loads(cli(config, "briefing", "enable", "--at", "07:30", "--weekdays", "--json"))
    assert first["action"] == "prompt" and first["text"] == PROMPT and first["chat_id"] == 42
    assert first["recurrence"]["rule"].startswith("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=7")
    nxt = datetime.fromtimestamp(first["next_run"], ZoneInfo("Europe/Berlin"))
    assert (nxt.hour, nxt.minute, nxt.weekday() < 5) == (7, 30, True)

    second = json.loads(cli(config, "briefing", "enable", "--at", "06:45", "--json"))
    status = json.loads(cli(config, "briefing", "status", "--json"))
    assert [s["id"] for s in status] == [second["id"]] != [first["id"]]  # replaced, not added

    conn = open_sync(tmp_path / "agentd.db")
    with conn:  # two runs of the briefing and an unrelated turn
        for instance, tokens in (
            (f"sched-{second['id']}-1-turn", 1000),
            (f"sched-{second['id']}-2-turn", 3000),
            ("tg-update-9", 99999),
        ):
            spent = Usage(input_tokens=tokens, output_tokens=100)
            usage.record(
                conn,
                spent,
                model="claude-haiku-4-5",
                purpose="turn",
                chat_id=42,
                instance_id=instance,
            )
    conn.close()
    rows = json.loads(cli(config, "usage", "--schedule", second["id"], "--json"))
    assert sum(r["input_tokens"] for r in rows) == 4000 and sum(r["calls"] for r in rows) == 2
    assert "briefing off" in cli(config, "briefing", "disable")
    status = cli(config, "briefing", "status")
    assert "No briefing" in status and "agentd briefing enable" in status  # and how to start one


def test_usage_for_the_briefing_counts_the_runs_made_by_briefing_run(
    config: Path, tmp_path: Path
) -> None:
    conn = open_sync(tmp_path / "agentd.db")
    apply_migrations(conn)
    conn.close()
    daily = json.loads(cli(config, "briefing", "enable", "--json"))
    once = json.loads(cli(config, "briefing", "run", "--after", "1h", "--json"))
    assert "agentd usage --schedule briefing" in cli(config, "briefing", "run").replace("\n", " ")
    # A run once is not the daily briefing: status and a new `enable` leave it alone.
    assert [s["id"] for s in json.loads(cli(config, "briefing", "status", "--json"))] == [
        daily["id"]
    ]
    conn = open_sync(tmp_path / "agentd.db")
    with conn:
        for instance in (f"sched-{daily['id']}-1-turn", f"sched-{once['id']}-1-turn", "tg-1"):
            spent = Usage(input_tokens=1000, output_tokens=100)
            usage.record(
                conn,
                spent,
                model="claude-haiku-4-5",
                purpose="turn",
                chat_id=42,
                instance_id=instance,
            )
    conn.close()
    rows = json.loads(cli(config, "usage", "--schedule", "briefing", "--json"))
    assert sum(r["calls"] for r in rows) == 2
