"""End to end: the web chat, a page of the dashboard served by `agentd run` beside Telegram,
in a real Chromium (Debian's, driven by Playwright) and through plain HTTP.

A first answer in the page, formatted and escaped; a kill -9 between the page's post and its
answer (nothing lost, nothing twice, shown once after the restart and after a reload); a
re-post under the same key is one turn; an approval card answered from the page; a request
without a session, from another origin or with a bad CSRF token refused; and the owner's
memory the same on the page as on Telegram (one agentd user).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from agentd.webchat.ids import ACCOUNT_ID, CHAT_ID
from agentd.webchat.pages import STREAM_SECONDS
from tests.daemon_process import OWNER, Daemon, daemon_env, poll, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import last_user_text
from tests.test_dashboard_browser import ARGS, CHROMIUM

DASHBOARD = [sys.executable, "-m", "agentd.cli.dashboard"]
CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools", "tests.plugins.media_tools"]
approval_timeout = 3600

[webchat]
enabled = true
"""
T = TypeVar("T")
CSRF = re.compile(r'data-csrf="([0-9a-f]+)"')
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install -y chromium)"
)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a thread of its own: Playwright's sync API keeps a loop on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _free_port() -> int:
    """A port for the dashboard that stays the same across the daemon's restarts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    tg: FakeTelegram
    llm: FakeAnthropic
    daemon: Daemon
    base: str

    def link(self) -> str:
        """A one-time login link, as `agentd dashboard --link` makes one for the owner."""
        port = self.base.rsplit(":", 1)[1]
        result = subprocess.run(
            [*DASHBOARD, "--link", "--port", port],
            env=self.daemon.env,
            cwd=self.daemon.tmp,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def rows(self, text: str) -> list[tuple[str, str]]:
        """(role, text) of the chat's stored messages whose text is `text`."""
        found = self.daemon.query(
            "SELECT role, text FROM webchat_messages WHERE text = ? ORDER BY seq", (text,)
        )
        return [(r[0], r[1]) for r in found]

    def wait_answer(self, text: str, timeout: float = 60) -> None:
        poll(lambda: self.rows(text), timeout, f"the answer {text!r} on the page")

    def turns(self, text: str) -> int:
        found = self.daemon.query(
            "SELECT COUNT(*) FROM workflow_instances WHERE workflow = 'turn' "
            "AND json_extract(input, '$.text') = ?",
            (text,),
        )
        return int(found[0][0])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("webchat")
    (tmp / "agentd.toml").write_text(CONFIG)
    port = _free_port()
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_DASHBOARD__ENABLED="true",
            AGENTD_DASHBOARD__PORT=str(port),
            AGENTD_CHAT__STREAM_INTERVAL="0.1",  # drafts every 0.1 s while one streams
        )
        with running_daemon(tmp, env) as daemon:
            yield Stack(tg, llm, daemon, f"http://127.0.0.1:{port}")


@pytest.fixture(autouse=True)
def echo(stack: Stack) -> None:
    """Each test starts with the fake model echoing ("echo: <text>")."""
    stack.llm.set_responder(None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


class Http:
    """The page's requests, made by hand: a session, its CSRF token, and the same origin."""

    def __init__(self, base: str) -> None:
        self.base = base

    async def sign_in(self, link: str) -> tuple[str, str]:
        token = link.split("t=", 1)[1]
        async with aiohttp.ClientSession() as http:
            response = await http.post(
                f"{self.base}/login",
                data={"t": token},
                headers={"Origin": self.base},
                allow_redirects=False,
            )
            session = response.cookies["agentd_session"].value
        status, page = await self.get(session, "/chat")
        assert status == 200, page
        found = CSRF.search(page)
        assert found, page
        return session, found[1]

    async def get(self, session: str | None, path: str) -> tuple[int, str]:
        cookies = {"agentd_session": session} if session else {}
        async with aiohttp.ClientSession(cookies=cookies) as http:
            response = await http.get(f"{self.base}{path}", allow_redirects=False)
            return response.status, await response.text()

    async def post(
        self, session: str | None, path: str, fields: dict[str, str], origin: str | None = None
    ) -> tuple[int, str]:
        cookies = {"agentd_session": session} if session else {}
        async with aiohttp.ClientSession(cookies=cookies) as http:
            response = await http.post(
                f"{self.base}{path}",
                data=fields,
                headers={"Origin": origin or self.base},
                allow_redirects=False,
            )
            return response.status, await response.text()


def _signed_in_page(stack: Stack, browser: Any) -> Any:
    page = browser.new_page()
    page.goto(stack.link())
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"{stack.base}/chat")
    page.wait_for_selector("#chat[data-live]")
    return page


