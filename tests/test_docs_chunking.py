"""Chunking and loaders: sections follow headings, sizes hold, overlap stays inside a section."""

from __future__ import annotations

import itertools
import random
import re
import sys

import pytest

from agentd.knowledge.chunking import (
    Block,
    Chunk,
    chunk_blocks,
    drop_title,
    markdown_blocks,
    overlap_tail,
    plain_blocks,
    split_text,
)
from agentd.knowledge.loaders import LoadError, format_for_path, parse_bytes

GUIDE = """\
# Guide

Welcome to the guide.

## Install

Pick your system.

### Linux

Run `apt install zebra`.

```sh
# this comment is not a heading
make install
```

### macOS

Use **brew**.

## [Usage](usage.md) notes

Call it.

Troubleshooting
---------------

Restart it.

***

After a thematic break.
"""


def _sections(blocks: list[Block]) -> list[tuple[tuple[str, ...], str]]:
    return [(b.path, b.text.split("\n")[0]) for b in blocks]


def test_markdown_headings_become_section_paths() -> None:
    assert _sections(markdown_blocks(GUIDE)) == [
        (("Guide",), "Welcome to the guide."),
        (("Guide", "Install"), "Pick your system."),
        (("Guide", "Install", "Linux"), "Run `apt install zebra`."),
        (("Guide", "Install", "Linux"), "```sh"),
        (("Guide", "Install", "macOS"), "Use **brew**."),
        (("Guide", "Usage notes"), "Call it."),
        (("Guide", "Troubleshooting"), "Restart it."),
        (("Guide", "Troubleshooting"), "After a thematic break."),
    ]


@pytest.mark.parametrize(
    "line, title",
    [
        ("# Title ##", "Title"),
        ("## C#", "C#"),
        ("# a # b #", "a # b"),
        ("### ##", "##"),
        ("# ![logo](a.png) [Guide](x) to `make` **now**", "logo Guide to make now"),
    ],
)
def test_heading_titles_drop_closing_hashes_links_and_marks(line: str, title: str) -> None:
    assert [b.path for b in markdown_blocks(f"{line}\n\ntext")] == [(title,)]
    assert parse_bytes(f"{line}\n\ntext".encode(), "markdown", fallback_title="f").title == (
        title if line.startswith("# ") else "f"
    )


def test_a_title_of_only_spaces_is_no_title() -> None:
    # One space after the hashes is no heading at all to the title finder; two are an empty one.
    assert parse_bytes(b"# \n# Real\n", "markdown", fallback_title="f").title == "Real"
    assert parse_bytes(b"#  \n# Real\n", "markdown", fallback_title="f").title == "f"


def test_a_fence_is_one_block_and_an_unclosed_one_runs_to_the_end() -> None:
    blocks = markdown_blocks("# A\n\n```\n# not a heading\n\nstill code\n")
    assert [b.path for b in blocks] == [("A",)]
    assert "still code" in blocks[0].text


def test_drop_title_removes_the_top_heading_equal_to_the_title() -> None:
    blocks = drop_title(markdown_blocks(GUIDE), "Guide")
    chunks = chunk_blocks(blocks, 1000, 100)
    assert [c.section for c in chunks] == [
        "",
        "Install",
        "Install > Linux",
        "Install > macOS",
        "Usage notes",
        "Troubleshooting",
    ]
    assert "make install" in chunks[2].text  # code stays with its section


def test_chunks_never_span_sections_and_have_no_overlap_across_them() -> None:
    text = "# A\n\n" + "Alpha sentence here. " * 30 + "\n\n# B\n\n" + "Beta words follow. " * 30
    chunks = chunk_blocks(markdown_blocks(text), 200, 60)
    assert {c.section for c in chunks} == {"A", "B"}
    for chunk in chunks:
        word = "Alpha" if chunk.section == "A" else "Beta"
        assert word in chunk.text and ("Beta" if word == "Alpha" else "Alpha") not in chunk.text
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))


