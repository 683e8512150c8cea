"""Split long answers to fit Telegram (R-TG-2); the Markdown becomes HTML in `chat.format`
(R-TG-1), the renderer every channel shares.

Pure functions: no aiogram here, so the splitting is testable and the CLI could reuse it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agentd.chat.format import Markup, blocks, to_html

TELEGRAM_LIMIT = 4096
# Telegram's HTML: <s> strikes through, a newline is a line break, tg:// links open in the app.
TELEGRAM = Markup(schemes=("https", "http", "tg"))


def utf16_len(text: str) -> int:
    """Telegram measures text in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _pieces(markdown: str) -> list[str]:
    """Paragraphs and whole code blocks: the units a split prefers to keep together."""
    pieces: list[str] = []
    for kind, lang, body in blocks(markdown):
        if kind == "code":
            pieces.append(f"```{lang}\n{body}\n```")
        else:
            pieces.extend(p for p in re.split(r"\n\s*\n", body) if p.strip())
    return pieces


def _fits(markdown: str, limit: int) -> bool:
    return utf16_len(to_html(markdown, TELEGRAM)) <= limit and utf16_len(markdown) <= limit


def _hard_cut(text: str, fits: Callable[[str], bool]) -> list[str]:
    """Cut text with no usable separator into the longest pieces that fit (binary search)."""
    parts = []
    while text:
        low, high = 1, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            if fits(text[:mid]):
                low = mid
            else:
                high = mid - 1
        parts.append(text[:low])
        text = text[low:]
    return parts


def _split_oversized(piece: str, limit: int) -> list[str]:
    """Split one paragraph or code block that is too long on its own: lines, words, characters."""
    code = re.match(r"```([\w+-]*)\n(.*)\n```$", piece, re.DOTALL)
    if code:
        lang = code[1]
        inner = _split_units(
            code[2].split("\n"), "\n", lambda t: _fits(f"```{lang}\n{t}\n```", limit)
        )
        return [f"```{lang}\n{part}\n```" for part in inner]
    for separator in ("\n", " "):
        units = piece.split(separator)
        if len(units) > 1:
            return _split_units(units, separator, lambda t: _fits(t, limit))
    return _hard_cut(piece, lambda t: _fits(t, limit))


def _split_units(units: list[str], sep: str, fits: Callable[[str], bool]) -> list[str]:
    parts: list[str] = []
    current = ""
    for unit in units:
        candidate = f"{current}{sep}{unit}" if current else unit
        if fits(candidate):
            current = candidate
            continue
        if current:
            parts.append(current)
        if fits(unit):
            current = unit
        else:
            *whole, current = _hard_cut(unit, fits)
            parts.extend(whole)
    if current:
        parts.append(current)
    return parts


def split_markdown(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split an answer into ordered chunks whose HTML and plain forms both fit Telegram's limit."""
    if not markdown.strip():
        return []
    chunks: list[str] = []
    current = ""
    for piece in _pieces(markdown):
        candidate = f"{current}\n\n{piece}" if current else piece
        if _fits(candidate, limit):
            current = candidate
            continue
        if current:
            chunks.append(current)
            current = ""
        if _fits(piece, limit):
            current = piece
        else:
            chunks.extend(_split_oversized(piece, limit))
    if current:
        chunks.append(current)
    return chunks