def _say(page: Any, text: str) -> None:
    page.fill("#text", text)
    page.get_by_role("button", name="Send").click()


# The page's stored messages of a role (the answer so far, a draft, is not one of them).
BUBBLES = "[...document.querySelectorAll('#messages li.msg.' + role + ':not(.draft)')]"


def _bubbles(page: Any, role: str, text: str) -> int:
    return int(
        page.evaluate(
            f"([role, text]) => {BUBBLES}.filter(li => li.innerText.trim() === text).length",
            [role, text],
        )
    )


def _wait_bubble(page: Any, role: str, text: str, timeout: float = 60) -> None:
    page.wait_for_function(
        f"([role, text]) => {BUBBLES}.some(li => li.innerText.trim() === text)",
        arg=[role, text],
        timeout=timeout * 1000,
    )


@needs_chromium
def test_a_first_answer_in_the_page_formatted_and_escaped(stack: Stack, browser: Any) -> None:
    page = browser.new_page()
    try:
        page.goto(stack.link())
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("link", name="Chat").click()  # in the dashboard's own navigation
        assert page.url == f"{stack.base}/chat"
        page.wait_for_selector("#chat[data-live]")
        _say(page, "hello from the desk")
        _wait_bubble(page, "agent", "echo: hello from the desk")
        assert _bubbles(page, "owner", "hello from the desk") == 1
        hostile = "**bold** then <img src=x onerror=window.hacked=1> and `code`"
        stack.llm.set_responder(lambda body: hostile if "format" in last_user_text(body) else None)
        _say(page, "format please")
        _wait_bubble(page, "agent", "bold then <img src=x onerror=window.hacked=1> and code")
        last = page.locator("#messages li.msg.agent").last
        assert last.locator("strong").inner_text() == "bold"
        assert last.locator("code").inner_text() == "code"
        assert page.locator("#messages img").count() == 0
        assert page.evaluate("window.hacked") is None
    finally:
        page.close()
    assert stack.rows("hello from the desk") == [("owner", "hello from the desk")]
    assert stack.turns("hello from the desk") == 1


@needs_chromium
def test_typing_and_the_answer_so_far_show_while_the_model_writes(
    stack: Stack, browser: Any
) -> None:
    answer = "One, two, three, four, five, six, seven, eight, nine, ten, and that is all."
    stack.llm.set_responder(lambda body: answer if "count" in last_user_text(body) else None)
    page = _signed_in_page(stack, browser)
    try:
        stack.llm.hold()
        _say(page, "count to ten")
        page.wait_for_selector("#typing:not([hidden])", timeout=60_000)  # the model works
        stack.llm.stream_delay = 0.2  # each chunk of 8 characters a fifth of a second apart
        stack.llm.release()
        page.wait_for_selector("#messages li.msg.draft", timeout=60_000)
        _wait_bubble(page, "agent", answer)
        assert page.locator("#messages li.msg.draft").count() == 0
        page.wait_for_selector("#typing[hidden]", state="attached")
    finally:
        stack.llm.release()
        stack.llm.stream_delay = 0.0
        page.close()
    assert stack.rows(answer) == [("agent", answer)]  # the drafts were shown, never stored