def test_long_sections_are_cut_with_overlap_at_sentence_boundaries() -> None:
    sentences = [f"Sentence number {i} says something." for i in range(60)]
    chunks = chunk_blocks([Block((), " ".join(sentences))], 300, 80)
    assert len(chunks) > 3
    assert all(len(c.text) <= 300 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        first_sentence = after.text.split(". ")[0] + "."
        assert first_sentence in before.text  # the next chunk starts with the previous tail
        assert after.text.startswith("Sentence number")  # ... at a sentence boundary
    assert all(s in " ".join(c.text for c in chunks) for s in sentences)


def test_paragraphs_are_packed_up_to_the_size() -> None:
    blocks = [Block(("S",), f"Paragraph {i} " + "x" * 80) for i in range(10)]
    chunks = chunk_blocks(blocks, 400, 0)
    assert all(len(c.text) <= 400 for c in chunks)
    assert sum(c.text.count("Paragraph") for c in chunks) == 10  # no overlap asked, none given
    assert len(chunks) == 3


def test_text_without_any_boundary_is_still_cut_to_size() -> None:
    chunks = chunk_blocks([Block((), "x" * 2500)], 1000, 100)
    assert all(len(c.text) <= 1000 for c in chunks)
    assert "".join(c.text for c in chunks).count("x") >= 2500


def test_random_text_keeps_every_word_and_the_size_bound() -> None:
    rng = random.Random(7)
    words = [
        "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 12))) for _ in range(3000)
    ]
    text, i = [], 0
    while i < len(words):
        n = rng.randint(1, 40)
        sep = rng.choice([". ", "\n", "\n\n", " "])
        text.append(" ".join(words[i : i + n]) + sep)
        i += n
    chunks = chunk_blocks(plain_blocks("".join(text)), 500, 100)
    assert all(0 < len(c.text) <= 500 for c in chunks)
    seen = set(re.findall(r"[a-j]+", " ".join(c.text for c in chunks)))
    assert all(w in seen for w in words)


@pytest.mark.parametrize("limit", [50, 120, 999])
def test_split_text_fits_the_limit(limit: int) -> None:
    text = "One two three. Four five six!\nSeven eight nine?\n\n" * 40
    assert all(len(p) <= limit for p in split_text(text, limit))


def test_overlap_tail_prefers_whole_sentences_then_words() -> None:
    assert overlap_tail("First one. Second sentence here.", 25) == "Second sentence here."
    assert overlap_tail("alpha beta gamma delta", 12) == "gamma delta"
    assert overlap_tail("short", 100) == "short"
    assert overlap_tail("anything", 0) == ""


def test_chunk_hash_covers_the_section() -> None:
    a, b = Chunk(0, "Install", "Run it."), Chunk(0, "Usage", "Run it.")
    assert a.hash != b.hash and a.embed_text == "Install\n\nRun it."
    assert Chunk(3, "Install", "Run it.").hash == a.hash  # position is not content


def test_chunk_size_must_be_sane() -> None:
    with pytest.raises(ValueError):
        chunk_blocks([Block((), "x")], 10, 0)


# --------------------------------------------------------------------------------------------
# Loaders


def test_markdown_title_from_front_matter_or_first_h1() -> None:
    doc = parse_bytes(
        b"---\ntitle: Handbook\ntags: [a]\n---\n# Intro\n\nHi.\n", "markdown", fallback_title="f.md"
    )
    assert doc.title == "Handbook" and doc.blocks == [Block(("Intro",), "Hi.")]
    doc = parse_bytes(b"\xef\xbb\xbf# Handbook\n\n## Part\n\nText.", "markdown", fallback_title="f")
    assert doc.title == "Handbook" and doc.blocks == [Block(("Part",), "Text.")]
    doc = parse_bytes(b"```\n# code\n```\n## Part\n\nText.", "markdown", fallback_title="f.md")
    assert doc.title == "f.md"


def test_html_headings_and_code_blocks() -> None:
    html = (
        "<html><head><title>Zebra docs</title><script>evil()</script></head><body>"
        "<nav>Home | About</nav><h1>Zebra</h1><p>Intro.</p><h2>Build</h2>"
        "<pre># not a heading\nmake</pre><p>Done.</p></body></html>"
    )
    doc = parse_bytes(html.encode(), "html", fallback_title="z.html")
    assert doc.title == "Zebra docs"
    paths = {b.path for b in doc.blocks}
    assert ("Zebra", "Build") in paths or ("Build",) in paths
    text = "\n".join(b.text for b in doc.blocks)
    assert "# not a heading" in text and "evil" not in text and "Home | About" not in text


def test_html_with_a_declared_charset_decodes() -> None:
    html = '<meta charset="iso-8859-1"><h1>Caf\xe9</h1><p>Cr\xe8me.</p>'.encode("latin-1")
    doc = parse_bytes(html, "html", fallback_title="x.html")
    assert "Crème." in doc.blocks[0].text


def test_invalid_utf8_is_a_clear_load_error() -> None:
    with pytest.raises(LoadError, match=r"not valid UTF-8 \(byte 0xe9 at offset 3\)"):
        parse_bytes(b"caf\xe9", "text", fallback_title="x.txt")


def test_pdf_without_pypdf_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)  # as if a trimmed install lacked it
    with pytest.raises(LoadError, match=r"PDF support \(pypdf\) is missing; reinstall"):
        parse_bytes(b"%PDF-1.4", "pdf", fallback_title="x.pdf")


def test_pdf_pages_become_sections() -> None:
    pytest.importorskip("pypdf")
    from tests.docs_support import make_pdf

    doc = parse_bytes(
        make_pdf(["Zebras sleep standing.", "They eat grass."], title="Zebras"),
        "pdf",
        fallback_title="z.pdf",
    )
    assert doc.title == "Zebras"
    assert [(b.path, b.text) for b in doc.blocks] == [
        (("Page 1",), "Zebras sleep standing."),
        (("Page 2",), "They eat grass."),
    ]


def test_formats_by_extension() -> None:
    assert [format_for_path(p) for p in ("a.MD", "b.htm", "c.txt", "d.pdf", "e.docx")] == [
        "markdown",
        "html",
        "text",
        "pdf",
        None,
    ]
