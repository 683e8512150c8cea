"""Time expressions in a memory, resolved against when it was said: "yesterday", "last summer",
"two weeks ago", "next month" as the dates they meant, in words a question uses ("in July",
"in 2023", "during the summer"), so "When did I go camping in July?" finds "we went camping
last weekend" said on 3 August.

English only, rule-based, the first expression of a text; no model call.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from agentd.retrieval.days import NUMBER_WORDS, WEEKDAYS, days_since

_SEASONS = {"spring": 4, "summer": 7, "fall": 10, "autumn": 10, "winter": 1}
_UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
_AGO = re.compile(r"\b(\d+|" + "|".join(NUMBER_WORDS) + r")\s+(day|week|month|year)s?\s+ago\b")
_REL = re.compile(
    r"\b(last|this|next|past)\s+(week|weekend|month|year|spring|summer|fall|autumn|winter|"
    + "|".join(WEEKDAYS)
    + r")\b"
)
_SIMPLE = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}


def _season(month: int) -> str:
    return ("winter", "spring", "summer", "autumn")[(month % 12) // 3]


def _relative(which: str, unit: str, anchor: datetime) -> datetime:
    sign = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
    if unit in ("week", "weekend"):
        return anchor + timedelta(days=7 * sign)
    if unit == "month":
        month = anchor.month - 1 + sign
        return anchor.replace(year=anchor.year + month // 12, month=month % 12 + 1, day=1)
    if unit == "year":
        return anchor.replace(year=anchor.year + sign, month=1, day=1)
    if unit in _SEASONS:
        month = _SEASONS[unit]
        year = anchor.year + sign if sign else anchor.year
        if sign < 0 and month < anchor.month and unit != "winter":
            year = anchor.year  # "last summer" said in October is this year's
        return anchor.replace(year=year, month=month, day=1)
    back = days_since(unit, anchor)
    return anchor - timedelta(days=back) if sign <= 0 else anchor + timedelta(days=7 - back)


def resolve(text: str, anchor: datetime) -> datetime | None:
    """The date the first time expression of `text` means, said at `anchor`; None if none."""
    low = text.casefold()
    found: list[tuple[int, datetime]] = []
    if (m := _AGO.search(low)) is not None:
        n = int(m.group(1)) if m.group(1).isdecimal() else NUMBER_WORDS[m.group(1)]
        found.append((m.start(), anchor - timedelta(days=n * _UNITS[m.group(2)])))
    if (m := _REL.search(low)) is not None:
        found.append((m.start(), _relative(m.group(1), m.group(2), anchor)))
    for word, days in _SIMPLE.items():
        if (i := low.find(word)) >= 0 and re.match(rf"\b{word}\b", low[i:]):
            found.append((i, anchor + timedelta(days=days)))
    return min(found, key=lambda f: f[0])[1] if found else None


def day_words(when: datetime) -> str:
    """ "3 August 2023" """
    return f"{when.day} {when:%B %Y}"


def date_words(when: datetime) -> str:
    """ "3 August 2023, August 2023, summer 2023": the ways a question names that time."""
    return f"{day_words(when)}, {when:%B %Y}, {_season(when.month)} {when.year}"


def time_context(text: str, anchor: datetime | None) -> str | None:
    """The context line to store with a memory said at `anchor`: the date its time expression
    means, or None when it has none (every memory dated alike would only add noise)."""
    if anchor is None:
        return None
    when = resolve(text, anchor)
    return None if when is None else f"(when: {date_words(when)})"
