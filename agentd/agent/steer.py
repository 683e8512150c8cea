"""Steering (chat/busy.py): a message sent while a turn works, taken into that turn.

Both sides are journaled local steps over the working turn's mailbox, so whichever comes
first wins once and for all, and a replay sees the same outcome:

- the working turn, before each model call after the first (`steer#n`), takes every steered
  message waiting in its mailbox, adds it to the conversation ("the user added: …") and to its
  own saved request, so history reads as one request and one answer;
- the steered message's own turn, when it runs (after the working turn let go of the chat),
  claims its message (`steer-claim`): if the working turn took it, it only records it; if not
  (that turn was already answering), it answers it like any other message.
"""

from __future__ import annotations

import json
from typing import Any

from agentd.chat.busy import STEER_EVENT, steer_event_id
from agentd.llm.types import Message, TextBlock

TAKEN_BY_WORKING_TURN = -1  # consumed_by of a steer event the working turn took
CLAIMED_BY_OWN_TURN = 0  # consumed_by of one its own turn answers


def added_text(text: str) -> str:
    return f"(The user added this while you were working on the request above:)\n{text}"


def take_added(conn: Any, instance_id: str, now: float) -> list[str]:
    """Every steered message waiting for this turn, taken; they are appended to its saved
    request too (the later history shows what the answer answered)."""
    rows = conn.execute(
        "SELECT id, payload FROM workflow_events WHERE instance_id = ? AND type = ? "
        "AND consumed_at IS NULL ORDER BY id",
        (instance_id, STEER_EVENT),
    ).fetchall()
    texts = []
    for event_id, payload in rows:
        conn.execute(
            "UPDATE workflow_events SET consumed_at = ?, consumed_by = ? WHERE id = ?",
            (now, TAKEN_BY_WORKING_TURN, event_id),
        )
        texts.append(str(json.loads(payload).get("text", "")))
    if texts:
        extra = "".join(f"\n\n{added_text(t)}" for t in texts)
        conn.execute(
            "UPDATE messages SET content = content || ? WHERE instance_id = ? AND role = 'user'",
            (extra, instance_id),
        )
    return texts


def claim_steer(conn: Any, instance_id: str, now: float) -> bool:
    """True: this turn answers its own message (the working turn never took it)."""
    row = conn.execute(
        "SELECT id, consumed_at FROM workflow_events WHERE event_id = ?",
        (steer_event_id(instance_id),),
    ).fetchone()
    if row is None:  # pruned, or never stored: nobody took it
        return True
    if row[1] is not None:
        return False
    conn.execute(
        "UPDATE workflow_events SET consumed_at = ?, consumed_by = ? WHERE id = ?",
        (now, CLAIMED_BY_OWN_TURN, row[0]),
    )
    return True


def with_added(message: Message, texts: list[str]) -> Message:
    """The conversation's last user message (tool results) with the user's additions."""
    blocks = [TextBlock(text=added_text(t)) for t in texts]
    content = message.content
    if isinstance(content, str):
        return message.model_copy(update={"content": [TextBlock(text=content), *blocks]})
    return message.model_copy(update={"content": [*content, *blocks]})
