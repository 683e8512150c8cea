"""Outside data stays bounded: a SECONDLY calendar rule expands in the bounded child to a
short list, far-past open rules start near the range, and a parse child's answer is capped
in the parent."""

from __future__ import annotations

import resource
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from icalendar import Calendar

from agentd.calendar.events import MAX_PER_EVENT, Occurrence, expand
from agentd.parsing.bounded import run_bounded
from agentd.parsing.budget import Budget, ParseFailed

UTC = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")
DAY = datetime(2026, 11, 27, tzinfo=UTC)


def _ics(rule: str, start: str = "20260101T000000Z", extra: str = "") -> bytes:
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:x\r\nBEGIN:VEVENT\r\nUID:bomb\r\n"
        f"DTSTART:{start}\r\nDURATION:PT1S\r\nSUMMARY:bomb\r\nRRULE:{rule}\r\n{extra}"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    ).encode()


async def test_a_secondly_rule_lists_one_day_in_the_bounded_child() -> None:
    # The child's own budget is the bound: 256 MB of address space and 10 s of CPU; the
    # unclamped rule needs about 729 MB and 47 s for this one day.
    budget = Budget(seconds=60, cpu_seconds=10, memory_bytes=256 * 1024 * 1024)
    found = await run_bounded(
        "agentd.calendar.events:expand_job",
        _ics("FREQ=SECONDLY"),
        budget,
        start=DAY.isoformat(),
        end=(DAY + timedelta(days=1)).isoformat(),
        zone="UTC",
    )
    occurrences = [Occurrence.model_validate(o) for o in found]
    assert 0 < len(occurrences) <= 96  # at most one each 15 minutes
    assert all(DAY <= o.start < DAY + timedelta(days=1) for o in occurrences)


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=MINUTELY",
        "FREQ=HOURLY;BYMINUTE=0,1,2,3,4,5,6,7,8,9,10;BYSECOND=0,1,2,3,4,5,6,7,8,9",
        "FREQ=SECONDLY;BYSECOND=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
    ],
)
def test_dense_rules_are_clamped(rule: str) -> None:
    found = expand(Calendar.from_ical(_ics(rule)), DAY, DAY + timedelta(days=1), UTC)
    assert 0 < len(found) <= min(MAX_PER_EVENT, 96)


def test_a_far_past_open_rule_keeps_its_phase_and_costs_little() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    found = expand(
        Calendar.from_ical(_ics("FREQ=HOURLY;INTERVAL=5", start="19000101T030000Z")),
        DAY,
        DAY + timedelta(days=1),
        UTC,
    )
    # Every 5 hours from 1900-01-01 03:00: the phase on 2026-11-27 is kept.
    first = datetime(1900, 1, 1, 3, tzinfo=UTC)
    step = timedelta(hours=5)
    expected = first + step * -((first - DAY) // step)  # the first one on or after DAY
    want = [expected + step * n for n in range(5) if expected + step * n < DAY + timedelta(days=1)]
    assert [o.start for o in found] == want
    assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - before < 5.0


def test_a_weekly_rule_in_a_zone_keeps_its_wall_clock_time() -> None:
    ics = (
        b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:x\r\nBEGIN:VEVENT\r\nUID:w\r\n"
        b"DTSTART;TZID=Europe/Berlin:19900105T090000\r\nDURATION:PT30M\r\nSUMMARY:w\r\n"
        b"RRULE:FREQ=WEEKLY\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    start = datetime(2026, 11, 23, tzinfo=BERLIN)
    found = expand(Calendar.from_ical(ics), start, start + timedelta(days=7), BERLIN)
    assert [(o.start.weekday(), o.start.hour) for o in found] == [(4, 9)]  # Friday 09:00


async def test_a_childs_answer_is_capped_in_the_parent() -> None:
    with pytest.raises(ParseFailed, match="answer passed") as caught:
        await run_bounded(
            "agentd.parsing.html_text:plain_job",
            b"<p>" + b"x" * 200_000 + b"</p>",
            Budget(answer_bytes=10_000),
        )
    assert caught.value.kind == "limit"


async def test_an_invitation_counting_a_billion_from_1900_does_not_stop_the_calendar() -> None:
    # Walking its COUNT from 1900 would take the child past its budget (the whole calendar
    # failed); a COUNT the rule cannot reach before the range ends changes nothing in it.
    found = await run_bounded(
        "agentd.calendar.events:expand_job",
        _ics("FREQ=MINUTELY;COUNT=1000000000", start="19000101T000000Z"),
        Budget(seconds=60, cpu_seconds=10, memory_bytes=256 * 1024 * 1024),
        start=DAY.isoformat(),
        end=(DAY + timedelta(days=1)).isoformat(),
        zone="UTC",
    )
    assert 0 < len(found) <= 96


@pytest.mark.parametrize(("count", "days"), [(3, [27]), (2, []), (4, [27])])
def test_a_count_the_range_can_reach_is_kept(count: int, days: list[int]) -> None:
    ics = _ics(f"FREQ=DAILY;COUNT={count}", start="20261125T090000Z")
    found = expand(Calendar.from_ical(ics), DAY, DAY + timedelta(days=1), UTC)
    assert [o.start.day for o in found] == days
