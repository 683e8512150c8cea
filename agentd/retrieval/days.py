"""The calendar days a question names, and whether a memory was said near one of them.

"What did Paola cook on 21.01.2024?", "Where was Kate on 31 Dec 2023?", "What did Gina find on
1 February, 2023?": a question that names a day is about what was said that day, or in the
days after, when people tell each other what they did. Re-ranking (rerank.py) gives a
candidate said from the day before the named day to three days after it a feature of its own;
the day before because the index keeps UTC days and the owner's day may start earlier.

Written forms read: 21.01.2024 / 21/01/24 / 21-01-2024 (day first, and month first when that
is a date too: "05/01/2024" names both), 2024-01-21, "21 Jan 2024", "21st of January",
"January 21, 2024", "Jan 21st" (no year: that day of any year). Only these; no model call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date
from typing import NamedTuple

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = (
    r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_NUMERIC = re.compile(r"\b(\d{1,2})([./-])(\d{1,2})\2(\d{4}|\d{2})\b")
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_DAY_MONTH = re.compile(
    r"\b(\d{1,2})(?:st|nd|rd|th)?(?: of)? " + _MONTH + r",?(?: (\d{4}))?\b", re.IGNORECASE
)
_MONTH_DAY = re.compile(
    r"\b" + _MONTH + r" (\d{1,2})(?:st|nd|rd|th)?\b,?(?: (\d{4}))?", re.IGNORECASE
)
BEFORE, AFTER = 1, 3  # days around a named day that count as near it


class NamedDay(NamedTuple):
    """A day a text names; `year` None when it gave none (that day of any year)."""

    year: int | None
    month: int
    day: int


def named_days(text: str | None) -> frozenset[NamedDay]:
    """Every calendar day `text` names in one of the forms above (invalid dates left out)."""
    if not text or not any(ch.isdigit() for ch in text):
        return frozenset()
    found: set[NamedDay] = set()
    for first, _, second, year in _NUMERIC.findall(text):
        full = int(year) + (2000 if len(year) == 2 else 0)
        found |= {NamedDay(full, int(m), int(d)) for d, m in ((first, second), (second, first))}
    found |= {NamedDay(int(y), int(m), int(d)) for y, m, d in _ISO.findall(text)}
    for day, month, year in _DAY_MONTH.findall(text):
        found.add(NamedDay(int(year) if year else None, _month(month), int(day)))
    for month, day, year in _MONTH_DAY.findall(text):
        if month != "may" or year:  # "I may 3 times" is the verb
            found.add(NamedDay(int(year) if year else None, _month(month), int(day)))
    return frozenset(d for d in found if _valid(d))


def near_named_day(days: Iterable[date], named: frozenset[NamedDay]) -> bool:
    """Whether any of `days` is from BEFORE days before to AFTER days after a named day."""
    for said in days:
        for name in named:
            try:
                meant = date(name.year or said.year, name.month, name.day)
            except ValueError:  # 29 February of a year without one
                continue
            if -BEFORE <= (said - meant).days <= AFTER:
                return True
    return False


def _month(word: str) -> int:
    return _MONTHS.index(word[:3].lower()) + 1


def _valid(day: NamedDay) -> bool:
    try:
        date(day.year or 2000, day.month, day.day)  # 2000: a leap year, so 29 Feb stays
    except ValueError:
        return False
    return True
