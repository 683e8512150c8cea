"""Turn the model's Markdown into Telegram HTML, and split long answers (R-TG-1, R-TG-2).

Pure functions: no aiogram here, so the formatting is testable and the CLI could reuse it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

TELEGRAM_LIMIT = 4096

_FENCE = re.compile(r"^```([\w+-]*)\s*$")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?|tg)://[^\s)]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])"
    # An underscore inside a word (add_note) does not close an italic span (CommonMark).
    r"|(?<!\w)_(?=\S)((?:[^_\n]|(?<=\w)_(?=\w))+?)(?<=\S)_(?!\w)"
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_BULLET = re.compile(r"^(\s*)[-*+]\s+", re.MULTILINE)


def utf16_len(text: str) -> int:
    """Telegram measures text in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _inline(text: str) -> str:
    """Escape, then apply inline Markdown; code spans are protected from further rules."""
    text = text.replace("\x00", "\ufffd")  # NUL marks the stash below; it never shows anyway
    stash: list[str] = []

    def keep(fragment: str) -> str:
        stash.append(fragment)
        return f"\x00{len(stash) - 1}\x00"

    text = _INLINE_CODE.sub(lambda m: keep(f"<code>{html.escape(m[1])}</code>"), text)
    text = _LINK.sub(
        lambda m: keep(f'<a href="{html.escape(m[2], quote=True)}">{html.escape(m[1])}</a>'),
        text,
    )
    text = html.escape(text, quote=False)
    text = _HEADING.sub(lambda m: f"<b>{m[1]}</b>", text)
    text = _BULLET.sub(lambda m: f"{m[1]}• ", text)
    text = _BOLD.sub(lambda m: f"<b>{m[1] or m[2]}</b>", text)
    text = _ITALIC.sub(lambda m: f"<i>{m[1] or m[2]}</i>", text)
    text = _STRIKE.sub(lambda m: f"<s>{m[1]}</s>", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: stash[int(m[1])], text)


def _blocks(text: str) -> list[tuple[str, str, str]]:
    """Split Markdown into (kind, lang, body) blocks: 'code' for fenced code, else 'text'."""
    blocks: list[tuple[str, str, str]] = []
    lines = text.split("\n")
    buf: list[str] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i].strip())
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is not None:
                if buf:
                    blocks.append(("text", "", "\n".join(buf)))
                    buf = []
                blocks.append(("code", fence[1], "\n".join(lines[i + 1 : end])))
                i = end + 1
                continue
        buf.append(lines[i])
        i += 1
    if buf:
        blocks.append(("text", "", "\n".join(buf)))
    return blocks


def to_html(markdown: str) -> str:
    """Telegram-safe HTML for a Markdown answer (unknown syntax is shown literally, escaped)."""
    out = []
    for kind, lang, body in _blocks(markdown):
        if kind == "code":
            cls = f' class="language-{html.escape(lang)}"' if lang else ""
            out.append(f"<pre><code{cls}>{html.escape(body)}</code></pre>")
        else:
            out.append(_inline(body))
    return "\n".join(out).strip()


def _pieces(markdown: str) -> list[str]:
    """Paragraphs and whole code blocks: the units a split prefers to keep together."""
    pieces: list[str] = []
    for kind, lang, body in _blocks(markdown):
        if kind == "code":
            pieces.append(f"```{lang}\n{body}\n```")
        else:
            pieces.extend(p for p in re.split(r"\n\s*\n", body) if p.strip())
    return pieces


def _fits(markdown: str, limit: int) -> bool:
    return utf16_len(to_html(markdown)) <= limit and utf16_len(markdown) <= limit


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
