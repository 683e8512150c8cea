"""What an edited message does (docs/messages.md, "Stopping and editing"), decided inside a
channel's intake commit: the one rule Telegram's `edited_message` and Matrix's `m.replace`
both follow. The edit's turn names the original message (`message_id`) and is `edited`.

- Same text as the turn it came from (Telegram re-sends messages as edits when only metadata
  changed): nothing starts.
- The turn of the original is still queued or running and has sent no answer: that turn is
  cancelled and its request withdrawn from later prompts; the edit replaces it.
- The original was answered (or is past its answer): the edit starts a turn that the model sees
  as a correction of what it answered.
- No turn is known for the original (sent before agentd, or pruned): an ordinary turn, marked
  as an edited message.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from agentd.agent.busy import answered
from agentd.chat.inputs import TurnInput
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.durable import store
from agentd.memory import history


class EditPlan(BaseModel):
    action: Literal["unchanged", "replace", "correct", "new"]
    previous: str | None = None  # the instance of the turn the original message started
    turn: TurnInput | None = None  # the turn to start (None: "unchanged")


def _same(a: TurnInput, b: TurnInput) -> bool:
    media = (a.media.file_id if a.media else None) == (b.media.file_id if b.media else None)
    return a.text == b.text and a.kind == b.kind and a.photo_file_id == b.photo_file_id and media


def _open_turn_for(conn: Any, turn: TurnInput) -> tuple[str, TurnInput] | None:
    """The newest unfinished turn started by this message (few rows: the open index)."""
    rows = conn.execute(
        "SELECT id, input FROM workflow_instances WHERE key = ? AND workflow = ? "
        "AND status NOT IN ('complete', 'errored', 'cancelled') ORDER BY seq DESC",
        (chat_key(turn.chat_id), TURN_WORKFLOW),
    ).fetchall()
    for instance_id, raw in rows:
        prev = _input(raw)
        if prev is not None and prev.message_id == turn.message_id:
            return instance_id, prev
    return None


def _finished_turn_for(conn: Any, turn: TurnInput) -> tuple[str, TurnInput] | None:
    """The newest finished turn for this message, found through its saved user message (whose
    meta keeps the chat's message id, on every channel, as `telegram_message_id`)."""
    row = conn.execute(
        "SELECT instance_id, content FROM messages WHERE chat_id = ? AND role = 'user' "
        "AND json_extract(meta, '$.telegram_message_id') = ? ORDER BY id DESC LIMIT 1",
        (turn.chat_id, turn.message_id),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    found = conn.execute("SELECT input FROM workflow_instances WHERE id = ?", (row[0],)).fetchone()
    prev = _input(found[0]) if found else None
    if prev is None:  # the instance was pruned: the saved text is all there is
        prev = turn.model_copy(update={"text": row[1], "edited": False})
    return row[0], prev


def _input(raw: str) -> TurnInput | None:
    try:
        return TurnInput.model_validate_json(raw)
    except ValidationError:
        return None


def _settle_approvals(conn: Any, instance_id: str, now: float) -> None:
    """Its pending approvals are denied, as /stop does, so no later press runs the old request
    (the cancelled turn's cards are taken down when it ends)."""
    conn.execute(
        "UPDATE approvals SET status = 'denied', decided_at = ?, decided_by = 'edit', "
        "reason = 'replaced by an edit' WHERE instance_id = ? AND status = 'pending'",
        (now, instance_id),
    )


def plan_edit(conn: Any, turn: TurnInput, now: float) -> EditPlan:
    """Decide (and, for "replace", cancel and withdraw the old turn) in intake's transaction."""
    found = _open_turn_for(conn, turn)
    is_open = found is not None
    found = found or _finished_turn_for(conn, turn)
    if found is None:
        return EditPlan(action="new", turn=turn)
    previous, prev = found
    if _same(prev, turn):
        return EditPlan(action="unchanged", previous=previous)
    if is_open and not answered(conn, previous):
        store.request_cancel(conn, previous, now)
        history.withdraw(conn, [previous], "edited")
        _settle_approvals(conn, previous, now)
        return EditPlan(
            action="replace", previous=previous, turn=turn.model_copy(update={"replaces": previous})
        )
    status = conn.execute(
        "SELECT status FROM workflow_instances WHERE id = ?", (previous,)
    ).fetchone()
    if status is not None and status[0] == "cancelled" and not answered(conn, previous):
        # Stopped (or replaced) before any answer: the model never saw it, so nothing to correct.
        return EditPlan(
            action="replace", previous=previous, turn=turn.model_copy(update={"replaces": previous})
        )
    corrects = prev.text[:2000]
    return EditPlan(
        action="correct", previous=previous, turn=turn.model_copy(update={"corrects": corrects})
    )
