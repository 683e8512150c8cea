"""Events in a range, recurrences expanded (recurring-ical-events) in the calendar's zone; free
time between them; new events as iCalendar. Pure functions: the tools run them in a thread."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from icalendar import Calendar, Event, vCalAddress
from pydantic import BaseModel

from agentd.config.clock import FIXED_PERIODS
from agentd.parsing.budget import Budget


class Occurrence(BaseModel):
    uid: str
    summary: str
    start: datetime  # aware, in the calendar's zone; an all-day event starts at local midnight
    end: datetime
    all_day: bool
    location: str = ""
    attendees: list[str] = []
    recurring: bool = False
    busy: bool = True


def _aware(value: date | datetime, zone: ZoneInfo) -> datetime:
    if isinstance(value, datetime):
        # Floating times (no zone) are wall-clock times in the calendar's zone.
        return value.astimezone(zone) if value.tzinfo else value.replace(tzinfo=zone)
    return datetime.combine(value, time(0), zone)


# A calendar is outside data: one hostile event must not cost the daemon memory or minutes.
# Rules are clamped before expansion (at most one occurrence per 15 minutes from a SECONDLY or
# MINUTELY rule, a few BYMINUTE values, one BYSECOND; a far-past open rule starts near the
# range) and the answer is capped per event and in total. The tools run it in the bounded
# child (agentd/parsing), which caps CPU, memory and time on top.
MAX_PER_EVENT = 200
# What one expansion in the bounded child may use (`expand_job`).
EXPAND_BUDGET = Budget(seconds=30.0, cpu_seconds=20, memory_bytes=512 * 1024 * 1024)
MAX_TOTAL = 2000
_MIN_INTERVAL = {"SECONDLY": 900, "MINUTELY": 15}
_FAR = timedelta(days=366)


def clamp(cal: Calendar, start: datetime, end: datetime) -> None:
    """Make every recurrence rule of `cal` cheap to expand in [start, end) (in place)."""
    for ev in cal.walk("VEVENT"):
        found = ev.get("RRULE")
        rules = found if isinstance(found, list) else [found] if found is not None else []
        for rule in rules:
            freq = str((rule.get("FREQ") or [""])[0]).upper()
            if freq in _MIN_INTERVAL:
                step = int((rule.get("INTERVAL") or [1])[0])
                rule["INTERVAL"] = [max(step, _MIN_INTERVAL[freq])]
            if len(rule.get("BYSECOND") or []) > 1:
                rule["BYSECOND"] = rule["BYSECOND"][:1]
            if len(rule.get("BYMINUTE") or []) > 4:
                rule["BYMINUTE"] = rule["BYMINUTE"][:4]
        if len(rules) == 1:
            _drop_unreachable_count(ev, rules[0], end)
            _start_near(ev, rules[0], start)


def _most_per_period(rule: Any, freq: str) -> int:
    """At most how many occurrences one period of a fixed-length rule holds."""
    count = {"SECONDLY": [], "MINUTELY": ["BYSECOND"], "HOURLY": ["BYMINUTE", "BYSECOND"]}.get(
        freq, ["BYHOUR", "BYMINUTE", "BYSECOND"]
    )
    most = 7 if freq == "WEEKLY" else 1
    for key in count:
        most *= max(1, len(rule.get(key) or []))
    return most


def _drop_unreachable_count(ev: Event, rule: Any, end: datetime) -> None:
    """A COUNT larger than the rule could reach before `end` changes nothing in the range, but
    makes the expansion walk every period from the start: an invitation with COUNT=10^9 from
    1900 stopped the whole calendar. Such a COUNT is dropped, so the start moves near the
    range like an open rule's."""
    freq = str((rule.get("FREQ") or [""])[0]).upper()
    if freq not in FIXED_PERIODS or not rule.get("COUNT") or "DTSTART" not in ev:
        return
    first = ev.decoded("DTSTART")
    if not isinstance(first, datetime):
        return
    begin = first if first.tzinfo else first.replace(tzinfo=end.tzinfo)
    period = FIXED_PERIODS[freq] * int((rule.get("INTERVAL") or [1])[0])
    if period <= timedelta(0):
        return  # dateutil refuses it (or loops): the child's budget ends that
    periods = max(0, (end - begin) // period) + 2  # the first and a DST day's extra one
    if int(rule["COUNT"][0]) > periods * _most_per_period(rule, freq):
        del rule["COUNT"]


def _start_near(ev: Event, rule: object, start: datetime) -> None:
    """Move an open rule's first occurrence from the far past to just before `start`, by whole
    periods, so its phase (and every RECURRENCE-ID) stays the same."""
    freq = str((rule.get("FREQ") or [""])[0]).upper()  # type: ignore[attr-defined]
    if freq not in FIXED_PERIODS or rule.get("COUNT") or "DTSTART" not in ev:  # type: ignore[attr-defined]
        return
    first = ev.decoded("DTSTART")
    if not isinstance(first, datetime):
        return
    begin = first if first.tzinfo else first.replace(tzinfo=start.tzinfo)
    if start - begin <= _FAR:
        return
    period = FIXED_PERIODS[freq] * int((rule.get("INTERVAL") or [1])[0])  # type: ignore[attr-defined]
    shift = period * ((start - begin - _FAR) // period)
    for key in ("DTSTART", "DTEND"):
        if key in ev:
            moved = ev.decoded(key) + shift
            params = dict(ev[key].params)
            del ev[key]
            ev.add(key, moved, parameters=params)


def merged(data: bytes) -> Calendar:
    """One calendar holding the components of every iCalendar document in `data`."""
    out = Calendar()
    out.add("prodid", "-//agentd//calendar//EN")
    out.add("version", "2.0")
    if not data.strip():
        return out  # a calendar with no events in the range
    found = Calendar.from_ical(data, multiple=True)
    if not found:
        raise ValueError("it is not iCalendar (no BEGIN:VCALENDAR … END:VCALENDAR)")
    for cal in found:
        for component in cal.subcomponents:
            out.add_component(component)
    return out


def expand_job(data: bytes, *, start: str, end: str, zone: str) -> list[dict[str, object]]:
    """The bounded child's side: iCalendar documents (as the server sent them) in, capped
    occurrences (JSON-able) out."""
    tz = ZoneInfo(zone)
    found = expand(merged(data), datetime.fromisoformat(start), datetime.fromisoformat(end), tz)
    return [o.model_dump(mode="json") for o in found]


async def expand_bounded(
    data: bytes, start: datetime, end: datetime, zone: ZoneInfo
) -> list[dict[str, object]]:
    """`expand_job` in the bounded child (EXPAND_BUDGET): what every reader of a calendar's
    outside bytes calls; ParseFailed when the child refused or ran out."""
    from agentd.parsing.bounded import run_bounded

    found: list[dict[str, object]] = await run_bounded(
        "agentd.calendar.events:expand_job",
        data,
        EXPAND_BUDGET,
        start=start.isoformat(),
        end=end.isoformat(),
        zone=zone.key,
    )
    return found


def expand(cal: Calendar, start: datetime, end: datetime, zone: ZoneInfo) -> list[Occurrence]:
    """Each occurrence overlapping [start, end), soonest first; rules clamped and the list
    capped (MAX_PER_EVENT, MAX_TOTAL)."""
    import recurring_ical_events

    clamp(cal, start, end)
    # The expansion marks every occurrence with a RECURRENCE-ID; the series are the masters.
    series = {str(c.get("UID")) for c in cal.walk("VEVENT") if "RRULE" in c or "RDATE" in c}
    out: list[Occurrence] = []
    per_event: dict[str, int] = {}
    for ev in recurring_ical_events.of(cal).after(start):
        if len(out) >= MAX_TOTAL:
            break
        if _aware(ev.decoded("DTSTART"), zone) >= end:
            break
        uid = str(ev.get("UID", ""))
        per_event[uid] = per_event.get(uid, 0) + 1
        if per_event[uid] > MAX_PER_EVENT:
            continue
        first = ev.decoded("DTSTART")
        all_day = not isinstance(first, datetime)
        if "DTEND" in ev:
            last = ev.decoded("DTEND")
        else:
            last = first + (
                ev.decoded("DURATION")
                if "DURATION" in ev
                else timedelta(days=1)
                if all_day
                else timedelta(0)
            )
        people = ev.get("ATTENDEE", [])
        people = people if isinstance(people, list) else [people]
        out.append(
            Occurrence(
                uid=uid,
                summary=str(ev.get("SUMMARY", "(no title)")),
                start=_aware(first, zone),
                end=_aware(last, zone),
                all_day=all_day,
                location=str(ev.get("LOCATION", "")),
                attendees=[str(p).removeprefix("mailto:").removeprefix("MAILTO:") for p in people],
                recurring=str(ev.get("UID", "")) in series,
                busy=str(ev.get("TRANSP", "OPAQUE")).upper() != "TRANSPARENT",
            )
        )
    return sorted(out, key=lambda o: (o.start, o.summary))


def describe(o: Occurrence) -> str:
    day = o.start.strftime("%a %Y-%m-%d")
    if o.all_day:
        days = (o.end.date() - o.start.date()).days
        when = f"{day} all day" + (f" ({days} days)" if days > 1 else "")
    else:
        when = f"{day} {o.start:%H:%M}–{o.end:%H:%M} {o.start:%Z}"
    extra = "".join(
        [
            f" @ {o.location}" if o.location else "",
            " (repeats)" if o.recurring else "",
            f" with {', '.join(o.attendees)}" if o.attendees else "",
        ]
    )
    return f"{when}: {o.summary}{extra} [uid {o.uid}]"


def free_slots(
    busy: list[Occurrence],
    first_day: date,
    days: int,
    zone: ZoneInfo,
    day_start: time,
    day_end: time,
    minimum: timedelta,
) -> list[tuple[datetime, datetime]]:
    """Gaps of at least `minimum` inside the working hours of each day, between busy events."""
    blocks = sorted((o.start, o.end) for o in busy if o.busy)
    out = []
    for n in range(days):
        day = first_day + timedelta(days=n)
        cursor = datetime.combine(day, day_start, zone)
        stop = datetime.combine(day, day_end, zone)
        for b_start, b_end in blocks:
            if b_end <= cursor or b_start >= stop:
                continue
            if b_start - cursor >= minimum:
                out.append((cursor, b_start))
            cursor = max(cursor, b_end)
        if stop - cursor >= minimum:
            out.append((cursor, stop))
    return out


def new_event(
    *,
    uid: str,
    summary: str,
    start: date | datetime,
    end: date | datetime,
    now: datetime,
    location: str = "",
    description: str = "",
    attendees: list[str] = (),  # type: ignore[assignment]
    organizer: str = "",
) -> str:
    """One VEVENT in a VCALENDAR; zone-aware times carry their TZID (and a VTIMEZONE)."""
    cal = Calendar()
    cal.add("prodid", "-//agentd//calendar//EN")
    cal.add("version", "2.0")
    ev = Event()
    ev.add("uid", uid)
    ev.add("dtstamp", now)
    ev.add("summary", summary)
    ev.add("dtstart", start)
    ev.add("dtend", end)
    if location:
        ev.add("location", location)
    if description:
        ev.add("description", description)
    if organizer and attendees:
        ev.add("organizer", vCalAddress(f"mailto:{organizer}"))
    for person in attendees:
        who = vCalAddress(f"mailto:{person}")
        who.params["RSVP"] = "TRUE"
        ev.add("attendee", who, encode=False)
    cal.add_component(ev)
    cal.add_missing_timezones()
    return cal.to_ical().decode()
