"""End to end: `[dashboard] enabled` makes `agentd run` serve the dashboard, and `/dashboard` in
the owner's private chat answers with a one-time login link; anyone else gets no link, and a
page being served never holds up a turn."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentd.dashboard.capability import NOT_YOURS
from agentd.db import open_sync
from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon, send_marker
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import last_user_text
from tests.owner_chat import OwnerChat, owner_chat_running
from tests.test_dashboard_browser import ARGS, CHROMIUM

OTHER = 43  # allowed to talk to the bot, not its owner
LINK = re.compile(r"(http://127\.0\.0\.1:\d+)/login\?t=([A-Za-z0-9_-]+)")


@dataclass
class Stack:
    tg: FakeTelegram
    daemon: Daemon

    def ask_link(self) -> tuple[str, str]:
        """/dashboard from the owner; the (base URL, token) of the link it answers with."""
        before = len([m for m in self.tg.sent if m["chat_id"] == OWNER])
        self.tg.add_message(OWNER, OWNER, "/dashboard")
        sent = self.tg.wait_until(
            lambda: (s := [m for m in self.tg.sent if m["chat_id"] == OWNER])[before:],
            60,
            "the answer to /dashboard",
        )
        found = LINK.search(sent[0]["plain_text"])
        assert found, sent[0]["plain_text"]
        return found[1], found[2]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("dashboard-daemon")
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        # The fake model's default answer ("echo: …") is all the turns here need.
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_DASHBOARD__ENABLED="true",
            AGENTD_DASHBOARD__PORT="0",  # any free port: the link names the one bound
        )
        with running_daemon(tmp, env) as daemon:
            yield Stack(tg, daemon)


async def _sign_in(base: str, token: str) -> str | None:
    """POST the login form as the link's page does; the session cookie, or None."""
    async with aiohttp.ClientSession() as http:
        response = await http.post(
            f"{base}/login", data={"t": token}, headers={"Origin": base}, allow_redirects=False
        )
        cookie = response.cookies.get("agentd_session")
        return cookie.value if cookie is not None else None


async def _page(base: str, session: str, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(cookies={"agentd_session": session}) as http:
        response = await http.get(f"{base}{path}", allow_redirects=False)
        return response.status, await response.text()


def test_the_owners_link_signs_in_once(stack: Stack) -> None:
    base, token = stack.ask_link()
    session = asyncio.run(_sign_in(base, token))
    assert session, "the link from the chat did not sign in"
    status, body = asyncio.run(_page(base, session, "/"))
    assert status == 200 and "<h1>Now</h1>" in body
    assert asyncio.run(_sign_in(base, token)) is None, "a link worked twice"
    # Made when the message was sent: the token reached the chat, never the journal.
    conn = open_sync(stack.daemon.db_path, readonly=True)
    try:
        journaled = conn.execute(
            "SELECT COUNT(*) FROM workflow_steps WHERE result LIKE ?", (f"%{token}%",)
        ).fetchone()[0]
        made_by = [r[0] for r in conn.execute("SELECT made_by FROM dashboard_logins")]
    finally:
        conn.close()
    assert journaled == 0 and made_by == [f"chat:{OWNER}"]


def test_anyone_else_gets_no_link(stack: Stack) -> None:
    stack.tg.add_message(OTHER, OTHER, "/dashboard")
    sent = send_marker(stack.tg, OTHER)
    assert [m["plain_text"] for m in sent] == [NOT_YOURS]
    assert not any(LINK.search(m["plain_text"]) for m in stack.tg.sent if m["chat_id"] == OTHER)


def test_a_turn_finishes_while_a_page_is_in_flight(stack: Stack) -> None:
    base, token = stack.ask_link()
    session = asyncio.run(_sign_in(base, token))
    assert session
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as page:
        # A request the server has begun and not answered: headers still arriving.
        page.sendall(
            f"GET /cost HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: agentd_session={session}\r\n"
            "Connection: close\r\n".encode()
        )
        send_marker(stack.tg, OWNER, "a turn while the Cost page is open")
        page.sendall(b"\r\n")
        answer = b""
        while chunk := page.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and b"<h1>Cost</h1>" in answer


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")
def test_the_link_signs_in_in_a_phones_browser(stack: Stack) -> None:
    from playwright.sync_api import sync_playwright

    base, token = stack.ask_link()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
            page.goto(f"{base}/login?t={token}")
            page.get_by_role("button", name="Sign in").click()
            assert page.url == base + "/", page.content()
            assert page.get_by_role("heading", name="Now").is_visible()
            assert "daemon: running" in page.inner_text("main")
        finally:
            browser.close()


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


async def _cancel(base: str, session: str, instance_id: str) -> str:
    """The turn page's Cancel button, as its form posts it; the page it lands on."""
    async with aiohttp.ClientSession(cookies={"agentd_session": session}) as http:
        page = await (await http.get(f"{base}/turn/{instance_id}")).text()
        found = CSRF.search(page)
        assert found, page
        answer = await http.post(
            f"{base}/workflows/{instance_id}/cancel",
            data={"csrf": found[1]},
            headers={"Origin": base},
        )
        return await answer.text()


def test_the_cancel_button_stops_a_turn_before_its_next_step(tmp_path: Path) -> None:
    """The owner presses Cancel on a turn while its model call runs. The dashboard runs in
    the daemon, so the turn is stopped at once: the tool its model then asks for is not run
    (no wait for the engine's next poll, here set to 10 s)."""
    config = (
        '[tools]\nplugins = ["tests.plugins.e2e_tools"]\n'
        "[dashboard]\nenabled = true\nport = 0\n[engine]\nevent_poll_interval = 10\n"
    )
    with owner_chat_running(tmp_path, config, OwnerChat) as s:
        base, token = Stack(s.tg, s.daemon).ask_link()
        session = asyncio.run(_sign_in(base, token))
        assert session
        marker = "cancel pressed one two"

        def responder(body: dict[str, Any]) -> Any:
            if last_user_text(body).endswith(marker):
                return [
                    {
                        "type": "tool_use",
                        "id": "toolu_c",
                        "name": "count_words",
                        "input": {"text": marker},
                    }
                ]
            return None

        s.llm.set_responder(responder)
        s.llm.hold()
        try:
            s.ask(f"please count the words in {marker}")
            s.llm.wait_for_held(1, timeout=60)
            [(turn,)] = s.daemon.query(
                "SELECT id FROM workflow_instances WHERE workflow = 'turn' AND status = 'running'"
            )
            landed = asyncio.run(_cancel(base, session, turn))
            assert "cancel requested" in landed
        finally:
            s.llm.release()
        s.daemon.wait_idle(f"chat-{OWNER}")
        [(status,)] = s.daemon.query("SELECT status FROM workflow_instances WHERE id = ?", (turn,))
        assert status == "cancelled"
        assert s.daemon.effects().count(f"count_words {marker}") == 0
