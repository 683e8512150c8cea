"""When a schedule fires: one-off, fixed interval, or an RFC 5545 RRULE in an IANA zone.

Calendar rules are wall-clock rules: "every day at 08:00 Europe/Berlin" stays at 08:00 local
across DST changes. Intervals are elapsed time ("every 90 minutes" is 5400 s, whatever the
clock on the wall says). On a DST day (the rule zoneinfo gives with fold=0):
- a local time that does not exist (spring forward, 02:30 in Berlin) fires after the gap, at
  the same distance past the transition it would have had before it (02:30 → 03:30 CEST);
- a local time that exists twice (fall back) fires once, at its first (summer time) instance.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr
from pydantic import BaseModel, Field

from agentd.config import clock

# Searching from a little before `t` in local time covers the largest UTC offset change.
_DST_SLACK = timedelta(hours=3)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_INTERVAL = re.compile(r"(?:^|;)\s*INTERVAL\s*=\s*([^;]*)", re.IGNORECASE)
_UNTIL_UTC = re.compile(r"(UNTIL\s*=\s*)(\d{8}T\d{6})Z", re.IGNORECASE)
_PART = re.compile(r"([A-Z]+)\s*=\s*([^;]*)")
# RFC 5545's day and week numbers: 1 is the first, -1 the last; 0 is none of them.
_NUMBERED_FROM_ONE = {"BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYSETPOS"}
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# The last run time every zone can still show: a datetime ends with 9999-12-31, and a zone may
# be a day ahead of UTC. A time past it would be stored and then break every listing.
LAST_RUN = int(datetime(9999, 12, 30, tzinfo=UTC).timestamp())


class ScheduleError(ValueError):
    """A schedule that cannot be created as asked; the message says what to change."""


class When(BaseModel):
    """When to run, as the model or the CLI gives it: exactly one of at / after / every / rrule."""

    at: str | None = Field(
        default=None,
        description="One-off at this local ISO 8601 date-time, e.g. '2026-11-24T09:00'.",
    )
    after: str | None = Field(
        default=None, description="One-off after this delay from now: '20m', '2h', '1h30m', '3d'."
    )
    every: str | None = Field(
        default=None, description="Repeat at this fixed interval ('90m', '2h', '1d')."
    )
    rrule: str | None = Field(
        default=None,
        description="A calendar rule (RFC 5545 RRULE), e.g. every weekday at 8:00: "
        "'FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8;BYMINUTE=0'.",
    )
    start: str | None = Field(
        default=None,
        description="For every/rrule: the first run (local ISO 8601); default: now.",
    )


class Recurrence(BaseModel):
    """A resolved When: absolute instants and rules, ready to compute occurrences."""

    kind: Literal["once", "interval", "rrule"]
    timezone: str
    at: int | None = None  # once: epoch seconds
    anchor: int | None = None  # interval: the first occurrence
    every: int | None = None  # interval: seconds
    rule: str | None = None  # rrule: the RRULE body
    dtstart: str | None = None  # rrule: local naive ISO date-time the rule counts from

    def next_after(self, t: float) -> int | None:
        """The first occurrence strictly after `t` (epoch seconds), or None when there is none."""
        if self.kind == "once":
            return self.at if self.at is not None and t < self.at <= LAST_RUN else None
        if self.kind == "interval":
            assert self.anchor is not None and self.every
            if t < self.anchor:
                nxt = self.anchor
            else:
                nxt = self.anchor + (int((t - self.anchor) // self.every) + 1) * self.every
            return nxt if nxt <= LAST_RUN else None
        zone = zone_or_error(self.timezone)
        assert self.rule is not None and self.dtstart is not None
        local = datetime.fromtimestamp(t, zone).replace(tzinfo=None) - _DST_SLACK
        for naive in _rule_near(self.rule, self.dtstart, local).xafter(local, inc=True):
            ts = naive.replace(tzinfo=zone).timestamp()  # fold=0: the DST rule above
            if ts > LAST_RUN:
                return None
            if ts > t:
                return int(ts)
        return None

    def upcoming(self, t: float, n: int) -> list[int]:
        """The next `n` occurrences after `t`."""
        found: list[int] = []
        while len(found) < n and (nxt := self.next_after(found[-1] if found else t)) is not None:
            found.append(nxt)
        return found

    def period(self, due: float) -> float | None:
        """The gap from `due` to the next occurrence (None for a one-off): scales catch-up."""
        nxt = self.next_after(due)
        return None if nxt is None else nxt - due

    def describe(self) -> str:
        if self.kind == "once":
            return "once"
        if self.kind == "interval":
            return f"every {format_duration(self.every or 0)}"
        return f"RRULE {self.rule} ({self.timezone})"


@lru_cache(maxsize=1024)
def _rule(body: str, dtstart: str) -> rrule:
    return rrulestr(body, dtstart=datetime.fromisoformat(dtstart))  # type: ignore[return-value]


def _rule_near(body: str, dtstart: str, local: datetime) -> rrule:
    """The rule, started from its last whole period at or before `local`: dateutil walks every
    period from the start, so a five-minute rule a year old would walk 100,000 of them on every
    lookup. A start moved by whole periods keeps the weekday and time of day dateutil fills
    unnamed BY parts from. Not moved: a COUNT counts from the first start; dateutil's first
    week runs from the start's day, so BYSETPOS would pick within a part of a week; a monthly
    or yearly rule has few periods to walk."""
    period = _period(body)
    start = datetime.fromisoformat(dtstart)
    if period is None or local <= start:
        return _rule(body, dtstart)
    return _rule(body, (start + ((local - start) // period) * period).isoformat())


@lru_cache(maxsize=1024)
def _period(body: str) -> timedelta | None:
    parts = {key: value.strip() for key, value in _PART.findall(body.upper())}
    unit = clock.FIXED_PERIODS.get(parts.get("FREQ", ""))
    interval = parts.get("INTERVAL", "1")
    if unit is None or "COUNT" in parts or not interval.isdecimal():
        return None
    if parts["FREQ"] == "WEEKLY" and "BYSETPOS" in parts:
        return None
    return unit * int(interval)


def zone_or_error(name: str) -> ZoneInfo:
    try:
        return clock.zone(name)
    except clock.UnknownZone as exc:
        raise ScheduleError(str(exc)) from None


def parse_duration(text: str) -> int:
    """'1h30m' → 5400 seconds; a bare number is seconds."""
    raw = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+", raw):
        raw += "s"
    parts = _DURATION.findall(raw)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != raw:
        raise ScheduleError(f"cannot read the duration {text!r}; write it like '20m' or '1h30m'")
    try:
        return round(sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))
    except OverflowError:  # hundreds of digits: past what a float holds
        raise ScheduleError(f"the duration {text[:40]!r} is too long") from None


def format_duration(seconds: float) -> str:
    left, out = int(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            out.append(f"{left // size}{unit}")
            left %= size
    return "".join(out) or "0s"


def local_time(text: str, zone: ZoneInfo) -> datetime:
    """An ISO 8601 date-time; one without an offset is wall-clock time in `zone`."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ScheduleError(
            f"cannot read the time {text!r}; use ISO 8601 like '2026-11-24T09:00'"
        ) from None
    return value.replace(tzinfo=zone) if value.tzinfo is None else value.astimezone(zone)


