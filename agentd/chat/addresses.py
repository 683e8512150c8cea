"""Chats a channel names with a string (a Matrix room id, "!abc:example.org"), found by it.

agentd's chats are integers; a channel whose network names chats with strings notes each such
name here as it meets the chat (in the transaction that gives it its id), so the owner can
name the chat in the configuration (`[automations.chats] supervisors = "!abc:example.org"`)
without knowing its number.
"""

from __future__ import annotations

from typing import Any


def note(conn: Any, address: str, chat_id: int) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO chat_addresses (address, chat_id) VALUES (?, ?)", (address, chat_id)
    )


def chat_of(conn: Any, address: str) -> int | None:
    """The chat `address` names, or None when no channel has met it yet."""
    row = conn.execute(
        "SELECT chat_id FROM chat_addresses WHERE address = ?", (address,)
    ).fetchone()
    return None if row is None else int(row[0])
