"""Approvals of high-risk tool calls (R-TOOL-2, R-TOOL-3): stored, decided once, never guessed.

A decision (button press or CLI) and the event that wakes the waiting turn are written in one
transaction, so a decision can never be lost between the two, and a second press finds the
approval already decided. A timeout is recorded as `timed_out`, never as `denied`.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel

from agentd.durable import store
from agentd.ledger import audit

Status = Literal["pending", "approved", "denied", "timed_out"]
_CALLBACK = re.compile(r"^ap:([A-Za-z0-9_-]{8,40}):([yn])$")
_COLUMNS = (
    "id, instance_id, tool_use_id, chat_id, user_id, tool, risk, args_digest, args_preview, "
    "status, created_at, expires_at, decided_at, decided_by, reason, message_id"
)


class Approval(BaseModel):
    id: str
    instance_id: str
    tool_use_id: str
    chat_id: int
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


class DecisionResult(BaseModel):
    ok: bool
    message: str  # for the presser (callback answer) or the CLI
    approval: Approval | None = None


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
        f"INSERT OR IGNORE INTO approvals ({_COLUMNS}) VALUES ({', '.join('?' * 16)})",
        tuple(approval.model_dump().values()),
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


def undecided_of(conn: Any, instance_id: str) -> list[Approval]:
    """The instance's approvals nobody decided (its turn may have ended without them)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM approvals WHERE instance_id = ? AND status = 'pending' "
        "ORDER BY created_at",
        (instance_id,),
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


def handle_callback(conn: Any, press: Any) -> str:
    """A button press, inside the intake transaction; returns the answer the presser sees."""
    parsed = parse_callback(press.data)
    if parsed is None:
        audit.record(conn, "callback_unknown", chat_id=press.chat_id, user_id=press.user_id,
                     detail={"data_length": len(press.data)})  # fmt: skip
        return "This button is not recognised."
    approval_id, approve = parsed
    return decide(conn, approval_id, approve=approve, by=f"telegram:{press.user_id}").message
