"""Signing in to a site through the dashboard, end to end: `agentd run` with the browser and
the dashboard on; the owner, in a real Chromium driving the dashboard page, opens "Sign in to
a site", clicks on the site's picture and types a user name and a password into it, and keeps
the profile; a turn then reads the members page with that profile through the sandboxed
browser. Neither the password nor the site's session cookie is anywhere in the database, the
daemon's log or what the model was sent. `agentd dashboard` run on its own signs in with a
sandboxed browser of its own.

With DASHBOARD_SCREENSHOTS=<folder> the sign-in page is saved there (docs/screenshots)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.browser.capability import _missing
from agentd.config import Config
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from tests.browser_sites import PASSWORD, PASSWORD_AT, SESSION, USER_AT, Site, sites
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.hands_support import reachable_dir
from tests.test_dashboard_browser import ARGS, CHROMIUM, DASHBOARD
from tests.test_e2e_browser import Browse, _config, call, say

PROBLEM = _missing(Config.model_validate({"browser": {"enabled": True}}))
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no browser here: {PROBLEM}")
LINK = re.compile(r"(http://127\.0\.0\.1:\d+)/login\?t=[A-Za-z0-9_-]+")


@pytest.fixture
def browse(tmp_path: Path) -> Iterator[Browse]:
    ws = reachable_dir()
    try:
        with sites() as (site, other), FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            made = _config(tmp_path, ws, site)
            (tmp_path / "agentd.toml").write_text(made["text"])
            env = daemon_env(
                tmp_path,
                tg.base_url,
                llm.base_url,
                AGENTD_CONFIG=made["AGENTD_CONFIG"],
                AGENTD_CHAT__STREAMING="false",
                AGENTD_DASHBOARD__ENABLED="true",
                AGENTD_DASHBOARD__PORT="0",
            )
            daemon = Daemon(tmp_path, env).start()
            stack = Browse(tg, llm, daemon, site, other)
            stack.ws = ws
            try:
                yield stack
            finally:
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.stop()
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def _link(browse: Browse) -> str:
    """/dashboard in the owner's chat: the one-time link it answers with."""
    browse.tg.add_message(OWNER, OWNER, "/dashboard")
    sent = browse.tg.wait_until(
        lambda: next((m for m in browse.tg.sent if LINK.search(m["plain_text"])), None),
        60,
        "the dashboard's link",
    )
    found = LINK.search(sent["plain_text"])
    assert found is not None
    return found[0]


def _sign_in(page: Any, browse: Browse, link: str) -> str:
    """The owner's part, in the dashboard; the flash the dashboard says after Done."""
    from playwright.sync_api import expect

    page.goto(link)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(link.split("/login", 1)[0] + "/")
    page.get_by_role("link", name="Browser", exact=True).click()
    page.fill("input[name=name]", "shop")
    page.fill("input[name=url]", f"{browse.site.base}/signin")
    page.get_by_role("button", name="Open").click()
    page.wait_for_url(re.compile(r"/browser/signin$"))
    expect(page.locator("#remote-title")).to_have_text("Sign in", timeout=30_000)
    for at, text in ((USER_AT, "owner"), (PASSWORD_AT, PASSWORD)):
        with page.expect_response(re.compile(r"/browser/signin/click$")):
            page.click("#screen", position={"x": at[0], "y": at[1]})
        page.fill("#remote-text", text)
        with page.expect_response(re.compile(r"/browser/signin/type$")):
            page.press("#remote-text", "Enter")
        assert page.input_value("#remote-text") == ""  # not left in the dashboard's page
    shots = os.environ.get("DASHBOARD_SCREENSHOTS")
    if shots:  # the form filled in (the password as dots), before it is sent
        page.wait_for_timeout(1500)  # the picture refreshes once a second
        page.screenshot(path=str(Path(shots) / "browser-signin.png"))
    with page.expect_response(re.compile(r"/browser/signin/key$")):
        page.get_by_role("button", name="Enter", exact=True).click()
    expect(page.locator("#remote-title")).to_have_text("Signed in", timeout=30_000)
    page.click("#done")
    page.wait_for_url(re.compile(r"/browser\?"))
    return str(page.locator(".flash").inner_text())


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium for the owner's side")
def test_the_owner_signs_in_through_the_dashboard_and_a_turn_reads_as_them(
    browse: Browse,
) -> None:
    from playwright.sync_api import sync_playwright

    link = _link(browse)
    with sync_playwright() as p:
        owner = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            said = _sign_in(owner.new_page(viewport={"width": 1400, "height": 1100}), browse, link)
        finally:
            owner.close()
    assert "Saved the browser profile shop for 127.0.0.1 (1 cookies)" in said
    assert browse.site.posted("/login") == [{"user": "owner", "password": PASSWORD}]
    listed = browse.daemon.cli_json("browser", "profiles")
    assert [(p["name"], p["site"], p["cookies"]) for p in listed] == [("shop", "127.0.0.1", 1)]

    members = f"{browse.site.base}/members"
    browse.turn(
        f"what does {members} say?",
        call("browser_open", "b_s1", url=members, profile="shop"),
        say("You are signed in there."),
    )
    browse.wait_text("You are signed in there.")
    assert "Welcome back, owner" in str(browse.result("b_s1")["content"])

    browse.daemon.stop()
    for secret in (PASSWORD, SESSION):
        for stored in browse.daemon.db_path.parent.glob(browse.daemon.db_path.name + "*"):
            assert secret.encode() not in stored.read_bytes(), stored
        assert secret not in browse.daemon.log()
        assert all(secret not in str(r["body"]) for r in browse.llm.requests)
    kinds = browse.daemon.query(
        "SELECT json_extract(detail, '$.outcome') FROM audit WHERE kind = 'browser_profile' "
        "ORDER BY id"
    )
    assert [k[0] for k in kinds] == ["started", "saved"]


