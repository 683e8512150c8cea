"""Where a user can be reached privately, on each channel: the private chat they last wrote
in there. A notice for a user (a reminder, a mail notice, an automation's) goes to the
channel `[access] notices` names, else to the one they last wrote in; an approval card to its
approver the same way. The channel adapter notes each private message at intake (in the
transaction that commits it), so the answer is as fresh as the last message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def note_private_chat(conn: Any, user_id: int, channel: str, chat_id: int, now: float) -> None:
    """`user_id` wrote in their private chat `chat_id` on `channel` at `now`."""
    conn.execute(
        "INSERT INTO user_chats (user_id, channel, chat_id, last_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (user_id, channel) DO UPDATE SET chat_id = excluded.chat_id, "
        "last_at = MAX(last_at, excluded.last_at)",
        (user_id, channel, chat_id, now),
    )


def forget_chat(conn: Any, channel: str, chat_id: int) -> None:
    """`chat_id` on `channel` is no one's private chat any more (a Matrix room someone else
    was let into): what is for its user alone goes where else they are reached."""
    conn.execute("DELETE FROM user_chats WHERE channel = ? AND chat_id = ?", (channel, chat_id))


def forget_user(conn: Any, user_id: int, channel: str) -> None:
    """`user_id` is reached on `channel` no more until they write there again (the account
    that wrote there no longer speaks for them)."""
    conn.execute("DELETE FROM user_chats WHERE user_id = ? AND channel = ?", (user_id, channel))


def know_private_chat(conn: Any, user_id: int, channel: str, chat_id: int) -> None:
    """A private chat the channel knows without a message (Telegram's, for a configured
    user): kept only where none was noted, and never preferred to one written in."""
    conn.execute(
        "INSERT OR IGNORE INTO user_chats (user_id, channel, chat_id, last_at) VALUES (?, ?, ?, 0)",
        (user_id, channel, chat_id),
    )


def private_chat(conn: Any, user_id: int, prefer: str = "") -> int | None:
    """The private chat to reach `user_id` in: on channel `prefer` if they have one there,
    else where they last wrote; None when no channel knows one."""
    if prefer:
        row = conn.execute(
            "SELECT chat_id FROM user_chats WHERE user_id = ? AND channel = ?", (user_id, prefer)
        ).fetchone()
        if row is not None:
            return int(row[0])
    row = conn.execute(
        "SELECT chat_id FROM user_chats WHERE user_id = ? ORDER BY last_at DESC LIMIT 1",
        (user_id,),
    ).fetchone()
    return int(row[0]) if row is not None else None


def private_chat_among(conn: Any, user_id: int, channels: Sequence[str]) -> int | None:
    """The private chat `user_id` last wrote in on one of `channels` (those still open, when
    another stopped); None when none of them knows one."""
    marks = ", ".join("?" * len(channels))
    row = conn.execute(
        f"SELECT chat_id FROM user_chats WHERE user_id = ? AND channel IN ({marks}) "
        "ORDER BY last_at DESC LIMIT 1",
        (user_id, *channels),
    ).fetchone()
    return int(row[0]) if row is not None else None
