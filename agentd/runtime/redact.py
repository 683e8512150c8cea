"""The redactor: every secret the daemon knows, and the escaped forms code writes it in, out of
whatever it would write (a log line, a journaled error, a tool's result for the model).

One instance per process, made at start from the configured secrets and handed to the log
formatter, the engine and everything that learns a secret later (a Matrix access token from
a password login, a signed-in browser profile's cookies): `learn` adds a value for every user
of that one instance at once.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterable, Iterator
from urllib.parse import quote, quote_plus

# Shorter values would blank out common words all over the log.
MIN_SECRET_LENGTH = 6
# Values learned at run time kept at most (the oldest go first): each costs every line one
# more substring search (about 0.4 us on a 2 KB line), and a site's cookies are many.
MAX_LEARNED = 128
REDACTED = "[REDACTED]"
# What an HTTP client leaves unencoded around a value: nothing, a path's "/", and the
# sub-delimiters yarl (aiohttp's URLs) keeps in a query value and in a path segment.
_URL_SAFE = ("", "/", "/?:@!$'()*,~", "/:@!$&'()*+,;=~")
# What no URL encoding, repr() or JSON escapes: every form of a secret holds these runs as is.
_UNESCAPED = re.compile(r"[A-Za-z0-9_.~-]+")
_PERCENT = re.compile(r"%[0-9A-F]{2}")
# Base64 credentials that name their scheme or command, written in any case (an HTTP auth
# scheme is case-insensitive, RFC 9110 §11.1, and so are SMTP's and IMAP's commands): HTTP
# Basic (RFC 7617, "user:secret"), SMTP's AUTH and IMAP's AUTHENTICATE with an initial
# response (PLAIN: NUL, user, NUL, secret; LOGIN; XOAUTH2: the token). The gates are searched
# for in the line in lower case; the pattern is tried only where one was found.
_BASIC_GATE, _AUTH_GATE = "basic", "auth"
_CREDENTIAL = re.compile(
    r"(?:basic|auth(?:enticate)? +[a-z0-9_-]{1,40}) +([A-Za-z0-9+/]{4,}={0,2})",
    re.IGNORECASE | re.ASCII,
)


def _escapes(text: str) -> set[str]:
    """`text` as repr() and json.dumps() write it inside a quoted string."""
    return {
        repr(text)[1:-1],
        # Inside a longer text repr() may pick the other quote, escaping a ' the text holds.
        repr("'\"" + text)[4:-1],
        json.dumps(text)[1:-1],
        json.dumps(text, ensure_ascii=False)[1:-1],
    }


def secret_forms(secret: str) -> set[str]:
    """The secret as written, and as the code between it and a log line may have escaped it:
    percent-encoded in a URL or a form (in upper- or lower-case hex: both are the same URL),
    quoted by repr() or JSON, or twice (the repr of an exception whose message quotes it)."""
    forms = {secret}
    for safe in _URL_SAFE:
        for encoded in (quote(secret, safe=safe), quote_plus(secret, safe=safe)):
            forms.add(encoded)
            forms.add(_PERCENT.sub(lambda m: m[0].lower(), encoded))
    for once in _escapes(secret):
        forms |= {once, *_escapes(once)}
    return forms


def _core(secret: str) -> str:
    """The longest run of the secret that no form escapes (letters, digits, "-._~")."""
    return max(_UNESCAPED.findall(secret), key=len, default="")


# One secret's entry: its core (the fast test) and its forms, longest first.
_Entry = tuple[str, tuple[str, ...]]


def _entry(secret: str) -> _Entry:
    return _core(secret), tuple(sorted(secret_forms(secret), key=len, reverse=True))


class Redactor:
    """Replaces known secret values, and their escaped forms, wherever they would be written.

    Called on every log line and journal write from any thread; `learn` may run meanwhile:
    it builds a new table and swaps it in whole, so a call sees the old one or the new one."""

    def __init__(self, secrets: Iterable[str] = (), *, max_learned: int = MAX_LEARNED) -> None:
        self._entries = {s: _entry(s) for s in _kept(secrets)}
        self._configured = set(self._entries)
        self._learned: dict[str, None] = {}  # oldest first
        self._max_learned = max_learned
        self._lock = threading.Lock()
        self._table = self._ordered()

    def _ordered(self) -> tuple[_Entry, ...]:
        # Longest secret first, so one that holds another is replaced whole (each form of the
        # longer holds the same form of the shorter).
        return tuple(self._entries[s] for s in sorted(self._entries, key=len, reverse=True))

    def learn(self, values: Iterable[str], *, lasting: bool = False) -> int:
        """Hide `values` from now on too (those long enough); returns how many were unknown.
        `lasting`: kept for good, like a configured secret (a form derived from one); else,
        past MAX_LEARNED, the value learned (or met again) longest ago is forgotten."""
        with self._lock:
            fresh = [v for v in _kept(values) if v not in self._configured]
            unknown = sum(v not in self._entries for v in fresh)
            for value in fresh:
                self._learned.pop(value, None)
                self._entries.setdefault(value, _entry(value))
                if lasting:
                    self._configured.add(value)
                else:
                    self._learned[value] = None  # newest last
            while len(self._learned) > self._max_learned:
                oldest = next(iter(self._learned))
                del self._learned[oldest], self._entries[oldest]
            if fresh:
                self._table = self._ordered()
        return unknown

    @property
    def learned(self) -> int:
        return len(self._learned)

    def __call__(self, text: str) -> str:
        # Every form holds its secret's core verbatim: a line without it (nearly every line)
        # costs one search per secret, not one per form.
        table = self._table
        hits = [forms for core, forms in table if core in text]
        for forms in hits:
            for form in forms:
                text = text.replace(form, REDACTED)
        # HTTP Basic sends "user:secret" in base64 (SMTP's AUTH PLAIN "\0user\0secret"),
        # which holds no run of the secret, and a user agentd never heard of (an
        # automation's) makes a form no one can list. Two searches of the line in lower case
        # gate the decoding, so a line without either word costs little.
        lowered = text.lower()
        if _BASIC_GATE in lowered or _AUTH_GATE in lowered:
            text = _hide_credentials(text, lowered, table)
        return text


def _hide_credentials(text: str, lowered: str, table: tuple[_Entry, ...]) -> str:
    """`text` with each base64 credential (`_CREDENTIAL`) that decodes to hold a known secret
    hidden. The pattern is tried only where a gate was found in `lowered`: a scan of the whole
    line costs more. A few characters change length in lower case (İ): such a line is
    scanned whole."""
    if len(lowered) == len(text):
        starts = sorted([*_finds(lowered, _BASIC_GATE), *_finds(lowered, _AUTH_GATE)])
        found: Iterable[re.Match[str]] = (
            m for at in starts if (m := _CREDENTIAL.match(text, at)) is not None
        )
    else:
        found = _CREDENTIAL.finditer(text)
    pieces: list[str] = []
    done = 0
    for match in found:
        if match.start(1) >= done and _holds_secret(match[1], table):
            pieces += [text[done : match.start(1)], REDACTED]
            done = match.end(1)
    return "".join(pieces) + text[done:] if pieces else text


def _finds(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + len(needle))


def _holds_secret(token: str, table: tuple[_Entry, ...]) -> bool:
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except ValueError:  # binascii.Error: not base64 after all
        return False
    # Clients encode "user:secret" in UTF-8 or Latin-1 (aiohttp's and requests' default).
    for decoded in (raw.decode("utf-8", "replace"), raw.decode("latin-1")):
        for core, forms in table:
            if core in decoded and any(form in decoded for form in forms):
                return True
    return False


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut to about `limit` characters between words, never inside one.
    What a server said is cut before it reaches the redactor; a secret is a word, so it stays
    whole for the redactor to find, or is left out, never shown in part."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit + 1)
    return (text[:space] if space > 0 else "") + " …"


def login_forms(user: str, secret: str) -> list[str]:
    """How a client sends `secret` as `user`'s password in base64, which holds no run of the
    secret itself: so each is a value of its own, hidden with the secret. HTTP Basic (RFC
    7617, "user:secret"; CalDAV, a calendar feed) in UTF-8 and in Latin-1 (requests' and
    aiohttp's default), and SMTP's AUTH PLAIN (NUL, user, NUL, secret) and AUTH LOGIN (the
    secret alone)."""
    found = [_b64(f"{user}:{secret}", "utf-8"), _b64(f"{user}:{secret}", "latin-1")]
    found += [_b64(f"\0{user}\0{secret}", "utf-8"), _b64(secret, "utf-8")]
    return [form for form in dict.fromkeys(found) if form]


def _b64(text: str, encoding: str) -> str:
    try:
        return base64.b64encode(text.encode(encoding)).decode()
    except UnicodeEncodeError:
        return ""


def _kept(values: Iterable[str]) -> set[str]:
    return {v.strip() for v in values if v and len(v.strip()) >= MIN_SECRET_LENGTH}