@needs_chromium
def test_a_cancelled_turns_answer_so_far_goes(stack: Stack, browser: Any) -> None:
    """`agentd workflows cancel` while the answer streams: its answer so far leaves the
    page, so the half answer is never read as the answer."""
    story = " ".join(f"Part {n} of a long answer, written slowly." for n in range(1, 41))
    stack.llm.set_responder(lambda body: story if "story" in last_user_text(body) else None)
    page = _signed_in_page(stack, browser)
    try:
        stack.llm.stream_delay = 0.2
        _say(page, "tell me a long story")
        page.wait_for_selector("#messages li.msg.draft", timeout=60_000)
        found = stack.daemon.query(
            "SELECT id FROM workflow_instances WHERE workflow = 'turn' "
            "AND json_extract(input, '$.text') = ?",
            ("tell me a long story",),
        )
        assert stack.daemon.cli("workflows", "cancel", found[0][0]).returncode == 0
        page.wait_for_selector("#messages li.msg.draft", state="detached", timeout=60_000)
        assert stack.rows(story) == []
        # The stopped message rides along with the next one (as after /stop): answered here,
        # so the next test's answer is its own.
        stack.llm.set_responder(None)
        stack.llm.stream_delay = 0.0
        _say(page, "and now?")
        answered = "SELECT 1 FROM webchat_messages WHERE role = 'agent' AND text LIKE '%and now?'"
        poll(lambda: stack.daemon.query(answered), 60, "the next message answered")
    finally:
        stack.llm.stream_delay = 0.0
        page.close()


def test_a_repost_with_the_same_key_is_one_turn(stack: Stack) -> None:
    http = Http(stack.base)
    session, csrf = _run(http.sign_in(stack.link()))
    key = secrets.token_hex(16)
    fields = {"csrf": csrf, "key": key, "text": "once only, please"}

    async def twice() -> list[tuple[int, str]]:
        first = await http.post(session, "/chat/send", fields)
        # The connection dropped before the page saw the answer: it posts the same again.
        return [first, await http.post(session, "/chat/send", fields)]

    (s1, b1), (s2, b2) = _run(twice())
    assert (s1, s2) == (200, 200), (b1, b2)
    one, two = json.loads(b1), json.loads(b2)
    assert not one["duplicate"] and two["duplicate"] and one["id"] == two["id"]
    stack.wait_answer("echo: once only, please")
    stack.daemon.wait_idle()
    assert stack.turns("once only, please") == 1
    assert stack.rows("once only, please") == [("owner", "once only, please")]
    assert stack.rows("echo: once only, please") == [("agent", "echo: once only, please")]


def test_dashboard_asked_on_the_page_is_a_plain_link_and_no_sign_in_is_stored(
    stack: Stack,
) -> None:
    http = Http(stack.base)
    session, csrf = _run(http.sign_in(stack.link()))

    def logins() -> int:
        return int(stack.daemon.query("SELECT COUNT(*) FROM dashboard_logins")[0][0])

    before = logins()
    fields = {"csrf": csrf, "key": secrets.token_hex(16), "text": "/dashboard"}
    status, body = _run(http.post(session, "/chat/send", fields))
    assert status == 200, body
    # The page keeps what it shows: a one-time link there would be a live sign-in in the
    # database. The owner is signed in already, so the answer is the dashboard's address.
    stack.wait_answer(f"You're signed in to your dashboard here: {stack.base}")
    stack.daemon.wait_idle()
    assert logins() == before
    assert stack.daemon.cells_holding("login?t=") == []


