"""m007_schedules upgrades a database created before scheduling existed."""

from __future__ import annotations

from pathlib import Path

from agentd.db import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations


def test_schedules_migration_upgrades_an_older_database(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m007_schedules")])
    assert "m007_schedules" in apply_migrations(conn)
    conn.execute("SELECT id, state, next_run FROM schedules").fetchall()
    conn.execute("SELECT schedule_id, due, outcome FROM schedule_runs").fetchall()
    assert apply_migrations(conn) == []


def test_a_run_time_past_9999_stored_by_an_earlier_version_is_repaired(tmp_path: Path) -> None:
    from agentd.schedule.recurrence import LAST_RUN

    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m085_runs_past_9999")])
    for sid, next_run in (("far", 1e12), ("soon", 1_800_000_000.0)):
        conn.execute(
            "INSERT INTO schedules (id, user_id, chat_id, chat_kind, action, text, recurrence, "
            "timezone, catch_up, state, next_run, created_at, updated_at, created_by) VALUES "
            "(?, 7, 7, 'private', 'message', 'x', '{}', 'UTC', 'once', 'active', ?, 0, 0, 'cli')",
            (sid, next_run),
        )
    conn.execute(
        "INSERT INTO watches (id, user_id, chat_id, chat_kind, label, source, condition, "
        "recurrence, catch_up, state, next_run, created_at, updated_at, created_by) VALUES "
        "('w', 7, 7, 'private', 'x', '{}', 'c', '{}', 'skip', 'active', 1e12, 0, 0, 'cli')"
    )
    conn.commit()
    assert "m085_runs_past_9999" in apply_migrations(conn)
    rows = conn.execute("SELECT id, state, next_run FROM schedules ORDER BY id").fetchall()
    assert [tuple(r) for r in rows] == [("far", "done", None), ("soon", "active", 1.8e9)]
    assert tuple(conn.execute("SELECT state, next_run FROM watches").fetchone()) == ("paused", None)
    assert 253402128000 == LAST_RUN  # the migration's figure is the schedules' last run time
