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


def test_host_rules_made_global_are_scoped_to_their_cards_chat_and_user(tmp_path: Path) -> None:
    """m046: an old "Always allow" rule holds where its card was, for its user; a rule whose
    card is gone cannot be placed and is dropped (the next card offers it again)."""
    from agentd.tools import hostrules

    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m046_host_rule_scope")])
    with conn:
        conn.execute(
            "INSERT INTO approvals (id, instance_id, tool_use_id, chat_id, user_id, tool, risk, "
            "args_digest, args_preview, status, created_at, expires_at) VALUES ('card1', 'i', "
            "'t', -100, 43, 'fetch_url', 'high', 'd', 'url', 'approved', 0, 10)"
        )
        for host, card in (("en.wikipedia.org", "card1"), ("gone.example", "card9")):
            conn.execute(
                "INSERT INTO fetch_host_rules (host, created_at, created_by, approval_id) "
                "VALUES (?, 1, 'telegram:42', ?)",
                (host, card),
            )
    assert "m046_host_rule_scope" in apply_migrations(conn)
    rules = hostrules.list_rules(conn)
    assert [(r.host, r.chat_id, r.user_id) for r in rules] == [("en.wikipedia.org", -100, 43)]
    assert hostrules.allowed_hosts(conn, -100, 43) == ["en.wikipedia.org"]
    assert hostrules.allowed_hosts(conn, 42, 42) == [] == hostrules.allowed_hosts(conn, -100, 42)
    # The same host may be allowed again elsewhere, each rule for its own chat and user.
    with conn:
        hostrules.add_rule(conn, "en.wikipedia.org", 42, 42, "telegram:42", None)
    assert hostrules.allowed_hosts(conn, 42, 42) == ["en.wikipedia.org"]
    assert apply_migrations(conn) == []


def test_documents_added_from_a_chat_keep_one_name_across_the_rename(tmp_path: Path) -> None:
    """m083: a document added from a chat was named "telegram:<chat>/<file>" on every channel;
    it becomes "chat:<chat>/<file>", the name media/chatdocs.py gives now, and nothing else
    (a file's path, a URL) is touched."""
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m083_chat_document_sources")])
    rows = [
        ("telegram:42/boiler.pdf", "telegram:42/boiler.pdf"),
        ("/home/me/notes/telegram:x.md", "/home/me/notes"),
        ("https://example.org/telegram:y", "https://example.org/"),
    ]
    with conn:
        for source, root in rows:
            conn.execute(
                "INSERT INTO doc_documents (source, kind, root, format, content_hash, "
                "created_at, updated_at) VALUES (?, 'file', ?, 'pdf', 'h', 0, 0)",
                (source, root),
            )
    assert "m083_chat_document_sources" in apply_migrations(conn)
    found = conn.execute("SELECT source, root FROM doc_documents ORDER BY id").fetchall()
    assert [tuple(r) for r in found] == [
        ("chat:42/boiler.pdf", "chat:42/boiler.pdf"),
        *rows[1:],
    ]
