"""The dashboard's Browser page over HTTP: the sign-in's posts need the session, the
dashboard's own origin and the CSRF token (nothing reaches the browser otherwise); profiles
are listed without a cookie's value and removed (audited); without the browser the page says
how to turn it on. The sign-in itself, in a real browser against the real desk, is in
test_e2e_browser_signin.py."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agentd.browser import profiles
from agentd.browser.remote import Click, Pressed, Typed, View
from agentd.dashboard.access import FileAccess
from agentd.dashboard.config import DashboardConfig
from agentd.dashboard.server import Site, make_app
from agentd.db.connect import open_sync
from tests.test_dashboard_security import Dash, seeded

SECRET = "typed-secret-Zq81"
COOKIE_VALUE = "cookie-value-9a7f"


@dataclass
class Recorder:
    """Stands in for the browser's desk: what reached it (the real one is tested with
    Chromium in test_browser_signin.py and end to end)."""

    got: list[Any] = field(default_factory=list)
    current: Any = None

    async def view(self) -> View | None:
        return View(name="shop", site="127.0.0.1", url="http://x/", title="t", idle_left=60)

    async def click(self, at: Click) -> None:
        self.got.append(at)

    async def type_text(self, typed: Typed) -> None:
        self.got.append(typed)

    async def press(self, pressed: Pressed) -> None:
        self.got.append(pressed)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Dash, Recorder]]:
    path = tmp_path / "agentd.db"
    seeded(path, "x")
    desk = Recorder()
    site = Site(FileAccess(path), DashboardConfig(), browser_data=tmp_path, signin=desk)
    async with TestClient(TestServer(make_app(site))) as client:
        yield Dash(path, client, ""), desk


async def test_every_sign_in_post_needs_session_origin_and_csrf(
    served: tuple[Dash, Recorder],
) -> None:
    dash, desk = served
    posts = [
        ("/browser/signin/type", {"text": SECRET}),
        ("/browser/signin/click", {"at.x": "10", "at.y": "20"}),
        ("/browser/signin/key", {"key": "Enter"}),
        ("/browser/signin/done", {}),
        ("/browser/signin/cancel", {}),
        ("/browser/signin", {"name": "shop", "url": "http://127.0.0.1/"}),
    ]
    for path, data in posts:  # no session: sent to the login page
        answer = await dash.client.post(
            path, data=data, headers={"Origin": dash.origin()}, allow_redirects=False
        )
        assert answer.status == 303 and answer.headers["Location"] == "/login", path
    csrf = await dash.login()
    for path, data in posts:
        no_token = await dash.client.post(path, data=data, headers={"Origin": dash.origin()})
        elsewhere = await dash.client.post(
            path, data={**data, "csrf": csrf}, headers={"Origin": "http://evil.example"}
        )
        assert no_token.status == 403 and elsewhere.status == 403, path
    assert desk.got == []

    sent = await dash.client.post(
        "/browser/signin/type",
        data={"text": SECRET, "csrf": csrf},
        headers={"Origin": dash.origin(), "Accept": "application/json"},
    )
    assert await sent.json() == {"ok": True, "said": ""}
    clicked = await dash.client.post(
        "/browser/signin/click",
        data={"at.x": "300", "at.y": "120", "csrf": csrf},
        headers={"Origin": dash.origin()},
        allow_redirects=False,
    )
    assert clicked.status == 303 and clicked.headers["Location"] == "/browser/signin"
    outside = await dash.client.post(
        "/browser/signin/click",
        data={"at.x": "5000", "at.y": "1", "csrf": csrf},
        headers={"Origin": dash.origin(), "Accept": "application/json"},
    )
    assert (await outside.json())["ok"] is False
    bad_key = await dash.client.post(
        "/browser/signin/key",
        data={"key": "Control+w", "csrf": csrf},
        headers={"Origin": dash.origin(), "Accept": "application/json"},
    )
    assert "not one the page offers" in (await bad_key.json())["said"]
    assert desk.got == [Typed(text=SECRET), Click(x=300, y=120)]
    assert SECRET.encode() not in dash.path.read_bytes()


async def test_profiles_are_listed_without_their_cookies_and_removed(
    served: tuple[Dash, Recorder], tmp_path: Path
) -> None:
    dash, _ = served
    state = {"cookies": [{"name": "session", "value": COOKIE_VALUE, "domain": "127.0.0.1"}]}
    profiles.save(tmp_path, "shop", "127.0.0.1", state, time.time())
    csrf = await dash.login()
    page = await (await dash.client.get("/browser")).text()
    assert "shop" in page and "127.0.0.1" in page and COOKIE_VALUE not in page
    gone = await dash.client.post(
        "/browser/profiles/shop/remove", data={"csrf": csrf}, headers={"Origin": dash.origin()}
    )
    assert "Removed the browser profile shop." in await gone.text()
    assert profiles.listing(tmp_path) == []
    conn = open_sync(dash.path)
    try:
        rows = conn.execute("SELECT detail FROM audit WHERE kind = 'browser_profile'").fetchall()
    finally:
        conn.close()
    assert [json.loads(r[0]) for r in rows] == [
        {"profile": "shop", "site": "", "outcome": "removed", "by": "dashboard"}
    ]


async def test_without_the_browser_the_page_says_how_to_turn_it_on(tmp_path: Path) -> None:
    path = tmp_path / "agentd.db"
    seeded(path, "x")
    why = "Signing in to a site needs the browser: set [browser] enabled = true"
    site = Site(FileAccess(path), DashboardConfig(), browser_data=tmp_path, signin_why=why)
    async with TestClient(TestServer(make_app(site))) as client:
        dash = Dash(path, client, "")
        csrf = await dash.login()
        assert why in await (await client.get("/browser")).text()
        started = await client.post(
            "/browser/signin",
            data={"name": "shop", "url": "http://127.0.0.1/", "csrf": csrf},
            headers={"Origin": dash.origin()},
        )
        assert why in await started.text()
