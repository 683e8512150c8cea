"""The load-history step journals the window's bounds; a replay reads the messages again.

End to end, a turn killed during its send replays load-history (tests/test_e2e_turn.py); here the
replay itself is pinned: the bounds give the same prompt history, and a journal written by an
older agentd (the messages themselves) still replays.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pydantic import TypeAdapter

from agentd.agent.turn import JOURNALED_HISTORY, HistoryWindow, history_for_prompt
from agentd.db import Database
from agentd.memory import history


class ReplayingStep:
    """A step whose journal already holds the result: do() returns it without running fn."""

    def __init__(self, journaled: str) -> None:
        self.value = TypeAdapter(JOURNALED_HISTORY).validate_json(journaled)
        self.calls: list[str] = []

    async def do(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(name)
        return self.value


class Deps:
    def __init__(self, db: Database) -> None:
        self.db = db


async def save(db: Database, role: str, text: str, chat: int = 7) -> int:
    return await db.write(
        lambda conn: history.save_message(
            conn,
            chat_id=chat,
            user_id=chat if role == "user" else None,
            role=role,
            content=text,
            source_key=f"{role}:{text}",
        )
    )


CHAT_7 = SimpleNamespace(chat_id=7, user_id=7, chat_kind="private")  # the turn's input


async def test_a_replay_reads_the_journaled_window_again(db: Database) -> None:
    first = await save(db, "user", "hello")
    await save(db, "assistant", "hi!")
    await save(db, "user", "other chat", chat=8)
    current = await save(db, "user", "how are you?")
    await save(db, "assistant", "a later reply, outside the window")
    journaled = HistoryWindow(start_id=first, before_id=current).model_dump_json()
    step = ReplayingStep(journaled)
    past, _ = await history_for_prompt(step, Deps(db), CHAT_7, current)  # type: ignore[arg-type]
    assert step.calls == ["load-history"]
    assert past == [("user", "hello"), ("assistant", "hi!")]


async def test_a_journal_from_an_older_version_replays_its_messages(db: Database) -> None:
    journaled = (
        '[{"id": 1, "chat_id": 7, "user_id": 7, "role": "user", "content": "old question", '
        '"created_at": 1.0, "instance_id": "tg-update-1", "telegram_message_ids": [3], '
        '"meta": {"kind": "text"}}, {"id": 2, "chat_id": 7, "user_id": null, '
        '"role": "assistant", "content": "old answer", "created_at": 2.0}]'
    )
    past, _ = await history_for_prompt(ReplayingStep(journaled), Deps(db), CHAT_7, 3)  # type: ignore[arg-type]
    assert past == [("user", "old question"), ("assistant", "old answer")]
