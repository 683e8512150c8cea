"""The calendar tools: list events, find free time, create / move / delete an event.

Times the model gives without an offset are wall-clock times in the calendar's zone (else the
owner's). Creating is medium risk, and high when it invites other people (`assess`): the
server may send them invitations. Deleting asks the owner. An event's UID comes from the tool
call, so the same call run again replaces the event instead of adding a second one.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field

from agentd.calendar.events import (
    Occurrence,
    describe,
    expand_bounded,
    free_slots,
    new_event,
)
from agentd.calendar.source import CalendarError, Source
from agentd.config import Config
from agentd.net.safe_fetch import SyncResolve, system_resolve_sync
from agentd.parsing.budget import ParseFailed
from agentd.tools import (
    Assessment,
    CallState,
    OwnerOnly,
    Tool,
    ToolContext,
    ToolError,
    Toolset,
    mark_untrusted,
)

MAX_EVENTS = 200


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    calendar: str = Field(default="", description="Calendar name; empty: the first one.")


class ListArgs(_Args):
    start: str = Field(default="", description="First day (YYYY-MM-DD); empty: today.")
    days: int = Field(default=1, ge=1, le=62)


class FreeArgs(ListArgs):
    days: int = Field(default=1, ge=1, le=14)
    day_start: str = Field(default="09:00", description="Working day starts (HH:MM).")
    day_end: str = Field(default="18:00", description="Working day ends (HH:MM).")
    minutes: int = Field(default=30, ge=5, le=24 * 60, description="Shortest useful slot.")


class CreateArgs(_Args):
    summary: str = Field(min_length=1, max_length=300)
    start: str = Field(
        description="Local ISO date-time ('2026-11-26T12:30'), or a date "
        "('2026-11-26') for an all-day event."
    )
    end: str = Field(default="", description="Same form as start; empty: one hour (one day).")
    location: str = ""
    description: str = Field(default="", max_length=4000)
    attendees: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="E-mail addresses to invite (asks the owner).",
    )


class MoveArgs(_Args):
    uid: str = Field(min_length=1)
    start: str = Field(description="The new start, local ISO date-time or date.")
    end: str = Field(default="", description="The new end; empty: keep the duration.")


class DeleteArgs(_Args):
    uid: str = Field(min_length=1)


@dataclass
class CalendarDeps:
    config: Config
    sources: dict[str, Source]

    def source(self, name: str, *, write: bool = False) -> Source:
        if name and name not in self.sources:
            raise ToolError(f"no calendar {name!r}; the calendars are: {', '.join(self.sources)}")
        src = self.sources[name] if name else next(iter(self.sources.values()))
        if write and src.read_only:
            raise ToolError(f"{src.config.name} is a read-only iCalendar feed")
        return src

    def zone(self, src: Source) -> ZoneInfo:
        return ZoneInfo(src.config.timezone or self.config.agent.timezone)


def parse_when(value: str, zone: ZoneInfo) -> date | datetime:
    try:
        if len(value.strip()) == 10:
            return date.fromisoformat(value.strip())
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(
            f"{value!r} is not an ISO date or date-time like 2026-11-26T12:30"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=zone)


def _first_day(value: str, zone: ZoneInfo, now: float) -> date:
    if not value:
        return datetime.fromtimestamp(now, zone).date()
    when = parse_when(value, zone)
    return when.date() if isinstance(when, datetime) else when


def _window(first: date, days: int, zone: ZoneInfo) -> tuple[datetime, datetime]:
    start = datetime.combine(first, time(0), zone)
    return start, datetime.combine(first + timedelta(days=days), time(0), zone)


async def _occurrences(deps: CalendarDeps, src: Source, first: date, days: int) -> list[Any]:
    zone = deps.zone(src)
    start, end = _window(first, days, zone)
    data = await src.fetch_raw(start, end)
    # Outside iCalendar is parsed and its rules expanded in the bounded child: a hostile
    # event (a 50 MB description, a rule of millions) costs a child process its budget,
    # never the daemon its memory or its loop.
    try:
        found = await expand_bounded(data, start, end, zone)
    except ParseFailed as exc:
        raise ToolError(f"the calendar {src.config.name} could not be expanded: {exc}") from None
    # JSON keeps the offset, not the zone: put the zone back for its name (CET, CEST).
    return [_in_zone(Occurrence.model_validate(o), zone) for o in found]


async def occurrences_ahead(config: Config, src: Source, days: int, now: float) -> list[Occurrence]:
    """The calendar's events from today on, `days` days long, in its zone (a watch reads this)."""
    deps = CalendarDeps(config=config, sources={src.config.name: src})
    zone = deps.zone(src)
    return await _occurrences(deps, src, _first_day("", zone, now), days)