def resolve(when: When, timezone: str, now: float) -> Recurrence:
    """Turn the request into a Recurrence, or raise ScheduleError saying what to fix."""
    zone = zone_or_error(timezone)
    given = [k for k in ("at", "after", "every", "rrule") if getattr(when, k)]
    if len(given) != 1:
        raise ScheduleError(
            "give exactly one of: at (a date-time), after (a delay), "
            "every (an interval) or rrule (a calendar rule)"
        )
    if when.start and given[0] in ("at", "after"):
        raise ScheduleError("start applies only to every/rrule; for a one-off use at")
    if when.at:
        at = local_time(when.at, zone).timestamp()
        if at <= now:
            raise ScheduleError(f"{when.at} ({timezone}) is in the past; give a future time")
        return Recurrence(kind="once", timezone=timezone, at=_before_the_last(at, when.at))
    if when.after:
        delay = parse_duration(when.after)
        if delay <= 0:
            raise ScheduleError("after must be a positive delay like '20m'")
        at = _before_the_last(int(now) + delay, f"in {when.after}")
        return Recurrence(kind="once", timezone=timezone, at=at)
    if when.every:
        every = parse_duration(when.every)
        if every <= 0:
            raise ScheduleError("every must be a positive interval like '1h'")
        anchor = int(local_time(when.start, zone).timestamp()) if when.start else int(now) + every
        anchor = _before_the_last(anchor, when.start or f"in {when.every}")
        return Recurrence(kind="interval", timezone=timezone, anchor=anchor, every=every)
    return _resolve_rrule(when.rrule or "", when.start, zone, timezone, now)


