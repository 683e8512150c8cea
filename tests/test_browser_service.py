"""The browser service with the real Chromium in its sandbox, without the daemon: started on
first use and closed when its turns ended and it idled; a page's text capped before it leaves
the page; a page whose script never yields closed in bounded time while the event loop stays
free; a tree over its memory limit killed, and its turn told the page is gone."""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentd.browser import actions
from agentd.browser.capability import _missing
from agentd.browser.jail import find_root, tree_rss
from agentd.browser.service import GONE, BrowserError, BrowserService, Paths, staged_bytes
from agentd.config import BrowserConfig, Config
from agentd.hands.workspace import Workspace
from agentd.runtime.redact import Redactor
from tests.browser_sites import FLOOD_BYTES, FRAMES_HOST, Site, sites

PROBLEM = _missing(Config.model_validate({"browser": {"enabled": True}}))
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no browser here: {PROBLEM}")
RUN_AS = (65534, 65534) if __import__("os").geteuid() == 0 else None


def _service(
    site: Site,
    folder: Path,
    open_ids: set[str],
    redactor: Redactor | None = None,
    **settings: object,
) -> BrowserService:
    """The service on the test site, which it also reaches as FRAMES_HOST (another site)."""
    allowed = [f"127.0.0.1:{site.port}", f"{FRAMES_HOST}:{site.port}"]
    config = BrowserConfig(enabled=True, allowed_hosts=allowed, **settings)

    async def still_open(ids: list[str]) -> set[str]:
        return {i for i in ids if i in open_ids}

    async def loopback(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host in ("127.0.0.1", FRAMES_HOST) else []

    learn = (redactor or Redactor()).learn
    return BrowserService(
        config,
        Paths(folder, folder / "run"),
        still_open,
        learn=learn,
        run_as=RUN_AS,
        resolve=loopback,
    )


async def _until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@pytest.fixture
async def site_and_folder() -> AsyncIterator[tuple[Site, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="agentd-browser-test-"))
    try:
        with sites() as (site, _):
            yield site, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_started_on_first_use_and_closed_once_its_turns_ended_and_it_idled(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    open_ids = {"turn-1"}
    service = _service(site, folder, open_ids, idle_seconds=1.0)
    assert not service.running and service.root_pid() is None  # nothing until used
    try:
        found = await service.open_session("turn-1")
        snap = await actions.open_url(service, found, f"{site.base}/js")
        assert "42 EUR" in snap.text
        pid = service.root_pid()
        assert pid is not None and tree_rss(pid) > 0
        open_ids.clear()  # the turn's workflow ended
        await _until(lambda: not service.sessions, 10, "the turn's context closed")
        await _until(lambda: not service.running, 10, "the idle browser closed")
        await _until(lambda: find_root(service.marker) is None, 10, "its processes gone")
        with pytest.raises(BrowserError, match="No page is open"):
            await service.session("turn-1")
        # The next turn starts it again.
        open_ids.add("turn-2")
        again = await service.open_session("turn-2")
        assert "42 EUR" in (await actions.open_url(service, again, f"{site.base}/js")).text
    finally:
        await service.close()


async def test_a_huge_page_is_cut_in_the_page_and_a_stalled_one_is_closed_in_bounded_time(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, page_timeout=8.0, action_timeout=3.0)
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/huge")
        assert snap.cut and len(snap.text) <= service.config.max_text_chars
        lags: list[float] = []

        async def tick() -> None:
            while True:
                before = time.monotonic()
                await asyncio.sleep(0.05)
                lags.append(time.monotonic() - before - 0.05)

        ticker = asyncio.create_task(tick())
        # The page's loop begins 50 ms after it loaded: the open's own read or the next one
        # finds it busy, and the page is closed.
        with pytest.raises(BrowserError, match="did not answer"):
            await actions.open_url(service, found, f"{site.base}/stall")
            await asyncio.sleep(0.3)
            await actions.read(service, found)
        ticker.cancel()
        # The event loop stayed free throughout: the ticker ran all along the wait (at least
        # the 3 s action timeout), where a blocked loop would have let it run once or twice.
        # Counted, not timed, so a busy machine does not fail it.
        assert len(lags) >= 10, lags
        # The turn goes on with a fresh page in the same browser.
        snap = await actions.open_url(service, found, f"{site.base}/js")
        assert "42 EUR" in snap.text
    finally:
        await service.close()


async def test_a_browser_over_its_memory_limit_is_killed_and_its_turn_told(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, memory_mb=256)
    try:
        # Chromium and a big page take more than 256 MB: the watchdog stops the tree, during
        # the start or the load, whichever it sees first.
        try:
            found = await service.open_session("t")
            await actions.open_url(service, found, f"{site.base}/huge")
        except BrowserError:
            pass
        await _until(lambda: not service.running, 20, "the watchdog")
        assert "memory_mb" in service.stopped_why
        await _until(lambda: find_root(service.marker) is None, 10, "the killed tree gone")
        with pytest.raises(BrowserError) as refused:
            await service.session("t")
        assert str(refused.value) == GONE
    finally:
        await service.close()


async def test_a_download_a_page_starts_by_itself_is_cancelled_as_it_starts(
    site_and_folder: tuple[Site, Path],
) -> None:
    """A script that clicks a download link (endless here) would fill the host's staging
    folder with no one asking: only the download browser_download waits for is kept."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, download_max_mb=1)
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/autodownload")
        assert "Nothing to see" in snap.text
        await _until(site.flood_ended.is_set, 30, "the browser to hang up on the download")
        assert site.flood_sent < FLOOD_BYTES // 4, site.flood_sent >> 20
        await _until(lambda: staged_bytes(service.downloads) == 0, 10, "the staged part gone")
    finally:
        await service.close()


async def test_a_download_past_download_max_mb_is_cancelled_while_it_comes(
    site_and_folder: tuple[Site, Path],
) -> None:
    """The limit holds while the file arrives, not once the whole of it sits in staging."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, download_max_mb=1)
    space = Workspace(folder / "ws", max_bytes=1 << 30, trash_days=7, chown=None)
    space.ensure()
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/flood")
        link = next(e.ref for e in snap.elements if e.text == "Get the data")
        with pytest.raises(BrowserError, match=r"download_max_mb \(1 MB\) and was cancelled"):
            await actions.download(service, found, link, space)
        await _until(site.flood_ended.is_set, 30, "the browser to hang up on the download")
        assert site.flood_sent < FLOOD_BYTES // 4, site.flood_sent >> 20
        await _until(lambda: staged_bytes(service.downloads) == 0, 10, "the staged part gone")
        assert not (space.root / "downloads").exists() or not any(
            (space.root / "downloads").iterdir()
        )
    finally:
        await service.close()


async def test_a_page_that_rewrote_javascripts_builtins_is_still_read_within_its_caps(
    site_and_folder: tuple[Site, Path],
) -> None:
    """The page runs its scripts first: the snapshot reads it in a world of agentd's own, or
    a `push` the page made push five times would carry five times max_elements (and more)."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/rewritten")
        assert len(snap.elements) == service.config.max_elements
        assert len({e.ref for e in snap.elements}) == len(snap.elements)
        assert len(re.findall(r"\[\d+-\d+\] link", snap.text)) == service.config.max_elements
        assert len(snap.text) <= service.config.max_text_chars
        # The element found again for an action is the one read.
        link = next(e.ref for e in snap.elements if e.text == "link 3")
        await actions.click(service, found, link)
        assert found.page.url == f"{site.base}/to/3"
    finally:
        await service.close()


async def test_a_page_that_rewrites_an_element_and_the_getters_describing_it_is_refused(
    site_and_folder: tuple[Site, Path],
) -> None:
    """Once read, the page turns its "Cancel" button into "Pay now" and makes `innerText`
    and `trim` answer "Cancel" for it in its own world: the check before acting reads the
    element in agentd's world, sees what it is, and refuses (the card would have said
    "Cancel" while the click paid)."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/decoy")
        (button,) = snap.elements
        assert button.text == "Cancel"
        with pytest.raises(BrowserError, match=r"changed the element .*Cancel"):
            await actions.click(service, found, button.ref)
        assert found.page.url == f"{site.base}/decoy"
        # Read again, the button is what it now is.
        (now,) = (await service.snapshot(found)).elements
        assert now.text == "Pay now"
    finally:
        await service.close()


