"""The calendar days a question names, and whether a memory was said near one of them.

"What did Paola cook on 21.01.2024?", "Where was Kate on 31 Dec 2023?", "What did Gina find on
1 February, 2023?": a question that names a day is about what was said that day, or in the
days after, when people tell each other what they did. Re-ranking (rerank.py) gives a
candidate said from the day before the named day to three days after it a feature of its own;
the day before because the index keeps UTC days and the owner's day may start earlier.

Written forms read: 21.01.2024 / 21/01/24 / 21-01-2024 (day first, and month first when that
is a date too: "05/01/2024" names both), 2024-01-21, "21 Jan 2024", "21st of January",
"January 21, 2024", "Jan 21st" (no year: that day of any year); and, when the caller says which
day it is, the English ones that name one past day: "yesterday", "the day before yesterday",
"3 days ago", "last Friday" (the most recent one before today). Not "today", "tonight" or "on
Monday": a message says them of what is planned as often as of what was said, and every such
message would lift the last days' memories. Only these; no model call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, timedelta
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
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# The words a time expression counts with ("three days ago", "a couple of weeks ago").
NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "few": 3,
    "couple of": 2,
}
_AGO = re.compile(r"\b(\d{1,2}|" + "|".join(NUMBER_WORDS) + r") days? ago\b", re.IGNORECASE)
_WEEKDAY = re.compile(r"\blast (" + "|".join(WEEKDAYS) + r")\b", re.IGNORECASE)
_BACK = {"the day before yesterday": 2, "yesterday": 1}
BEFORE, AFTER = 1, 3  # days around a named day that count as near it


class NamedDay(NamedTuple):
    """A day a text names; `year` None when it gave none (that day of any year)."""

    year: int | None
    month: int
    day: int


def named_days(text: str | None, today: date | None = None) -> frozenset[NamedDay]:
    """Every calendar day `text` names in one of the forms above (invalid dates left out); the
    relative ones only with `today`."""
    if not text:
        return frozenset()
    found = _relative_days(text, today) if today is not None else set()
    if not any(ch.isdecimal() for ch in text):
        return frozenset(found)
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
                meant = date(said.year if name.year is None else name.year, name.month, name.day)
            except ValueError:  # 29 February of a year without one
                continue
            if -BEFORE <= (said - meant).days <= AFTER:
                return True
    return False


def _relative_days(text: str, today: date) -> set[NamedDay]:
    low = text.casefold()
    back: set[int] = set()
    for phrase, days in _BACK.items():
        if re.search(rf"\b{phrase}\b", low):
            back.add(days)
            low = low.replace(phrase, " ")  # "the day before yesterday" is not also yesterday
    for count in _AGO.findall(low):
        back.add(int(count) if count.isdecimal() else NUMBER_WORDS[count])
    for weekday in _WEEKDAY.findall(low):
        back.add(days_since(weekday, today))
    meant = [today - timedelta(days=n) for n in back]
    return {NamedDay(d.year, d.month, d.day) for d in meant}


def days_since(weekday: str, today: date) -> int:
    """How many days back the last `weekday` (lower case) before `today` was: 1 to 7."""
    return (today.weekday() - WEEKDAYS.index(weekday)) % 7 or 7


def _month(word: str) -> int:
    return _MONTHS.index(word[:3].lower()) + 1


def _valid(day: NamedDay) -> bool:
    try:
        # No year: 2000, a leap year, so 29 February stays. Year 0 is none (and no "any year").
        date(2000 if day.year is None else day.year, day.month, day.day)
    except ValueError:
        return False
    return True
