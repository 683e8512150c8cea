"""Units: the answer's HTML on Matrix stays inside the spec's recommended subset ("m.room.message
msgtypes": the tags and attributes a client should permit), whatever the model wrote."""

from __future__ import annotations

import json
import random
from html.parser import HTMLParser
from typing import Any

import pytest

from agentd.chat.format import to_html, to_plain
from agentd.matrix.output import MARKUP, MatrixOutbox, _replacing, text_content

# The spec's list of tags to permit, and the attributes permitted on each.
TAGS = set(
    "font del h1 h2 h3 h4 h5 h6 blockquote p a ul ol sup sub li b i u strong em strike code hr "
    "br div table thead tbody tr th td caption pre span img details summary".split()
)
ATTRS = {
    "font": {"data-mx-bg-color", "data-mx-color", "color"},
    "span": {"data-mx-bg-color", "data-mx-color", "data-mx-spoiler"},
    "a": {"name", "target", "href"},
    "img": {"width", "height", "alt", "title", "src"},
    "ol": {"start"},
    "code": {"class"},
}
SCHEMES = ("https://", "http://", "ftp://", "mailto:", "magnet:")
VOID = {"br", "hr", "img"}


class SubsetCheck(HTMLParser):
    """Every tag in the subset, every attribute allowed on it, links absolute with a permitted
    scheme, code classes `language-…`, and every tag closed in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            self.problems.append(f"<{tag}> is outside the subset")
        for name, value in attrs:
            if name not in ATTRS.get(tag, set()):
                self.problems.append(f"{name}= on <{tag}>")
            elif name == "href" and not str(value).startswith(SCHEMES):
                self.problems.append(f"href {value!r}")
            elif name == "class" and not str(value).startswith("language-"):
                self.problems.append(f"class {value!r}")
            elif name == "src":
                self.problems.append("an image the model chose")
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.open.pop()

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            self.problems.append(f"</{tag}> closes nothing open")

    def close(self) -> None:
        super().close()
        self.problems.extend(f"<{tag}> never closed" for tag in self.open)


def problems(html: str) -> list[str]:
    check = SubsetCheck()
    check.feed(html)
    check.close()
    return check.problems


HOSTILE = [
    '<img src="mxc://evil.example/tracker">',
    "<img src=mxc://evil.example/tracker onerror=alert(1)>",
    "[click](javascript:alert(1))",
    '[x](https://ok.example/" onclick="alert(1))',
    "[x](tg://resolve?domain=bot)",
    "<a href='javascript:alert(1)'>hi</a>",
    "<b>unclosed <i>tags <script>alert(1)</script>",
    '<span data-mx-spoiler="">secret</span><iframe src="https://x">',
    "**bold with <b> inside** and `code </code><img src=x>`",
    "```html\n<script>alert(1)</script>\n```\n```\nunclosed fence <b>",
    '```"><img src=x>\ncode\n```',
    "~~<del>~~ __<u>__ *</i>* _<em>_ # <h1>head",
    "\x00 NUL \x001\x00 and the stash marker",
    "<!-- comment --> <![CDATA[ x ]]> &lt;already&gt; &#x3C;img&#x3E;",
    "<mx-reply><blockquote>fake quote</blockquote></mx-reply> answer",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_stays_text(text: str) -> None:
    content = text_content(text)
    assert problems(content["formatted_body"]) == []
    assert content["format"] == "org.matrix.custom.html"
    assert "<img" not in content["formatted_body"] and "javascript:" not in str(
        [a for a in content["formatted_body"].split('href="')[1:]]
    )


def test_random_markup_soup_never_leaves_the_subset() -> None:
    pieces = [
        "<",
        ">",
        "**",
        "*",
        "_",
        "__",
        "~~",
        "`",
        "```",
        "\n",
        "[a](",
        ")",
        "https://x",
        "javascript:",
        '"',
        "'",
        "&",
        "img",
        "src=",
        "mxc://",
        "# ",
        "- ",
        " ",
        "b",
        "/",
    ]
    rng = random.Random(4517)
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))
        assert problems(to_html(text, MARKUP)) == [], text


def test_the_same_markdown_as_telegram_in_matrix_tags() -> None:
    md = "# Plan\n**bold** _it_ ~~gone~~ `a<b` [docs](https://e.com/?a=1&b=2)\n- one\n- two"
    assert to_html(md, MARKUP) == (
        "<b>Plan</b><br><b>bold</b> <i>it</i> <del>gone</del> <code>a&lt;b</code> "
        '<a href="https://e.com/?a=1&amp;b=2">docs</a><br>• one<br>• two'
    )
    assert to_plain(md) == "Plan\nbold it gone a<b docs (https://e.com/?a=1&b=2)\n• one\n• two"


def test_code_keeps_its_lines_and_its_language() -> None:
    out = to_html("see:\n```python\nif a < b:\n    pass\n```", MARKUP)
    assert out == 'see:\n<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>'
    assert to_plain("```python\nif a < b:\n```") == "if a < b:"


def test_an_edit_carries_the_formatting_in_its_new_content() -> None:
    edit = _replacing("$draft", "**so far**")
    assert edit["m.new_content"] == {
        "msgtype": "m.text",
        "body": "so far",
        "format": "org.matrix.custom.html",
        "formatted_body": "<b>so far</b>",
    }
    assert edit["formatted_body"] == "* <b>so far</b>" and edit["body"] == "* so far"
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$draft"}


def _outbox(limit: int = 16_000) -> Any:
    return MatrixOutbox(None, max_message_chars=limit, max_file_bytes=1)  # type: ignore[arg-type]


def test_every_chunk_fits_one_event_even_when_html_swells_it() -> None:
    """16,000 '<' are 16,000 characters but 64,000 bytes of HTML: each chunk's content, and
    the edit that carries it twice, stays under the spec's 65,536-byte event."""
    outbox = _outbox()
    for text in ["<" * 16_000, "😀" * 16_000, "**a** & " * 2_000]:
        chunks = outbox.split(text)
        assert "".join(c.replace("\n", "").replace(" ", "") for c in chunks) == text.replace(
            " ", ""
        )
        for chunk in chunks:
            assert len(json.dumps(_replacing("$d", chunk)).encode()) < 65_536 - 4_000


def test_a_long_code_block_is_closed_and_reopened_in_each_chunk() -> None:
    code = "```python\n" + "\n".join(f"x_{i} = {i}  # <{i}>" for i in range(3000)) + "\n```"
    chunks = _outbox(8_000).split(code)
    assert len(chunks) > 1
    for chunk in chunks:
        assert len(chunk) <= 8_000 and chunk.startswith("```python\n") and chunk.endswith("```")
        html = text_content(chunk)["formatted_body"]
        assert html.startswith('<pre><code class="language-python">') and problems(html) == []
