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
# Bold and strikethrough: a two-character mark, a non-space, the shortest span on the line to
# the same mark after a non-space. Scanned by `_sub_spans`, not a lazy regex: one such regex
# searches to the end of the line from every unclosed mark ("**a " repeated), quadratic.
_BOLD_MARKS = ("**", "__")
_STRIKE_MARK = ("~~",)
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])"
    # An underscore inside a word (add_note) does not close an italic span (CommonMark).
    r"|(?<!\w)_(?=\S)((?:[^_\n]|(?<=\w)_(?=\w))+?)(?<=\S)_(?!\w)"
)
# The opening of a heading: its hashes at a line start, then whitespace (`_sub_headings`).
_HEADING_MARK = re.compile(r"^#{1,6}(?=\s)", re.MULTILINE)
_SPACE_RUN = re.compile(r"\s*")
_HASH_RUN = re.compile(r"#*")
# The indent is whitespace within the line: `\s*` there would run over every following blank
# line from each line start, quadratic in a run of empty lines; what a match replaces is the same.
_BULLET = re.compile(r"^([^\S\n]*)[-*+]\s+", re.MULTILINE)
# A link's url runs to the next space or ")"; the end of that run is looked up once per run.
_URL_RUN = re.compile(r"[^\s)]*")
_LINK_STOP = re.compile(r"[\]\n]")
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


def _sub_spans(text: str, marks: tuple[str, ...], wrap: Callable[[str], str]) -> str:
    """`text` with each span `M(?=\\S)(.+?)(?<=\\S)M` (M one of the two-character `marks`,
    tried left to right as re.sub would) replaced by `wrap(inner)`, in one pass: a mark with
    no closing mark after it on its line means no later mark of that kind on the line has
    one either, so the rest of that line is not searched again for it."""
    opener = re.compile("|".join(f"{re.escape(mark)}(?=\\S)" for mark in marks))
    out: list[str] = []
    at = pos = 0
    line_end = -1
    unclosed: dict[str, int] = {}  # mark -> the line end before which it has no closing
    while (found := opener.search(text, pos)) is not None:
        start, mark = found.start(), found.group()
        if start > line_end:
            line_end = text.find("\n", start)
            line_end = len(text) if line_end < 0 else line_end
        if unclosed.get(mark, -1) != line_end:
            close = text.find(mark, start + 3, line_end)
            while close >= 0 and text[close - 1].isspace():
                close = text.find(mark, close + 1, line_end)
            if close >= 0:
                out.append(text[at:start])
                out.append(wrap(text[start + 2 : close]))
                at = pos = close + 2
                continue
            unclosed[mark] = line_end
        pos = start + 1
    out.append(text[at:])
    return "".join(out)


def _sub_headings(text: str, wrap: Callable[[str], str]) -> str:
    """`text` with each heading line replaced by `wrap(title)`: exactly what
    re.sub(r"^#{1,6}\\s+(.+?)\\s*#*\\s*$", ..., flags=re.MULTILINE) does (the whitespace
    after the hashes and after the title may run over line ends), worked out in one pass:
    that regex backtracks cubically in a run of spaces on a heading line."""
    out: list[str] = []
    at = pos = 0
    size = len(text)
    while (mark := _HEADING_MARK.search(text, pos)) is not None:
        start = _SPACE_RUN.match(text, mark.end()).end()
        if start == size:
            # Only whitespace follows: the title is its last character that is not a newline.
            start = len(text.rstrip("\n")) - 1
            if start <= mark.end():
                pos = mark.start() + 1
                continue
        line_end = text.find("\n", start)
        line_end = size if line_end < 0 else line_end
        title = text[start:line_end].rstrip().rstrip("#").rstrip()
        stop = max(start + 1, start + len(title))
        # Where the match ends: the greedy `\s*#*\s*$` after the title.
        spaces = _SPACE_RUN.match(text, stop).end()
        end = size if spaces == size else -1
        if end < 0 and text[spaces] == "#":
            hashes = _HASH_RUN.match(text, spaces).end()
            after = _SPACE_RUN.match(text, hashes).end()
            end = size if after == size else text.rfind("\n", hashes, after)
        if end < 0:
            end = text.rfind("\n", stop, spaces)
        out.append(text[at : mark.start()])
        out.append(wrap(text[start:stop]))
        at = pos = end
    out.append(text[at:])
    return "".join(out)


def _sub_links(link: re.Pattern[str], text: str, repl: Callable[[re.Match[str]], str]) -> str:
    """`link.sub(repl, text)` for a `Markup.link()` pattern, trying it only where it can match:
    from the first "[" before a "]" or line end (a later "[" there fails the same way), and
    only when the url's run of characters ends at a ")". Tried everywhere, each "[" of a
    "[[[[" line, and each url of "[a](http://x[a](http://x…", is scanned to the line's end."""
    out: list[str] = []
    at = pos = 0
    run_from = run_end = -1  # the url run last measured
    while (start := text.find("[", pos)) >= 0:
        stop = _LINK_STOP.search(text, start + 1)
        if stop is None:
            break
        pos = stop.start()
        if text[pos] != "]" or not text.startswith("(", pos + 1):
            continue
        if not run_from <= pos + 2 < run_end:
            run_from, run_end = pos + 2, _URL_RUN.match(text, pos + 2).end()
        if not text.startswith(")", run_end):
            continue
        found = link.match(text, start)
        if found is not None:
            out.append(text[at:start])
            out.append(repl(found))
            at = pos = found.end()
    out.append(text[at:])
    return "".join(out)


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
        text = _sub_links(
            link,
            text,
            lambda m: keep(f'<a href="{html.escape(m[2], quote=True)}">{esc(m[1])}</a>'),
        )
        text = html.escape(text, quote=False)
    else:
        text = _sub_links(link, text, lambda m: keep(f"{m[1]} ({m[2]})" if m[1] != m[2] else m[2]))
    text = _sub_headings(text, lambda title: tag("b", title))
    text = _BULLET.sub(lambda m: f"{m[1]}• ", text)
    text = _sub_spans(text, _BOLD_MARKS, lambda inner: tag("b", inner))
    text = _ITALIC.sub(lambda m: tag("i", m[1] or m[2]), text)
    text = _sub_spans(text, _STRIKE_MARK, lambda inner: tag(markup.strike if markup else "", inner))
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
    # The lines that can close a fence, found once: an opening fence takes the first after it
    # (searching from each opening fence instead is quadratic in unclosed ones).
    closings = [j for j, line in enumerate(lines) if line.strip() == "```"]
    next_closing = 0
    buf: list[str] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i].strip())
        if fence:
            while next_closing < len(closings) and closings[next_closing] <= i:
                next_closing += 1
            end = closings[next_closing] if next_closing < len(closings) else None
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