async def test_the_browser_opens_web_urls_only_and_a_page_links_to_no_local_one(
    site_and_folder: tuple[Site, Path],
) -> None:
    """A file: URL shows the sandbox's files (the host's /etc among them), chrome: and
    view-source: the browser's own pages: browser_open refuses them; a page's links to them
    go nowhere (Chromium's rule)."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        for url in (
            "file:///etc/passwd",
            "chrome://version",
            f"view-source:{site.base}/js",
            "data:text/html,<p>hi</p>",
        ):
            with pytest.raises(BrowserError, match=r"is not an http.s. URL"):
                await actions.open_url(service, found, url)
        snap = await actions.open_url(service, found, f"{site.base}/local")
        for link in snap.elements:
            await actions.click(service, found, link.ref)
            assert found.page.url == f"{site.base}/local"
        assert "root:" not in await actions.read(service, found)
    finally:
        await service.close()


async def test_a_page_opens_no_window_by_itself_but_a_click_on_a_new_tab_link_does(
    site_and_folder: tuple[Site, Path],
) -> None:
    """A page calling window.open from a timer would open a window every 20 ms, each the
    page the turn reads next, until the browser ran out of memory."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        await actions.open_url(service, found, f"{site.base}/popups")

        async def tries() -> int:
            found_text = re.search(r"tried (\d+)", await actions.read(service, found))
            return int(found_text.group(1)) if found_text else 0

        deadline = time.monotonic() + 20
        while await tries() < 30:
            assert time.monotonic() < deadline, "the page's timer did not run"
            await asyncio.sleep(0.1)
        assert site.opened == 0 and len(found.context.pages) == 1
        assert found.page.url == f"{site.base}/popups"
        snap = await service.snapshot(found)
        link = next(e.ref for e in snap.elements if e.text == "Open the shop")
        await actions.click(service, found, link)
        await _until(lambda: found.page.url == f"{site.base}/ssr", 10, "the new tab followed")
        assert len(found.context.pages) == 2
        shown = await actions.read(service, found)
        assert "Note: the link opened in a new tab (tab 2); this is that tab" in shown
        assert f"[tab 1] {site.base}/popups\n[tab 2] {site.base}/ssr (this page)" in shown
    finally:
        await service.close()


