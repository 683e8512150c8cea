"""The user's language as stored: Telegram's code, a chosen one that wins, and auto."""

from __future__ import annotations

from agentd.chat import locale
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations


def test_language_of_a_telegram_user() -> None:
    assert locale.language_of({"id": 1, "language_code": "pt-BR"}) == "pt-br"
    assert locale.language_of({"id": 1, "language_code": "'; DROP"}) == ""
    assert locale.language_of({"id": 1}) == "" and locale.language_of(None) == ""


def test_chosen_wins_until_auto(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conn = open_sync(tmp_path / "l.db")
    apply_migrations(conn)
    assert locale.current(conn, 7) == ("", "")
    locale.observe(conn, 7, "de", 1.0)
    assert locale.current(conn, 7) == ("de", "telegram")
    locale.choose(conn, 7, "fr", 2.0)
    locale.observe(conn, 7, "en", 3.0)  # the client changed: kept, but the choice wins
    assert locale.current(conn, 7) == ("fr", "chosen")
    locale.choose(conn, 7, None, 4.0)
    assert locale.current(conn, 7) == ("en", "telegram")
    conn.close()
