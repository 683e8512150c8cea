"""Document formats: bytes (from a file or a URL) to a title and structured blocks.

Text must be valid UTF-8 (a byte-order mark is fine; HTML may declare another charset): a
file in another encoding is reported, not indexed as mojibake. PDFs are read with `pypdf`, a
default dependency imported on first use; if it is missing (a trimmed install) each PDF fails
with a hint and the run goes on.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from agentd.knowledge.chunking import (
    Block,
    atx_title,
    drop_title,
    heading_text,
    markdown_blocks,
    plain_blocks,
)
from agentd.parsing.budget import Budget, ParseFailed
from agentd.parsing.html_text import html_to_text

DocFormat = Literal["text", "markdown", "html", "pdf"]

EXTENSIONS: dict[str, DocFormat] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)---[ \t]*\n", re.DOTALL)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
# The hashes, their spaces and the rest of the line; the title is cut from the rest in Python
# (`atx_title`): as a lazy group before `(?:[ \t]+#+)?[ \t]*$` it is quadratic in a run of spaces.
_FIRST_HEADING = re.compile(r" {0,3}(#{1,6})([ \t]+)(.*)$")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([a-zA-Z0-9_.:-]+)""", re.IGNORECASE)


# A PDF longer than this is refused whole rather than read in part: a half-indexed manual
# answers questions wrongly. Every page costs parse time inside the budget below.
MAX_PDF_PAGES = 2000
# Text and Markdown up to this size are parsed in a thread: their parsers are linear (line by
# line, regexes without nested repetition), so the size bounds the time. Larger ones, HTML
# and PDFs (whose parsers have quadratic or unbounded cases) go to the bounded child.
IN_THREAD_BYTES = 1_000_000
# Parsing outside documents: a 20 MB PDF of text takes seconds; a bomb hits one of these.
DOCUMENT_BUDGET = Budget(seconds=60.0, cpu_seconds=45, memory_bytes=1536 * 1024 * 1024)


class LoadError(Exception):
    """A document cannot be read; the message is the reason shown in the ingest report."""


@dataclass(frozen=True)
class LoadedDocument:
    title: str
    format: DocFormat
    blocks: list[Block]


def format_for_path(path: str | PurePath) -> DocFormat | None:
    """The format a file name implies, or None for files ingestion does not read."""
    return EXTENSIONS.get(PurePath(path).suffix.lower())