@needs_chromium
def test_a_post_whose_answer_was_lost_is_posted_again_as_the_same_message(
    stack: Stack, browser: Any
) -> None:
    """The server took the message, the page never heard so (the connection dropped): the
    page posts it again under its key, and it is one message, one turn, one answer."""
    page = _signed_in_page(stack, browser)
    lost: list[int] = []

    def drop_the_answer(route: Any) -> None:
        if lost:
            route.continue_()
            return
        lost.append(route.fetch().status)  # the server has it now
        route.abort("connectionreset")

    try:
        page.route("**/chat/send", drop_the_answer)
        _say(page, "posted twice, taken once")
        _wait_bubble(page, "agent", "echo: posted twice, taken once")
        poll(lambda: page.locator("#messages li.pending").count() == 0, 30, "no post pending")
        assert lost == [200]
        assert _bubbles(page, "owner", "posted twice, taken once") == 1
    finally:
        page.close()
    stack.daemon.wait_idle()
    assert stack.turns("posted twice, taken once") == 1
    assert stack.rows("echo: posted twice, taken once") == [
        ("agent", "echo: posted twice, taken once")
    ]


@needs_chromium
def test_a_message_written_after_the_session_ended_is_sent_after_signing_in(
    stack: Stack, browser: Any
) -> None:
    """The page keeps what the server has not taken; signed in again, it sends it, once."""
    page = _signed_in_page(stack, browser)
    try:
        [cookie] = [c for c in page.context.cookies() if c["name"] == "agentd_session"]
        csrf = page.get_attribute("#chat", "data-csrf")
        ended = _run(Http(stack.base).post(cookie["value"], "/logout", {"csrf": csrf or ""}))
        assert ended[0] == 303  # signed out elsewhere: this page's session is gone
        _say(page, "written while signed out")
        page.wait_for_function(
            "() => document.getElementById('status').innerText.includes('session ended')"
        )
        assert stack.rows("written while signed out") == []
        page.goto(stack.link())
        page.get_by_role("button", name="Sign in").click()
        page.goto(f"{stack.base}/chat")
        _wait_bubble(page, "agent", "echo: written while signed out")
        assert _bubbles(page, "owner", "written while signed out") == 1
    finally:
        page.close()
    stack.daemon.wait_idle()
    assert stack.turns("written while signed out") == 1


def _report(body: dict[str, Any]) -> Any:
    last = json.dumps(body["messages"][-1])
    if "tool_result" in last and "report-week-3" in json.dumps(body["messages"]):
        return "Here is your report."
    if "weekly report" in last:
        return [{"type": "tool_use", "id": "tu_web", "name": "weekly_report", "input": {"week": 3}}]
    return None


def test_a_file_out_is_a_link_behind_the_login(stack: Stack) -> None:
    stack.llm.set_responder(_report)
    http = Http(stack.base)
    session, csrf = _run(http.sign_in(stack.link()))
    fields = {"csrf": csrf, "key": secrets.token_hex(16), "text": "the weekly report, please"}
    assert _run(http.post(session, "/chat/send", fields))[0] == 200
    stack.wait_answer("Here is your report.")
    [(message, name)] = poll(
        lambda: stack.daemon.query(
            "SELECT id, file_name FROM webchat_messages WHERE file_name IS NOT NULL"
        ),
        60,
        "the file sent with the answer",
    )
    assert name == "report-week-3.csv"

    async def fetch(session: str | None) -> tuple[int, dict[str, str], bytes]:
        cookies = {"agentd_session": session} if session else {}
        async with aiohttp.ClientSession(cookies=cookies) as client:
            response = await client.get(f"{stack.base}/chat/file/{message}", allow_redirects=False)
            return response.status, dict(response.headers), await response.read()

    status, headers, body = _run(fetch(session))
    assert status == 200 and body.startswith(b"day,steps\n1,4000")
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"] == 'attachment; filename="report-week-3.csv"'
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert _run(fetch(None))[0] == 303


