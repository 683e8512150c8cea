"""m031_memory_versions on a database with memories already in it: they become the model's."""

from __future__ import annotations

from pathlib import Path

from agentd.db.connect import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations
from agentd.memory.store import NewMemory, add_memory, get_memory


def test_upgrade_keeps_memories_as_the_models(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m031_memory_versions")])
    conn.execute(
        "INSERT INTO memories (user_id, kind, content, created_at, updated_at)"
        " VALUES (1, 'summary', 'Talked about the garden', 0, 0)"
    )
    conn.commit()
    upto = MIGRATIONS[: names.index("m031_memory_versions") + 1]  # later ones are not its own
    assert apply_migrations(conn, upto) == ["m031_memory_versions"]
    old = get_memory(conn, 1)
    assert old is not None and old.origin == "model" and not old.pinned
    apply_migrations(conn)  # today's store writes today's columns
    new = add_memory(conn, NewMemory(user_id=1, kind="note", content="mine", origin="user"))
    assert get_memory(conn, new).origin == "user"  # type: ignore[union-attr]
    conn.close()
