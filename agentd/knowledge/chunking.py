"""Structure-aware chunking: a document becomes blocks under a heading path, then chunks.

Two steps, both pure:
1. `markdown_blocks` / `plain_blocks` cut text into blocks (a paragraph, a list, a table, a
   fenced code block), each under the path of headings above it (`("Install", "Linux")`).
   HTML is read as Markdown after `html_to_text` (which writes headings as `#` lines and code
   as fences), PDFs as plain text per page.
2. `chunk_blocks` packs consecutive blocks of one section into chunks of at most `chunk_chars`.
   A chunk never spans two sections (its section name must stay true); a block longer than a
   chunk is split at paragraph, line, sentence, then word boundaries; consecutive chunks of one
   section overlap by up to `overlap_chars` (whole sentences or words where possible), so a
   fact cut in two is whole in one of them.

What is embedded and hashed is `section + text` (`Chunk.embed_text`): the same paragraph under
a renamed heading is a changed chunk. Changing the algorithm here changes chunks: bump
CHUNKER_VERSION, which is part of every document hash, so re-ingesting re-chunks everything.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby

CHUNKER_VERSION = 1
SECTION_SEPARATOR = " > "
# A "heading" of thousands of characters is a conversion accident; it must not flood citations.
MAX_HEADING_CHARS = 200

# An ATX heading's hashes and the rest of its line; `atx_title` cuts the title from the rest:
# a lazy title before `(?:[ \t]+#+)?[ \t]*$` makes the match quadratic in a run of spaces.
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_THEMATIC = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_EMPHASIS = re.compile(r"(\*{1,3}|_{1,3}|`+)(\S(?:.*?\S)?)\1")
# Emphasis is looked for in this much of a heading (spaces collapsed): the regex above is
# quadratic in unclosed marks ("`a `a …"), and a title is cut to MAX_HEADING_CHARS anyway.
_EMPHASIS_SCAN = 5 * MAX_HEADING_CHARS
_INLINE_SPACES = re.compile(r"[^\S\n]+")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Block:
    """One paragraph, list, table or code block, under its heading path."""

    path: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Chunk:
    """A piece of a document as stored, searched and cited."""

    ordinal: int
    section: str
    text: str

    @property
    def embed_text(self) -> str:
        """What the embedder sees: the heading path gives a short passage its context."""
        return f"{self.section}\n\n{self.text}" if self.section else self.text

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.embed_text.encode("utf-8")).hexdigest()


def heading_text(raw: str) -> str:
    """A heading as plain words: links, emphasis and code marks dropped, spaces collapsed."""
    # Spaces within a line collapse before emphasis is looked for (what it matches is the
    # same), so that a run of them does not use up the part of the heading scanned.
    text = _INLINE_SPACES.sub(" ", _drop_links(raw)).strip()
    text = _EMPHASIS.sub(r"\2", text[:_EMPHASIS_SCAN])
    return _SPACES.sub(" ", text).strip()[:MAX_HEADING_CHARS]


def _drop_links(text: str) -> str:
    r"""`text` with each link or image, `!?\[([^\]]*)\]\([^)]*\)`, as its bracketed text: as
    that regex, every "[" of a "[[[[…" heading was scanned to the end (quadratic); here each
    part of the text is looked at once."""
    out: list[str] = []
    at = pos = 0
    while (bracket := text.find("[", pos)) >= 0:
        close = text.find("]", bracket + 1)
        if close < 0:
            break  # no "]" after this "[", nor after any later one
        if not text.startswith("(", close + 1):
            pos = close + 1  # every "[" before this "]" would close here and fail the same
            continue
        end = text.find(")", close + 2)
        if end < 0:
            break  # no ")" after this link's "(", nor after any later one's
        start = bracket - 1 if bracket > at and text[bracket - 1] == "!" else bracket
        out.append(text[at:start])
        out.append(text[bracket + 1 : close])
        at = pos = end + 1
    out.append(text[at:])
    return "".join(out)


def atx_title(rest: str) -> str:
    """An ATX heading's title from what follows its hashes and their spaces: trailing spaces
    dropped, and a closing run of hashes when a space comes before it ("C#" keeps its "#")."""
    text = rest.rstrip(" \t")
    bare = text.rstrip("#")
    if bare != text and bare[-1:] in (" ", "\t"):
        return bare.rstrip(" \t")
    return text


def section_name(path: Sequence[str]) -> str:
    return SECTION_SEPARATOR.join(path)


# --------------------------------------------------------------------------------------------
# Text to blocks


def _paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def plain_blocks(text: str, path: tuple[str, ...] = ()) -> list[Block]:
    """Paragraphs (split on blank lines) of text without structure, all under `path`."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [Block(path, p) for p in _paragraphs(text)]


