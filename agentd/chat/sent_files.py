"""Files the user sent in a chat, as the chat_documents table keeps them (media/chatdocs.py
writes a row when a turn reads one): what tools about such a file ask."""

from __future__ import annotations

from typing import Any


def holds_sent_files(conn: Any, chat_id: int) -> bool:
    """A file was sent in this chat (a tool's `offered` read)."""
    query = "SELECT 1 FROM chat_documents WHERE chat_id = ? LIMIT 1"
    return conn.execute(query, (chat_id,)).fetchone() is not None
