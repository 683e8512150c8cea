"""The model the owner picked for a chat with `/model`: kept in `kv`, asked first for every turn
of that chat (the configured fallbacks still stand behind it)."""

from __future__ import annotations

from typing import Any

_KEY = "chat.model:{chat_id}"


def offered(llm: Any) -> list[str]:
    """The models a chat may be switched to: every configured one (the chat's, the fallbacks,
    the per-purpose ones), in the order the chat's chain tries them."""
    candidates = getattr(llm, "candidates", None)
    return [c.ref.label for c in candidates()] if candidates is not None else []


def chosen(conn: Any, chat_id: int) -> str | None:
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (_KEY.format(chat_id=chat_id),))
    found = row.fetchone()
    return str(found[0]) if found else None


def choose(conn: Any, chat_id: int, model: str | None) -> None:
    """Keep `model` for the chat; None: back to the configured one."""
    key = _KEY.format(chat_id=chat_id)
    if model is None:
        conn.execute("DELETE FROM kv WHERE key = ?", (key,))
        return
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
        "SET value = excluded.value",
        (key, model),
    )


async def for_turn(db: Any, llm: Any, chat_id: int) -> str | None:
    """The chat's model for a turn's first call, if it is still configured (a model taken out
    of the config since is forgotten quietly: the chat goes back to the default)."""
    models = offered(llm)
    if not models:
        return None
    model = await db.read(chosen, chat_id)
    return model if model in models else None