def test_requests_without_a_session_from_elsewhere_or_with_a_bad_token_are_refused(
    stack: Stack,
) -> None:
    http = Http(stack.base)
    session, csrf = _run(http.sign_in(stack.link()))
    fields = {"key": secrets.token_hex(16), "text": "refused, I hope"}

    async def tries() -> dict[str, int]:
        return {
            "no session": (await http.post(None, "/chat/send", {**fields, "csrf": csrf}))[0],
            "bad csrf": (await http.post(session, "/chat/send", {**fields, "csrf": "0" * 64}))[0],
            "no csrf": (await http.post(session, "/chat/send", fields))[0],
            "other origin": (
                await http.post(
                    session, "/chat/send", {**fields, "csrf": csrf}, "https://evil.example"
                )
            )[0],
            "events, no session": (await http.get(None, "/chat/events"))[0],
            "page, no session": (await http.get(None, "/chat"))[0],
            "file, no session": (await http.get(None, "/chat/file/1"))[0],
            "a button never offered": (
                await http.post(
                    session, "/chat/press", {"csrf": csrf, "message": "1", "data": "ap:x:1"}
                )
            )[0],
            # A digit int() cannot read (str.isdigit() says yes to it).
            "a superscript message id": (
                await http.post(
                    session, "/chat/press", {"csrf": csrf, "message": "²", "data": "ap:x:1"}
                )
            )[0],
            "a key too short": (
                await http.post(session, "/chat/send", {**fields, "csrf": csrf, "key": "k"})
            )[0],
            "a message too long": (
                await http.post(
                    session, "/chat/send", {**fields, "csrf": csrf, "text": "x" * 12_001}
                )
            )[0],
        }

    assert _run(tries()) == {
        "no session": 303,
        "bad csrf": 403,
        "no csrf": 403,
        "other origin": 403,
        "events, no session": 303,
        "page, no session": 303,
        "file, no session": 303,
        "a button never offered": 400,
        "a superscript message id": 400,
        "a key too short": 400,
        "a message too long": 400,
    }
    assert stack.rows("refused, I hope") == []
    assert stack.turns("refused, I hope") == 0


@needs_chromium
def test_kill_9_between_the_post_and_its_answer(stack: Stack, browser: Any) -> None:
    """The page posted, the daemon committed the message and was killed before answering:
    after the restart the open page gets the answer once, and once again after a reload."""
    page = _signed_in_page(stack, browser)
    try:
        stack.llm.hold()
        before = len(stack.llm.requests)
        _say(page, "survive a kill")
        poll(lambda: stack.rows("survive a kill"), 30, "the message committed")
        stack.llm.wait_until(lambda: len(stack.llm.requests) > before, 60, "the model call")
        stack.daemon.kill9()
        stack.llm.release()
        stack.daemon.start()
        _wait_bubble(page, "agent", "echo: survive a kill", timeout=120)
        assert _bubbles(page, "agent", "echo: survive a kill") == 1
        assert _bubbles(page, "owner", "survive a kill") == 1
        assert page.locator("#messages li.pending").count() == 0
        page.reload()
        page.wait_for_selector("#chat[data-live]")
        _wait_bubble(page, "agent", "echo: survive a kill")
        assert _bubbles(page, "agent", "echo: survive a kill") == 1
        assert _bubbles(page, "owner", "survive a kill") == 1
    finally:
        page.close()
    stack.daemon.wait_idle()
    assert stack.turns("survive a kill") == 1
    assert stack.rows("echo: survive a kill") == [("agent", "echo: survive a kill")]


@needs_chromium
def test_a_message_written_while_the_daemon_is_down_is_sent_once_it_is_back(
    stack: Stack, browser: Any
) -> None:
    page = _signed_in_page(stack, browser)
    try:
        stack.daemon.kill9()
        _say(page, "while you were away")
        page.wait_for_function(
            "() => document.getElementById('status').innerText.includes('retrying')"
        )
        stack.daemon.start()
        _wait_bubble(page, "agent", "echo: while you were away", timeout=120)
        assert _bubbles(page, "owner", "while you were away") == 1
    finally:
        page.close()
    stack.daemon.wait_idle()
    assert stack.turns("while you were away") == 1
    assert stack.rows("echo: while you were away") == [("agent", "echo: while you were away")]