def decode_utf8(data: bytes) -> str:
    """Strict UTF-8 (BOM allowed), with the offending byte named when it is not."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoadError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert the file to UTF-8"
        ) from None


def _decode_html(data: bytes) -> str:
    found = _META_CHARSET.search(data[:4096])
    if found:
        charset = found.group(1).decode("ascii").lower()
        if charset not in ("utf-8", "utf8"):
            try:
                return data.decode(charset)
            except (LookupError, UnicodeDecodeError) as exc:
                raise LoadError(f"cannot decode as declared charset {charset!r} ({exc})") from None
    return decode_utf8(data)


def _markdown(text: str, fallback_title: str) -> LoadedDocument:
    title = ""
    front = _FRONT_MATTER.match(text)
    if front:
        text = text[front.end() :]
        found = _FRONT_TITLE.search(front.group(1))
        title = found.group(1).strip("\"'") if found else ""
    blocks = markdown_blocks(text)
    first = _first_heading(text)
    if not title and first is not None and first[0] == 1:
        title = first[1]
    title = title or fallback_title
    return LoadedDocument(title, "markdown", drop_title(blocks, title))


def _first_heading(text: str) -> tuple[int, str] | None:
    # The first ATX heading outside code fences; a fenced "# comment" is not a title.
    in_fence = False
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        match = None if in_fence else _FIRST_HEADING.match(line)
        if match and (match.group(3) or len(match.group(2)) > 1):
            # Only spaces after the hashes: the title is the last of them (so, no words).
            title = atx_title(match.group(3)) if match.group(3) else match.group(2)[-1]
            return len(match.group(1)), heading_text(title)
    return None


def _html(text: str, fallback_title: str) -> LoadedDocument:
    page = html_to_text(text, fence_code=True)
    doc = _markdown(page.text, fallback_title)
    # <title> names the page best ("Install - MySite"); a leading H1 was dropped from the
    # section paths either way, as the title covers it.
    return LoadedDocument(page.title or doc.title, "html", doc.blocks)


def _pdf(data: bytes, fallback_title: str) -> LoadedDocument:
    try:
        import pypdf
    except ImportError:
        raise LoadError(
            "PDF support (pypdf) is missing; reinstall agentd: pip install -e ."
        ) from None
    # pypdf parses untrusted bytes and raises many kinds of errors on broken files; any of them
    # means "this PDF cannot be read", never a reason to stop the whole run.
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise LoadError("the PDF is encrypted with a password")
        meta_title = str((reader.metadata or {}).get("/Title") or "").strip()
        blocks: list[Block] = []
        if len(reader.pages) > MAX_PDF_PAGES:
            raise LoadError(
                f"the PDF has {len(reader.pages)} pages; at most {MAX_PDF_PAGES} are read"
            )
        for number, page in enumerate(reader.pages, start=1):
            blocks.extend(plain_blocks(page.extract_text() or "", (f"Page {number}",)))
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    return LoadedDocument(meta_title or fallback_title, "pdf", blocks)


_TEXT_PARSERS: dict[str, Callable[[str, str], LoadedDocument]] = {
    "markdown": _markdown,
    "html": _html,
    "text": lambda text, title: LoadedDocument(title, "text", plain_blocks(text)),
}


def parse_text(text: str, fmt: DocFormat, *, fallback_title: str) -> LoadedDocument:
    """A decoded text document (fetched pages are decoded by the fetcher)."""
    if fmt == "pdf":
        raise ValueError("PDFs are parsed from bytes")
    return _TEXT_PARSERS[fmt](text, fallback_title)


def parse_bytes(data: bytes, fmt: DocFormat, *, fallback_title: str) -> LoadedDocument:
    """A document from its raw bytes; raises LoadError with a reason fit for the report."""
    if fmt == "pdf":
        return _pdf(data, fallback_title)
    text = _decode_html(data) if fmt == "html" else decode_utf8(data)
    return parse_text(text, fmt, fallback_title=fallback_title)


def document_job(
    data: bytes, *, fmt: DocFormat, fallback_title: str, decoded: bool = False
) -> dict[str, object]:
    """The child-process side of parse_bytes_bounded (JSON-able out)."""
    if decoded:  # already decoded by the caller (a fetched page's charset) and sent as UTF-8
        doc = parse_text(data.decode("utf-8"), fmt, fallback_title=fallback_title)
    else:
        doc = parse_bytes(data, fmt, fallback_title=fallback_title)
    return {
        "title": doc.title,
        "format": doc.format,
        "blocks": [[list(b.path), b.text] for b in doc.blocks],
    }


async def parse_bytes_bounded(
    data: bytes,
    fmt: DocFormat,
    *,
    fallback_title: str,
    budget: Budget | None = None,
    decoded: bool = False,
) -> LoadedDocument:
    """parse_bytes off the event loop: in a child process with time and memory limits (HTML,
    PDF, anything over IN_THREAD_BYTES), or a thread (small text and Markdown).

    `decoded`: the bytes are UTF-8 text the caller decoded (parse_text, not parse_bytes).
    Every document from outside (a file sent in chat, a fetched URL, a file being ingested)
    is read this way: a PDF or HTML bomb ends as a LoadError saying which limit it hit.
    """
    if fmt in ("text", "markdown") and len(data) <= IN_THREAD_BYTES:
        # Linear regex work on a bounded size: a thread (off the loop) costs ~0 where a child
        # costs ~0.1 s, which made ingesting a folder of notes six times slower.
        if decoded:
            text = data.decode("utf-8")
            return await asyncio.to_thread(parse_text, text, fmt, fallback_title=fallback_title)
        return await asyncio.to_thread(parse_bytes, data, fmt, fallback_title=fallback_title)
    from agentd.parsing.bounded import run_bounded

    try:
        answer = await run_bounded(
            "agentd.knowledge.loaders:document_job",
            data,
            budget or DOCUMENT_BUDGET,
            fmt=fmt,
            fallback_title=fallback_title,
            decoded=decoded,
        )
    except ParseFailed as exc:
        if exc.error_type == "LoadError":
            raise LoadError(str(exc)) from None
        if exc.kind == "error":
            raise LoadError(f"not a readable {fmt} document ({exc.error_type}: {exc})") from None
        raise LoadError(f"too costly to read: {exc}") from None
    blocks = [Block(tuple(path), text) for path, text in answer["blocks"]]
    return LoadedDocument(answer["title"], answer["format"], blocks)
