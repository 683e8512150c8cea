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
