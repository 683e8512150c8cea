"""Approvals of high-risk tool calls (R-TOOL-2, R-TOOL-3): stored, decided once, never guessed.

A decision (button press or CLI) and the event that wakes the waiting turn are written in one
transaction, so a decision can never be lost between the two, and a second press finds the
approval already decided. A timeout is recorded as `timed_out`, never as `denied`.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import unicodedata
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from agentd.chat.inputs import ChatKind
from agentd.chat.names import chat_actor
from agentd.durable import store
from agentd.ledger import audit

Status = Literal["pending", "approved", "denied", "timed_out"]
_CALLBACK = re.compile(r"^ap:([A-Za-z0-9_-]{8,40}):([yn])$")
_COLUMNS = (
    "id, instance_id, tool_use_id, chat_id, user_id, tool, risk, args_digest, args_preview, "
    "status, created_at, expires_at, decided_at, decided_by, reason, message_id, "
    "card_chat_id, call_json, tool_source, tool_fingerprint, why, request, chat_kind, "
    "approver_id"
)

_PLACEHOLDERS = ", ".join("?" * len(_COLUMNS.split(", ")))


class Approval(BaseModel):
    id: str
    instance_id: str
    tool_use_id: str
    chat_id: int
    chat_kind: ChatKind  # the kind of chat the call was made in
    user_id: int | None
    tool: str
    risk: str
    args_digest: str
    args_preview: str
    status: Status
    created_at: float
    expires_at: float
    decided_at: float | None = None
    decided_by: str | None = None
    reason: str | None = None
    message_id: int | None = None
    card_chat_id: int | None = None  # the approver's private chat the card was sent to
    call_json: str | None = None  # the whole call, canonical JSON, secrets redacted
    tool_source: str | None = None  # builtin, plugin:<module>, mcp:<server>
    tool_fingerprint: str | None = None  # sha256 of the tool's schema and code when asked
    why: str | None = None  # why this call needs approval beyond its tool's level (policy)
    request: str | None = None  # the asker's message, quoted (quote()), for the approver
    approver_id: int | None = None  # whose answer the card waits for (None: agentd approve)
    # The tool's own card text (hands' shell), redacted; not a column: it travels with the
    # approval through the turn's journal, to the card it is shown on (quoted).
    card_text: str | None = None
    card_whole: bool = False  # the card text shows every argument (ApprovalCard.whole)

    @property
    def card_chat(self) -> int:
        """Where the card is (older approvals were always in the call's own chat)."""
        return self.card_chat_id if self.card_chat_id is not None else self.chat_id

    @property
    def private(self) -> bool:
        return self.chat_kind == "private"

    @property
    def self_approved(self) -> bool:
        """The asker answers their own card (an approver's own call)."""
        return self.user_id is not None and self.user_id == self.approver_id


class DecisionResult(BaseModel):
    ok: bool
    message: str  # for the presser (callback answer) or the CLI
    approval: Approval | None = None


# Characters that could make a card lie: line and paragraph separators, bidi overrides,
# zero-width and other invisible format characters, controls. Shown as \\uXXXX escapes.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})


def _escape_hidden(text: str) -> str:
    out = []
    for ch in text:
        hidden = unicodedata.category(ch) in _HIDDEN_CATEGORIES or (ch.isspace() and ch != " ")
        if hidden or ch == "`":  # a backtick could close the card's code block
            # JSON escapes UTF-16 units: a character past U+FFFF is a surrogate pair.
            units = ch.encode("utf-16-be")
            out += [
                f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2)
            ]
        else:
            out.append(ch)
    return "".join(out)


def canonical_call(tool: str, args: Any) -> str:
    """The call exactly as it will run, as one line of canonical JSON: keys sorted, every
    newline, control and invisible character (and the backtick) escaped, so no value can draw
    a fake line or leave the card's code block. It parses back to exactly the arguments."""
    text = json.dumps(
        {"tool": tool, "arguments": args},
        sort_keys=True,
        ensure_ascii=False,
        separators=(", ", ": "),
        default=str,
    )
    return _escape_hidden(text)