def _before_the_last(ts: float, asked: str) -> int:
    if ts > LAST_RUN:
        raise ScheduleError(f"{asked} is too far ahead; give a time before 9999-12-30")
    return int(ts)


def _check_rule_parts(body: str) -> None:
    """dateutil never moves on from INTERVAL=0 (an endless loop) and runs backwards on a
    negative one; it drops a day number 0, so 'BYMONTHDAY=0' ran every day. Refuse them all
    before any occurrence is computed."""
    for value in _INTERVAL.findall(body):
        if not value.strip().isdecimal() or int(value) < 1:
            raise ScheduleError(f"INTERVAL must be a whole number of at least 1, not {value!r}")
    for key, values in _PART.findall(body.upper()):
        numbers = [v.strip().lstrip("+-") for v in values.split(",")]
        if key in _NUMBERED_FROM_ONE and any(n.isdecimal() and int(n) == 0 for n in numbers):
            raise ScheduleError(f"{key} counts from 1 (or from -1, the last), so it cannot hold 0")


def _until_in_zone(body: str, zone: ZoneInfo) -> str:
    """RFC 5545 writes UNTIL in UTC ('…Z') when the start is in a zone, as a schedule's is;
    dateutil counts from a naive start and takes only a naive UNTIL: the zone's wall clock."""

    def local(match: re.Match[str]) -> str:
        utc = datetime.strptime(match[2], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
        return match[1] + utc.astimezone(zone).strftime("%Y%m%dT%H%M%S")

    return _UNTIL_UTC.sub(local, body)


def _resolve_rrule(
    text: str, start: str | None, zone: ZoneInfo, timezone: str, now: float
) -> Recurrence:
    body = text.strip()
    if body.upper().startswith("RRULE:"):
        body = body[6:]
    if "DTSTART" in body.upper() or "\n" in body:
        raise ScheduleError("give only the RRULE part (FREQ=…); put the first run in start")
    _check_rule_parts(body)
    if start:
        first = local_time(start, zone)
    else:  # the rule's BYHOUR/BYMINUTE decide the time; seconds are zero unless given
        first = datetime.fromtimestamp(now, zone).replace(second=0, microsecond=0)
    dtstart = first.replace(tzinfo=None).isoformat()
    try:
        rule = _until_in_zone(body, zone)
        rec = Recurrence(kind="rrule", timezone=timezone, rule=rule, dtstart=dtstart)
        nxt = rec.next_after(now)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ScheduleError(f"invalid RRULE {text!r}: {exc}") from None
    if nxt is None:
        raise ScheduleError(f"the rule {text!r} has no occurrence after now")
    return rec