def _in_zone(o: Occurrence, zone: ZoneInfo) -> Occurrence:
    return o.model_copy(update={"start": o.start.astimezone(zone), "end": o.end.astimezone(zone)})


async def _list(deps: CalendarDeps, ctx: ToolContext, a: ListArgs) -> str:
    src = deps.source(a.calendar)
    first = _first_day(a.start, deps.zone(src), ctx.now())
    found = await _occurrences(deps, src, first, a.days)
    head = f"{len(found)} event(s) in {src.config.name} from {first} for {a.days} day(s)"
    lines = [describe(o) for o in found[:MAX_EVENTS]]
    return mark_untrusted(
        f"{head}:\n" + ("\n".join(lines) or "(none)"), f"calendar:{src.config.name}"
    )


async def _free(deps: CalendarDeps, ctx: ToolContext, a: FreeArgs) -> str:
    src = deps.source(a.calendar)
    zone = deps.zone(src)
    first = _first_day(a.start, zone, ctx.now())
    try:
        day_start, day_end = time.fromisoformat(a.day_start), time.fromisoformat(a.day_end)
    except ValueError:
        raise ToolError("day_start and day_end are HH:MM") from None
    found = await _occurrences(deps, src, first, a.days)
    slots = free_slots(found, first, a.days, zone, day_start, day_end, timedelta(minutes=a.minutes))
    lines = [f"{s:%a %Y-%m-%d %H:%M}–{e:%H:%M} {s:%Z}" for s, e in slots]
    return "Free:\n" + ("\n".join(lines) or "(no free slot that long)")


def _uid(ctx: ToolContext) -> str:
    digest = hashlib.sha256(f"{ctx.instance_id}/{ctx.tool_use_id}".encode()).hexdigest()[:32]
    return f"{digest}@agentd"


def _span(start: date | datetime, end_text: str, zone: ZoneInfo) -> tuple[Any, Any]:
    if end_text:
        end = parse_when(end_text, zone)
    else:
        end = start + (timedelta(hours=1) if isinstance(start, datetime) else timedelta(days=1))
    if isinstance(start, datetime) != isinstance(end, datetime):
        raise ToolError("start and end must both be dates (all day) or both date-times")
    if end <= start:  # type: ignore[operator]
        raise ToolError("the event must end after it starts")
    return start, end


async def _create(deps: CalendarDeps, ctx: ToolContext, a: CreateArgs) -> str:
    src = deps.source(a.calendar, write=True)
    zone = deps.zone(src)
    start, end = _span(parse_when(a.start, zone), a.end, zone)
    uid = _uid(ctx)
    organizer = src.config.username if "@" in src.config.username else ""
    ical = new_event(
        uid=uid,
        summary=a.summary,
        start=start,
        end=end,
        location=a.location,
        description=a.description,
        attendees=a.attendees,
        organizer=organizer,
        now=datetime.fromtimestamp(ctx.now(), UTC),
    )
    await asyncio.to_thread(src.save, ical)
    who = f", inviting {', '.join(a.attendees)}" if a.attendees else ""
    return f"Created {a.summary!r} {start}–{end}{who} [uid {uid}]."


