"""Outside data is parsed in a bounded child process: hostile input ends in a clear outcome.

Each case is real hostile input (quadratic HTML, deep nesting, a PDF bomb, an image bomb) fed
through the same functions the daemon calls; the limits are the production ones unless a
smaller one makes the test fast.
"""

from __future__ import annotations

import asyncio
import io
import struct
import zlib

import pytest

from agentd.knowledge.loaders import LoadError, parse_bytes_bounded
from agentd.parsing import bounded
from agentd.parsing.bounded import run_bounded
from agentd.parsing.budget import Budget, ParseFailed
from agentd.parsing.html_text import html_to_text, html_to_text_bounded
from agentd.parsing.image import NotAnImage, downscale_bounded
from agentd.schedule.recurrence import ScheduleError, When
from agentd.schedule.timing import Gap, checked_bounded
from tests.heartbeat import LIMIT, heartbeat


def test_quadratic_markup_for_the_stdlib_parser_is_read() -> None:
    # 2 MB of unclosed `<a `: hours for html.parser, linear here; text around it survives.
    page = "<title>t</title><p>before</p>" + "<a " * 700_000
    result = html_to_text(page)
    assert result.title == "t"
    assert result.text.startswith("before")


def test_the_extractor_keeps_structure() -> None:
    html = (
        "<html><head><title>T &amp; x</title><style>p{}</style></head><body><h2>Head</h2>"
        "<p>a<b hidden>secret</b><p>b&lt;<ul><li>one<li>two</ul>"
        "<table><tr><td>1<td>2</table><div style='display:none'>gone</div>"
        "<pre>x\n  y</pre><img alt=pic></body></html>"
    )
    result = html_to_text(html, fence_code=True)
    assert result.title == "T & x"
    assert (
        result.text
        == "## Head\n\na\n\nb<\n\n- one\n- two\n\n1 | 2\n\n```\nx\n  y\n```\n\n[image: pic]"
    )


async def test_bounded_html_matches_the_in_process_result() -> None:
    html = "<title>x</title><h1>One</h1><p>two <a href=/>three</a></p>"
    assert await html_to_text_bounded(html) == html_to_text(html)


async def test_deep_nesting_past_the_budget_falls_back_to_bare_text() -> None:
    # The HTML5 tree builder is quadratic in depth: 300 000 nested divs blow a 1 s CPU budget.
    html = "<div>" * 300_000 + "the text &amp; more"
    result = await html_to_text_bounded(html, budget=Budget(seconds=10, cpu_seconds=1))
    assert "too costly to lay out" in result.text
    assert "more than its 1 s of CPU" in result.text
    assert result.text.endswith("the text & more")


async def test_a_wall_clock_budget_kills_the_child() -> None:
    with pytest.raises(ParseFailed) as caught:
        await run_bounded(
            "agentd.parsing.html_text:html_job",
            b"<div>" * 400_000,
            Budget(seconds=0.5, cpu_seconds=30),
        )
    assert caught.value.kind == "limit"
    assert "longer than 0.5 s" in str(caught.value)


async def test_targets_outside_agentd_are_refused() -> None:
    with pytest.raises(ValueError):
        await run_bounded("os:system", b"")


def _pdf_with_stream(stream: bytes, *, pages: int = 1) -> bytes:
    # Every page shows the same content stream: a small file, as much work as it has pages.
    kids = b" ".join(b"%d 0 R" % (5 + n) for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        b"/Resources << /Font << /F1 4 0 R >> >> >>"
    )
    objects += [page] * pages
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


async def test_a_pdf_cpu_bomb_is_stopped_by_the_budget() -> None:
    # 100 000 text operators shown on 500 pages: a few KB that take pypdf minutes of CPU.
    ops = b"BT /F1 12 Tf " + b"(x) Tj 1 0 Td " * 100_000 + b"ET"
    bomb = _pdf_with_stream(zlib.compress(ops, 9), pages=500)
    assert len(bomb) < 100_000
    with pytest.raises(LoadError) as caught:
        await parse_bytes_bounded(
            bomb, "pdf", fallback_title="bomb.pdf", budget=Budget(seconds=30, cpu_seconds=2)
        )
    assert "too costly to read" in str(caught.value)
    assert "2 s of CPU" in str(caught.value)


