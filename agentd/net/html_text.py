"""HTML to readable plain text with the stdlib parser: headings, paragraphs, lists, link text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

# Content that is code, chrome or invisible: never useful to a reader, often used for tricks.
_SKIP = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "nav",
        "iframe",
        "object",
        "embed",
        "canvas",
        "select",
        "button",
    }
)
_VOID = frozenset(
    {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    }
)
_BLOCK = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hr",
        "html",
        "main",
        "ol",
        "p",
        "section",
        "summary",
        "table",
        "tbody",
        "thead",
        "tfoot",
        "tr",
        "ul",
    }
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class HtmlText:
    title: str
    text: str


class _Extractor(HTMLParser):
    def __init__(self, *, fence_code: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self._fence_code = fence_code
        self.title_parts: list[str] = []
        self._lines: list[str] = []
        self._line: list[str] = []
        self._prefix = ""
        self._skip_tag: str | None = None
        self._skip_depth = 0
        self._in_title = False
        self._pre_depth = 0
        self._list_depth = 0
        self._cells = 0

    # Hidden subtrees are skipped whole: count nested tags of the same name to find the end.
    def _hidden(self, tag: str, attrs: list[tuple[str, str | None]]) -> bool:
        if tag in _SKIP:
            return True
        values = dict(attrs)
        if "hidden" in values or (values.get("aria-hidden") or "").lower() == "true":
            return True
        return bool(_HIDDEN_STYLE.search(values.get("style") or ""))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skip_tag is not None:
            if tag == self._skip_tag:
                self._skip_depth += 1
            return
        if tag == "title":
            self._in_title = True
            return
        if tag not in _VOID and self._hidden(tag, attrs):
            self._skip_tag, self._skip_depth = tag, 1
            return
        if tag in _HEADINGS:
            self._break(blank=True)
            self._prefix = "#" * _HEADINGS[tag] + " "
        elif tag == "li":
            self._break()
            self._prefix = "  " * max(0, self._list_depth - 1) + "- "
        elif tag in ("ul", "ol"):
            self._break()
            self._list_depth += 1
        elif tag == "pre":
            self._break(blank=True)
            if self._fence_code and not self._pre_depth:
                self._lines.append("```")
            self._pre_depth += 1
        elif tag == "br":
            self._break()
        elif tag in ("td", "th"):
            if self._cells:
                self._line.append(" | ")
            self._cells += 1
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt:
                self._line.append(f" [image: {alt}] ")
        elif tag in _BLOCK:
            self._break(blank=tag in ("p", "blockquote", "table"))

    def handle_endtag(self, tag: str) -> None:
        if self._skip_tag is not None:
            if tag == self._skip_tag:
                self._skip_depth -= 1
                if self._skip_depth == 0:
                    self._skip_tag = None
            return
        if tag == "title":
            self._in_title = False
        elif tag in _HEADINGS:
            self._break(blank=True)
        elif tag in ("ul", "ol"):
            self._list_depth = max(0, self._list_depth - 1)
            self._break()
        elif tag == "pre":
            if self._fence_code and self._pre_depth == 1:
                self._break(collapse=False)
                self._lines.append("```")
            self._break(blank=True, collapse=False)
            self._pre_depth = max(0, self._pre_depth - 1)
        elif tag == "tr":
            self._cells = 0
            self._break()
        elif tag in _BLOCK or tag == "li":
            self._break(blank=tag == "p")

    def handle_data(self, data: str) -> None:
        if self._skip_tag is not None:
            return
        if self._in_title:
            self.title_parts.append(data)
        elif self._pre_depth:
            self._flush_pre(data)
        else:
            self._line.append(data)

    def _flush_pre(self, data: str) -> None:
        # Preformatted text keeps its own line breaks and indentation.
        first, *rest = data.split("\n")
        self._line.append(first)
        for part in rest:
            self._break(collapse=False)
            self._line.append(part)

    def _break(self, *, blank: bool = False, collapse: bool = True) -> None:
        raw = "".join(self._line)
        text = _SPACES.sub(" ", raw).strip() if collapse else raw.rstrip()
        if text:
            self._lines.append(self._prefix + text)
        self._line, self._prefix = [], ""
        if blank and self._lines and self._lines[-1] != "":
            self._lines.append("")

    def result(self) -> str:
        self._break()
        text = "\n".join(self._lines)
        return re.sub(r"\n{3,}", "\n\n", text).strip()


def html_to_text(html: str, *, fence_code: bool = False) -> HtmlText:
    """Readable text of an HTML page plus its title; scripts, styles, nav and hidden parts go.

    Headings come out as Markdown `#` lines. With `fence_code`, `<pre>` blocks are fenced with
    ``` as well, so the text reads as Markdown whose code lines are never taken for headings
    (document ingestion chunks it by its headings).
    """
    parser = _Extractor(fence_code=fence_code)
    parser.feed(html)
    parser.close()
    title = _SPACES.sub(" ", "".join(parser.title_parts)).strip()
    return HtmlText(title=title, text=parser.result())
