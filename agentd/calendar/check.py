"""`agentd doctor` for calendars: log in, find the calendar, read today's events."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from agentd.calendar.events import expand_bounded
from agentd.calendar.source import CalendarError, Source
from agentd.config import CalendarConfig
from agentd.parsing.budget import ParseFailed


async def _read(
    src: Source, start: datetime, end: datetime, zone: ZoneInfo
) -> list[dict[str, object]]:
    data = await src.fetch_raw(start, end)
    # Parsed in the bounded child, as the tools do: a hostile feed costs a child, not the
    # command (nor `agentd init`, which asks again).
    return await expand_bounded(data, start, end, zone)


def check_calendar(
    config: CalendarConfig, env: Mapping[str, str], default_zone: str
) -> tuple[str, bool, str]:
    name = f"calendar {config.name}"
    src = Source(config, env)
    if config.password_env and not src.password:
        return (
            name,
            False,
            (
                f"{config.name}: login failed: no password: set the environment "
                f"variable or systemd credential {config.password_env}"
            ),
        )
    zone = ZoneInfo(config.timezone or default_zone)
    start = datetime.combine(datetime.now(zone).date(), time(0), zone)
    end = start + timedelta(days=1)
    try:
        found = asyncio.run(_read(src, start, end, zone))
    except CalendarError as exc:
        return name, False, str(exc)
    except ParseFailed as exc:  # a feed that is not iCalendar, or one past the child's budget
        return name, False, f"{config.name}: reading failed: {exc}"[:300]
    except Exception as exc:  # a server that answers oddly
        return name, False, f"{config.name}: reading failed: {type(exc).__name__}: {exc}"[:300]
    kind = "feed (read only)" if src.read_only else "CalDAV"
    return name, True, f"{kind} {config.url}, {len(found)} event(s) today ({zone.key})"