async def test_a_new_tab_link_through_a_redirect_is_switched_to_as_a_direct_one_is(
    site_and_folder: tuple[Site, Path],
) -> None:
    """A link shortener or click counter: the window opens at the address the link was
    redirected to, not the link's; it is still the window the model asked for."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/tabs")
        direct = next(e.ref for e in snap.elements if e.text == "Open the shop")
        await actions.click(service, found, direct)
        await _until(lambda: found.page.url == f"{site.base}/ssr", 10, "the direct link's tab")
        shown = await actions.read(service, found)
        assert "Note: the link opened in a new tab (tab 2); this is that tab" in shown
        service.switch_tab(found, 1)
        snap = await service.snapshot(found)
        redirected = next(e for e in snap.elements if "through a redirect" in e.text)
        assert redirected.href == f"{site.base}/go?to=/ssr"
        await actions.click(service, found, redirected.ref)
        await _until(lambda: found.page.url == f"{site.base}/ssr", 10, "the redirected tab")
        shown = await actions.read(service, found)
        assert "Note: the link opened in a new tab (tab 3); this is that tab" in shown
        assert f"[tab 3] {site.base}/ssr (this page)" in shown
        assert "not switched to" not in shown
    finally:
        await service.close()


async def test_a_tab_that_closes_itself_gives_way_to_the_tab_the_model_was_on_before(
    site_and_folder: tuple[Site, Path],
) -> None:
    """window.close() in the turn's page: on the click that closes it (the tool reads the page
    after the click), and later by a timer (the next call reads). The turn goes back to the
    open tab it chose last, as a browser goes back to the tab a closed one came from, and the
    reading says so."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/closer")
        for tab in (2, 3):  # tab 1 opens tab 2, which opens tab 3
            link = next(e.ref for e in snap.elements if e.text == "Open another")
            await actions.click(service, found, link)
            await _until(lambda n=tab: len(found.tabs) == n, 10, f"tab {tab}")
            snap = await service.snapshot(found)
            assert snap.note == f"the link opened in a new tab (tab {tab}); this is that tab"
        # Tab 3 closes on the click: the click went through, and the page read after it is
        # tab 2, where the model came from (not tab 1, the first).
        close = next(e.ref for e in snap.elements if e.text == "Close it")
        found = await service.session("t")
        await actions.click(service, found, close)
        shown = await actions.read(service, found)
        assert "Note: the tab this turn was on closed; this is tab 2" in shown, shown
        assert f"[tab 1] {site.base}/closer\n[tab 2] {site.base}/closer (this page)" in shown
        assert "[tab 3]" not in shown
        # Tab 2 closes itself later, by a timer: the turn's next call is on tab 1.
        soon = next(e.ref for e in (await service.snapshot(found)).elements if "soon" in e.text)
        await actions.click(service, found, soon)
        await _until(lambda: 2 not in found.tabs, 10, "tab 2 closed")
        found = await service.session("t")
        snap = await service.snapshot(found)
        assert snap.note == "the tab this turn was on closed; this is tab 1"
        assert [(t.number, t.current) for t in snap.tabs] == [(1, True)]
    finally:
        await service.close()


