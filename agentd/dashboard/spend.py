"""What the model calls cost, grouped for the Cost and Now pages, from `llm_usage`.

Each model is priced at its own rate (ledger.pricing), so rows are summed per label and
model in SQL, and priced per model here: a few rows per day, however many calls.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from agentd.ledger.pricing import ModelPrice, Tokens, cost, price_for
from agentd.ledger.usage import hit_ratio, vision_counts

DAY = 86400
FIELDS = tuple(Tokens.model_fields)  # input, output, cache read, cache write, of it 1 h
SUMS = ", ".join(f"SUM(u.{f})" for f in FIELDS) + ", COUNT(*)"
Prices = Mapping[str, ModelPrice] | None
# (label, model, the FIELDS' sums..., calls)
Row = tuple[Any, ...]


def schedule_of(instance_id: str) -> str:
    """The schedule id in sched-<id>-<due> (an occurrence) or sched-<id>-<due>-turn (its
    turn); ids may hold dashes themselves (briefing-1a2b3c4d)."""
    body = instance_id.removeprefix("sched-").removesuffix("-turn")
    return body.rsplit("-", 1)[0]


def fold(rows: Iterable[Row], prices: Prices) -> list[dict[str, Any]]:
    """One line per label: calls, tokens, cache read share and USD, each model priced apart."""
    per: dict[Any, dict[str, list[int]]] = {}
    for label, model, *sums in rows:
        acc = per.setdefault(label, {}).setdefault(model, [0] * (len(FIELDS) + 1))
        for i, value in enumerate(sums):
            acc[i] += value or 0
    out = []
    for label, models in per.items():
        by_model = {m: Tokens(**dict(zip(FIELDS, s, strict=False))) for m, s in models.items()}
        total = Tokens(**{f: sum(getattr(t, f) for t in by_model.values()) for f in FIELDS})
        out.append(
            {
                "label": "—" if label is None else str(label),
                "calls": sum(s[-1] for s in models.values()),
                "tokens": total.input_tokens
                + total.output_tokens
                + total.cache_read_tokens
                + total.cache_write_tokens,
                "cache_share": hit_ratio(total),
                "usd": sum(cost(t, price_for(m, prices)) for m, t in by_model.items()),
            }
        )
    return out


def _day(number: int) -> str:
    return datetime.fromtimestamp(number * DAY, UTC).date().isoformat()


def groups(conn: Any, since: float, prices: Prices) -> dict[str, list[dict[str, Any]]]:
    """Per day, purpose, user and model from one pass over the period; per schedule and per
    automation through the instance id index (their calls only; the automation's instances
    are in automation_runs)."""
    # A day number, made a date here: cheaper than date() on every row of a year. Over more
    # than a few months most rows qualify, and reading the table straight through beats
    # looking each one up from the time index ("+" keeps SQLite off that index).
    at = "+u.at" if time.time() - since > 90 * DAY else "u.at"
    base = conn.execute(
        f"SELECT CAST(u.at / {DAY} AS INTEGER), u.purpose, u.user_id, u.model, {SUMS} "
        f"FROM llm_usage u WHERE {at} >= ? GROUP BY 1, 2, 3, 4",
        (since,),
    ).fetchall()
    scheduled = conn.execute(
        f"SELECT u.instance_id, u.model, {SUMS} FROM llm_usage u "
        "WHERE u.instance_id >= 'sched-' AND u.instance_id < 'sched.' AND u.at >= ? "
        "GROUP BY 1, 2",
        (since,),
    ).fetchall()
    automated = conn.execute(
        f"SELECT r.automation, u.model, {SUMS} FROM automation_runs r "
        "JOIN llm_usage u ON u.instance_id = r.instance_id WHERE u.at >= ? GROUP BY 1, 2",
        (since,),
    ).fetchall()
    found = {
        "day": fold(((_day(r[0]), *r[3:]) for r in base), prices),
        "purpose": fold(((r[1], *r[3:]) for r in base), prices),
        "user": fold(((r[2], *r[3:]) for r in base), prices),
        "model": fold(((r[3], *r[3:]) for r in base), prices),
        "schedule": fold(((schedule_of(r[0]), *r[1:]) for r in scheduled), prices),
        "automation": fold((tuple(r) for r in automated), prices),
    }
    found["day"].sort(key=lambda r: r["label"])
    return found


def vision_cache(conn: Any, since: float) -> tuple[int, int]:
    """(photos summarised from the cache, photos seen) over the period."""
    counts = vision_counts(conn, since=since).values()
    return sum(h for h, _ in counts), sum(h + m for h, m in counts)


def since(conn: Any, start: float, prices: Prices) -> dict[str, Any]:
    """Everything from `start` on as one line (today's spend on the Now page)."""
    rows = conn.execute(
        f"SELECT 'all', u.model, {SUMS} FROM llm_usage u WHERE u.at >= ? GROUP BY 2", (start,)
    ).fetchall()
    found = fold((tuple(r) for r in rows), prices)
    return found[0] if found else {"tokens": 0, "usd": 0.0, "calls": 0, "cache_share": 0.0}
