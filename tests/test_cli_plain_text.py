"""What the CLI prints of stored text (a message, a reminder, a memory, a watch) is that text,
never rich markup: a `[/b]` written by anyone served, or by a page the bot read, does not end
the owner's command with a traceback, and a `[red]` styles nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.memory.history import save_message

runner = CliRunner()
ODD = "buy [/b] milk [red]now[/red] [paused]"


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


def run(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 0, result.output
    return result.output


def test_a_reminder_with_brackets_is_shown_as_written() -> None:
    assert ODD in run("schedule", "add", "--message", ODD, "--after", "1h")
    [sched] = json.loads(run("schedule", "ls", "--json"))
    assert ODD in run("schedule", "ls")
    assert ODD in run("schedule", "show", sched["id"])


def test_pause_and_remove_say_the_new_state() -> None:
    """The state a change leaves ("[paused]") is in the line printed, not taken for a style."""
    sid = json.loads(run("schedule", "add", "--message", "stretch", "--every", "1d", "--json"))
    assert "[paused]" in run("schedule", "pause", sid["id"])
    assert "[cancelled]" in run("schedule", "cancel", sid["id"])
    wid = json.loads(
        run(
            "watch",
            "add",
            "--label",
            "n",
            "--if",
            "it changes",
            "--file",
            "n.txt",
            "--every",
            "1h",
            "--json",
        )
    )["id"]
    assert "[paused]" in run("watch", "pause", wid)
    assert "[paused]" in run("watch", "ls")
    assert "[removed]" in run("watch", "rm", wid)


def test_a_message_and_a_memory_with_brackets_are_shown_as_written(config: Path) -> None:
    conn = open_sync(config.parent / "agentd.db")
    with conn:
        save_message(conn, chat_id=42, user_id=42, role="user", content=ODD, source_key="m1")
    conn.close()
    assert ODD in " ".join(run("history").split("│"))
    assert ODD in run("memory", "add", ODD)
    assert ODD in run("memory", "ls")


@pytest.mark.parametrize(("group", "what"), [("memory", "memories"), ("docs", "document chunks")])
def test_reindex_says_what_it_did_in_a_sentence(group: str, what: str) -> None:
    """It printed its report's fields ("model_id: …, dim: 384, embedded: 0, dropped_spaces:
    []"); now a sentence, and --json keeps the fields."""
    if group == "memory":
        run("memory", "add", "tea at five")
    output = " ".join(run(group, "reindex").split())
    assert "model_id:" not in output and "dropped_spaces" not in output, output
    assert ("Re-embedded" in output or "Nothing to re-embed" in output) and what in output
    data = json.loads(run(group, "reindex", "--force", "--json"))
    assert set(data) == {"model_id", "dim", "embedded", "dropped_spaces"}


def test_a_call_waiting_for_approval_is_listed_with_its_arguments_as_written(
    config: Path,
) -> None:
    """The model writes a call's arguments: a `[/b]` in them ended `agentd pending`, the
    command that lists what waits for the owner, with a traceback."""
    from agentd.access import approvals
    from agentd.durable import store

    now = time.time()
    conn = open_sync(config.parent / "agentd.db")
    with conn:
        store.insert_instance(
            conn,
            instance_id="tg-update-1",
            workflow="turn",
            key="chat-42",
            input_json="{}",
            now=now,
        )
        approvals.create(
            conn,
            approvals.Approval(
                id="a1",
                instance_id="tg-update-1",
                tool_use_id="tu-1",
                chat_id=42,
                chat_kind="private",
                user_id=42,
                tool="shell",
                risk="high",
                args_digest="d",
                args_preview=ODD,
                status="pending",
                created_at=now,
                expires_at=now + 3600,
                call_json=approvals.canonical_call("shell", {"command": ODD}),
            ),
        )
    conn.close()
    assert "[/b]" in run("pending")
    assert ODD in run("pending", "--show", "a1")