async def test_a_closed_tab_never_gives_way_to_a_window_a_page_opened_by_itself(
    site_and_folder: tuple[Site, Path],
) -> None:
    """A page opens a window of its choosing and closes the turn's tab. With no other tab of
    the model's left (here the test closes the first; agentd closes a wedged one), that window
    is still listed as a page's own, not read as the turn's page: a fresh empty tab is."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/closer")
        link = next(e.ref for e in snap.elements if e.text == "Open the slam")
        await actions.click(service, found, link)
        await _until(lambda: found.page.url == f"{site.base}/slam", 10, "the slam's tab")
        snap = await service.snapshot(found)
        await found.tabs[1].close()
        await actions.click(service, found, snap.elements[0].ref)
        shown = await actions.read(service, found)
        assert found.page.url == "about:blank"
        assert "Note: the tab this turn was on closed, and no other tab it chose is open" in shown
        # The page's window and the fresh tab open at once: which is numbered first is a race.
        tabs = {line.split("] ", 1)[1] for line in shown.splitlines() if line.startswith("[tab ")}
        assert f"{site.base}/opened?slam=1 (new: a page opened it; not switched to)" in tabs, shown
        assert "about:blank (this page)" in tabs, shown
    finally:
        await service.close()


async def test_a_window_a_page_opens_is_a_new_tab_listed_to_the_model_never_its_page(
    site_and_folder: tuple[Site, Path],
) -> None:
    """A button whose handler opens a window (an advert, a page of the site's choosing):
    the turn stays on the page the model chose, the reading lists the window as a new tab
    (inside the page's text, outside content like the rest), and the model may switch to it."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        opened: list[Any] = []
        found.context.on("page", lambda page: opened.append(page))
        snap = await actions.open_url(service, found, f"{site.base}/deals")
        button = snap.elements[0]
        await actions.click(service, found, button.ref)
        await _until(lambda: len(opened) == 1, 10, "the deal's window")
        assert found.page.url == f"{site.base}/deals"
        snap = await service.snapshot(found)
        assert "Deals of the day" in snap.text and snap.elements[0].text == "Show a deal"
        shown = actions.render(snap, 1000)
        assert (
            f"[tab 2] {site.base}/opened?deal=1 (new: a page opened it; not switched to)" in shown
        )
        # Told once: the next reading lists it as a tab like any other.
        again = actions.render(await service.snapshot(found), 1000)
        assert f"[tab 2] {site.base}/opened?deal=1\n" in again + "\n" and "new:" not in again
        # The model's choice: the tab it names.
        service.switch_tab(found, 2)
        assert "a window" in (await service.snapshot(found)).text
        with pytest.raises(BrowserError, match="there is no tab 5; the open tabs are: 1, 2"):
            service.switch_tab(found, 5)
    finally:
        await service.close()


async def test_a_turn_keeps_four_windows_and_closes_more_as_they_open(
    site_and_folder: tuple[Site, Path],
) -> None:
    """Each click is a user activation, each lets the page open a window: past four windows
    a new one is closed as it opens, and the turn stays on its page. The window of a link the
    model clicks takes the place of the newest of the page's."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        opened: list[Any] = []
        found.context.on("page", lambda page: opened.append(page))
        snap = await actions.open_url(service, found, f"{site.base}/deals")
        button = snap.elements[0]
        for _ in range(6):
            await actions.click(service, found, button.ref)
        await _until(lambda: len(opened) == 6, 20, "six windows opened")
        await _until(lambda: len(found.context.pages) <= 4, 10, "the windows past four closed")
        assert found.page.url == f"{site.base}/deals"
        snap = await service.snapshot(found)
        tabs, link = snap.tabs, snap.elements[1]
        assert [t.number for t in tabs] == [1, 2, 3, 4]
        assert [t.url.rsplit("/", 1)[1] for t in tabs[1:]] == [
            f"opened?deal={n}" for n in (1, 2, 3)
        ]
        assert site.opened == 6  # the page's windows past four did open, and were closed
        await actions.click(service, found, link.ref)
        await _until(lambda: found.page.url == f"{site.base}/ssr", 10, "the link's tab")
        await _until(lambda: len(found.context.pages) <= 4, 10, "the newest deal closed")
        tabs = (await service.snapshot(found)).tabs
        assert [(t.number, t.url.rsplit("/", 1)[1], t.current) for t in tabs] == [
            (1, "deals", False),
            (2, "opened?deal=1", False),
            (3, "opened?deal=2", False),
            (5, "ssr", True),
        ]
    finally:
        await service.close()


async def test_a_timer_spending_a_clicks_activation_does_not_choose_the_turns_page(
    site_and_folder: tuple[Site, Path],
) -> None:
    """The model clicks a link that opens in a new tab while the page's timer keeps calling
    window.open: the click's user activation lets several of the timer's windows through
    (the link's own may then be blocked), in any order. None becomes the turn's page."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        opened: list[Any] = []
        found.context.on("page", lambda page: opened.append(page))
        snap = await actions.open_url(service, found, f"{site.base}/popstorm")
        (link,) = snap.elements
        await actions.click(service, found, link.ref)
        await _until(lambda: len(opened) >= 2, 10, "the timer's windows")
        await _until(lambda: len(found.context.pages) <= 4, 10, "the windows past four closed")
        assert found.page.url in (f"{site.base}/popstorm", f"{site.base}/ssr")
        tabs = (await service.snapshot(found)).tabs
        assert all("opened?storm" in t.url for t in tabs if t.new)
        assert not any(t.current and "opened" in t.url for t in tabs)
    finally:
        await service.close()


async def test_a_submission_is_the_forms_own_whatever_the_page_made_of_request_submit(
    site_and_folder: tuple[Site, Path],
) -> None:
    """The page replaced HTMLFormElement's requestSubmit (and an input's `form`) in its own
    world so that submitting the order sends its hidden payment form instead: agentd submits
    from its own world, where both are the browser's."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"})
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/resubmit")
        (field,) = snap.elements
        assert field.kind == "input" and field.form_action == f"{site.base}/form/done"
        await actions.type_text(service, found, field.ref, "Ann")
        await actions.submit(service, found, field.ref)
        assert site.posted("/form/done") == [{"name": "Ann"}]
        assert site.posted("/pay") == []
        assert found.page.url == f"{site.base}/form/done"
    finally:
        await service.close()


async def test_a_page_that_never_loads_is_read_as_far_as_it_came_and_a_wedged_one_closed(
    site_and_folder: tuple[Site, Path],
) -> None:
    """A body that never ends is read as far as it arrived (said so); a page whose script
    loops on dialogs would take every later page of the turn with it: it is closed, and
    the next page opens."""
    site, folder = site_and_folder
    service = _service(site, folder, {"t"}, page_timeout=3.0, action_timeout=2.0)
    try:
        found = await service.open_session("t")
        snap = await actions.open_url(service, found, f"{site.base}/never")
        assert snap.unfinished == 3.0 and "almost" in snap.text
        assert "had not finished loading after 3 s" in actions.render(snap, 1000)
        with pytest.raises(BrowserError, match=r"did not answer .* it was closed"):
            await actions.open_url(service, found, f"{site.base}/alerts")
        snap = await actions.open_url(service, found, f"{site.base}/js")
        assert "42 EUR" in snap.text and not snap.unfinished
    finally:
        await service.close()
