"""Frames and shadow roots, with the real Chromium in its sandbox: a page whose content sits
in frames (of its own site, and of another site, which Chromium runs in a process of its own)
is read whole, each frame in agentd's own world and within the page's caps; frames nested too
deep, or past the count a reading takes, are named and not read; an element in a frame is
acted on where it is. A web component's open shadow root is read where it shows, within the
same caps, and its elements acted on; a closed one cannot be read."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.browser import actions
from agentd.browser.worlds import MAX_FRAME_DEPTH, MAX_FRAMES
from tests.browser_sites import FRAMES_HOST, PRICE, Site, sites
from tests.test_browser_service import PROBLEM, _service, _until

pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no browser here: {PROBLEM}")


@pytest.fixture
async def site_and_folder() -> AsyncIterator[tuple[Site, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="agentd-browser-test-"))
    try:
        with sites() as (site, _):
            yield site, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_pages_frames_are_read_in_place_within_its_caps_and_acted_on(
    site_and_folder: tuple[Site, Path],
) -> None:
    """The first frame is the site's own, with a form; the second another site's, whose
    script makes `push` push five times (read in the page's world, its 200 links would be
    a thousand elements)."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/framed")
        text = snap.text
        order = ["Outer page", "Inside the frame", "link 0", "After the frames"]
        at = [text.find(s) for s in order]
        assert -1 not in at and at == sorted(at), text[:2000]
        assert f"[frame {site.base}/inner]" in text
        assert f"[frame http://{FRAMES_HOST}:{site.port}/rewritten]" in text
        # One cap for the page and its frames, each element numbered once.
        assert len(snap.elements) == service.config.max_elements
        assert len({e.ref for e in snap.elements}) == len(snap.elements)
        assert len(re.findall(r"\[\d+-\d+\] link", text)) == service.config.max_elements - 2
        assert snap.unnumbered > 0  # the other site's frame's links past the cap, counted
        assert len(text) <= service.config.max_text_chars
        name = next(e for e in snap.elements if e.kind == "input")
        assert name.frame == f"{site.base}/inner"
        assert "(in a frame from 127.0.0.1)" in name.shown()
        # The other site's frame: a link clicked where it is.
        link = next(e for e in snap.elements if e.text == "link 3")
        assert link.frame.startswith(f"http://{FRAMES_HOST}:")
        await actions.click(service, found, link.ref)
        assert any(f.url.endswith("/to/3") for f in found.page.frames)
        assert found.page.url == f"{site.base}/framed"
        # The site's own frame: a field typed into and its form submitted, in the frame.
        snap = await service.snapshot(found)
        name = next(e for e in snap.elements if e.kind == "input")
        await actions.type_text(service, found, name.ref, "Ann")
        await actions.submit(service, found, name.ref)
        assert site.posted("/form/done") == [{"name": "Ann"}]
        assert "Order placed" in (await service.snapshot(found)).text
        # A link in a frame that leads the whole page away.
        snap = await actions.open_url(service, found, f"{site.base}/framed")
        leave = next(e for e in snap.elements if e.text == "Leave for the shop")
        await actions.click(service, found, leave.ref)
        assert found.page.url == f"{site.base}/ssr"
        assert "42 EUR" in (await service.snapshot(found)).text
    finally:
        await service.close()


async def test_frames_too_deep_or_too_many_are_named_and_not_read(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        deep = MAX_FRAME_DEPTH + 2
        snap = await actions.open_url(service, found, f"{site.base}/nest?d={deep}")
        read = [f"level {deep - n}" for n in range(MAX_FRAME_DEPTH + 1)]
        assert all(level in snap.text for level in read), snap.text
        assert f"level {deep - MAX_FRAME_DEPTH - 1}" not in snap.text
        assert snap.text.count("[a frame, not read: it is nested too deep]") == 1
        snap = await actions.open_url(service, found, f"{site.base}/manyframes")
        assert snap.text.count(PRICE) == MAX_FRAMES
        assert snap.text.count(f"page's first {MAX_FRAMES} frames") == 15 - MAX_FRAMES
    finally:
        await service.close()


async def test_a_frame_that_never_answers_is_left_out_and_the_page_read(
    site_and_folder: tuple[Site, Path],
) -> None:
    """Another site's frame runs in a process of its own: a script of its that never yields
    keeps its reading waiting, not the page's."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, action_timeout=3.0)
    try:
        found = await service.open_session("t")
        await actions.open_url(service, found, f"{site.base}/stallframe")
        await _until(lambda: bool(site.posted("/stalling")), 10, "the frame's loop")
        snap = await service.snapshot(found)
        assert "Outer page" in snap.text and "After the frame" in snap.text
        assert "[a frame that did not answer in time, not read]" in snap.text
        # Still the turn's page, read again as it is.
        assert "Outer page" in (await service.snapshot(found)).text
    finally:
        await service.close()


async def test_open_shadow_roots_are_read_where_they_show_and_their_elements_acted_on(
    site_and_folder: tuple[Site, Path],
) -> None:
    """The answer, a field, a button and a form sit in a custom element's open shadow root; a
    link and 60 more in a shadow root inside it; the host's own child shows through a slot."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, max_elements=20)
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/shadow")
        text = snap.text
        order = [
            "Before the widget",
            "The answer is 42",
            "A note from the page",
            "Deeper still",
            "Go to the shop",
            "After the widget",
        ]
        at = [text.find(s) for s in order]
        assert -1 not in at and at == sorted(at), text
        # A closed shadow root is out of any script's reach, agentd's included.
        assert "Sealed text" not in text and "Hidden" not in text
        # The page's element cap counts what shadow roots hold.
        assert len(snap.elements) == 20 and snap.elements[-1].text == "more 15"
        shown = [(e.text, e.kind) for e in snap.elements[:4]]
        assert shown == [
            ("Name", "input"),
            ("Say hello", "button"),
            ("Email", "input"),
            ("Go to the shop", "link"),
        ]
        field, button, email = snap.elements[:3]
        await actions.type_text(service, found, field.ref, "Ann")
        await actions.click(service, found, button.ref)
        assert "Hello, Ann" in (await service.snapshot(found)).text
        # A form in a shadow root, submitted from its field in agentd's own world.
        snap = await service.snapshot(found)
        email = next(e for e in snap.elements if e.text == "Email")
        await actions.type_text(service, found, email.ref, "Bo")
        await actions.submit(service, found, email.ref)
        assert site.posted("/form/done") == [{"name": "Bo"}]
        snap = await actions.open_url(service, found, f"{site.base}/shadow")
        # Read again, the elements keep their place; a link two shadow roots deep is followed.
        snap = await service.snapshot(found)
        link = next(e for e in snap.elements if e.text == "Go to the shop")
        await actions.click(service, found, link.ref)
        assert found.page.url == f"{site.base}/ssr"
    finally:
        await service.close()