def _deleting(path: str) -> Any:
    def responder(body: dict[str, Any]) -> Any:
        text = last_user_text(body)
        if text.endswith(f"please delete {path}"):
            return [
                {
                    "type": "tool_use",
                    "id": "toolu_web1",
                    "name": "delete_file",
                    "input": {"path": path},
                }
            ]
        if text.startswith("tool_result:") and path in json.dumps(body["messages"][-2:]):
            return "Deleted it."
        return None

    return responder


@needs_chromium
def test_an_approval_answered_from_the_page(stack: Stack, browser: Any) -> None:
    stack.llm.set_responder(_deleting("/tmp/web-notes"))
    page = _signed_in_page(stack, browser)
    try:
        _say(page, "please delete /tmp/web-notes")
        approve = page.get_by_role("button", name=re.compile("Approve"))
        approve.wait_for(timeout=60_000)
        assert "delete_file /tmp/web-notes" not in stack.daemon.effects()
        approve.click()
        _wait_bubble(page, "agent", "Deleted it.")
        # The card's outcome replaced its buttons: nothing left to press.
        poll(lambda: page.get_by_role("button", name=re.compile("Approve")).count() == 0, 30)
    finally:
        page.close()
    assert stack.daemon.effects().count("delete_file /tmp/web-notes") == 1
    decided = stack.daemon.query(
        "SELECT status, decided_by FROM approvals WHERE chat_id = ?", (CHAT_ID,)
    )
    # Decided by the owner's agentd user (the prefix names the button path, not the network).
    assert [(r[0], r[1].rsplit(":", 1)[1]) for r in decided] == [("approved", str(OWNER))]


def _context(request: dict[str, Any]) -> str:
    body = request["body"]
    context = body["messages"][-1]["content"][-1].get("text", "")
    return "\n".join([*(block["text"] for block in body["system"]), context])


def test_the_owners_memory_is_the_same_on_the_page_as_on_telegram(stack: Stack) -> None:
    stack.llm.enqueue_tool_use(
        "remember",
        {"kind": "preference", "key": "drink", "content": "Likes oolong tea"},
        "toolu_webrem",
    )
    stack.llm.enqueue_text("I'll remember that.")
    stack.tg.add_message(OWNER, OWNER, "I like oolong tea, remember that")
    stack.tg.wait_until(
        lambda: any(m["plain_text"] == "I'll remember that." for m in stack.tg.sent), 60, "ok"
    )
    http = Http(stack.base)
    session, csrf = _run(http.sign_in(stack.link()))
    fields = {"csrf": csrf, "key": secrets.token_hex(16), "text": "what do I drink?"}
    status, body = _run(http.post(session, "/chat/send", fields))
    assert status == 200, body
    stack.wait_answer("echo: what do I drink?")
    asked = [r for r in stack.llm.requests if "what do I drink" in json.dumps(r["body"])]
    assert "Likes oolong tea" in _context(asked[-1])
    users = {u for (u,) in stack.daemon.query("SELECT DISTINCT user_id FROM memories")}
    assert users == {OWNER}
    linked = stack.daemon.query(
        "SELECT user_id, channel FROM user_accounts WHERE account_id = ?", (ACCOUNT_ID,)
    )
    assert [(r[0], r[1]) for r in linked] == [(OWNER, "webchat")]


