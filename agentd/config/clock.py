"""Time as text names it: the one reader of an IANA time-zone name (for the config file,
schedules and tools alike), and the fixed lengths of RFC 5545's frequencies (for schedules and
calendars alike)."""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# The frequencies whose periods are a fixed length of wall-clock time (months and years are
# not); a rule of one of these can start any whole number of periods later and keep its phase.
FIXED_PERIODS = {
    "SECONDLY": timedelta(seconds=1),
    "MINUTELY": timedelta(minutes=1),
    "HOURLY": timedelta(hours=1),
    "DAILY": timedelta(days=1),
    "WEEKLY": timedelta(weeks=1),
}


class UnknownZone(ValueError):
    """A name that is no IANA time zone; the message says what to write instead."""


@lru_cache(maxsize=64)
def _load(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def zone(name: str) -> ZoneInfo:
    try:
        return _load(name)
    # OSError: a name that is a folder of the zone database ('Europe') or too long for a path;
    # ValueError: an absolute path or one with '..'.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise UnknownZone(
            f"unknown time zone {name[:80]!r}; use an IANA name like 'Europe/Berlin'"
        ) from None
