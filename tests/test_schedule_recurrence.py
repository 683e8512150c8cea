"""Recurrence in IANA zones: wall-clock rules across DST, the gap/overlap rule, bad input."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr

from agentd.schedule.recurrence import Recurrence, ScheduleError, When, parse_duration, resolve

BERLIN = ZoneInfo("Europe/Berlin")


def ts(text: str, zone: ZoneInfo = BERLIN) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def local(t: float) -> str:
    return datetime.fromtimestamp(t, BERLIN).strftime("%Y-%m-%d %H:%M %Z")


def test_daily_0800_stays_at_0800_local_across_spring_forward() -> None:
    now = ts("2026-03-27T12:00")
    rec = resolve(When(rrule="FREQ=DAILY;BYHOUR=8;BYMINUTE=0"), "Europe/Berlin", now)
    runs = rec.upcoming(now, 4)
    assert [local(t) for t in runs] == [
        "2026-03-28 08:00 CET",
        "2026-03-29 08:00 CEST",
        "2026-03-30 08:00 CEST",
        "2026-03-31 08:00 CEST",
    ]
    assert [utc(t) for t in runs[:2]] == ["2026-03-28 07:00", "2026-03-29 06:00"]


def test_daily_0800_across_fall_back() -> None:
    now = ts("2026-10-24T12:00")
    rec = resolve(When(rrule="FREQ=DAILY;BYHOUR=8;BYMINUTE=0"), "Europe/Berlin", now)
    assert [utc(t) for t in rec.upcoming(now, 2)] == ["2026-10-25 07:00", "2026-10-26 07:00"]


def test_a_time_that_does_not_exist_runs_after_the_gap() -> None:
    # 2026-03-29 02:30 does not exist in Berlin (02:00 → 03:00): it runs at 03:30 CEST.
    now = ts("2026-03-28T12:00")
    rec = resolve(When(rrule="FREQ=DAILY;BYHOUR=2;BYMINUTE=30"), "Europe/Berlin", now)
    assert [local(t) for t in rec.upcoming(now, 3)] == [
        "2026-03-29 03:30 CEST",
        "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST",
    ]


def test_a_time_that_exists_twice_runs_once_at_the_first() -> None:
    # 2026-10-25 02:30 happens twice in Berlin (CEST, then CET): one run, the first.
    now = ts("2026-10-24T12:00")
    rec = resolve(When(rrule="FREQ=DAILY;BYHOUR=2;BYMINUTE=30"), "Europe/Berlin", now)
    runs = rec.upcoming(now, 2)
    assert [utc(t) for t in runs] == ["2026-10-25 00:30", "2026-10-26 01:30"]
    # Asked from between the two 02:30s, the repeated one is not run again.
    assert utc(rec.next_after(runs[0] + 1800) or 0) == "2026-10-26 01:30"


def test_one_off_at_a_nonexistent_local_time_follows_the_same_rule() -> None:
    rec = resolve(When(at="2026-03-29T02:30"), "Europe/Berlin", ts("2026-03-01T00:00"))
    assert local(rec.at or 0) == "2026-03-29 03:30 CEST"


def test_until_in_utc_as_rfc_5545_writes_it_ends_the_rule_then() -> None:
    # A start in a zone takes UNTIL in UTC; 07:00Z on the 23rd is 08:00 CET, the last run.
    now = ts("2026-11-20T12:00")
    rule = "FREQ=DAILY;BYHOUR=8;BYMINUTE=0;UNTIL=20261123T070000Z"
    rec = resolve(When(rrule=rule), "Europe/Berlin", now)
    assert [local(t) for t in rec.upcoming(now, 5)] == [
        "2026-11-21 08:00 CET",
        "2026-11-22 08:00 CET",
        "2026-11-23 08:00 CET",
    ]
    with pytest.raises(ScheduleError, match="no occurrence"):
        resolve(When(rrule="FREQ=DAILY;UNTIL=20200101T000000Z"), "Europe/Berlin", now)


def test_weekdays_rule_skips_the_weekend() -> None:
    now = ts("2026-11-20T09:00")  # a Friday, after 08:00
    rule = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8;BYMINUTE=0"
    rec = resolve(When(rrule=rule), "Europe/Berlin", now)
    days = [datetime.fromtimestamp(t, BERLIN).strftime("%a %H:%M") for t in rec.upcoming(now, 3)]
    assert days == ["Mon 08:00", "Tue 08:00", "Wed 08:00"]


def test_interval_is_elapsed_time_not_wall_clock() -> None:
    now = ts("2026-03-29T00:30")
    rec = resolve(When(every="1h"), "Europe/Berlin", now)
    runs = rec.upcoming(now, 3)
    assert [b - a for a, b in itertools.pairwise(runs)] == [3600, 3600]
    assert [local(t)[11:] for t in runs] == ["01:30 CET", "03:30 CEST", "04:30 CEST"]


def test_relative_one_off_and_start_anchor() -> None:
    now = 1_800_000_000.0
    assert resolve(When(after="20m"), "UTC", now).at == int(now) + 1200
    rec = resolve(When(every="1d", start="2030-01-01T09:00"), "Asia/Tokyo", now)
    assert datetime.fromtimestamp(rec.next_after(now) or 0, ZoneInfo("Asia/Tokyo")).hour == 9


@pytest.mark.parametrize(
    ("when", "zone", "fragment"),
    [
        (When(at="2020-01-01T09:00"), "UTC", "in the past"),
        (When(at="tomorrow at 9"), "UTC", "ISO 8601"),
        (When(after="soon"), "UTC", "duration"),
        (When(after="20m", every="1h"), "UTC", "exactly one"),
        (When(), "UTC", "exactly one"),
        (When(rrule="FREQ=SOMETIMES"), "UTC", "invalid RRULE"),
        (When(rrule="FREQ=DAILY;COUNT=1", start="2020-01-01T00:00"), "UTC", "no occurrence"),
        (When(after="1h"), "Mars/Olympus", "unknown time zone"),
        (When(after="1h"), "Europe", "unknown time zone"),  # a folder of the zone database
        (When(after="1h"), "Europe/" + "x" * 300, "unknown time zone"),  # too long for a path
        (When(after="1h", start="2030-01-01T00:00"), "UTC", "start applies only"),
        (When(after="100000000w"), "UTC", "too far ahead"),
        (When(at="9999-12-31T23:30"), "America/New_York", "too far ahead"),  # UTC year 10000
        (When(every="1d", start="9999-12-31T00:00"), "UTC", "too far ahead"),
        (When(every="9" * 400 + "s"), "UTC", "too long"),
    ],
)
def test_bad_requests_say_what_to_fix(when: When, zone: str, fragment: str) -> None:
    with pytest.raises(ScheduleError, match=fragment):
        resolve(when, zone, 1_800_000_000.0)


def test_no_run_falls_past_the_last_date_a_zone_can_show() -> None:
    # A run time after 9999-12-31 in its zone (or in UTC) cannot be shown, so it is not a run:
    # the schedule ends instead of breaking every listing of the owner's schedules.
    for zone, when in [
        ("Pacific/Kiritimati", When(every="1d")),  # UTC+14
        ("America/New_York", When(rrule="FREQ=DAILY;BYHOUR=23;BYMINUTE=30")),
    ]:
        now = ts("9999-12-20T00:00", ZoneInfo(zone))
        runs = resolve(when, zone, now).upcoming(now, 30)
        assert 5 < len(runs) < 30
        assert datetime.fromtimestamp(runs[-1], ZoneInfo(zone)).year == 9999


@pytest.mark.timeout(10)  # without the check, dateutil loops forever on INTERVAL=0
@pytest.mark.parametrize("interval", ["0", "-1", " 0", "00"])
def test_an_interval_of_zero_is_refused_not_looped_on(interval: str) -> None:
    with pytest.raises(ScheduleError, match="INTERVAL must be a whole number of at least 1"):
        resolve(When(rrule=f"FREQ=DAILY;INTERVAL={interval}"), "UTC", 1_800_000_000.0)


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90") == 90
    assert parse_duration("1.5d") == 129600


def _random_rule(rnd: random.Random) -> str:
    parts = [f"FREQ={rnd.choice(['WEEKLY', 'DAILY', 'HOURLY', 'MINUTELY'])}"]
    parts.append(f"INTERVAL={rnd.choice([1, 1, 2, 3, 5, 13])}")
    picks = {
        "BYDAY": lambda: ",".join(rnd.sample(["MO", "TU", "WE", "TH", "FR", "SA", "SU"], 2)),
        "BYHOUR": lambda: ",".join(str(h) for h in rnd.sample(range(24), 3)),
        "BYMINUTE": lambda: ",".join(str(m) for m in rnd.sample(range(60), 2)),
        "BYMONTHDAY": lambda: str(rnd.choice([1, 13, 28, 31, -1])),
        "BYMONTH": lambda: ",".join(str(m) for m in rnd.sample(range(1, 13), 6)),
        "BYSETPOS": lambda: str(rnd.choice([1, -1])),
        "WKST": lambda: rnd.choice(["MO", "SU", "WE"]),
        "UNTIL": lambda: "20270301T000000",
    }
    parts += [f"{key}={pick()}" for key, pick in picks.items() if rnd.random() < 0.4]
    return ";".join(parts)


def test_an_old_rule_finds_the_same_runs_as_a_walk_from_its_start() -> None:
    """A rule is looked up from its last whole period before now, not walked from its start:
    the runs found must be the ones dateutil finds walking from the start."""
    rnd = random.Random(5545)
    checked = 0
    for _ in range(600):
        rule = _random_rule(rnd)
        start = datetime(2026, 9, 1) + timedelta(seconds=rnd.randrange(40 * 86400))
        now = start + timedelta(seconds=rnd.randrange(90 * 86400))
        try:
            walked = list(itertools.islice(rrulestr(rule, dtstart=start).xafter(now), 5))
        except ValueError:  # dateutil refuses some mixes of INTERVAL and BYHOUR
            continue
        rec = Recurrence(kind="rrule", timezone="UTC", rule=rule, dtstart=start.isoformat())
        found = rec.upcoming(now.replace(tzinfo=UTC).timestamp(), 5)
        assert found == [int(d.replace(tzinfo=UTC).timestamp()) for d in walked], (rule, start)
        checked += 1
    assert checked > 400


def test_a_weekly_set_position_is_picked_in_whole_weeks() -> None:
    # dateutil's first week starts on the start's day: a rule started again mid-week would
    # pick the first of Friday alone (Fri 20th), where the rule picks Monday of each week.
    rule = "FREQ=WEEKLY;BYDAY=MO,FR;BYSETPOS=1"
    start, now = datetime(2026, 9, 2, 9, 0), datetime(2026, 11, 19, 10, 0)  # Wed, a Thu
    rec = Recurrence(kind="rrule", timezone="UTC", rule=rule, dtstart=start.isoformat())
    found = rec.upcoming(now.replace(tzinfo=UTC).timestamp(), 2)
    assert [utc(t) for t in found] == ["2026-11-23 09:00", "2026-11-30 09:00"]


def test_a_minutely_rule_started_long_ago_is_looked_up_at_once() -> None:
    # Walking from year 1 would take a billion periods (hours) on every lookup.
    now = datetime(2026, 12, 7, 10, 2, 30, tzinfo=UTC).timestamp()
    rec = resolve(When(rrule="FREQ=MINUTELY;INTERVAL=5", start="0001-01-01T00:01"), "UTC", now)
    assert [utc(t) for t in rec.upcoming(now, 2)] == ["2026-12-07 10:06", "2026-12-07 10:11"]


@pytest.mark.parametrize(
    "rule",
    ["FREQ=MONTHLY;BYMONTHDAY=0", "FREQ=MONTHLY;BYMONTHDAY=15,-0", "FREQ=YEARLY;BYYEARDAY=00"],
)
def test_a_day_numbered_zero_is_refused_not_run_every_day(rule: str) -> None:
    # dateutil drops the 0: "monthly on day 0" would have run every day.
    with pytest.raises(ScheduleError, match=r"counts from 1 .*cannot hold 0"):
        resolve(When(rrule=rule), "UTC", 1_800_000_000.0)