class _MarkdownReader:
    """Line by line: headings move the path, blank lines end blocks, fences stay whole."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._stack: list[tuple[int, str]] = []
        self._lines: list[str] = []

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self._stack if title)

    def flush(self) -> None:
        text = "\n".join(self._lines).strip("\n")
        if text.strip():
            self.blocks.append(Block(self.path, text))
        self._lines = []

    def heading(self, level: int, raw: str) -> None:
        self.flush()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, heading_text(raw)))

    def read(self, text: str) -> list[Block]:
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            fence = _FENCE.match(line)
            if fence:
                i = self._fenced(lines, i, fence.group(1))
                continue
            atx = _ATX.match(line)
            if atx:
                self.heading(len(atx.group(1)), atx_title(atx.group(2) or ""))
            elif not line.strip():
                self.flush()
            elif (setext := _SETEXT.match(line)) and len(self._lines) == 1:
                # "Title\n=====": only a one-line paragraph; a lone "---" is a thematic break.
                title = self._lines.pop()
                self.heading(1 if setext.group(1)[0] == "=" else 2, title)
            elif _THEMATIC.match(line):
                self.flush()
            else:
                self._lines.append(line)
            i += 1
        self.flush()
        return self.blocks

    def _fenced(self, lines: list[str], start: int, marker: str) -> int:
        # A fence is one block (its "# comments" are not headings); an unclosed fence runs to
        # the end of the document, as CommonMark says.
        self.flush()
        end = start + 1
        closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = lines[start : min(end + 1, len(lines))]
        if any(line.strip() for line in body[1:] if not closing.match(line)):
            self.blocks.append(Block(self.path, "\n".join(body)))
        return end + 1


def markdown_blocks(text: str) -> list[Block]:
    """Blocks of a Markdown text under their heading paths (ATX and setext headings)."""
    return _MarkdownReader().read(text)


def drop_title(blocks: Iterable[Block], title: str) -> list[Block]:
    """Drop a top heading equal to the document title: a citation shows the title already."""
    out = []
    for block in blocks:
        if block.path and title and block.path[0] == title:
            block = Block(block.path[1:], block.text)
        out.append(block)
    return out


# --------------------------------------------------------------------------------------------
# Blocks to chunks


def _hard_split(text: str, limit: int) -> list[str]:
    return [text[i : i + limit] for i in range(0, len(text), limit)]


def _pack(parts: list[str], sep: str, limit: int) -> list[str]:
    out: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current}{sep}{part}" if current else part
        if len(candidate) <= limit:
            current = candidate
        else:
            if current:
                out.append(current)
            current = part
    if current:
        out.append(current)
    return out


def split_text(text: str, limit: int) -> list[str]:
    """Pieces of at most `limit` chars, cut at the coarsest boundary that makes them fit."""
    text = text.strip()
    if len(text) <= limit:
        return [text] if text else []
    for splitter, sep in (
        (lambda t: re.split(r"\n[ \t]*\n", t), "\n\n"),
        (lambda t: t.split("\n"), "\n"),
        (_SENTENCE_END.split, " "),
        (lambda t: t.split(" "), " "),
    ):
        parts = [p for p in splitter(text) if p.strip()]
        if len(parts) > 1:
            pieces: list[str] = []
            for part in parts:
                pieces.extend(split_text(part, limit) if len(part) > limit else [part.strip()])
            return _pack(pieces, sep, limit)
    return _hard_split(text, limit)


def overlap_tail(text: str, overlap: int) -> str:
    """The end of a chunk to repeat at the start of the next: whole sentences, else words."""
    if overlap <= 0 or not text:
        return ""
    if len(text) <= overlap:
        return text.strip()
    tail = text[-overlap:]
    for boundary in (_SENTENCE_END, re.compile(r"\s+")):
        match = boundary.search(tail)
        if match and match.end() < len(tail):
            return tail[match.end() :].strip()
    return tail.strip()


def _chunk_section(texts: list[str], chunk_chars: int, overlap_chars: int) -> list[str]:
    # Long blocks are cut smaller than a chunk by the overlap, so tail + piece still fits.
    step = max(chunk_chars - overlap_chars, chunk_chars // 2)
    pieces: list[str] = []
    for text in texts:
        pieces.extend(split_text(text, step) if len(text) > chunk_chars else [text])
    chunks: list[str] = []
    current: list[str] = []
    fresh = False  # does `current` hold more than the previous chunk's tail?
    for piece in pieces:
        size = sum(len(p) + 2 for p in current)
        if current and size + len(piece) > chunk_chars:
            if fresh:
                chunks.append("\n\n".join(current))
                tail = overlap_tail(chunks[-1], overlap_chars)
                current = [tail] if tail and len(tail) + 2 + len(piece) <= chunk_chars else []
            else:
                current = []  # only an overlap tail, and the piece does not fit beside it
        current.append(piece)
        fresh = True
    if current and fresh:
        chunks.append("\n\n".join(current))
    return chunks


def chunk_blocks(blocks: Sequence[Block], chunk_chars: int, overlap_chars: int) -> list[Chunk]:
    """Chunks of at most `chunk_chars`, one section each, numbered in document order."""
    if chunk_chars < 50:
        raise ValueError("chunk_chars must be at least 50")
    overlap_chars = max(0, min(overlap_chars, chunk_chars // 2))
    chunks: list[Chunk] = []
    for path, group in groupby(blocks, key=lambda b: b.path):
        section = section_name(path)
        texts = [b.text for b in group]
        for text in _chunk_section(texts, chunk_chars, overlap_chars):
            chunks.append(Chunk(ordinal=len(chunks), section=section, text=text))
    return chunks