async def test_a_pdf_with_too_many_pages_is_refused() -> None:
    bomb = _pdf_with_stream(zlib.compress(b"BT ET"), pages=2001)
    with pytest.raises(LoadError, match="2001 pages; at most 2000"):
        await parse_bytes_bounded(bomb, "pdf", fallback_title="many.pdf")


async def test_a_readable_pdf_is_read_in_the_child() -> None:
    text = b"BT /F1 12 Tf 72 700 Td (Hello bounded world) Tj ET"
    doc = await parse_bytes_bounded(
        _pdf_with_stream(zlib.compress(text)), "pdf", fallback_title="ok.pdf"
    )
    assert doc.title == "ok.pdf"
    assert [b.text for b in doc.blocks] == ["Hello bounded world"]
    assert doc.blocks[0].path == ("Page 1",)


def _png(width: int, height: int, idat: bytes) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


async def test_an_image_bomb_is_refused_before_decoding() -> None:
    # 100 000 x 100 000 grey pixels (10 GB decoded) declared by a tiny file: Pillow's own
    # guard; 7 000 x 7 000 (49 MP) passes it and meets ours.
    bomb = _png(100_000, 100_000, zlib.compress(b"\x00" * 100_001))
    with pytest.raises(NotAnImage, match="10000000000 pixels"):
        await downscale_bounded(bomb, 1568, 1_150_000)
    bomb = _png(7_000, 7_000, zlib.compress(b"\x00" * 7_001))
    with pytest.raises(NotAnImage, match="7000 x 7000 pixels; at most 40 megapixels"):
        await downscale_bounded(bomb, 1568, 1_150_000)


async def test_a_real_image_is_downscaled_in_the_child() -> None:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (3000, 2000), (200, 10, 10)).save(buf, format="PNG")
    small = await downscale_bounded(buf.getvalue(), 1568, 1_150_000)
    assert (small.width, small.height) == (3000, 2000)
    assert small.media_type == "image/jpeg"
    assert Image.open(io.BytesIO(small.data)).size[0] <= 1568


async def test_parses_run_concurrently_without_blocking_the_loop() -> None:
    # The loop keeps ticking while two hostile parses run (no timing assert: it must tick).
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await asyncio.gather(*(html_to_text_bounded("<a " * 500_000) for _ in range(2)))
    ticker.cancel()
    assert ticks > 0


@pytest.mark.parametrize(
    "line",
    [
        "# x" + " " * 30_000 + "y",  # a heading with a run of spaces
        "# " + "[" * 45_000,  # a heading of open brackets
    ],
)
async def test_a_hostile_markdown_heading_never_holds_the_loop(line: str) -> None:
    """A small Markdown document is parsed in a thread, but one `re` match holds the GIL from
    start to end: a heading regex quadratic in its line held the whole loop for seconds."""
    async with heartbeat() as beat:
        await parse_bytes_bounded(line.encode(), "markdown", fallback_title="bomb.md")
    assert beat.largest < LIMIT, f"the loop was held {beat.largest:.1f} s"


async def test_a_rule_search_is_not_queued_behind_two_parses() -> None:
    """Both parse slots taken (two documents being read, up to a minute each): a rule search,
    which a tool waits on within its own time limit, still runs at once in its own slot."""
    parse = bounded._semaphore("parse")
    gap = Gap(60, "runs", "schedule.min_interval")
    async with parse, parse:
        assert parse.locked()
        async with asyncio.timeout(60):  # without a slot of its own: never, while they run
            rec = await checked_bounded(When(rrule="FREQ=DAILY;BYHOUR=8"), "UTC", 0.0, gap)
            with pytest.raises(ScheduleError, match="was found within 2 s of searching"):
                await checked_bounded(
                    When(rrule="FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30;COUNT=1"), "UTC", 0.0, gap
                )
    assert rec.next_after(0.0) == 8 * 3600


def test_a_short_job_is_short() -> None:
    with pytest.raises(ValueError, match="at most 2 s of CPU"):
        Budget(cpu_seconds=20, lane="short")
