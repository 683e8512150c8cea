"""Units: Markdown → Telegram HTML, and splitting long answers (R-TG-1, R-TG-2)."""

from __future__ import annotations

import asyncio
import html
import re

import pytest

from agentd.chat.format import to_html as render
from agentd.chat.format import to_plain
from agentd.chat.split import split_markdown as split_to_fit
from agentd.telegram.format import TELEGRAM, split_markdown, utf16_len
from tests.heartbeat import LIMIT, heartbeat


def to_html(markdown: str) -> str:
    return render(markdown, TELEGRAM)


def test_inline_markdown_becomes_html_and_everything_else_is_escaped() -> None:
    out = to_html("**bold** _it_ `a<b` [x](https://e.com/?a=1&b=2) 1 < 2 & <script>")
    assert out == (
        '<b>bold</b> <i>it</i> <code>a&lt;b</code> <a href="https://e.com/?a=1&amp;b=2">x</a> '
        "1 &lt; 2 &amp; &lt;script&gt;"
    )


def test_code_blocks_keep_their_content_literal() -> None:
    out = to_html("```python\nif a < b and **c**:\n    pass\n```")
    assert out == (
        '<pre><code class="language-python">if a &lt; b and **c**:\n    pass</code></pre>'
    )


def test_snake_case_and_lone_stars_are_not_italics() -> None:
    assert to_html("call my_func_name with 2 * 3 * 4") == "call my_func_name with 2 * 3 * 4"


def test_javascript_links_are_not_made_clickable() -> None:
    assert "<a" not in to_html("[x](javascript:alert(1))")


@pytest.mark.parametrize("n", [1, 3, 10])
def test_split_keeps_order_and_fits_the_limit(n: int) -> None:
    paragraphs = [f"P{i} " + "word " * 400 for i in range(n)]
    chunks = split_markdown("\n\n".join(paragraphs))
    assert all(utf16_len(to_html(c)) <= 4096 and utf16_len(c) <= 4096 for c in chunks)
    assert re.findall(r"P\d+", " ".join(chunks)) == [f"P{i}" for i in range(n)]


def test_split_handles_giant_unbroken_text_escapes_and_emoji() -> None:
    text = ("<&>" * 5000) + ("😀" * 3000)
    chunks = split_markdown(text)
    assert "".join(chunks) == text
    assert all(utf16_len(to_html(c)) <= 4096 for c in chunks)


def test_split_code_blocks_are_closed_in_every_chunk() -> None:
    code = "```\n" + "\n".join(f"line {i} <tag>" for i in range(2000)) + "\n```"
    chunks = split_markdown(code)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.startswith("```") and chunk.endswith("```")
        assert utf16_len(to_html(chunk)) <= 4096
    lines = [ln for c in chunks for ln in c.splitlines() if ln.startswith("line")]
    assert lines == [f"line {i} <tag>" for i in range(2000)]


def test_empty_answer_has_no_chunks() -> None:
    assert split_markdown("  \n ") == []
    assert html.unescape(to_html("a & b")) == "a & b"


@pytest.mark.parametrize("text", ["a\n\n" * 8000, "**a** & " * 2000, "x\n" * 8000])
def test_a_split_costs_a_few_renders_per_chunk_not_one_per_word(text: str) -> None:
    """Each check renders the candidate chunk: one check per paragraph or word made a
    16,000-character answer of short words take seconds on the event loop."""
    calls = []

    def fits(candidate: str) -> bool:
        calls.append(len(candidate))
        return len(candidate) <= 4096

    chunks = split_to_fit(text, fits)
    assert all(len(c) <= 4096 for c in chunks)
    assert len(calls) <= 40 * len(chunks), len(calls)


def test_heading_bold_strike_and_link_edges_render_as_before() -> None:
    """The one-pass scanners keep what the regexes they replace matched (the heading's trailing
    whitespace runs over a blank line, a span closes at the first mark after a non-space)."""
    assert to_html("# Title ##\n\nBody") == "<b>Title</b>\nBody"
    assert to_html("## C#") == "<b>C</b>"
    assert to_html("#\nnext line") == "<b>next line</b>"
    assert to_html("**a **b** c**") == "<b>a **b</b> c**"
    assert to_html("**x** a ** b**") == "<b>x</b> a ** b**"
    assert to_html("~~a ~~ b~~") == "<s>a ~~ b</s>"
    assert (
        to_html("[a [b](https://x.org) [c](ftp://y)")
        == '<a href="https://x.org">a [b</a> [c](ftp://y)'
    )
    assert (
        to_html("```a\n```b\nx\n```\n```")
        == '<pre><code class="language-a">```b\nx</code></pre>\n```'
    )


@pytest.mark.parametrize(
    "name, text",
    [
        ("a heading with a space run", "# x" + " " * 1_500 + "y"),
        ("unclosed bold marks", "**a " * 11_000),
        ("unclosed strike marks", "~~a " * 11_000),
        ("unclosed fences", "```a\n" * 20_000),
        ("empty lines", "\n" * 25_000),
        ("open brackets", "[" * 25_000),
        ("unclosed link urls", "[a](http://x" * 6_000),
    ],
)
async def test_rendering_hostile_markdown_never_holds_the_loop(name: str, text: str) -> None:
    """Every answer and draft is rendered on the event loop: each shape here, rendered by
    backtracking regexes, held it for seconds (quadratic or cubic in its length)."""
    async with heartbeat() as beat:
        await asyncio.sleep(0)
        to_html(text)
        to_plain(text)
    assert beat.largest < LIMIT, f"{name}: the loop was held {beat.largest:.1f} s"
