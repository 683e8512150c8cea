"""The provenance migration on a database from before it."""

from __future__ import annotations

from pathlib import Path

from agentd.db import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations


def test_origins_are_added_to_an_older_database(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    try:
        # A database from before it holds none of the later ones either (m046 rebuilds the
        # host rules m032 made).
        names = [name for name, _ in MIGRATIONS]
        apply_migrations(conn, MIGRATIONS[: names.index("m032_provenance")])
        conn.execute(
            "INSERT INTO messages (chat_id, user_id, role, content, created_at, source_key, meta)"
            " VALUES (1, 1, 'user', '[Forwarded message written by Eve, not by the user: x', 0,"
            " 'a', '{}'), (1, 1, 'user', 'mine', 0, 'b', '{}'),"
            " (1, NULL, 'assistant', 'ok', 0, 'c', '{}')"
        )
        assert apply_migrations(conn) == names[names.index("m032_provenance") :]
        rows = conn.execute("SELECT role, origin FROM messages ORDER BY id").fetchall()
        assert [tuple(r) for r in rows] == [
            ("user", "outside"),
            ("user", "user"),
            ("assistant", "model"),
        ]
    finally:
        conn.close()