async def _standalone_sign_in(base: str, token: str, site: Site) -> tuple[str, bytes]:
    """The owner's part over HTTP, as the page's script posts it; (the flash after Done, the
    first picture)."""
    import aiohttp

    origin = {"Origin": base}
    as_json = {**origin, "Accept": "application/json"}
    # unsafe: keep cookies from an IP address (the dashboard on 127.0.0.1)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await http.post(f"{base}/login", data={"t": token}, headers=origin)
        page = await (await http.get(f"{base}/browser")).text()
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        started = await http.post(
            f"{base}/browser/signin",
            data={"name": "shop", "url": f"{site.base}/signin", "csrf": csrf},
            headers=origin,
        )
        assert str(started.url).endswith("/browser/signin"), await started.text()
        picture = await (await http.get(f"{base}/browser/signin/screen")).read()
        for (x, y), text in ((USER_AT, "owner"), (PASSWORD_AT, PASSWORD)):
            clicked = {"at.x": str(x), "at.y": str(y), "csrf": csrf}
            await http.post(f"{base}/browser/signin/click", data=clicked, headers=as_json)
            typed = {"text": text, "csrf": csrf}
            await http.post(f"{base}/browser/signin/type", data=typed, headers=as_json)
        key = {"key": "Enter", "csrf": csrf}
        assert (
            await (await http.post(f"{base}/browser/signin/key", data=key, headers=as_json)).json()
        )["ok"]
        for _ in range(100):
            state = await (await http.get(f"{base}/browser/signin/state")).json()
            if state["title"] == "Signed in":
                break
            await asyncio.sleep(0.1)
        done = await http.post(f"{base}/browser/signin/done", data={"csrf": csrf}, headers=origin)
        said = (await done.text()).split('class="flash" role="status">', 1)[1].split("<", 1)[0]
        return said, picture


def test_agentd_dashboard_on_its_own_signs_in_with_a_sandboxed_browser_of_its_own(
    tmp_path: Path,
) -> None:
    with sites() as (site, _):
        (tmp_path / "agentd.toml").write_text(
            f'[browser]\nenabled = true\nallowed_hosts = ["127.0.0.1:{site.port}"]\n'
        )
        env = daemon_env(
            tmp_path,
            "http://127.0.0.1:9",
            "http://127.0.0.1:9",
            AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
        )
        conn = open_sync(tmp_path / "agentd.db")  # the daemon's database, as it leaves it
        apply_migrations(conn)
        conn.close()
        proc = subprocess.Popen(
            [*DASHBOARD, "--port", "0"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert proc.stdout is not None
            link = next(line for line in proc.stdout if line.startswith("Sign in"))
            base, token = link.split(": ", 1)[1].strip().split("/login?t=")
            said, picture = asyncio.run(_standalone_sign_in(base, token, site))
        finally:
            proc.send_signal(signal.SIGINT)
            rest = proc.communicate(timeout=60)[0]
        assert picture[:3] == b"\xff\xd8\xff"
        assert "Saved the browser profile shop for 127.0.0.1 (1 cookies)" in said, said
        assert site.posted("/login") == [{"user": "owner", "password": PASSWORD}]
        assert proc.returncode == 0 and PASSWORD not in rest
        db = tmp_path / "agentd.db"
        assert all(PASSWORD.encode() not in f.read_bytes() for f in db.parent.glob("agentd.db*"))
