"""Citations by id (R-DOC-3, R-WEB-1): what a tool retrieved is listed with an id, the answer
cites the id, and the reply turns each id into a link or a title, checked against what the
turn retrieved.

Ids: `D<chunk id>` for a document passage (search_docs), `W<6 hex>` for a web search result,
`U<6 hex>` for a fetched page (the hex from the URL's sha256). A citable tool heads each
result `[ID] title` inside its untrusted block and ends with a source list *after* the block
(`source_list`), one `[ID] where` line each, with no title: a title is outside text and must
not speak outside the block. Only the list says what exists and where it points (a page cannot
close the block: mark_untrusted escapes its closing tags, so it cannot forge a source); the
heading inside only names it. The turn's record of what it
retrieved is rebuilt from the tool results, which are journaled: a replay renders the same.
An id the answer cites that the turn never retrieved is dropped and counted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from pydantic import BaseModel

LIST_HEAD = "Sources you may cite, by id:"
CITE_RULE = (
    "Cite a document passage, web search result or fetched page you use by its id in square "
    "brackets right after the claim, as in [D12] or [W3f9a1c] (ids are in each tool result's "
    "source list; the reply turns them into links). Never invent an id."
)
# Strict shapes, and never a Markdown link's text ("[Dad](…)"): anything else is left alone.
_ID_SHAPE = r"D\d{1,12}|[WU][0-9a-f]{6}"
_ID = re.compile(rf"\[({_ID_SHAPE})\](?!\()")
_LINE = re.compile(rf"^\[({_ID_SHAPE})\] (\S+)$")
_HEADING = re.compile(rf"^\[({_ID_SHAPE})\] (.+)$", re.MULTILINE)
TITLE_CHARS = 120
_CLOSE = "</untrusted_content>"


class CitedSource(BaseModel):
    title: str
    where: str  # a URL (rendered as a link) or a file path

    @property
    def is_url(self) -> bool:
        return self.where.startswith(("http://", "https://"))


def url_id(prefix: str, url: str) -> str:
    return prefix + hashlib.sha256(url.encode("utf-8")).hexdigest()[:6]


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split()).replace("[", "(").replace("]", ")")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def heading(sid: str, title: str) -> str:
    """The line that names a source inside the untrusted block."""
    return f"[{sid}] {_one_line(title, TITLE_CHARS)}"


def source_list(sources: Iterable[tuple[str, str]]) -> str:
    """The list a tool appends after its untrusted block: (id, where) each, where a URL or a
    path (whitespace in it is escaped or it could not be one token)."""
    lines = [f"[{sid}] {where.replace(' ', '%20')}" for sid, where in dict(sources).items()]
    return f"{LIST_HEAD}\n" + "\n".join(lines) if lines else ""


def found_in(result: str) -> dict[str, CitedSource]:
    """The sources a tool result lists after its last untrusted block, titled by the headings
    above the list."""
    head = result.rfind(LIST_HEAD)
    if head < 0 or head < result.rfind(_CLOSE):
        return {}
    where: dict[str, str] = {}
    for line in result[head + len(LIST_HEAD) :].splitlines():
        match = _LINE.match(line.strip())
        if match:
            where[match.group(1)] = match.group(2).replace("%20", " ")
    titles: dict[str, str] = {}
    for match in _HEADING.finditer(result[:head]):
        titles.setdefault(match.group(1), _one_line(match.group(2), TITLE_CHARS))
    return {sid: CitedSource(title=titles.get(sid) or w, where=w) for sid, w in where.items()}


def _cite(source: CitedSource, first: bool) -> str:
    if source.is_url:
        url = source.where.replace(")", "%29")
        return f"[{source.title}]({url})"
    return f"({source.title}, {source.where})" if first else f"({source.title})"


def render(text: str, retrieved: Mapping[str, CitedSource]) -> tuple[str, list[str], list[str]]:
    """`text` with each cited id as a link or title; (text, ids used, ids dropped), in order."""
    used: list[str] = []
    dropped: list[str] = []

    def swap(match: re.Match[str]) -> str:
        sid = match.group(1)
        source = retrieved.get(sid)
        if source is None:
            if sid not in dropped:
                dropped.append(sid)
            return "\x00"
        first = sid not in used
        if first:
            used.append(sid)
        return _cite(source, first)

    # A dropped id takes the space before it along: "claim [X9]." reads "claim.".
    rendered = re.sub(r"[ \t]*\x00", "", _ID.sub(swap, text))
    return rendered, used, dropped
