"""Each user's language: what their Telegram client sends (`language_code`), or what they
chose with /language, which wins until they go back to `auto`.

It goes into every model call's context (agent/prompt.py), so an answer to a photo, a voice
note or a scheduled task, which carry no words of the user's to follow, is in their language,
with dates written as its readers write them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# An IETF language tag as Telegram sends them ("en", "pt-br", "zh-hans").
_TAG = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8}){0,3}$")


def valid(code: str) -> bool:
    return bool(_TAG.match(code))


def language_of(user: Any) -> str:
    """The language code of a Telegram User object; "" when absent or not a tag."""
    code = user.get("language_code") if isinstance(user, dict) else None
    return code.lower() if isinstance(code, str) and valid(code) else ""


def observe(conn: Any, user_id: int, code: str, now: float) -> None:
    """What the user's client says, kept when it changes (a chosen language still wins)."""
    if not code:
        return
    conn.execute(
        "INSERT INTO user_locales (user_id, telegram, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (user_id) DO UPDATE SET telegram = excluded.telegram,"
        " updated_at = excluded.updated_at WHERE telegram IS NOT excluded.telegram",
        (user_id, code, now),
    )


def choose(conn: Any, user_id: int, code: str | None, now: float) -> None:
    """/language CODE (or None: follow Telegram again)."""
    conn.execute(
        "INSERT INTO user_locales (user_id, chosen, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (user_id) DO UPDATE SET chosen = excluded.chosen,"
        " updated_at = excluded.updated_at",
        (user_id, code, now),
    )


def current(conn: Any, user_id: int) -> tuple[str, str]:
    """(language, where it comes from: "chosen", "telegram" or "" when unknown)."""
    row = conn.execute(
        "SELECT chosen, telegram FROM user_locales WHERE user_id = ?", (user_id,)
    ).fetchone()
    if row is None:
        return "", ""
    if row[0]:
        return str(row[0]), "chosen"
    return (str(row[1]), "telegram") if row[1] else ("", "")


def of_user(conn: Any, user_id: int, told: str = "") -> str:
    """The language to use for a user: theirs (`current`), else what their message `told`
    (a Telegram client's `language_code`); "" when neither says."""
    language, _ = current(conn, user_id)
    return language or told


def worded(texts: Mapping[str, str], language: str) -> str:
    """A fixed text in `language` from its translations (keyed by primary tag, "en" always
    there): "pt-br" reads "pt"; a language with none reads English."""
    tag = language.lower()
    return texts.get(tag) or texts.get(tag.split("-")[0]) or texts["en"]
