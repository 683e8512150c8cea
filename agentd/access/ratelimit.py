"""Rate limits (R-RATE-1): messages per minute per user, a daily token budget per user and one
for everyone together (finite by default, so a runaway loop or a chatty family member cannot
spend without bound).

Over a limit the message is still saved, no model call is made, and the user gets one polite
notice per window (not one per message: that would be its own flood).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentd.config import LimitsConfig


class Verdict(BaseModel):
    allowed: bool
    limit: Literal["", "messages_per_minute", "daily_tokens", "daily_tokens_total"] = ""
    notify: bool = False  # the first refusal in this window: tell the user once


def _day_start(now: float) -> float:
    return now - (now % 86400)  # UTC midnight


def check(conn: Any, limits: LimitsConfig, *, user_id: int, chat_id: int, now: float) -> Verdict:
    """Whether this user may get a model call now (the current message is already saved)."""
    if limits.messages_per_minute:
        count = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE user_id = ? AND role = 'user' AND created_at > ?",
            (user_id, now - 60),
        ).fetchone()[0]
        if count > limits.messages_per_minute:
            return _refuse(conn, "messages_per_minute", user_id, since=now - 60)
    day = _day_start(now)
    if limits.daily_tokens and tokens_used(conn, day, user_id=user_id) >= limits.daily_tokens:
        return _refuse(conn, "daily_tokens", user_id, since=day)
    if limits.daily_tokens_total and tokens_used(conn, day) >= limits.daily_tokens_total:
        return _refuse(conn, "daily_tokens_total", user_id, since=day)
    return Verdict(allowed=True)


def tokens_used(conn: Any, since: float, *, user_id: int | None = None) -> int:
    """Tokens since `since`: one user's, or everyone's. A call without a user (vision, older
    rows) counts for the user whose private chat it was in (its id is the user's)."""
    # Every input token counts, cached or not: the API reports the three kinds apart.
    total = (
        "SELECT COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens "
        "+ output_tokens), 0) FROM llm_usage WHERE at >= ?"
    )
    if user_id is None:
        return int(conn.execute(total, (since,)).fetchone()[0])
    where = " AND (user_id = ? OR (user_id IS NULL AND chat_id = ?))"
    return int(conn.execute(total + where, (since, user_id, user_id)).fetchone()[0])


def _refuse(conn: Any, limit: str, user_id: int, *, since: float) -> Verdict:
    told = conn.execute(
        "SELECT 1 FROM audit WHERE kind = 'rate_limited' AND user_id = ? AND at > ? "
        "AND json_extract(detail, '$.limit') = ? AND json_extract(detail, '$.notified')",
        (user_id, since, limit),
    ).fetchone()
    return Verdict(allowed=False, limit=limit, notify=told is None)  # type: ignore[arg-type]


def notice(limit: str) -> str:
    if limit == "daily_tokens":
        return "I've used today's token budget for you, so I'll answer again tomorrow (UTC)."
    if limit == "daily_tokens_total":
        return "I've used today's token budget for everyone, so I'll answer again tomorrow (UTC)."
    return "You're sending messages faster than I can take them — please wait a minute."