def test_a_stop_does_not_wait_for_an_open_page(stack: Stack) -> None:
    """An open event stream ends at shutdown, not at its deadline: SIGTERM with the page open
    stops the daemon as soon as without it."""
    http = Http(stack.base)
    session, _ = _run(http.sign_in(stack.link()))
    opened, ended = threading.Event(), threading.Event()

    async def listen() -> None:
        async with aiohttp.ClientSession(cookies={"agentd_session": session}) as client:
            async with client.get(f"{stack.base}/chat/events") as response:
                assert response.status == 200
                opened.set()
                with contextlib.suppress(aiohttp.ClientError):
                    async for _ in response.content:
                        pass
        ended.set()

    listener = threading.Thread(target=asyncio.run, args=(listen(),), daemon=True)
    listener.start()
    assert opened.wait(30), "the event stream did not open"
    started = time.monotonic()
    try:
        assert stack.daemon.stop(timeout=STREAM_SECONDS) == 0
        took = time.monotonic() - started
    finally:
        stack.daemon.start()
    assert ended.wait(10), "the stream was left open"
    assert took < STREAM_SECONDS / 2, f"the stop waited {took:.1f} s for the open page"


def test_the_web_chat_alone_with_no_telegram_at_all(tmp_path: Path) -> None:
    """An owner with no phone: no Telegram token, only the dashboard and its chat. The daemon
    runs on the web chat alone and answers there."""
    (tmp_path / "agentd.toml").write_text(CONFIG)
    port = _free_port()
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
            AGENTD_DASHBOARD__ENABLED="true",
            AGENTD_DASHBOARD__PORT=str(port),
        )
        del env["TELEGRAM_BOT_TOKEN"]
        with running_daemon(tmp_path, env) as daemon:
            alone = Stack(tg, llm, daemon, f"http://127.0.0.1:{port}")
            http = Http(alone.base)
            session, csrf = _run(http.sign_in(alone.link()))
            fields = {"csrf": csrf, "key": secrets.token_hex(16), "text": "no phone here"}
            assert _run(http.post(session, "/chat/send", fields))[0] == 200
            alone.wait_answer("echo: no phone here")
            assert tg.requests == []  # nothing asked Telegram anything


def test_a_card_pressed_twice_at_once_both_ways_decides_once_and_then_offers_nothing(
    stack: Stack,
) -> None:
    """Approve and Deny posted at once, twice each (a double click, a second tab): one
    decision, the call run at most once; once decided, the card carries no button and a press
    of its old data, or of a guessed approval id, is refused."""
    stack.llm.set_responder(_deleting("/tmp/web-twice"))
    http = Http(stack.base)
    session, csrf = _run(http.sign_in(stack.link()))
    key = secrets.token_hex(16)
    sent = _run(
        http.post(
            session,
            "/chat/send",
            {"csrf": csrf, "key": key, "text": "please delete /tmp/web-twice"},
        )
    )
    assert sent[0] == 200, sent

    def card() -> Any:
        rows = stack.daemon.query(
            "SELECT id, buttons FROM webchat_messages WHERE role = 'agent' AND buttons LIKE '%ap:%'"
        )
        return rows[0] if rows else None

    message, buttons = poll(card, 60, "the card on the page")
    data = [b["data"] for line in json.loads(buttons) for b in line]
    yes, no = next(d for d in data if d.endswith(":y")), next(d for d in data if d.endswith(":n"))

    async def presses() -> list[tuple[int, str]]:
        one = {"csrf": csrf, "message": str(message)}
        return list(
            await asyncio.gather(
                *(http.post(session, "/chat/press", {**one, "data": d}) for d in (yes, no, yes, no))
            )
        )

    answers = _run(presses())
    assert all(status in (200, 400) for status, _ in answers), answers
    decided = stack.daemon.query("SELECT status FROM approvals WHERE id = ?", (yes.split(":")[1],))
    assert [r[0] for r in decided] in (["approved"], ["denied"])
    poll(lambda: card() is None, 60, "the card's buttons gone")
    forged = yes.split(":")[0] + ":" + "A" * 12 + ":y"

    async def late() -> list[int]:
        one = {"csrf": csrf, "message": str(message)}
        return [
            (await http.post(session, "/chat/press", {**one, "data": d}))[0] for d in (yes, forged)
        ]

    assert _run(late()) == [400, 400]
    stack.daemon.wait_idle()
    assert stack.daemon.effects().count("delete_file /tmp/web-twice") <= 1
