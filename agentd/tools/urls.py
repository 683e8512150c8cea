"""URLs as the taint policy compares them: found in text, normalised.

A fetch in a tainted turn needs no approval when its URL appeared verbatim in the user's own
words or in a result already shown: such a URL carries nothing the model composed (no data
appended to a query string), so fetching it sends nothing out.
"""

from __future__ import annotations

import re

# Scheme, then anything up to a space, quote or bracket; trailing punctuation is trimmed.
_URL = re.compile(r"https?://[^\s<>\"'`\]\[(){}|\\^]+", re.IGNORECASE)
_TRAILING = ".,;:!?*_~"


def normal_url(url: str) -> str:
    """A URL as compared here: trailing punctuation and slash dropped, scheme and host folded."""
    url = url.strip().rstrip(_TRAILING).rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}"


def user_url_in(text: str, user_urls: set[str]) -> str | None:
    """The first URL in `text`, as written there, that is one of `user_urls` (normalised)."""
    for match in _URL.finditer(text):
        raw = match.group(0).rstrip(_TRAILING)
        if normal_url(raw) in user_urls:
            return raw
    return None


def urls_in(text: str) -> list[str]:
    """Every http(s) URL written in the text, normalised (normal_url)."""
    return [normal_url(m.group(0)) for m in _URL.finditer(text)]
