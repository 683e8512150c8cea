"""HTML to readable plain text: headings, paragraphs, lists, link text.

The markup is parsed by lexbor (through selectolax), an HTML5 parser whose tokenizer is linear
in its input: the stdlib HTMLParser is quadratic on malformed markup (30 KB of `<a ` took 6 s
of CPU, a 2 MB page hours). The tree is walked without recursion, so nesting depth costs
nothing. Outside data goes through `html_to_text_bounded` (a limited child process).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentd.parsing.budget import Budget, ParseFailed

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


class _Extractor:
    """Start, end and text events (as the tree walk emits them) to readable lines."""

    def __init__(self, *, fence_code: bool = False) -> None:
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


def _walk(root: Any, out: _Extractor) -> None:
    # Depth-first over child/next/parent links: a page nested 100 000 deep is no recursion.
    node, top = root, root.mem_id
    while node is not None:
        tag = node.tag
        if tag == "-text":
            out.handle_data(node.text_content or "")
        elif tag and tag[0] not in "-!#_":
            out.handle_starttag(tag, list(node.attributes.items()))
            if node.child is not None and tag not in _VOID:
                node = node.child
                continue
            if tag not in _VOID:
                out.handle_endtag(tag)
        if node.mem_id == top:
            return
        # Climb until a node has a next sibling, closing each element left behind.
        while node is not None and node.next is None:
            node = node.parent
            if node is None or node.mem_id == top:
                return
            if node.tag and node.tag[0] not in "-!#_":
                out.handle_endtag(node.tag)
        node = node.next if node is not None else None


def html_to_text(html: str, *, fence_code: bool = False) -> HtmlText:
    """Readable text of an HTML page plus its title; scripts, styles, nav and hidden parts go.

    Headings come out as Markdown `#` lines. With `fence_code`, `<pre>` blocks are fenced with
    ``` as well, so the text reads as Markdown whose code lines are never taken for headings
    (document ingestion chunks it by its headings). Linear in the input, but CPU-bound: call
    it on the event loop only for small trusted text; outside data goes through
    `html_to_text_bounded`.
    """
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    parser = _Extractor(fence_code=fence_code)
    if tree.root is not None:
        _walk(tree.root, parser)
    title = _SPACES.sub(" ", "".join(parser.title_parts)).strip()
    return HtmlText(title=title, text=parser.result())


def html_job(data: bytes, *, fence_code: bool = False) -> dict[str, str]:
    """The child-process side of html_to_text_bounded (UTF-8 bytes in, JSON-able out)."""
    page = html_to_text(data.decode("utf-8", "replace"), fence_code=fence_code)
    return {"title": page.title, "text": page.text}


# Any tag: `[^<>]` stops each failed match at the next `<`, so the scan stays linear even on
# a page of unclosed `<<<<`.
_TAG = re.compile(r"<[^<>]*>?")


def plain_job(data: bytes) -> dict[str, str]:
    """Tags stripped, entities decoded: linear, structure-free; when the tree is too costly."""
    import html as html_lib

    text = _TAG.sub(" ", data.decode("utf-8", "replace"))
    lines = (_SPACES.sub(" ", line).strip() for line in html_lib.unescape(text).splitlines())
    return {"title": "", "text": "\n".join(line for line in lines if line)}


# A 2 MB page parses in well under a second; the budget is for pathological ones. The HTML5
# tree builder is quadratic in nesting depth (each block tag scans the open elements: 40 000
# nested <div> take 1.3 s), so a page that blows the budget is read again without structure.
HTML_BUDGET = Budget(seconds=15.0, cpu_seconds=5, memory_bytes=1024 * 1024 * 1024)


class HtmlTooHard(Exception):
    """The page could not be turned into text within the budget; the message says why."""


async def html_to_text_bounded(
    html: str, *, fence_code: bool = False, budget: Budget | None = None
) -> HtmlText:
    """html_to_text off the event loop, in a child process with time and memory limits.

    A page whose markup is too costly to build a tree of comes back as its bare text (tags
    stripped, no headings or lists), with a note saying so; HtmlTooHard if even that fails.
    """
    from agentd.parsing.bounded import run_bounded

    data = html.encode("utf-8", "replace")
    budget = budget or HTML_BUDGET
    try:
        answer = await run_bounded(
            "agentd.parsing.html_text:html_job", data, budget, fence_code=fence_code
        )
        return HtmlText(title=answer["title"], text=answer["text"])
    except ParseFailed as exc:
        if exc.kind != "limit":
            raise HtmlTooHard(f"the page could not be read as HTML: {exc}") from None
        why = str(exc)
    try:
        answer = await run_bounded("agentd.parsing.html_text:plain_job", data, budget)
    except ParseFailed as exc:
        raise HtmlTooHard(f"the page could not be read as HTML: {exc}") from None
    note = f"[The page's markup was too costly to lay out ({why}); its bare text follows.]"
    return HtmlText(title="", text=note + "\n\n" + answer["text"])
