"""The provenance migration on a database from before it, and a column added twice."""

from __future__ import annotations

from pathlib import Path

from agentd.db import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations


def test_origins_are_added_to_an_older_database_and_a_present_column_is_skipped(
    tmp_path: Path,
) -> None:
    conn = open_sync(tmp_path / "old.db")
    try:
        apply_migrations(conn, [m for m in MIGRATIONS if m[0] != "m032_provenance"])
        conn.execute(
            "INSERT INTO messages (chat_id, user_id, role, content, created_at, source_key, meta)"
            " VALUES (1, 1, 'user', '[Forwarded message written by Eve, not by the user: x', 0,"
            " 'a', '{}'), (1, 1, 'user', 'mine', 0, 'b', '{}'),"
            " (1, NULL, 'assistant', 'ok', 0, 'c', '{}')"
        )
        assert apply_migrations(conn) == ["m032_provenance"]
        rows = conn.execute("SELECT role, origin FROM messages ORDER BY id").fetchall()
        assert [tuple(r) for r in rows] == [
            ("user", "outside"),
            ("user", "user"),
            ("assistant", "model"),
        ]
        # Another branch of work may add the same memory columns first: skipped, no error.
        conn.execute("DELETE FROM schema_migrations WHERE name = 'm032_provenance'")
        conn.execute("DROP TABLE fetch_host_rules")
        conn.execute("DROP TABLE fetch_host_offers")
        assert apply_migrations(conn) == ["m032_provenance"]
        columns = [r[1] for r in conn.execute("PRAGMA table_info(memories)")]
        assert columns.count("origin") == 1 and columns.count("origin_ref") == 1
    finally:
        conn.close()
