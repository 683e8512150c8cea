"""URLs as the taint policy compares them: found in text, compared byte for byte.

A fetch after outside content needs no approval when its URL is one the user wrote: such a URL
carries nothing the model composed. The comparison is exact: folding case or dropping a
trailing slash or punctuation would let a model append a character of its choosing, and a
URL that a tool's result or error showed earns nothing (which of several shown links a model
fetches says something too).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# Scheme, then anything up to a space, quote or bracket; trailing punctuation is trimmed.
_URL = re.compile(r"https?://[^\s<>\"'`\]\[(){}|\\^]+", re.IGNORECASE)
_TRAILING = ".,;:!?*_~"


def urls_in(text: str) -> list[str]:
    """Every http(s) URL written in the text, as written (a sentence's final punctuation is
    not part of it)."""
    return [m.group(0).rstrip(_TRAILING) for m in _URL.finditer(text)]


def user_url_in(text: str, user_urls: set[str]) -> str | None:
    """The first URL in `text` that is, byte for byte, one of `user_urls`."""
    return next((url for url in urls_in(text) if url in user_urls), None)


def url_host(url: str) -> str:
    """The server a URL reaches, as a host rule names it: its host name in lower case, with
    the port when it is not the scheme's own ("" when there is none)."""
    try:
        parts = urlsplit(url.strip())
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return ""
    if not host:
        return ""
    if ":" in host:  # an IPv6 address: bracketed, as in a URL
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return f"{host}:{port}" if port is not None and port != default else host
