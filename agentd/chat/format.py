"""The model's Markdown as chat HTML, and as plain text: one renderer for every channel.

Everything the model wrote is escaped first, then only the renderer's own tags are added
(bold, italic, strike, code, preformatted code, links), so whatever markup the model (or a
page it read) put in its answer shows as text, never as a tag. A channel picks the few
details its network differs in (`Markup`): which tag strikes through, which link schemes may
be clickable, whether a line break needs a tag. Unknown syntax is shown literally.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

_FENCE = re.compile(r"^```([\w+-]*)\s*$")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])"
    # An underscore inside a word (add_note) does not close an italic span (CommonMark).
    r"|(?<!\w)_(?=\S)((?:[^_\n]|(?<=\w)_(?=\w))+?)(?<=\S)_(?!\w)"
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_BULLET = re.compile(r"^(\s*)[-*+]\s+", re.MULTILINE)
_STASHED = re.compile(r"\x00(\d+)\x00")
_TAG = re.compile(r"<(/?)([a-z0-9]+)[^>]*>")
_VOID = frozenset({"br", "hr"})


@dataclass(frozen=True)
class Markup:
    """What one network's HTML looks like. `schemes`: the link schemes made clickable (any
    other link stays literal text); `strike`: its strikethrough tag; `line_break`: what a
    newline outside code becomes (Telegram keeps "\\n", HTML proper needs "<br>")."""

    schemes: tuple[str, ...] = ("https", "http")
    strike: str = "s"
    line_break: str = "\n"

    def link(self) -> re.Pattern[str]:
        alternatives = "|".join(re.escape(s) for s in self.schemes)
        return re.compile(rf"\[([^\]\n]+)\]\(((?:{alternatives})://[^\s)]+)\)")


def _inline(text: str, markup: Markup | None) -> str:
    """Escape, then apply inline Markdown; code spans and links are kept from further rules.
    `markup` None: plain text (the same spans, without tags; a link as "text (url)")."""
    text = text.replace("\x00", "\ufffd")  # NUL marks the stash below; it never shows anyway
    stash: list[str] = []
    esc: Callable[[str], str] = html.escape if markup else (lambda s: s)

    def keep(fragment: str) -> str:
        stash.append(fragment)
        return f"\x00{len(stash) - 1}\x00"

    def tag(name: str, inner: str) -> str:
        return f"<{name}>{inner}</{name}>" if markup else inner

    text = _INLINE_CODE.sub(lambda m: keep(tag("code", esc(m[1]))), text)
    link = (markup or Markup()).link()
    if markup:
        text = link.sub(
            lambda m: keep(f'<a href="{html.escape(m[2], quote=True)}">{esc(m[1])}</a>'), text
        )
        text = html.escape(text, quote=False)
    else:
        text = link.sub(lambda m: keep(f"{m[1]} ({m[2]})" if m[1] != m[2] else m[2]), text)
    text = _HEADING.sub(lambda m: tag("b", m[1]), text)
    text = _BULLET.sub(lambda m: f"{m[1]}• ", text)
    text = _BOLD.sub(lambda m: tag("b", m[1] or m[2]), text)
    text = _ITALIC.sub(lambda m: tag("i", m[1] or m[2]), text)
    text = _STRIKE.sub(lambda m: tag(markup.strike if markup else "", m[1]), text)
    if markup and markup.line_break != "\n":
        text = text.replace("\n", markup.line_break)
    return _STASHED.sub(lambda m: stash[int(m[1])], text)


def balanced(rendered: str) -> str:
    """The renderer's tags properly nested: spans the rules made overlap (`**a _b** c_`) are
    closed and reopened around each other, a stray close is dropped, and all are closed at
    the end. Every `<` in `rendered` is the renderer's own (the text was escaped)."""
    out: list[str] = []
    stack: list[tuple[str, str]] = []  # (name, its opening tag as written)
    at = 0
    for match in _TAG.finditer(rendered):
        out.append(rendered[at : match.start()])
        at = match.end()
        closing, name = bool(match[1]), match[2]
        if name in _VOID:
            out.append(match[0])
        elif not closing:
            stack.append((name, match[0]))
            out.append(match[0])
        elif any(open_name == name for open_name, _ in stack):
            reopen: list[tuple[str, str]] = []
            while stack[-1][0] != name:
                reopen.append(stack.pop())
                out.append(f"</{reopen[-1][0]}>")
            stack.pop()
            out.append(match[0])
            for item in reversed(reopen):
                stack.append(item)
                out.append(item[1])
    out.append(rendered[at:])
    out.extend(f"</{name}>" for name, _ in reversed(stack))
    return "".join(out)


def blocks(text: str) -> list[tuple[str, str, str]]:
    """Split Markdown into (kind, lang, body) blocks: 'code' for fenced code, else 'text'."""
    found: list[tuple[str, str, str]] = []
    lines = text.split("\n")
    buf: list[str] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i].strip())
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is not None:
                if buf:
                    found.append(("text", "", "\n".join(buf)))
                    buf = []
                found.append(("code", fence[1], "\n".join(lines[i + 1 : end])))
                i = end + 1
                continue
        buf.append(lines[i])
        i += 1
    if buf:
        found.append(("text", "", "\n".join(buf)))
    return found


def to_html(markdown: str, markup: Markup) -> str:
    """HTML for a Markdown answer, in the tags `markup` allows (unknown syntax is escaped)."""
    out = []
    for kind, lang, body in blocks(markdown):
        if kind == "code":
            cls = f' class="language-{html.escape(lang)}"' if lang else ""
            out.append(f"<pre><code{cls}>{html.escape(body)}</code></pre>")
        else:
            out.append(_inline(body, markup))
    return balanced("\n".join(out).strip())


def to_plain(markdown: str) -> str:
    """The same answer as plain text: the Markdown's marks gone, code as it was written, a
    link as "text (url)" (a network's `body` beside its HTML)."""
    out = []
    for kind, _, body in blocks(markdown):
        out.append(body if kind == "code" else _inline(body, None))
    return "\n".join(out).strip()
