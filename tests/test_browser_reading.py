"""How a page's text reads, with the real Chromium in its sandbox: content in wrappers that
have no box of their own is read and hidden content is not; inline elements keep the space
between them, and line breaks and preformatted text their lines; and a reading past its
element cap says so, and what to do."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.browser import actions
from agentd.browser.pages import render
from tests.browser_sites import Site, sites
from tests.test_browser_service import PROBLEM, _service

pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no browser here: {PROBLEM}")


@pytest.fixture
async def site_and_folder() -> AsyncIterator[tuple[Site, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="agentd-browser-test-"))
    try:
        with sites() as (site, _):
            yield site, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_display_contents_wrappers_are_read_through_and_hidden_content_is_not(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/wrappers")
        text = snap.text
        order = [
            "Before the wrappers",
            "Inside a wrapper",
            "and its inline words",
            "A link two wrappers deep",
            "After the wrappers",
        ]
        at = [text.find(s) for s in order]
        assert -1 not in at and at == sorted(at), text
        assert "Gone" not in text, text
        # The link inside the wrappers has a box of its own: numbered, and followed.
        link = next(e for e in snap.elements if e.text == "A link two wrappers deep")
        await actions.click(service, found, link.ref)
        assert found.page.url == f"{site.base}/ssr"
    finally:
        await service.close()


async def test_whitespace_between_inline_elements_reads_as_one_space(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, max_elements=10)
    try:
        found = await service.open_session("t")
        text = (await actions.open_url(service, found, f"{site.base}/inline")).text
        assert "bold italic" in text and "one two" in text, text
        assert re.search(r"\] first link \[\S+\] second link", text), text
        # The pretty-printed markup's indentation and blank lines do not reach the reading.
        assert "  " not in text and "\n\n\n" not in text and "\n " not in text, repr(text)
        # Past the cap, links have no number between them to keep them apart.
        text = (await actions.open_url(service, found, f"{site.base}/manylinks")).text
        assert "item 9\n" in text and "item 10\n" in text, text
        text = (await actions.open_url(service, found, f"{site.base}/shadow")).text
        assert "more 16 more 17" in text, text
    finally:
        await service.close()


async def test_a_reading_past_its_element_cap_says_so_once_and_what_to_do(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, max_elements=10)
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/manylinks")
        assert len(snap.elements) == 10 and snap.elements[-1].text == "item 9"
        assert snap.unnumbered == 21  # twenty links and the search field
        # A field past the cap, which has no words of its own, still shows where it is.
        assert 'Search input "Search" (no number)' in snap.text, snap.text
        shown = render(snap, service.config.max_text_chars)
        assert shown.count("numbered") == 1, shown
        assert "Only the first 10 links, buttons and fields are numbered." in shown
        assert "21 more show in the text without a number and cannot be clicked" in shown
        assert "open a page that shows fewer" in shown
        # Within the cap, nothing is said.
        snap = await actions.open_url(service, found, f"{site.base}/inline")
        assert snap.unnumbered == 0
        assert "numbered" not in render(snap, service.config.max_text_chars)
    finally:
        await service.close()


async def test_a_line_break_reads_as_a_new_line(site_and_folder: tuple[Site, Path]) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        text = (await actions.open_url(service, found, f"{site.base}/lines")).text
        assert "12 Harbour Street\nPortsmouth\nPO1 3AH" in text, repr(text)
    finally:
        await service.close()


async def test_preformatted_text_keeps_its_lines(site_and_folder: tuple[Site, Path]) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        text = (await actions.open_url(service, found, f"{site.base}/lines")).text
        # Each line of code on a line of its own, also when highlighting wraps its words in
        # spans; the indentation is folded as all runs of spaces are.
        assert "def total(items):\nreturn sum(items)" in text, repr(text)
        assert "if ready:\ngo()\nstop()\nend" in text, repr(text)
    finally:
        await service.close()
