"""/tasks as a chat command: its answers without a running daemon."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agentd.chat.command import CommandInput
from agentd.config import Config
from agentd.db import Database
from agentd.tasks.commands import commands, tasks_command


def asked(args: str) -> CommandInput:
    return CommandInput(name="tasks", args=args, chat_id=7, chat_kind="private", user_id=7)


async def test_an_unknown_word_after_tasks_is_named_not_ignored(db: Database) -> None:
    deps: Any = SimpleNamespace(config=Config(), db=db)
    listed = await tasks_command(None, deps, asked(""))  # type: ignore[arg-type]
    unknown = await tasks_command(None, deps, asked("frob"))  # type: ignore[arg-type]
    assert listed.text.startswith("No background tasks")
    assert "`/tasks frob`" in unknown.text and "/tasks stop N" in unknown.text


def test_task_is_in_the_owners_help_and_menu_only() -> None:
    # Anyone else is told "Only the owner starts background tasks": listing it to them is a lure.
    declared = {c.name: c for c in commands(None, None)}  # type: ignore[arg-type]
    assert declared["task"].owner_only and not declared["tasks"].owner_only
