"""Token accounting (R-LLM-4, R-AUD-2): one row per answered model call, and one per attempt
whose answer stream broke partway (billed all the same), and what they cost."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from agentd.ledger.pricing import ModelPrice, Tokens, cost, price_for, uncached_cost

# A remote embedder's requests (retrieval/spend.py): in the ledger, held by no daily budget.
EMBEDDING = "embedding"
# Voice notes heard (media/voice.py): minutes of audio, no tokens, so no token budget holds
# them; their cost is in every total the ledger gives.
TRANSCRIPTION = "transcription"


class UsageTotals(Tokens):
    day: str
    chat_id: int | None
    model: str
    calls: int


class UsageReport(BaseModel):
    """One day and chat, all models together, priced per model."""

    day: str
    chat_id: int | None
    models: list[str]
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    audio_seconds: float = 0.0  # transcribed, priced per minute
    cache_hit_ratio: float  # share of all input tokens read from the cache
    estimated_cost_usd: float
    estimated_saving_usd: float  # against the same calls with no prompt caching
    vision_cache_hits: int = 0  # photos whose summary came from the cache
    vision_cache_misses: int = 0  # photos the model looked at


def record(
    conn: Any,
    tokens: Tokens,
    *,
    model: str,
    purpose: str,
    chat_id: int | None = None,
    instance_id: str | None = None,
    step: str | None = None,
    attempt: int | None = None,
    user_id: int | None = None,  # whose turn it served: budgets and /status are per user
    calls: int = 1,  # how many calls the row stands for (an embedder's minute: many)
    estimated: bool = False,  # counts estimated from text: the provider sent none
    now: Callable[[], float] = time.time,  # the clock the budgets read: the engine's
) -> None:
    conn.execute(
        "INSERT INTO llm_usage (at, instance_id, step, attempt, chat_id, purpose, model, "
        "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
        "cache_write_1h_tokens, user_id, calls, estimated, audio_seconds) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            now(),
            instance_id,
            step,
            attempt,
            chat_id,
            purpose,
            model,
            tokens.input_tokens,
            tokens.output_tokens,
            tokens.cache_read_tokens,
            tokens.cache_write_tokens,
            tokens.cache_write_1h_tokens,
            user_id,
            calls,
            int(estimated),
            tokens.audio_seconds,
        ),
    )


def totals(
    conn: Any,
    *,
    since: float | None = None,
    chat_id: int | None = None,
    user_id: int | None = None,
    instance_prefix: str | None = None,
) -> list[UsageTotals]:
    """Per day (UTC), chat and model; of one chat if `chat_id` is given, of one user's turns
    (and of calls in their private chat that name no user) if `user_id` is, of the workflow
    instances whose id starts with `instance_prefix` if given (one schedule's runs)."""
    where, params = "at >= ?", [since or 0]
    if chat_id is not None:
        where, params = where + " AND chat_id = ?", [*params, chat_id]
    if user_id is not None:
        where += " AND (user_id = ? OR (user_id IS NULL AND chat_id = ?))"
        params = [*params, user_id, user_id]
    if instance_prefix:
        escaped = instance_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where, params = where + " AND instance_id LIKE ? ESCAPE '\\'", [*params, escaped + "%"]
    rows = conn.execute(
        "SELECT date(at, 'unixepoch') AS day, chat_id, model, SUM(calls), SUM(input_tokens), "
        "SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), "
        f"SUM(cache_write_1h_tokens), SUM(audio_seconds) FROM llm_usage WHERE {where} "
        "GROUP BY day, chat_id, model ORDER BY day, chat_id, model",
        params,
    ).fetchall()
    return [
        UsageTotals(
            day=r[0],
            chat_id=r[1],
            model=r[2],
            calls=r[3],
            input_tokens=r[4],
            output_tokens=r[5],
            cache_read_tokens=r[6],
            cache_write_tokens=r[7],
            cache_write_1h_tokens=r[8],
            audio_seconds=r[9],
        )
        for r in rows
    ]


def hit_ratio(t: Tokens) -> float:
    total = t.input_tokens + t.cache_read_tokens + t.cache_write_tokens
    return t.cache_read_tokens / total if total else 0.0


VisionCounts = dict[tuple[str, int | None], tuple[int, int]]


def vision_counts(conn: Any, *, since: float | None = None) -> VisionCounts:
    """(hits, misses) of the vision cache per day (UTC) and chat (media/vision.py counts)."""
    rows = conn.execute(
        "SELECT day, chat_id, hits, misses FROM vision_lookups WHERE day >= date(?, 'unixepoch')",
        (since or 0,),
    ).fetchall()
    return {(r[0], r[1]): (int(r[2]), int(r[3])) for r in rows}


def report(
    rows: list[UsageTotals],
    prices: Mapping[str, ModelPrice] | None = None,
    vision: VisionCounts | None = None,
) -> list[UsageReport]:
    """Rows per day and chat with cost, cache hit ratio and saving, each model at its price,
    and the vision cache's hits and misses (a photo seen from the cache alone still makes a
    turn, so its day and chat have a row)."""
    vision = vision or {}
    groups: dict[tuple[str, int | None], list[UsageTotals]] = {}
    for r in rows:
        groups.setdefault((r.day, r.chat_id), []).append(r)
    out = []
    for (day, chat_id), items in groups.items():
        fields = Tokens.model_fields
        summed = Tokens(**{f: sum(getattr(r, f) for r in items) for f in fields})
        spent = sum(cost(r, price_for(r.model, prices)) for r in items)
        plain = sum(uncached_cost(r, price_for(r.model, prices)) for r in items)
        out.append(
            UsageReport(
                day=day,
                chat_id=chat_id,
                models=sorted({r.model for r in items}),
                calls=sum(r.calls for r in items),
                **summed.model_dump(),
                cache_hit_ratio=round(hit_ratio(summed), 4),
                estimated_cost_usd=round(spent, 6),
                estimated_saving_usd=round(plain - spent, 6),
                vision_cache_hits=vision.get((day, chat_id), (0, 0))[0],
                vision_cache_misses=vision.get((day, chat_id), (0, 0))[1],
            )
        )
    return out
