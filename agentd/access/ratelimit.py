"""Rate limits (R-RATE-1): messages per minute per user, a daily token budget per user and one
for everyone together (finite by default, so a runaway loop or a chatty family member cannot
spend without bound).

Over a limit the message is still saved, no model call is made, and the user gets one polite
notice per window (not one per message: that would be its own flood). The token budgets hold
for every model call made for a user, not only a turn's: a background task asks
`over_tokens` before each of its calls, and a watch before its decision (watch/budget.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentd.config import LimitsConfig
from agentd.ledger import usage

TokenLimit = Literal["", "daily_tokens", "daily_tokens_total"]
AUTOMATION = "automation"  # the purpose of an automation's model calls (step.llm)
_SPENT = (
    "SELECT COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens + output_tokens), 0)"
    " FROM llm_usage"
)


class Verdict(BaseModel):
    allowed: bool
    limit: Literal["", "messages_per_minute", "daily_tokens", "daily_tokens_total"] = ""
    notify: bool = False  # the first refusal in this window: tell the user once


def day_start(now: float) -> float:
    """The start of the [limits] day `now` is in: UTC midnight."""
    return now - (now % 86400)


def next_day(now: float) -> float:
    """When the [limits] daily budgets are counted afresh: the next UTC midnight."""
    return day_start(now) + 86400


def check(
    conn: Any, limits: LimitsConfig, *, user_id: int, instance_id: str, now: float
) -> Verdict:
    """Whether this user may get a model call now for the message of turn `instance_id`.

    The message counts whether or not it is saved yet: the turn asks before it looks at a
    photo or hears a voice note (those cost calls too), and a turn journaled by older code
    asks after saving it."""
    if limits.messages_per_minute:
        others = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE user_id = ? AND role = 'user' AND created_at > ? "
            "AND instance_id IS NOT ?",
            (user_id, now - 60, instance_id),
        ).fetchone()[0]
        if others + 1 > limits.messages_per_minute:
            return _refuse(conn, "messages_per_minute", user_id, since=now - 60)
    if limit := over_tokens(conn, limits, user_id=user_id, now=now):
        return _refuse(conn, limit, user_id, since=day_start(now))
    return Verdict(allowed=True)


def over_tokens(conn: Any, limits: LimitsConfig, *, user_id: int | None, now: float) -> TokenLimit:
    """The daily token budget this user's next model call would go over ("": none is spent).
    Checked before a call, so the call that crosses a budget is the last one (every answer
    is in the ledger as it arrives: llm/billing.py).

    `user_id` None: a call made for nobody, an automation's while no owner is configured.
    The per-user budget then holds the automations' own tokens as one user's, never
    everyone's (what the total's budget counts), or another user's turns would stop them."""
    day = day_start(now)
    own = limits.daily_tokens
    if own and _own_tokens(conn, day, user_id) >= own:
        return "daily_tokens"
    total = limits.daily_tokens_total
    if total and tokens_used(conn, day) >= total:
        return "daily_tokens_total"
    return ""


def tokens_used(conn: Any, since: float, *, user_id: int | None = None) -> int:
    """Tokens since `since`: one user's, or everyone's. A call without a user (vision, older
    rows) counts for the user whose private chat it was in (its id is the user's)."""
    # Every input token counts, cached or not: the API reports the three kinds apart. A remote
    # embedder's tokens are the ledger's but not the budgets' (retrieval/spend.py).
    total = f"{_SPENT} WHERE at >= ? AND purpose IS NOT ?"
    if user_id is None:
        return int(conn.execute(total, (since, usage.EMBEDDING)).fetchone()[0])
    where = " AND (user_id = ? OR (user_id IS NULL AND chat_id = ?))"
    params = (since, usage.EMBEDDING, user_id, user_id)
    return int(conn.execute(total + where, params).fetchone()[0])


def _own_tokens(conn: Any, since: float, user_id: int | None) -> int:
    if user_id is not None:
        return tokens_used(conn, since, user_id=user_id)
    # With no owner an automation's rows name neither a user nor a chat.
    row = conn.execute(
        f"{_SPENT} WHERE at >= ? AND purpose = ? AND user_id IS NULL AND chat_id IS NULL",
        (since, AUTOMATION),
    ).fetchone()
    return int(row[0])


def _refuse(conn: Any, limit: str, user_id: int, *, since: float) -> Verdict:
    told = conn.execute(
        "SELECT 1 FROM audit WHERE kind = 'rate_limited' AND user_id = ? AND at > ? "
        "AND json_extract(detail, '$.limit') = ? AND json_extract(detail, '$.notified')",
        (user_id, since, limit),
    ).fetchone()
    return Verdict(allowed=False, limit=limit, notify=told is None)  # type: ignore[arg-type]


def spent_words(limit: TokenLimit, limits: LimitsConfig) -> str:
    """Which budget is spent, in words for the user, naming the setting that sets it."""
    if limit == "daily_tokens":
        own = limits.daily_tokens
        return f"today's token budget for you ([limits] daily_tokens, {own:,}) is spent"
    total = limits.daily_tokens_total
    return f"today's token budget for everyone ([limits] daily_tokens_total, {total:,}) is spent"


def notice(limit: str) -> str:
    if limit == "daily_tokens":
        return "I've used today's token budget for you, so I'll answer again tomorrow (UTC)."
    if limit == "daily_tokens_total":
        return "I've used today's token budget for everyone, so I'll answer again tomorrow (UTC)."
    return "You're sending messages faster than I can take them — please wait a minute."
