"""Local integers for Matrix's string ids (rooms, users, events), kept in `matrix_ids`.

agentd's chats, users and messages are integers everywhere past the channel; a Matrix id gets
its integer the first time intake or output meets it. A room's and a user's are kept for
good; an event's follows `[retention] message_days`, as the history that names it does
(`kept`), and no integer is ever given to a second id. They lie in Matrix's block
(chat/channel.py: from 2^53, past every Telegram id), so no two channels share a number and
the core routes a send by its chat id alone.
The configured owner is the exception: their Matrix account is the owner's agentd user.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from agentd.chat import addresses
from agentd.chat.channel import block_start

BLOCK = 1  # Matrix's block of agentd ids (chat/channel.py): Telegram has block 0
BASE = block_start(BLOCK)
Kind = Literal["room", "user", "event"]


def local_id(conn: Any, kind: Kind, mxid: str, room_id: str | None = None) -> int:
    """The integer for `mxid` (made now if new); call inside a write transaction."""
    row = conn.execute("SELECT n FROM matrix_ids WHERE kind = ? AND mxid = ?", (kind, mxid))
    found = row.fetchone()
    if found is None:
        cursor = conn.execute(
            "INSERT INTO matrix_ids (kind, mxid, room_id, made_at) VALUES (?, ?, ?, ?)",
            (kind, mxid, room_id, time.time()),
        )
        local = BASE + int(cursor.lastrowid)
        if kind == "room":  # so the owner can name the room in the configuration
            addresses.note(conn, mxid, local)
        return local
    return BASE + int(found[0])


def sent_id(conn: Any, event_id: str, room_id: str) -> int:
    """The integer of an event agentd sent, marked as the bot's (call inside a write)."""
    local = local_id(conn, "event", event_id, room_id)
    conn.execute("UPDATE matrix_ids SET sent = 1 WHERE n = ?", (local - BASE,))
    return local


def sent_by_bot(conn: Any, event_id: str, room_id: str) -> bool:
    """Whether agentd sent this event in this room (read only): an event of another room is
    not this room's to answer to, whatever a reply names."""
    row = conn.execute(
        "SELECT sent FROM matrix_ids WHERE kind = 'event' AND mxid = ? AND room_id = ?",
        (event_id, room_id),
    ).fetchone()
    return row is not None and bool(row[0])


def known_id(conn: Any, kind: Kind, mxid: str) -> int | None:
    """The integer `mxid` already has, or None (read only)."""
    row = conn.execute("SELECT n FROM matrix_ids WHERE kind = ? AND mxid = ?", (kind, mxid))
    found = row.fetchone()
    return None if found is None else BASE + int(found[0])


def mxid_of(conn: Any, kind: Kind, local: int) -> str | None:
    """The Matrix id behind a local integer of that kind, or None (not one of Matrix's)."""
    if local < BASE:
        return None
    row = conn.execute(
        "SELECT mxid FROM matrix_ids WHERE n = ? AND kind = ?", (local - BASE, kind)
    ).fetchone()
    return None if row is None else str(row[0])


def event_of(conn: Any, local: int) -> tuple[str, str] | None:
    """(event id, room id) of a local message id, or None."""
    if local < BASE:
        return None
    row = conn.execute(
        "SELECT mxid, room_id FROM matrix_ids WHERE n = ? AND kind = 'event'", (local - BASE,)
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1] or ""))
