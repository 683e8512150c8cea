"""The one reader of an IANA time-zone name, for the config file, schedules and tools alike."""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


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
