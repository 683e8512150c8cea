"""The words a message means in context: the message, plus what the recent turns say it means.

"What did she say about it?" has no word that finds anything: its keywords are stopwords and its
vector is that of any question. When a message leans on what came before (a referring word such
as she, it, there, or almost no words of its own), the names in the recent turns, newest first,
are added after it, at most MAX_CARRIED, so a long turn cannot drown the message.
A message that stands on its own is searched as it is: carrying words over from an earlier topic
only blurs a query that needs no help (benchmarks/README.md measures both).

No model call: a regex pass over a few short strings, microseconds per turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentd.retrieval.fts import STOPWORDS, normalise

# Words whose meaning is in an earlier turn.
REFERRING = frozenset(
    "he she it they him her them his hers its their theirs this that these those there"
    " then he's she's it's they're".split()
)
MAX_CARRIED = 8  # words taken from the recent turns
MIN_OWN_TERMS = 2  # a message with fewer content words of its own leans on its context
_WORD = re.compile(r"[^\W_]+(?:'[a-z]+)?")
# A name: a capital, then word characters and hyphens holding a small letter, not ending in a
# hyphen. Found as the capital's whole run of word characters and hyphens, then checked and
# trimmed in Python: as one regex (`\b[A-Z][\w-]*[a-z][\w-]*\b`) each capital of "A-A-A-…"
# backtracked over the rest of the run, quadratic.
_NAME_RUN = re.compile(r"\b[A-Z][\w-]*")
_LOWER = re.compile(r"[a-z]")


def _content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(normalise(text)) if w not in STOPWORDS and len(w) > 1]


def leans_on_context(message: str) -> bool:
    """Whether the message refers to something said before, or says too little on its own."""
    words = _WORD.findall(normalise(message))
    if any(w in REFERRING for w in words):
        return True
    return len(_content_words(message)) < MIN_OWN_TERMS


def _interjection(text: str, start: int, end: int) -> bool:
    """A capitalised word opening a sentence and ending it or a clause ("Nice!", "Thanks,"):
    an exclamation, not a name ("Anna loved it" keeps Anna)."""
    before = start
    while before and text[before - 1].isspace():
        before -= 1
    opens = before == 0 or text[before - 1] in ".!?"
    return opens and text[end : end + 1] in ("!", ",", ".", "?", "")


def carried_words(recent: Sequence[str], exclude: set[str], limit: int = MAX_CARRIED) -> list[str]:
    """Names in the recent turns (newest first) that are not in `exclude` (the message's own
    words), at most `limit`. Only names: carrying every content word of the turn before cost
    0.12 R@5 on the chat-form questions (benchmarks/README.md), names alone gained."""
    names: list[str] = []
    seen = set(exclude)
    for turn in reversed(recent):
        for match in _NAME_RUN.finditer(turn):
            if not _LOWER.search(match.group(0), 1):
                continue
            name = match.group(0).rstrip("-")
            if _interjection(turn, match.start(), match.start() + len(name)):
                continue
            key = normalise(name)
            if key not in seen and key not in STOPWORDS:
                seen.add(key)
                names.append(name)
    return names[:limit]


def words_in_context(message: str, recent: Sequence[str] = ()) -> str:
    """What recall should search with for `message`, given the chat's recent turns (oldest
    first; the owner's and the assistant's texts, without the message itself)."""
    if not recent or not leans_on_context(message):
        return message
    own = set(_content_words(message))
    extra = carried_words([t for t in recent if t and t.strip()], own)
    return f"{message} {' '.join(extra)}" if extra else message
