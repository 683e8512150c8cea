"""Which stored messages a turn sends as history: a window that moves as rarely as it can.

The history is part of the cached prompt prefix (R-LLM-4), so every move of the window's start
makes the next call write the whole prefix again. The start is kept per chat and moves only
when it must (the window reached `limit + step` messages) or when it costs nothing: after a
pause longer than the cache TTL, the cached prefix has expired and will be written again
anyway, so the window is cut back to `limit` messages then, and the next forced jump is put
off. A cut never leaves a prefix too short to cache at all: it keeps older messages until the
estimated prefix reaches the model's minimum cacheable length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel

from agentd.llm.estimate import CHARS_PER_TOKEN

# The estimate (llm/estimate.py) only decides how many messages a cut keeps: rough is enough.
# A cut keeps this much more than the minimum, so an underestimate still caches.
HEADROOM = 1.15
CACHE_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
# A cut waits this long past the TTL: clocks differ, and a needless cut costs a cache write.
COLD_MARGIN = 60.0


class WindowRule(BaseModel):
    limit: int  # messages a cut keeps (at least)
    step: int  # the window holds at most limit + step - 1 messages
    cold_after: float  # seconds since the chat's last message after which the cache is gone
    min_tokens: int  # the model's minimum cacheable prefix
    fixed_tokens: int = 0  # system prompt and tools: the prefix before the history


class Past(NamedTuple):
    """The little the rule needs of each stored message (a tuple: up to 120 are read a turn)."""

    id: int
    created_at: float
    chars: int


def cut(past: Sequence[Past], rule: WindowRule) -> int:
    """The index a cut starts at: the newest `limit` messages, more if the prefix is too short."""
    start = max(0, len(past) - rule.limit)
    oldest = max(0, len(past) - (rule.limit + rule.step - 1))
    want = rule.min_tokens * HEADROOM - rule.fixed_tokens
    tokens = sum(p.chars for p in past[start:]) / CHARS_PER_TOKEN
    while start > oldest and tokens < want:
        start -= 1
        tokens += past[start].chars / CHARS_PER_TOKEN
    return start


def window_start(past: Sequence[Past], kept: int | None, now: float, rule: WindowRule) -> int:
    """The index in `past` (oldest first) where this turn's history starts.

    `kept` is the id the chat's window started at last turn (None if unknown or reset).
    """
    if rule.limit <= 0 or not past:
        return len(past)
    start = next((i for i, p in enumerate(past) if p.id >= kept), len(past)) if kept else None
    if start is None:  # no window yet (a new chat, or the first turn after an upgrade)
        return cut(past, rule) if len(past) >= rule.limit + rule.step else 0
    if len(past) - start >= rule.limit + rule.step:
        return cut(past, rule)
    if now - past[-1].created_at > rule.cold_after:
        return max(start, cut(past, rule))  # free now; a cut never grows the window
    return start


def load_window(
    conn: Any, chat_id: int, before_id: int, floor: int, rule: WindowRule, now: float
) -> int:
    """The id this turn's history starts at; the chat's window start is updated when it moves."""
    row = conn.execute(
        "SELECT start_id FROM history_windows WHERE chat_id = ?", (chat_id,)
    ).fetchone()
    kept = int(row[0]) if row and row[0] > floor else None
    # Only the messages a window can hold (and one more, to see a jump) are read.
    lower = max(floor, (kept or 0) - 1)
    rows = conn.execute(
        "SELECT id, created_at, length(content) FROM messages WHERE chat_id = ? AND id > ? "
        "AND id < ? ORDER BY id DESC LIMIT ?",
        (chat_id, lower, before_id, 2 * (rule.limit + rule.step)),
    ).fetchall()
    past = [Past(id=r[0], created_at=r[1], chars=r[2]) for r in reversed(rows)]
    index = window_start(past, kept, now, rule)
    start_id = past[index].id if index < len(past) else before_id
    if start_id != kept:
        conn.execute(
            "INSERT INTO history_windows (chat_id, start_id, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (chat_id) DO UPDATE SET start_id = excluded.start_id, "
            "updated_at = excluded.updated_at",
            (chat_id, start_id, now),
        )
    return start_id