def _move_event(src: Source, uid: str, start: Any, end_text: str, zone: ZoneInfo) -> str:
    obj = src.by_uid(uid)
    ev = obj.icalendar_component
    if "RRULE" in ev:
        raise ToolError("this event repeats; moving a whole series is not supported here")
    old_start, old_end = ev.decoded("DTSTART"), ev.decoded("DTEND") if "DTEND" in ev else None
    if end_text:
        start, end = _span(start, end_text, zone)
    else:
        end = start + ((old_end - old_start) if old_end else timedelta(hours=1))
    for key, value in (("DTSTART", start), ("DTEND", end)):
        ev.pop(key, None)
        ev.add(key.lower(), value)
    ev.pop("DURATION", None)
    seq = int(ev.get("SEQUENCE", 0)) + 1
    ev.pop("SEQUENCE", None)
    ev.add("sequence", seq)
    obj.save()
    return f"Moved {ev.get('SUMMARY', uid)!s} to {start}–{end}."


async def _move(deps: CalendarDeps, ctx: ToolContext, a: MoveArgs) -> str:
    src = deps.source(a.calendar, write=True)
    zone = deps.zone(src)
    return await asyncio.to_thread(_move_event, src, a.uid, parse_when(a.start, zone), a.end, zone)


async def _delete(deps: CalendarDeps, ctx: ToolContext, a: DeleteArgs) -> str:
    src = deps.source(a.calendar, write=True)

    def work() -> str:
        obj = src.by_uid(a.uid)
        name = str(obj.icalendar_component.get("SUMMARY", a.uid))
        obj.delete()
        return f"Deleted {name!r}."

    return await asyncio.to_thread(work)


def _invites(args: Any, state: CallState) -> Assessment | None:
    if getattr(args, "attendees", None):
        return Assessment(
            risk="high",
            reason="it invites other people: the calendar server may send them invitations",
        )
    return None


NOT_THE_OWNERS = (
    "The calendars are the owner's: calendar tools work only for the owner, in their private "
    "chat (anyone else, or a group, would read or change the owner's calendar). Nothing was done."
)


def _reading_tools(cal: Toolset, deps: CalendarDeps) -> None:
    # Events are written by whoever invites the owner: outside content, so listing taints.
    @cal.tool(
        risk="low",
        taints=True,
        description="List calendar events in a range of days (recurring events expanded, "
        "times in the calendar's zone).",
    )
    async def calendar_list(ctx: ToolContext, args: ListArgs) -> str:
        return await _list(deps, ctx, args)

    # Free slots are agentd's own words (times it computed), never an event's text.
    @cal.tool(risk="low")
    async def calendar_free(ctx: ToolContext, args: FreeArgs) -> str:
        """Find free time slots in working hours over a range of days."""
        return await _free(deps, ctx, args)


def _writing_tools(cal: Toolset, deps: CalendarDeps) -> None:
    # Every change to the owner's calendar asks while outside content is in view (egress):
    # an invitation's words must not move or create the owner's events unasked.
    @cal.tool(
        risk="medium",
        egress=True,
        assess=_invites,
        description="Create an event (all-day when start is a date). Inviting attendees asks "
        "the owner first.",
    )
    async def calendar_create(ctx: ToolContext, args: CreateArgs) -> str:
        return await _create(deps, ctx, args)

    @cal.tool(risk="medium", egress=True)
    async def calendar_move(ctx: ToolContext, args: MoveArgs) -> str:
        """Move an event (by uid) to a new start; keeps its duration unless end is given."""
        return await _move(deps, ctx, args)

    @cal.tool(risk="high", egress=True)
    async def calendar_delete(ctx: ToolContext, args: DeleteArgs) -> str:
        """Delete an event by uid (asks the owner)."""
        return await _delete(deps, ctx, args)


def build_calendar_tools(
    config: Config, env: Mapping[str, str], resolve: SyncResolve = system_resolve_sync
) -> list[Tool]:
    """The calendar tools; `resolve` answers DNS for CalDAV (`Source`)."""
    if not config.calendar:
        return []
    sources = {c.name: Source(c, env, resolve) for c in config.calendar}
    deps = CalendarDeps(config=config, sources=sources)
    # Only the owner, in their private chat, reaches a calendar; a CalendarError reaches the
    # model as a plain tool error.
    cal = Toolset(
        timeout=120.0,
        guard=OwnerOnly.of(config.access, NOT_THE_OWNERS),
        errors=(CalendarError,),
    )
    _reading_tools(cal, deps)
    if any(not s.read_only for s in sources.values()):
        _writing_tools(cal, deps)
    return cal.tools()