def quote(text: str, limit: int = 300) -> str:
    """Someone's words for a card: one JSON string, escaped like a call, cut with a mark."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    return _escape_hidden(json.dumps(cut, ensure_ascii=False))


def one_line(text: str, limit: int = 300) -> str:
    """A value for one line of a card: newlines, controls, invisible characters and the
    backtick escaped (so it can neither draw a fake line nor leave a code span), cut with a
    mark; unlike `quote`, without JSON's quotes."""
    return _escape_hidden(text if len(text) <= limit else text[:limit] + "…")


def card_block(text: str, limit: int) -> str:
    """A tool's card text (line by line, each field already one line) as the lines of a code
    block: each line escaped as `one_line`, the whole cut at `limit` with a mark."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    return "\n".join(_escape_hidden(line) for line in cut.split("\n"))


def event_type(approval_id: str) -> str:
    return f"approval:{approval_id}"


def new_id() -> str:
    """12 unguessable characters (callback data can be forged), never starting with "-":
    `agentd approve -Tx…` would read the id as an option."""
    while (approval_id := secrets.token_urlsafe(9)).startswith("-"):
        pass
    return approval_id


def callback_data(approval_id: str, approve: bool) -> str:
    return f"ap:{approval_id}:{'y' if approve else 'n'}"


def parse_callback(data: str) -> tuple[str, bool] | None:
    match = _CALLBACK.match(data)
    return (match[1], match[2] == "y") if match else None


def _row(row: Any) -> Approval:
    return Approval.model_validate(dict(zip(_COLUMNS.split(", "), row, strict=True)))


def create(conn: Any, approval: Approval) -> Approval:
    """Store a pending approval once per (instance, tool_use); return the stored one."""
    conn.execute(
        f"INSERT OR IGNORE INTO approvals ({_COLUMNS}) VALUES ({_PLACEHOLDERS})",
        tuple(getattr(approval, column) for column in _COLUMNS.split(", ")),
    )
    stored = conn.execute(
        f"SELECT {_COLUMNS} FROM approvals WHERE instance_id = ? AND tool_use_id = ?",
        (approval.instance_id, approval.tool_use_id),
    ).fetchone()
    return _row(stored)


def get(conn: Any, approval_id: str) -> Approval | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (approval_id,)).fetchone()
    return _row(row) if row else None


def pending(conn: Any, now: float | None = None) -> list[Approval]:
    """Approvals a live turn is still waiting for (not expired, instance still open)."""
    rows = conn.execute(
        f"SELECT {', '.join('a.' + c for c in _COLUMNS.split(', '))} FROM approvals a "
        "JOIN workflow_instances i ON i.id = a.instance_id "
        "WHERE a.status = 'pending' AND a.expires_at > ? "
        f"AND i.status IN {store.OPEN_STATUSES!r} ORDER BY a.created_at",
        (time.time() if now is None else now,),
    ).fetchall()
    return [_row(r) for r in rows]


REVOKED_BY = "users rm"  # decided_by of the approvals `agentd users rm` denies
EDITED_BY = "edit"  # decided_by of a replaced turn's approvals (agent/edits.py)


def undecided_of(conn: Any, instance_id: str) -> list[Approval]:
    """The instance's approvals whose card still shows buttons: nobody decided them (the turn
    ended without them), or `agentd users rm` or an edit that replaced the turn
    (agent/edits.py) denied them without a press."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM approvals WHERE instance_id = ? AND (status = 'pending' "
        "OR (status = 'denied' AND decided_by IN (?, ?))) ORDER BY created_at",
        (instance_id, REVOKED_BY, EDITED_BY),
    ).fetchall()
    return [_row(r) for r in rows]


def set_message_id(conn: Any, approval_id: str, message_id: int) -> None:
    conn.execute("UPDATE approvals SET message_id = ? WHERE id = ?", (message_id, approval_id))


