"""Token accounting (R-LLM-4, R-AUD-2): one row per answered model call."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from agentd.llm.types import Usage


class UsageTotals(BaseModel):
    day: str
    chat_id: int | None
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


def record(
    conn: Any,
    tokens: Usage,
    *,
    model: str,
    purpose: str,
    chat_id: int | None = None,
    instance_id: str | None = None,
    step: str | None = None,
) -> None:
    conn.execute(
        "INSERT INTO llm_usage (at, instance_id, step, chat_id, purpose, model, input_tokens, "
        "output_tokens, cache_read_tokens, cache_write_tokens) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            time.time(),
            instance_id,
            step,
            chat_id,
            purpose,
            model,
            tokens.input_tokens,
            tokens.output_tokens,
            tokens.cache_read_tokens,
            tokens.cache_write_tokens,
        ),
    )


def totals(conn: Any, *, since: float | None = None) -> list[UsageTotals]:
    """Per day (UTC) and chat."""
    rows = conn.execute(
        "SELECT date(at, 'unixepoch') AS day, chat_id, SUM(calls), SUM(input_tokens), "
        "SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens) FROM llm_usage "
        "WHERE at >= ? GROUP BY day, chat_id ORDER BY day, chat_id",
        (since or 0,),
    ).fetchall()
    return [
        UsageTotals(
            day=r[0],
            chat_id=r[1],
            calls=r[2],
            input_tokens=r[3],
            output_tokens=r[4],
            cache_read_tokens=r[5],
            cache_write_tokens=r[6],
        )
        for r in rows
    ]
