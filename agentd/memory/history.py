"""Short-term memory (R-MEM-1): every user message and answer, and the last N for the prompt."""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.chat import quotable
from agentd.chat.names import chat_key

# An answer sent in several messages keeps their texts in its meta, in order: its message
# ids (`telegram_message_ids`) name them in the same order, files sent with it after them.
PARTS = "parts"

# Whose words a stored message, memory or fact is: the user's own, the model's, or outside
# content (someone else's words, a page, a mail, a command's output).
Origin = Literal["user", "model", "outside"]


class StoredMessage(BaseModel):
    id: int
    chat_id: int
    user_id: int | None
    role: Literal["user", "assistant"]
    content: str
    created_at: float
    instance_id: str | None = None
    telegram_message_ids: list[int] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)


_COLUMNS = (
    "id, chat_id, user_id, role, content, created_at, instance_id, telegram_message_ids, meta"
)


def _message(row: Any) -> StoredMessage:
    return StoredMessage(
        id=row[0],
        chat_id=row[1],
        user_id=row[2],
        role=row[3],
        content=row[4],
        created_at=row[5],
        instance_id=row[6],
        telegram_message_ids=json.loads(row[7]),
        meta=json.loads(row[8]),
    )


def save_message(
    conn: Any,
    *,
    chat_id: int,
    user_id: int | None,
    role: Literal["user", "assistant"],
    content: str,
    source_key: str,
    instance_id: str | None = None,
    telegram_message_ids: list[int] | None = None,
    meta: dict[str, Any] | None = None,
    created_at: float | None = None,
    origin: Origin | None = None,
    origin_ref: str | None = None,
) -> int:
    """Store a message once per source_key (a re-run step stores nothing new); return its id.

    `origin` says whose words it is (agent/provenance.py); unsaid, a user's message is theirs
    and an answer the model's."""
    origin = origin or ("user" if role == "user" else "model")
    conn.execute(
        "INSERT OR IGNORE INTO messages (chat_id, user_id, role, content, created_at, "
        "instance_id, telegram_message_ids, source_key, meta, origin, origin_ref) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            chat_id,
            user_id,
            role,
            content,
            created_at or time.time(),
            instance_id,
            json.dumps(telegram_message_ids or []),
            source_key,
            json.dumps(meta or {}, ensure_ascii=False),
            origin,
            origin_ref,
        ),
    )
    return int(
        conn.execute("SELECT id FROM messages WHERE source_key = ?", (source_key,)).fetchone()[0]
    )


def start_fresh(conn: Any, chat_id: int, now: float) -> int:
    """/new: later prompts leave out every message stored so far (nothing is deleted)."""
    row = conn.execute("SELECT MAX(id) FROM messages WHERE chat_id = ?", (chat_id,)).fetchone()
    since = int(row[0] or 0)
    conn.execute(
        "INSERT INTO chat_context (chat_id, since_message_id, reset_at) VALUES (?, ?, ?) "
        "ON CONFLICT (chat_id) DO UPDATE SET since_message_id = excluded.since_message_id, "
        "reset_at = excluded.reset_at",
        (chat_id, since, now),
    )
    return since


def context_floor(conn: Any, chat_id: int) -> int:
    """The id after which the chat's messages belong to its current context (0: all do)."""
    row = conn.execute(
        "SELECT since_message_id FROM chat_context WHERE chat_id = ?", (chat_id,)
    ).fetchone()
    return int(row[0]) if row else 0


def withdraw(conn: Any, instance_ids: list[str], reason: str) -> int:
    """Leave the user messages of these turns out of every later prompt (README "Stopping and
    editing"): stopped with /stop ("stopped") or replaced by an edit ("edited"). The rows stay,
    for `agentd history`."""
    changed = 0
    for iid in instance_ids:
        changed += conn.execute(
            "UPDATE messages SET meta = json_set(meta, '$.withdrawn', ?) "
            "WHERE instance_id = ? AND role = 'user' AND json_extract(meta, '$.withdrawn') IS NULL",
            (reason, iid),
        ).rowcount
    return changed


def turns_between(conn: Any, chat_id: int, start_id: int, before_id: int) -> list[tuple[str, str]]:
    """(role, content) of the chat's messages from `start_id` up to (not including) `before_id`,
    oldest first: all a prompt needs. Withdrawn requests (`withdraw`) are left out, and so
    are the requests of turns still waiting (for an approval): the prompt lists those as
    pending (agent/pending.py), and read as unanswered they would be answered again."""
    rows = conn.execute(
        "SELECT role, content FROM messages WHERE chat_id = ? AND id >= ? AND id < ? "
        "AND json_extract(meta, '$.withdrawn') IS NULL AND (instance_id IS NULL OR "
        "instance_id NOT IN (SELECT id FROM workflow_instances WHERE key = ? AND status IN "
        "('queued', 'running', 'waiting', 'sleeping') AND status = 'waiting')) ORDER BY id",
        (chat_id, start_id, before_id, chat_key(chat_id)),
    )
    return [(r[0], r[1]) for r in rows]


def history(conn: Any, *, chat_id: int | None = None, limit: int = 50) -> list[StoredMessage]:
    """For `agentd history`: the last `limit` messages (of one chat, or all), oldest first."""
    if chat_id is None:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM messages ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
    else:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE chat_id = ? ORDER BY id DESC LIMIT ?",
            (chat_id, limit),
        ).fetchall()
    return [_message(r) for r in reversed(rows)]


def sent_text(conn: Any, chat_id: int, message_id: int) -> str | None:
    """What agentd sent as chat message `message_id` in this chat, as kept in the history (a
    turn's answer, a told message; of an answer sent in several messages, the part that
    message was) or as a notice (chat/quotable.py, never history). None: not one of its kept
    messages (a row retention removed, a message of another chat)."""
    row = conn.execute(
        "SELECT content, telegram_message_ids, meta FROM messages WHERE chat_id = ? "
        "AND role = 'assistant' AND EXISTS "
        "(SELECT 1 FROM json_each(messages.telegram_message_ids) WHERE value = ?) "
        "ORDER BY id DESC LIMIT 1",
        (chat_id, message_id),
    ).fetchone()
    if row is None:
        return quotable.notice_text(conn, chat_id, message_id)
    parts = json.loads(row[2]).get(PARTS) or []
    at = json.loads(row[1]).index(message_id)
    return str(parts[at]) if at < len(parts) else str(row[0])
