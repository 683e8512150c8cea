"""A message that arrives while a turn of its chat works (chat/busy.py says what each mode
does), decided inside a channel's intake commit: the one rule every channel's intake calls
(Telegram's and Matrix's alike), from the chat's working turn, the sender and `[chat] busy`."""

from __future__ import annotations

from typing import Any

from agentd.chat.busy import STEER_EVENT, BusyMode, steer_event_id
from agentd.chat.inputs import TurnInput
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.durable import store
from agentd.memory import history

INTERRUPTED_BY = "interrupt"  # decided_by of an interrupted turn's pending approvals


def answered(conn: Any, instance_id: str) -> bool:
    """A send of its answer finished or began (a marked attempt is journaled before the call,
    so one in flight counts: the user may be reading it already)."""
    row = conn.execute(
        "SELECT 1 FROM workflow_steps WHERE instance_id = ? AND name LIKE 'send%' LIMIT 1",
        (instance_id,),
    ).fetchone()
    return row is not None


def working_turn(conn: Any, chat_id: int) -> tuple[str, int | None] | None:
    """The chat's turn that is working now (not waiting, not queued), if any, and its user."""
    row = conn.execute(
        "SELECT id, json_extract(input, '$.user_id') FROM workflow_instances "
        "WHERE key = ? AND workflow = ? AND status = 'running' ORDER BY seq LIMIT 1",
        (chat_key(chat_id), TURN_WORKFLOW),
    ).fetchone()
    return (row[0], row[1]) if row else None


def plan_busy(
    conn: Any, turn: TurnInput, instance_id: str, mode: BusyMode, now: float
) -> tuple[TurnInput, str | None]:
    """(the turn to start, a turn to cancel now). Only a new text message steers or
    interrupts; photos, voice and edits (which have their own rule) queue."""
    if mode == "queue" or turn.edited or turn.kind != "text" or turn.origin != "chat":
        return turn, None
    # Someone else's words (forwarded, quoted in a group) are outside content: they get a turn
    # of their own, tainted and kept as data, never "the user added" in the working one.
    if turn.forwarded or (turn.reply_to is not None and not turn.private):
        return turn, None
    found = working_turn(conn, turn.chat_id)
    # Only the working turn's own user speaks in it: in a group another member's message is
    # that member's request, answered as a turn of its own, never "the user added" in someone
    # else's turn (nor a reason to cut it off).
    if found is None or found[1] != turn.user_id:
        return turn, None
    working = found[0]
    if mode == "interrupt":
        if answered(conn, working):  # its answer is on its way: cutting it would lose it
            return turn, None
        store.request_cancel(conn, working, now)
        history.withdraw(conn, [working], "interrupted")
        conn.execute(
            "UPDATE approvals SET status = 'denied', decided_at = ?, decided_by = ?, "
            "reason = 'interrupted by a new message' WHERE instance_id = ? AND status = 'pending'",
            (now, INTERRUPTED_BY, working),
        )
        return turn, working
    payload = {"text": turn.text, "message_id": turn.message_id, "instance_id": instance_id}
    store.insert_event(conn, working, STEER_EVENT, payload, now, steer_event_id(instance_id))
    return turn.model_copy(update={"steer_into": working}), None
