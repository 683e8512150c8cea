"""Nicknames learned from the talk itself, so a question that names "Joanna" also finds the
messages that call her "jo".

In a chat people call each other by short forms the display name does not show. When a stored
turn says who wrote it (`meta["speaker"]`), its speaker is recorded, and a word in a place where
one addresses someone ("hey jo", "thanks, jo!", "love you jo") that could be a short form of
exactly one other speaker's first name (shorter than it, sharing its first three letters, or
its first two for a two-letter word) counts once for that alias; the same word in such a place
in the named speaker's own messages counts once against it (nobody calls themselves "jo", but
they do start a message with "meeting"). An alias counts once its tally reaches MIN_SEEN; a
search then adds the aliases of the names in the question to its keyword query (never to what
the re-ranking reads as the question). Rule-based, no model call; "mom", or a nickname sharing
no beginning with the name ("Liz" for "Elizabeth"), is not learned.

Table `memory_aliases` (migration m073): one row per (user, alias, name); a speaker is a row
whose alias is their own first name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from agentd.retrieval.fts import STOPWORDS, normalise

Conn = Any
MIN_SEEN = 2  # an alias seen once may be a word that happens to start like a name
MAX_ALIASES = 4  # per name, the most seen first
# Words after which the next word is often the name of the one spoken to.
_GREETINGS = frozenset(
    "hi hey heya hiya hello yo morning night thanks thank thx ty congrats congratulations "
    "sorry love miss bye cheers dear oh ok okay omg wow aw aww".split()
)
_WORD = re.compile(r"[^\W\d_]+")


def first_name(speaker: str) -> str | None:
    words = _WORD.findall(normalise(speaker))
    return words[0] if words else None


def addressed_words(text: str) -> list[str]:
    """Words of a message in a place where one addresses someone: the first word, the last, and
    a word right after a greeting ("hey jo", "thanks jo")."""
    words = _WORD.findall(normalise(text))
    if not words:
        return []
    out = {words[0], words[-1]}
    out.update(b for a, b in pairwise(words) if a in _GREETINGS)
    return sorted(w for w in out if w not in STOPWORDS and w not in _GREETINGS)


def short_form(word: str, name: str) -> bool:
    """Whether `word` could be a nickname of the first name `name` ("jo", "caro", "mels")."""
    if len(word) < 2 or len(word) >= len(name):
        return False
    return name.startswith(word) if len(word) == 2 else word[:3] == name[:3]


def learn(conn: Conn, user_id: int, speaker: str, text: str) -> None:
    """Record a turn's speaker and tally the aliases its words give the speakers."""
    own = first_name(speaker)
    if own is None:
        return
    if text.startswith(f"{speaker}:"):  # "Name: text", as a transcript line carries it
        text = text[len(speaker) + 1 :]
    _count(conn, user_id, own, own, 1)
    names = [
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM memory_aliases WHERE user_id = ? AND alias = name AND name != ?",
            (user_id, own),
        )
    ]
    for word in addressed_words(text):
        if short_form(word, own):
            _count(conn, user_id, word, own, -1)
            continue
        matches = [n for n in names if short_form(word, n)]
        if len(matches) == 1:
            _count(conn, user_id, word, matches[0], 1)


def _count(conn: Conn, user_id: int, alias: str, name: str, delta: int) -> None:
    conn.execute(
        "INSERT INTO memory_aliases (user_id, alias, name, seen) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (user_id, alias, name) DO UPDATE SET seen = seen + excluded.seen",
        (user_id, alias, name, delta),
    )


def expand(conn: Conn, user_id: int, terms: Sequence[str]) -> list[str]:
    """The learned aliases of the names among the query's terms (lowercase), most seen first."""
    wanted = sorted({normalise(t) for t in terms})
    if not wanted:
        return []
    rows = conn.execute(
        "SELECT name, alias FROM memory_aliases"
        " WHERE user_id = ? AND name IN (SELECT value FROM json_each(?)) AND alias != name"
        " AND seen >= ? ORDER BY name, seen DESC, alias",
        (user_id, _json(wanted), MIN_SEEN),
    ).fetchall()
    out: list[str] = []
    per_name: dict[str, int] = {}
    for name, alias in rows:
        if per_name.get(name, 0) < MAX_ALIASES and alias not in wanted:
            per_name[name] = per_name.get(name, 0) + 1
            out.append(str(alias))
    return out


def _json(values: Sequence[str]) -> str:
    return json.dumps(list(values))
