"""The audit log (R-AUD-1): who did what, when, with what outcome. Never message content."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel

# The kinds agentd writes (`agentd audit --kind`); plugins and newer code may add their own.
KINDS = (
    "turn",
    "turn_error",
    "tool_call",
    "approval_requested",
    "approval_decided",
    "approval_timed_out",
    "access_denied",
    "rate_limited",
    "command",
    "callback_unknown",
    "intake_error",
    "memory_forgotten",
    "memory_changed",
    "memory_summary",
    "memory_summary_error",
    "retrieval",
    "workflow_errored",
    "workflow_cancelled",
    "shell",
    "workspace",
    "shell_rule_added",
    "shell_rule_removed",
    "skill_enabled",
    "skill_disabled",
    "skill_changed",
    "skill_removed",
    "approval_press_refused",
    "question_press_refused",
    "message_ignored",
    "send_uncertain",
    "user_paired",
    "pairing_failed",
    "user_removed",
    "llm_fallback",
    "update_unreadable",
    "memory_summary_deferred",
    "pairing_code_created",
    "account_linked",
    "account_unlinked",
    "group_left",
    "group_leave_failed",
    "matrix_gap",
    "host_rule_added",
    "host_rule_removed",
    "mcp_trusted",
    "mcp_held",
    "browser_profile",
    "dashboard_link",
    "dashboard_login",
    "schedule_created",
    "schedule_paused",
    "schedule_resumed",
    "schedule_cancelled",
    "schedule_sent",
    "schedule_started",
    "schedule_failed",
    "schedule_missed",
    "schedule_refused",
    "watch_created",
    "watch_paused",
    "watch_resumed",
    "watch_removed",
)


def known_kinds(conn: Any) -> set[str]:
    """KINDS plus every kind the log already holds."""
    return set(KINDS) | {r[0] for r in conn.execute("SELECT DISTINCT kind FROM audit")}


class AuditEntry(BaseModel):
    id: int
    at: float
    kind: str
    chat_id: int | None
    user_id: int | None
    instance_id: str | None
    detail: dict[str, Any]


def record(
    conn: Any,
    kind: str,
    *,
    chat_id: int | None = None,
    user_id: int | None = None,
    instance_id: str | None = None,
    detail: dict[str, Any] | None = None,
    source_key: str | None = None,
    at: float | None = None,
) -> None:
    """Append an entry; with source_key, recording the same event twice keeps one row."""
    conn.execute(
        "INSERT OR IGNORE INTO audit (at, kind, chat_id, user_id, instance_id, detail, source_key) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            at if at is not None else time.time(),
            kind,
            chat_id,
            user_id,
            instance_id,
            json.dumps(detail or {}, ensure_ascii=False, default=str),
            source_key,
        ),
    )


def entries(
    conn: Any,
    *,
    since: float | None = None,
    kind: str | None = None,
    chat_id: int | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """Newest last, like a log."""
    where, params = [], []
    if since is not None:
        where.append("at >= ?")
        params.append(since)
    if kind:
        where.append("kind = ?")
        params.append(kind)
    if chat_id is not None:
        where.append("chat_id = ?")
        params.append(chat_id)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        f"SELECT id, at, kind, chat_id, user_id, instance_id, detail FROM audit {clause} "
        "ORDER BY id DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [
        AuditEntry(
            id=r[0],
            at=r[1],
            kind=r[2],
            chat_id=r[3],
            user_id=r[4],
            instance_id=r[5],
            detail=json.loads(r[6]),
        )
        for r in reversed(rows)
    ]
