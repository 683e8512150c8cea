"""The dashboard's tables come with the rest of the schema, by the same named migration the
standalone `agentd dashboard` applied first: a database it migrated is not migrated twice."""

from __future__ import annotations

from pathlib import Path

from agentd.db import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations


def _tables(conn: object) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}  # type: ignore[attr-defined]


def test_a_fresh_database_has_the_dashboard_tables(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "a.db")
    assert "m028_dashboard" in apply_migrations(conn)
    assert {"dashboard_logins", "dashboard_sessions"} <= _tables(conn)
    assert apply_migrations(conn) == []


def test_a_database_the_standalone_dashboard_migrated_is_not_migrated_twice(
    tmp_path: Path,
) -> None:
    conn = open_sync(tmp_path / "b.db")
    names = [name for name, _ in MIGRATIONS]
    older = MIGRATIONS[: names.index("m028_dashboard")]
    apply_migrations(conn, older)
    # What the standalone command applied: the same name and tables, recorded once.
    apply_migrations(conn, [m for m in MIGRATIONS if m[0] == "m028_dashboard"])
    conn.execute("INSERT INTO dashboard_sessions VALUES ('h', 1, 2, 'k')")
    conn.commit()
    later = apply_migrations(conn)
    assert "m028_dashboard" not in later
    assert conn.execute("SELECT COUNT(*) FROM dashboard_sessions").fetchone()[0] == 1
