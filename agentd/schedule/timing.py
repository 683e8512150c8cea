"""A request's runs, checked before anything is stored: a first run, and runs not too close.

dateutil finds a rule's next run by walking its periods, and a rule that never fires
('FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30') is walked to year 9999: seconds of CPU on a fast
machine, far more on a small one, and nothing in the search can be interrupted. So a rule from
the model or the command line is searched in a child process with a CPU budget (the parsing
package's `run_bounded`), never inside a transaction or on the event loop.
"""

from __future__ import annotations

import itertools
from dataclasses import astuple, dataclass
from typing import Any

from agentd.parsing.bounded import run_bounded
from agentd.parsing.budget import Budget, ParseFailed
from agentd.schedule.recurrence import Recurrence, ScheduleError, When, format_duration, resolve

# A sound rule finds its next runs in milliseconds (February 29th on a Monday, 28 years away,
# in 20 ms); the budget is a hundred times that and still well inside a tool's time limit.
SEARCH = Budget(seconds=8.0, cpu_seconds=2, answer_bytes=64 * 1024, lane="short")


@dataclass(frozen=True)
class Gap:
    """The closest two runs may be, and the words to refuse a rule by."""

    seconds: float
    noun: str  # "runs", "checks"
    setting: str  # the setting that holds `seconds`

    def check(self, rec: Recurrence, now: float) -> None:
        if rec.kind == "interval":
            gaps = [float(rec.every or 0)]
        elif rec.kind == "rrule":
            gaps = [b - a for a, b in itertools.pairwise(rec.upcoming(now, 6))]
        else:
            gaps = []
        if gaps and min(gaps) < self.seconds:
            raise ScheduleError(
                f"{self.noun} would be {format_duration(min(gaps))} apart; the minimum is "
                f"{format_duration(self.seconds)} ({self.setting})"
            )


def checked(when: When, timezone: str, now: float, gap: Gap) -> Recurrence:
    """`resolve`, then refuse a request with no run ahead or with runs closer than `gap`."""
    rec = resolve(when, timezone, now)
    gap.check(rec, now)
    if rec.next_after(now) is None:
        raise ScheduleError("this would never run; give a future time")
    return rec


def checked_job(data: bytes, *, timezone: str, now: float, gap: list[Any]) -> dict[str, Any]:
    """The child's side of `checked_bounded`."""
    when = When.model_validate_json(data)
    return checked(when, timezone, now, Gap(*gap)).model_dump()


async def checked_bounded(when: When, timezone: str, now: float, gap: Gap) -> Recurrence:
    """`checked`, with a calendar rule searched in a child with the `SEARCH` budget."""
    if not when.rrule:  # a time, a delay or an interval is arithmetic: nothing to search
        return checked(when, timezone, now, gap)
    data = when.model_dump_json(include=set(When.model_fields)).encode()
    try:
        found = await run_bounded(
            "agentd.schedule.timing:checked_job",
            data,
            SEARCH,
            timezone=timezone,
            now=now,
            gap=list(astuple(gap)),
        )
    except ParseFailed as exc:
        if exc.error_type == "ScheduleError":
            raise ScheduleError(str(exc)) from None
        if exc.kind == "limit":
            raise ScheduleError(
                f"no run of the rule {when.rrule!r} was found within {SEARCH.cpu_seconds} s of "
                "searching; check that its BY parts can meet (there is no February 30th)"
            ) from None
        raise ScheduleError(f"the rule {when.rrule!r} could not be searched: {exc}") from None
    return Recurrence.model_validate(found)
