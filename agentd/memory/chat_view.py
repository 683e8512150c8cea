"""/memory in chat: what the owner sees and what its buttons do, without Telegram types.

The chat command renders `memory_page` (text and rows of (label, callback data) buttons) and
routes a pressed button's data to `on_button`; an "edit" press asks for the new text, which the
owner's next message brings to `apply_edit`. All writes go through manage.py, so a change made
here is versioned and audited like one made on the CLI or the dashboard.

The edit waiting for its text is a row in `kv` (`await_edit`), not process state: a restart
between the press and the message keeps it. It lapses after EDIT_TTL, and a command sent
meanwhile cancels it, so an edit left unanswered does not take a later message.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from agentd.db.runner import Runner
from agentd.memory import manage
from agentd.memory.store import Memory, list_memories
from agentd.retrieval.embedders import Embedder

PREFIX = "mem"  # callback data: mem:<action>:<id>[:<version>], short (Telegram allows 64 bytes)
PAGE = 8
EDIT_TTL = 600.0  # seconds an edit waits for its text
_EDIT_KEY = "memory.edit:{chat}:{user}"
BY = "chat"  # where the audit says the change was made
_ORIGIN_LABEL = {"user": "your words", "model": "noted by me", "outside": "from outside content"}


class Button(BaseModel):
    label: str
    data: str


class ChatView(BaseModel):
    """A message to send: its text and its inline keyboard, one list per row."""

    text: str
    buttons: list[list[Button]] = Field(default_factory=list)
    awaiting_edit: int | None = None  # the memory whose new text the next message brings


def describe(memory: Memory) -> str:
    """One memory as the owner reads it: text, kind, whose words, from where, when."""
    when = datetime.fromtimestamp(memory.created_at, UTC).date().isoformat()
    where = f", {memory.origin_ref}" if memory.origin_ref else ""
    pin = " 📌" if memory.pinned else ""
    return (
        f"#{memory.id}{pin} {memory.content}\n"
        f"   {memory.kind} · {_ORIGIN_LABEL[memory.origin]}{where} · {when}"
    )


def memory_page(conn: Any, user_id: int, *, offset: int = 0) -> ChatView:
    """A page of the owner's memories, newest first, each with edit and forget buttons."""
    rows = list_memories(conn, user_id, limit=PAGE + 1, offset=offset)
    shown = rows[:PAGE]
    if not shown:
        return ChatView(text="I have no memories of you yet.")
    buttons = [
        [
            Button(label=f"✏️ #{m.id}", data=f"{PREFIX}:edit:{m.id}"),
            Button(label=f"🗑 #{m.id}", data=f"{PREFIX}:forget:{m.id}"),
            Button(label=f"{'📍' if m.pinned else '📌'} #{m.id}", data=f"{PREFIX}:pin:{m.id}"),
        ]
        for m in shown
    ]
    if len(rows) > PAGE:
        buttons.append([Button(label="More ›", data=f"{PREFIX}:page:{offset + PAGE}")])
    return ChatView(text="\n".join(describe(m) for m in shown), buttons=buttons)


async def on_button(db: Runner, embedder: Embedder | None, user_id: int, data: str) -> ChatView:
    """What a pressed /memory button does. Only ever the pressing user's memories."""
    parts = data.split(":")
    if len(parts) < 3 or parts[0] != PREFIX or not parts[2].isdecimal():
        return ChatView(text="That button is no longer valid.")
    action, target = parts[1], int(parts[2])
    if action == "page":
        return await db.read(lambda c: memory_page(c, user_id, offset=target))
    try:
        if action == "forget":
            gone = await db.write(lambda c: manage.forget_one(c, target, user_id=user_id, by=BY))
            undo = Button(label="↩️ Undo", data=f"{PREFIX}:undo:{target}")
            return ChatView(text=f"Forgot #{gone.id}: {gone.content}", buttons=[[undo]])
        if action == "edit":
            memory = await db.read(lambda c: manage.owned(c, target, user_id))
            return ChatView(
                text=f"Send the new text for #{memory.id}:\n{memory.content}",
                awaiting_edit=memory.id,
            )
        if action == "pin":
            pinned = await db.write(lambda c: _toggle_pin(c, target, user_id))
            said = "Pinned: always in my context" if pinned.pinned else "Unpinned"
            return ChatView(text=f"{said}:\n{describe(pinned)}")
        if action == "undo":
            versions = await db.read(lambda c: manage.history(c, target, user_id=user_id))
            before = next(v.version for v in reversed(versions) if v.action != "forget")
            restored = await manage.restore(db, embedder, target, before, user_id=user_id, by=BY)
            return ChatView(text=f"Restored #{restored.id}: {restored.content}")
    except (manage.MemoryNotFound, StopIteration):
        return ChatView(text=f"No memory #{target}.")
    return ChatView(text="That button is no longer valid.")


async def apply_edit(
    db: Runner, embedder: Embedder | None, user_id: int, memory_id: int, text: str
) -> ChatView:
    """The owner's next message after "edit": the memory's new text, in their words."""
    try:
        memory = await manage.edit(db, embedder, memory_id, text, user_id=user_id, by=BY)
    except manage.MemoryNotFound:
        return ChatView(text=f"No memory #{memory_id}.")
    except manage.MemoryStoreError as exc:
        return ChatView(text=f"Not changed: {exc}.")
    return ChatView(text=f"Updated:\n{describe(memory)}")


def _toggle_pin(conn: Any, memory_id: int, user_id: int) -> Memory:
    memory = manage.owned(conn, memory_id, user_id)
    return manage.set_pinned(conn, memory_id, not memory.pinned, user_id=user_id, by=BY)


def await_edit(conn: Any, chat_id: int, user_id: int, memory_id: int, now: float) -> None:
    """Remember that this user's next message in this chat is memory_id's new text."""
    value = json.dumps({"memory": memory_id, "until": now + EDIT_TTL})
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value ="
        " excluded.value",
        (_EDIT_KEY.format(chat=chat_id, user=user_id), value),
    )


def take_edit(conn: Any, chat_id: int, user_id: int, text: str, now: float) -> int | None:
    """The memory this message is the new text of, if an edit waits for it. The waiting edit
    is used up either way: a command (`/...`) cancels it, and a lapsed one is dropped."""
    key = _EDIT_KEY.format(chat=chat_id, user=user_id)
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    if row is None:
        return None
    conn.execute("DELETE FROM kv WHERE key = ?", (key,))
    waiting = json.loads(row[0])
    if now > float(waiting["until"]) or text.lstrip().startswith("/") or not text.strip():
        return None
    return int(waiting["memory"])
