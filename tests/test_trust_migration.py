"""m021_trust_access upgrades a database from before owners: old approvals still read and
decide, their cards stay in the call's own chat."""

from __future__ import annotations

from pathlib import Path

from agentd.access import approvals
from agentd.db import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations


def test_trust_migration_upgrades_an_older_database(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m021_trust_access")])
    with conn:
        conn.execute(
            "INSERT INTO approvals (id, instance_id, tool_use_id, chat_id, user_id, tool, risk, "
            "args_digest, args_preview, status, created_at, expires_at, message_id) "
            "VALUES ('oldapproval1', 'i', 't', 42, 42, 'x', 'high', 'd', 'path: /a', "
            "'pending', 0, 10, 5)"
        )
        conn.execute(
            "INSERT INTO llm_usage (at, chat_id, purpose, model, input_tokens, output_tokens, "
            "cache_read_tokens, cache_write_tokens) VALUES (1, 42, 'turn', 'm', 1, 1, 0, 0)"
        )
    assert "m021_trust_access" in apply_migrations(conn)
    old = approvals.get(conn, "oldapproval1")
    assert old is not None and old.card_chat == 42 and old.call_json is None
    assert conn.execute("SELECT user_id FROM llm_usage").fetchone()[0] is None
    conn.execute("SELECT added_by FROM doc_documents").fetchall()
    assert apply_migrations(conn) == []
