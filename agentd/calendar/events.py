"""Events in a range, recurrences expanded (recurring-ical-events) in the calendar's zone; free
time between them; new events as iCalendar. Pure functions: the tools run them in a thread."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from icalendar import Calendar, Event, vCalAddress
from pydantic import BaseModel


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


def expand(cal: Calendar, start: datetime, end: datetime, zone: ZoneInfo) -> list[Occurrence]:
    """Each occurrence overlapping [start, end), soonest first."""
    import recurring_ical_events

    # The expansion marks every occurrence with a RECURRENCE-ID; the series are the masters.
    series = {str(c.get("UID")) for c in cal.walk("VEVENT") if "RRULE" in c or "RDATE" in c}
    out = []
    for ev in recurring_ical_events.of(cal).between(start, end):
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
                uid=str(ev.get("UID", "")),
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
