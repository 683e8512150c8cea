"""What the model calls cost, grouped for the Cost and Now pages, from `llm_usage`.

Each model is priced at its own rate (ledger.pricing), so rows are summed per label and
model in SQL, and priced per model here: a few rows per day, however many calls. Finished
days are read from a daily rollup (llm_usage_days), topped up when the Cost page is opened.
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
# SUM(calls): a day the retention prune compacted is one row holding many calls.
SUMS = ", ".join(f"SUM(u.{f})" for f in FIELDS) + ", SUM(u.calls)"
UNTIL_KEY = "cost_days.until"  # kv: the rollup holds every day before this one
GRACE = 3600.0
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
        # Sums of integer columns need no validation: model_construct is ~10x cheaper, which
        # counts on a year's view (one line per day).
        by_model = {
            m: Tokens.model_construct(**dict(zip(FIELDS, s, strict=False)))
            for m, s in models.items()
        }
        total = Tokens.model_construct(
            **{f: sum(getattr(t, f) for t in by_model.values()) for f in FIELDS}
        )
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


def _days(conn: Any, since: float) -> list[Row]:
    """(day, purpose, user, model, sums...) from `since` on: whole finished days from the
    rollup (llm_usage_days), the rest (a partial first day, today, days not yet rolled up)
    from the calls themselves, each range found through the time index."""
    until = rolled_until(conn)
    first = -int(-since // DAY)  # the first whole day of the period
    by_day = f"CAST(u.at / {DAY} AS INTEGER), u.purpose, u.user_id, u.model, {SUMS}"
    if first >= until:
        return conn.execute(  # type: ignore[no-any-return]
            f"SELECT {by_day} FROM llm_usage u WHERE u.at >= ? GROUP BY 1, 2, 3, 4", (since,)
        ).fetchall()
    rolled = ", ".join(f"SUM(d.{f})" for f in FIELDS) + ", SUM(d.calls)"
    return conn.execute(  # type: ignore[no-any-return]
        f"SELECT d.day, d.purpose, d.user_id, d.model, {rolled} FROM llm_usage_days d "
        "WHERE d.day >= ? AND d.day < ? GROUP BY 1, 2, 3, 4 "
        f"UNION ALL SELECT {by_day} FROM llm_usage u WHERE u.at >= ? AND u.at < ? "
        "GROUP BY 1, 2, 3, 4 "
        f"UNION ALL SELECT {by_day} FROM llm_usage u WHERE u.at >= ? GROUP BY 1, 2, 3, 4",
        (first, until, since, first * DAY, until * DAY),
    ).fetchall()


def groups(conn: Any, since: float, prices: Prices) -> dict[str, list[dict[str, Any]]]:
    """Per day, purpose, user and model from the daily rollup and the calls since it; per
    schedule and per automation through the instance id index (their calls only; the
    automation's instances are in automation_runs)."""
    base = _days(conn, since)
    scheduled = conn.execute(
        f"SELECT u.instance_id, u.model, {SUMS} FROM llm_usage u "
        "WHERE u.instance_id >= 'sched-' AND u.instance_id < 'sched.' AND u.at >= ? "
        "GROUP BY 1, 2",
        (since,),
    ).fetchall()
    # CROSS JOIN keeps the runs the outer loop: each run's calls are found through the
    # instance id index, never by reading every call of the period.
    automated = conn.execute(
        f"SELECT r.automation, u.model, {SUMS} FROM automation_runs r "
        "CROSS JOIN llm_usage u ON u.instance_id = r.instance_id WHERE u.at >= ? GROUP BY 1, 2",
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


def rolled_until(conn: Any) -> int:
    """The first day the rollup does not hold (every day before it is in llm_usage_days)."""
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (UNTIL_KEY,)).fetchone()
    return int(row[0]) if row else 0


def finished(now: float) -> int:
    """The first day not yet over for an hour: a call stamped just before midnight has been
    written by then, so a day rolled up never gains a row afterwards."""
    return int((now - GRACE) // DAY)


def roll_up(conn: Any, now: float | None = None) -> int:
    """Add the finished days the rollup lacks (in the caller's write transaction, so two
    dashboards never add a day twice); return how many days it now holds more."""
    done = finished(time.time() if now is None else now)
    until = rolled_until(conn)
    if until >= done:
        return 0
    conn.execute(
        "INSERT INTO llm_usage_days (day, purpose, user_id, model, "
        + ", ".join(FIELDS)
        + ", calls) SELECT CAST(at / ? AS INTEGER), purpose, user_id, model, "
        + ", ".join(f"SUM({f})" for f in FIELDS)
        + ", SUM(calls) FROM llm_usage WHERE at >= ? AND at < ? GROUP BY 1, 2, 3, 4",
        (DAY, until * DAY, done * DAY),
    )
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (UNTIL_KEY, str(done)),
    )
    return done - until


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
