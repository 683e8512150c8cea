"""Rate limits (R-RATE-1): messages per minute per user and a daily token budget per chat.

Over a limit the message is still saved, no model call is made, and the user gets one polite
notice per window (not one per message: that would be its own flood).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentd.config import LimitsConfig


class Verdict(BaseModel):
    allowed: bool
    limit: Literal["", "messages_per_minute", "daily_tokens"] = ""
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
    if limits.daily_tokens:
        used = conn.execute(
            # Every input token counts, cached or not: the API reports the three kinds apart.
            "SELECT COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens "
            "+ output_tokens), 0) FROM llm_usage "
            "WHERE chat_id = ? AND at >= ?",
            (chat_id, _day_start(now)),
        ).fetchone()[0]
        if used >= limits.daily_tokens:
            return _refuse(conn, "daily_tokens", user_id, since=_day_start(now))
    return Verdict(allowed=True)


def _refuse(conn: Any, limit: str, user_id: int, *, since: float) -> Verdict:
    told = conn.execute(
        "SELECT 1 FROM audit WHERE kind = 'rate_limited' AND user_id = ? AND at > ? "
        "AND json_extract(detail, '$.limit') = ? AND json_extract(detail, '$.notified')",
        (user_id, since, limit),
    ).fetchone()
    return Verdict(allowed=False, limit=limit, notify=told is None)  # type: ignore[arg-type]


def notice(limit: str) -> str:
    if limit == "daily_tokens":
        return "I've used today's token budget for this chat, so I'll answer again tomorrow."
    return "You're sending messages faster than I can take them — please wait a minute."
