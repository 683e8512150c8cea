"""The owner's sign-in desk over the real browser service (Chromium in its sandbox, behind its
proxy), without the daemon: clicks on the page's picture, text and keys reach the page, Done
keeps the session as a profile a turn then browses with, Cancel and the idle timeout discard
it, one sign-in at a time, and the sign-in is no turn's session."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentd.browser import actions, profiles
from agentd.browser.capability import _missing, signin_desk
from agentd.browser.login import login
from agentd.browser.remote import Click, Pressed, SignInError, SignIns, Typed
from agentd.config import Config
from agentd.runtime.redact import REDACTED, Redactor
from tests.browser_sites import PASSWORD, PASSWORD_AT, SESSION, USER_AT, Site, sites
from tests.test_browser_service import _service, _until

PROBLEM = _missing(Config.model_validate({"browser": {"enabled": True}}))
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no browser here: {PROBLEM}")


@pytest.fixture
async def site_and_folder() -> AsyncIterator[tuple[Site, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="agentd-signin-test-"))
    try:
        with sites() as (site, _):
            yield site, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _title(desk: SignIns, title: str) -> None:
    for _ in range(100):
        view = await desk.view()
        if view is not None and view.title == title:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the page never showed {title!r}: {await desk.view()}")


async def test_the_owner_signs_in_by_clicks_and_keys_and_a_turn_browses_with_the_profile(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, {"turn-1"})
    desk = SignIns(service, folder)
    try:
        view = await desk.start("shop", f"{site.base}/signin")
        assert (view.name, view.site, view.title) == ("shop", "127.0.0.1", "Sign in")
        assert service.sessions == {} and service.remote is not None  # no turn reaches it
        with pytest.raises(SignInError, match="is open"):
            await desk.start("other", f"{site.base}/signin")
        assert (await desk.picture())[:3] == b"\xff\xd8\xff"  # a JPEG of the page
        await desk.click(Click(x=USER_AT[0], y=USER_AT[1]))
        await desk.type_text(Typed(text="owner"))
        await desk.click(Click(x=PASSWORD_AT[0], y=PASSWORD_AT[1]))
        await desk.type_text(Typed(text=PASSWORD))
        await desk.press(Pressed(key="Enter"))
        await _title(desk, "Signed in")
        assert site.posted("/login") == [{"user": "owner", "password": PASSWORD}]
        made = await desk.done()
        assert (made.name, made.site, made.cookies) == ("shop", "127.0.0.1", 1)
        assert desk.current is None and service.remote is None
        stored = profiles.profiles_dir(folder) / "shop.json"
        assert os.stat(stored).st_mode & 0o777 == 0o600
        assert SESSION in stored.read_text() and PASSWORD not in stored.read_text()

        found = await service.open_session("turn-1", "shop", "127.0.0.1")
        snap = await actions.open_url(service, found, f"{site.base}/members")
        assert "Welcome back, owner" in snap.text
    finally:
        await desk.close()
        await service.close()


async def test_cancel_and_the_idle_timeout_discard_it_and_bad_input_is_refused(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    service = _service(site, folder, set(), idle_seconds=1.0, signin_idle_seconds=60.0)
    desk = SignIns(service, folder)
    try:
        await desk.start("shop", f"{site.base}/signin")
        # The reaper (every 2 s) neither takes the sign-in nor stops its idle browser.
        await asyncio.sleep(3.0)
        assert service.running and service.remote is not None and desk.current is not None
        assert await desk.cancel() == "shop"
        assert desk.current is None and service.remote is None
        assert profiles.listing(folder) == []
        with pytest.raises(SignInError, match="no sign-in is open"):
            await desk.click(Click(x=1, y=1))
        await _until(lambda: not service.running, 10, "the browser idled out once it ended")

        service.config = service.config.model_copy(update={"signin_idle_seconds": 1.0})
        await desk.start("shop", f"{site.base}/signin")
        await _until(lambda: desk.current is None, 10, "the idle sign-in closed")
        assert service.remote is None and profiles.listing(folder) == []
        assert await desk.view() is None

        for bad in ({"x": -1, "y": 0}, {"x": 1280, "y": 0}, {"x": 0, "y": 800}):
            with pytest.raises(ValidationError):
                Click.model_validate(bad)
        with pytest.raises(ValidationError):
            Pressed.model_validate({"key": "Control+w"})
        with pytest.raises(ValidationError):
            Typed(text="x" * 1001)
        for name, url in (("Bad Name", f"{site.base}/"), ("ok", "file:///etc/passwd")):
            with pytest.raises(SignInError):
                await desk.start(name, url)
    finally:
        await desk.close()
        await service.close()


def test_a_click_position_that_is_no_number_is_refused_not_a_server_error() -> None:
    from agentd.dashboard.signin import _num

    for raw in ("inf", "1e400", "-inf", "nan", "x", None):
        assert _num(raw) == -1, raw
    assert _num("12.7") == 12


def _config(site: Site, folder: Path) -> Config:
    return Config.model_validate(
        {
            "browser": {"enabled": True, "allowed_hosts": [f"127.0.0.1:{site.port}"]},
            "storage": {"path": str(folder / "agentd.db")},
        }
    )


async def test_agentd_dashboards_own_sign_in_teaches_its_process_the_session(
    site_and_folder: tuple[Site, Path],
) -> None:
    """`agentd dashboard` on its own runs a browser in its own process: the profile Done
    keeps is taught to that process's redactor, as a turn's profile is to the daemon's."""
    site, folder = site_and_folder
    redactor = Redactor()
    desk, why = signin_desk(_config(site, folder), folder / "run", redactor.learn)
    assert desk is not None, why
    try:
        await desk.start("shop", f"{site.base}/signin")
        for at, text in ((USER_AT, "owner"), (PASSWORD_AT, PASSWORD)):
            await desk.click(Click(x=at[0], y=at[1]))
            await desk.type_text(Typed(text=text))
        await desk.press(Pressed(key="Enter"))
        await _title(desk, "Signed in")
        assert redactor(f"session={SESSION}") == f"session={SESSION}"  # not met before Done
        await desk.done()
    finally:
        await desk.close()
        await desk.service.close()
    assert redactor(f"session={SESSION}") == f"session={REDACTED}"


async def test_agentd_browser_login_teaches_its_process_the_session(
    site_and_folder: tuple[Site, Path],
) -> None:
    site, folder = site_and_folder
    redactor = Redactor()
    answers = iter(["owner", PASSWORD])
    made = await login(
        _config(site, folder),
        "shop",
        f"{site.base}/login",
        lambda label, hidden: next(answers),
        redactor.learn,
    )
    assert (made.name, made.cookies) == ("shop", 1)
    assert site.posted("/login") == [{"user": "owner", "password": PASSWORD}]
    assert redactor(f"Cookie: session={SESSION}") == f"Cookie: session={REDACTED}"
