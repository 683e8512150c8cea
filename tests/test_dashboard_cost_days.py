"""The Cost page's daily rollup: finished days summed once into llm_usage_days, the rest read
from the calls; the totals are the same either way, and a day is never added twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentd.dashboard import spend
from agentd.db.connect import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations

DAY = 86400
NOW = 20_000 * DAY + 15 * 3600  # 15:00 UTC on day 20000


def _calls(conn: Any) -> None:
    """Ten days of calls, two users and two models, one of them a compacted day (calls=5)."""
    for day in range(20_000 - 9, 20_001):
        for hour in (1, 12, 23):
            at = day * DAY + hour * 3600
            user = 1 if hour < 20 else 2
            model = "claude-haiku-4-5" if hour != 12 else "claude-sonnet-4-5"
            conn.execute(
                "INSERT INTO llm_usage (at, purpose, user_id, model, input_tokens, "
                "output_tokens, cache_read_tokens, calls) VALUES (?, 'turn', ?, ?, ?, 7, 3, ?)",
                (at, user, model, 100 + hour, 5 if day == 19_995 and hour == 1 else 1),
            )
    conn.commit()


def _db(tmp_path: Path) -> Any:
    conn = open_sync(tmp_path / "c.db")
    apply_migrations(conn)
    # Rows written after the migration with past times (as a generator does): start over.
    conn.execute("DELETE FROM kv WHERE key = ?", (spend.UNTIL_KEY,))
    _calls(conn)
    return conn


def _sorted(groups: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {k: sorted(v, key=lambda r: r["label"]) for k, v in groups.items()}


def test_the_rollup_changes_no_figure(tmp_path: Path) -> None:
    conn = _db(tmp_path)
    since = NOW - 7.5 * DAY  # a partial first day, whole days, and today
    before = spend.groups(conn, since, None)
    conn.execute("BEGIN IMMEDIATE")
    assert spend.roll_up(conn, NOW) == 20_000
    assert spend.roll_up(conn, NOW) == 0  # nothing twice
    conn.execute("COMMIT")
    assert spend.rolled_until(conn) == 20_000
    rolled = conn.execute("SELECT COUNT(*) FROM llm_usage_days").fetchone()[0]
    assert rolled == 9 * 3  # nine finished days; today stays with the calls
    after = spend.groups(conn, since, None)
    assert _sorted(after) == _sorted(before)
    # Day 19993 from 03:00 (two calls), six whole days (one compacted: four more), today.
    assert sum(r["calls"] for r in after["day"]) == 2 + 6 * 3 + 4 + 3
    assert {r["label"] for r in after["user"]} == {"1", "2"}


def test_a_day_is_rolled_up_an_hour_after_it_ends(tmp_path: Path) -> None:
    conn = _db(tmp_path)
    conn.execute("BEGIN IMMEDIATE")
    spend.roll_up(conn, 20_000 * DAY + 1800)  # half an hour into the day: yesterday waits
    conn.execute("COMMIT")
    assert spend.rolled_until(conn) == 19_999
    conn.execute("BEGIN IMMEDIATE")
    assert spend.roll_up(conn, 20_000 * DAY + 3601) == 1
    conn.execute("COMMIT")
    year = spend.groups(conn, NOW - 365 * DAY, None)
    assert sum(r["calls"] for r in year["day"]) == 10 * 3 + 4  # the compacted row's five


def test_the_migration_rolls_up_the_days_already_over(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "m.db")
    names = [n for n, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m028_dashboard_cost_days")])
    _calls(conn)  # days long over by the time the migration runs
    assert apply_migrations(conn)[0] == "m028_dashboard_cost_days"
    assert spend.rolled_until(conn) > 20_000
    assert conn.execute("SELECT SUM(calls) FROM llm_usage_days").fetchone()[0] == 34