def decide(
    conn: Any,
    approval_id: str,
    *,
    approve: bool,
    by: str,
    reason: str | None = None,
    now: float | None = None,
) -> DecisionResult:
    """Approve or deny a pending, unexpired approval and wake its turn; otherwise say why not."""
    now = time.time() if now is None else now
    approval = get(conn, approval_id)
    if approval is None:
        return DecisionResult(ok=False, message="This approval is unknown.")
    if approval.status != "pending":
        label = approval.status.replace("_", " ")
        return DecisionResult(ok=False, message=f"Already decided: {label}.", approval=approval)
    if now >= approval.expires_at:
        return DecisionResult(
            ok=False,
            message="This approval has expired; the action was not run.",
            approval=approval,
        )
    turn = store.find_instance(conn, approval.instance_id)
    if turn is None or turn.status in store.FINAL_STATUSES:
        return DecisionResult(
            ok=False,
            message="The conversation turn that asked for this is over; nothing was run.",
            approval=approval,
        )
    status: Status = "approved" if approve else "denied"
    conn.execute(
        "UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, reason = ? "
        "WHERE id = ? AND status = 'pending'",
        (status, now, by, reason, approval_id),
    )
    store.insert_event(
        conn,
        approval.instance_id,
        event_type(approval_id),
        {"decision": status, "by": by, "reason": reason},
        now,
        event_id=f"approval-decision:{approval_id}",
    )
    audit.record(
        conn,
        "approval_decided",
        chat_id=approval.chat_id,
        instance_id=approval.instance_id,
        detail={"approval": approval_id, "tool": approval.tool, "decision": status, "by": by},
        at=now,
    )
    verb = "Approved" if approve else "Denied"
    decided = approval.model_copy(update={"status": status, "decided_by": by, "decided_at": now})
    return DecisionResult(ok=True, message=f"{verb}: {approval.tool}.", approval=decided)


def expire(conn: Any, approval_id: str, now: float) -> Approval:
    """Record a timeout, unless a decision landed first; return the approval as it stands."""
    conn.execute(
        "UPDATE approvals SET status = 'timed_out', decided_at = ?, decided_by = 'timeout' "
        "WHERE id = ? AND status = 'pending'",
        (now, approval_id),
    )
    approval = get(conn, approval_id)
    assert approval is not None
    return approval


NOT_AN_APPROVER = "Only the owner can approve this; nothing changed."
NOT_THIS_CARD = "This button does not belong to that request; nothing changed."


def _refuse_press(conn: Any, press: Any, approval: Approval | None, why: str) -> None:
    audit.record(
        conn,
        "approval_press_refused",
        chat_id=press.chat_id,
        user_id=press.user_id,
        detail={"approval": approval.id if approval else None, "why": why},
    )


def press_refusal(approval: Approval | None, press: Any, may_approve: bool) -> str | None:
    """Why this press cannot decide this approval, or None when it may. A press counts only
    from an approver, on the card itself: the chat it was sent to and its message."""
    if approval is None:
        return None  # decide() says "unknown"
    if not may_approve:
        return NOT_AN_APPROVER
    if press.chat_id != approval.card_chat:
        return NOT_THIS_CARD
    if approval.message_id is not None and press.message_id != approval.message_id:
        return NOT_THIS_CARD
    return None


def check_press(
    conn: Any, press: Any, approval_id: str, may_approve: Callable[[int], bool]
) -> str | None:
    """Why this press may not decide `approval_id` (the refusal is audited), or None when it
    may. Every button that decides an approval asks here: Approve / Deny, "Always allow this"."""
    approval = get(conn, approval_id)
    refused = press_refusal(approval, press, may_approve(press.user_id))
    if refused is not None:
        _refuse_press(conn, press, approval, refused)
    return refused


def callback_handler(may_approve: Callable[[int], bool]) -> Callable[[Any, Any], str]:
    """The `ap:` button handler for intake; `may_approve(user_id)` says who is an approver."""

    def handle(conn: Any, press: Any) -> str:
        """A button press, inside the intake transaction; returns what the presser sees."""
        parsed = parse_callback(press.data)
        if parsed is None:
            audit.record(
                conn,
                "callback_unknown",
                chat_id=press.chat_id,
                user_id=press.user_id,
                detail={"data_length": len(press.data)},
            )
            return "This button is not recognised."
        approval_id, approve = parsed
        refused = check_press(conn, press, approval_id, may_approve)
        if refused is not None:
            return refused
        return decide(conn, approval_id, approve=approve, by=chat_actor(press.user_id)).message

    return handle
