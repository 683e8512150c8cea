"""The web chat's rows (`webchat_messages`): what the owner posted and what the agent said,
each change numbered by `seq`, the page's cursor.

Intake is persist-then-acknowledge: the owner's message, the account link, where the owner is
reached and the workflow it starts are one transaction, committed before the page is answered.
The key the page chose for the message makes a re-post the same message; the key of the send
step makes a re-send of an answer after a crash the same answer.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from pydantic import BaseModel, Field

from agentd.access import accounts
from agentd.agent.busy import plan_busy
from agentd.chat import reach
from agentd.chat.busy import BusyMode
from agentd.chat.channel import CallbackHandler, CommandHook
from agentd.chat.inputs import CallbackPress, TurnInput
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.durable import Engine
from agentd.webchat.ids import ACCOUNT_ID, BASE, CHAT_ID, NAME
from agentd.webchat.kept import next_numbers

# Characters in one message from the page: at 4 bytes each still inside the dashboard's
# 64 KiB request bound (the page posts multipart form data, raw UTF-8).
MAX_TEXT = 12_000
HISTORY = 300  # messages a page opened with no cursor is given (the newest)
COLUMNS = "id, seq, role, text, buttons, file_name, reply_to, created_at, client_key"


class Posted(BaseModel):
    """What taking one message did."""

    id: int
    seq: int
    duplicate: bool = False
    keys: list[str] = Field(default_factory=list)  # engine keys to kick after the commit
    cancel: str | None = None  # a turn the message interrupted: stop it after the commit


def instance_id_of(client_key: str) -> str:
    return "web-" + hashlib.sha256(client_key.encode()).hexdigest()[:32]


def _next_seq(conn: Any) -> int:
    return next_numbers(conn)[0]


def _owner_user(conn: Any, owner_id: int, now: float) -> int:
    """The owner's web account speaks for the owner's agentd user (one memory, one budget)."""
    if accounts.user_of(conn, ACCOUNT_ID) != owner_id:
        accounts.link(conn, ACCOUNT_ID, owner_id, NAME, now)
    return owner_id


def take_message(
    conn: Any,
    client_key: str,
    text: str,
    owner_id: int,
    engine: Engine,
    on_command: CommandHook,
    busy: BusyMode,
    now: float | None = None,
) -> Posted:
    """Store the owner's message and start its turn (or command), once per `client_key`."""
    now = time.time() if now is None else now
    row = conn.execute(
        "SELECT id, seq FROM webchat_messages WHERE client_key = ?", (client_key,)
    ).fetchone()
    if row is not None:
        return Posted(id=row[0], seq=row[1], duplicate=True)
    seq, ident = next_numbers(conn)
    instance_id = instance_id_of(client_key)
    cursor = conn.execute(
        "INSERT INTO webchat_messages (id, seq, role, text, client_key, instance_id, "
        "created_at, updated_at) VALUES (?, ?, 'owner', ?, ?, ?, ?, ?)",
        (ident, seq, text, client_key, instance_id, now, now),
    )
    message_id = int(cursor.lastrowid)
    user = _owner_user(conn, owner_id, now)
    turn = TurnInput(
        origin="chat",
        update_id=BASE + message_id,
        chat_id=CHAT_ID,
        user_id=user,
        message_id=message_id,
        date=now,
        kind="text",
        text=text,
        chat_kind="private",
    )
    reach.note_private_chat(conn, user, NAME, CHAT_ID, now)
    posted = Posted(id=message_id, seq=seq)
    command = on_command(turn, conn)
    if command is not None:
        name, inp, key = command
        engine.prepare_start(conn, name, inp, instance_id=instance_id, key=key)
        posted.keys.append(key)
        return posted
    turn, posted.cancel = plan_busy(conn, turn, instance_id, busy, now)
    key = chat_key(CHAT_ID)
    engine.prepare_start(conn, TURN_WORKFLOW, turn, instance_id=instance_id, key=key)
    posted.keys.append(key)
    return posted


def press(
    conn: Any, message_id: int, data: str, owner_id: int, on_callback: CallbackHandler
) -> str | None:
    """A press of one of the buttons a message carries, as the owner; None when the message
    carries no such button (the page offers only what it was sent)."""
    row = conn.execute(
        "SELECT buttons FROM webchat_messages WHERE id = ? AND role = 'agent'", (message_id,)
    ).fetchone()
    offered = {b.get("data") for line in json.loads(row[0]) for b in line} if row else set()
    if data not in offered:
        return None
    now = time.time()
    event = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM webchat_messages").fetchone()[0]
    found = CallbackPress(
        update_id=BASE + int(event),
        callback_id=f"web-{message_id}-{now}",
        user_id=_owner_user(conn, owner_id, now),
        chat_id=CHAT_ID,
        message_id=message_id,
        data=data,
        chat_kind="private",
    )
    return on_callback(conn, found)


def put_answer(
    conn: Any,
    send_key: str | None,
    text: str,
    *,
    buttons: str = "[]",
    reply_to: int | None = None,
    file_name: str | None = None,
    file_sha256: str | None = None,
) -> int:
    """One message of the agent's; a send key seen before returns that message, unchanged."""
    if send_key is not None:
        row = conn.execute(
            "SELECT id FROM webchat_messages WHERE send_key = ?", (send_key,)
        ).fetchone()
        if row is not None:
            return int(row[0])
    now = time.time()
    seq, ident = next_numbers(conn)
    cursor = conn.execute(
        "INSERT INTO webchat_messages (id, seq, role, text, buttons, file_name, file_sha256, "
        "send_key, reply_to, created_at, updated_at) "
        "VALUES (?, ?, 'agent', ?, ?, ?, ?, ?, ?, ?, ?)",
        (ident, seq, text, buttons, file_name, file_sha256, send_key, reply_to, now, now),
    )
    return int(cursor.lastrowid)


def edit_answer(conn: Any, message_id: int, text: str, buttons: str) -> bool:
    """A new text (and buttons) for one of the agent's messages, as a new change."""
    changed = conn.execute(
        "UPDATE webchat_messages SET text = ?, buttons = ?, seq = ?, updated_at = ? "
        "WHERE id = ? AND role = 'agent'",
        (text, buttons, _next_seq(conn), time.time(), message_id),
    ).rowcount
    return changed == 1


def changes(conn: Any, after: int, limit: int = 200) -> list[dict[str, Any]]:
    """Every message changed after cursor `after`, oldest change first; with no cursor (0),
    the newest `HISTORY` messages."""
    if after <= 0:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM (SELECT {COLUMNS} FROM webchat_messages "
            "ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (HISTORY,),
        ).fetchall()
    else:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM webchat_messages WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        ).fetchall()
    return [
        {
            "id": r[0],
            "seq": r[1],
            "role": r[2],
            "text": r[3],
            "buttons": json.loads(r[4]),
            "file": r[5] is not None,
            "file_name": r[5] or "",
            "reply_to": r[6],
            "at": r[7],
            "key": r[8] or "",  # an owner's message: the page drops its unconfirmed copy
        }
        for r in rows
    ]


def file_of(conn: Any, message_id: int) -> tuple[str, str] | None:
    """(file name, content hash) of a file the agent sent, or None."""
    row = conn.execute(
        "SELECT file_name, file_sha256 FROM webchat_messages WHERE id = ? AND role = 'agent' "
        "AND file_sha256 IS NOT NULL",
        (message_id,),
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))
