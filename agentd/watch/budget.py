"""What watches cost and may cost: the caps checked before a model call, the forecast shown
when a watch is added, and when a message may be delivered (quiet hours, /mute)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from agentd.access.ratelimit import day_start, over_tokens, spent_words, tokens_used
from agentd.config import Config
from agentd.ledger.pricing import ModelPrice
from agentd.llm.estimate import CHARS_PER_TOKEN
from agentd.watch.store import Watch, instance_prefix, utc_day

_TOKENS = "COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens + output_tokens), 0)"
# A decision's request without the change: the rule, the condition, the schema (measured on
# the fake and real API within a few dozen tokens), and a short structured answer.
BASE_INPUT_TOKENS = 450
ANSWER_TOKENS = 90
MIN_MEASURED = 10  # checks before the forecast is measured rather than estimated


def watch_tokens(conn: Any, watch_id: str, since: float) -> int:
    prefix = instance_prefix(watch_id)
    sql = f"SELECT {_TOKENS} FROM llm_usage WHERE at >= ? AND instance_id LIKE ? ESCAPE '\\'"
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return int(conn.execute(sql, (since, escaped + "%")).fetchone()[0])


def all_watch_tokens(conn: Any, since: float) -> int:
    sql = f"SELECT {_TOKENS} FROM llm_usage WHERE at >= ? AND purpose = 'watch'"
    return int(conn.execute(sql, (since,)).fetchone()[0])


def cap_reason(conn: Any, config: Config, w: Watch, now: float) -> str | None:
    """Why this watch may make no model call today, in words for the owner; None: it may."""
    since, cfg = day_start(now), config.watch
    # Resumed over a cap today: the owner chose to spend more on it; what keeps chat its share
    # and the [limits] budgets still hold.
    lifted = w.cap_lifted_day == utc_day(now)
    own = w.daily_tokens if w.daily_tokens is not None else cfg.daily_tokens
    if own and not lifted and watch_tokens(conn, w.id, since) >= own:
        return f"it reached its daily cap of {own:,} tokens"
    every = cfg.background_daily_tokens
    if every and not lifted and all_watch_tokens(conn, since) >= every:
        return f"all watches together reached their daily cap of {every:,} tokens"
    total = config.limits.daily_tokens_total
    reserve_line = total * (1 - cfg.chat_reserve)
    if total and cfg.chat_reserve and tokens_used(conn, since) >= reserve_line:
        kept = int(total * cfg.chat_reserve)
        return f"today's tokens are down to the {kept:,} kept for chat"
    # Its tokens count to its user's [limits] budgets: they hold it as they hold a turn (with
    # no chat_reserve, the total is where watches stop, not a line they may cross).
    if limit := over_tokens(conn, config.limits, user_id=w.user_id, now=now):
        return spent_words(limit, config.limits)
    return None


class Forecast(BaseModel):
    checks_per_day: float
    tokens_per_check: float
    tokens_per_day: float
    usd_per_day: float
    usd_per_month: float
    measured_checks: int  # 0: an estimate from the interval and [watch] assumed_changes_per_day

    def describe(self) -> str:
        how = (
            f"measured over {self.measured_checks} checks"
            if self.measured_checks
            else "estimated before the first check"
        )
        return (
            f"{self.checks_per_day:.0f} checks a day, ~{self.tokens_per_day:,.0f} tokens a day: "
            f"${self.usd_per_day:.4f}/day, ${self.usd_per_month:.2f}/month ({how}; an unchanged "
            "check costs nothing)"
        )


def checks_per_day(w: Watch, now: float) -> float:
    rec = w.recurrence
    if rec.kind == "interval" and rec.every:
        return 86400 / rec.every
    week = [t for t in rec.upcoming(now, 2000) if t < now + 7 * 86400]
    return len(week) / 7


def call_tokens(config: Config, w: Watch) -> tuple[int, int]:
    """(input, output) tokens of one decision, before any is measured: the change shown is at
    most max_change_chars; half of it is the usual diff."""
    shown = config.watch.max_change_chars // 2 + len(w.condition) + len(w.label)
    return BASE_INPUT_TOKENS + shown // CHARS_PER_TOKEN, ANSWER_TOKENS


def forecast(conn: Any, config: Config, w: Watch, price: ModelPrice, now: float) -> Forecast:
    """Per day and month, at the watch model's price: measured from the last week's checks once
    there are MIN_MEASURED of them (the first, a one-off read of the whole source, left out),
    else estimated from the interval and `assumed_changes_per_day`."""
    per_day = checks_per_day(w, now)
    row = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM watch_checks WHERE watch_id = ? "
        "AND outcome IN ('baseline', 'unchanged', 'quiet', 'told') AND at >= ? AND due > "
        "(SELECT MIN(due) FROM watch_checks WHERE watch_id = ?)",
        (w.id, now - 7 * 86400, w.id),
    ).fetchone()
    measured, spent = int(row[0]), int(row[1])
    tin, tout = call_tokens(config, w)
    share_out = tout / (tin + tout)
    if measured >= MIN_MEASURED:
        per_check = spent / measured
    else:
        measured = 0
        changes = min(per_day, config.watch.assumed_changes_per_day)
        per_check = (tin + tout) * changes / per_day if per_day else 0.0
    tokens_day = per_check * per_day
    usd_day = tokens_day * ((1 - share_out) * price.input + share_out * price.output) / 1e6
    return Forecast(
        checks_per_day=round(per_day, 2),
        tokens_per_check=round(per_check, 1),
        tokens_per_day=round(tokens_day),
        usd_per_day=round(usd_day, 6),
        usd_per_month=round(usd_day * 30, 4),
        measured_checks=measured,
    )


def hold_until(now: float, quiet_hours: str, timezone: str, muted: float) -> float:
    """When a watch's message may be delivered: now, or the end of the quiet hours or of the
    chat's /mute it falls in, whichever is later."""
    until = muted if muted > now else now
    if quiet_hours:
        start_s, end_s = quiet_hours.split("-")
        zone = ZoneInfo(timezone)
        local = datetime.fromtimestamp(until, zone)
        start = local.replace(
            hour=int(start_s[:2]), minute=int(start_s[3:]), second=0, microsecond=0
        )
        end = local.replace(hour=int(end_s[:2]), minute=int(end_s[3:]), second=0, microsecond=0)
        if start <= end:
            inside = start <= local < end
        else:  # across midnight: 22:00-07:00
            inside = local >= start or local < end
            if local >= start:
                end += timedelta(days=1)
        if inside:
            until = max(until, end.timestamp())
    return until
