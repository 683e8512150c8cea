"""The dashboard in a real browser (Debian's Chromium driven by Playwright) against a real
`agentd run` talking to the fake Bot API and the fake model: sign in through a one-time link,
approve a waiting call and watch the turn finish, read its timeline, refuse a request without
a session or with a bad CSRF token, and fit a phone's screen.

With DASHBOARD_SCREENSHOTS=<folder> each page is saved there as PNG (docs/screenshots).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

CHROMIUM = Path("/usr/bin/chromium")
# `agentd dashboard` once the command is listed in agentd/cli/app.py; the same function.
DASHBOARD = [sys.executable, "-m", "agentd.cli.dashboard"]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools"]
approval_timeout = 3600
"""

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install -y chromium)"
)


@dataclass
class Stack:
    tg: FakeTelegram
    llm: FakeAnthropic
    daemon: Daemon
    base: str
    shots: Path

    def link(self) -> str:
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


def _dashboard(daemon: Daemon) -> tuple[subprocess.Popen[str], str]:
    """`agentd dashboard --port 0` beside the daemon; returns it and its first login link."""
    proc = subprocess.Popen(
        [*DASHBOARD, "--port", "0"],
        env=daemon.env,
        cwd=daemon.tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # blocks on the pipe until the server has printed its link
        if line.startswith("Sign in"):
            return proc, line.split(": ", 1)[1].strip()
    raise AssertionError(f"agentd dashboard exited ({proc.wait()}) without a link")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    tmp = tmp_path_factory.mktemp("dashboard")
    (tmp / "agentd.toml").write_text(CONFIG)
    shots = Path(os.environ.get("DASHBOARD_SCREENSHOTS") or tmp / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp / "agentd.toml"))
        with running_daemon(tmp, env) as daemon:
            proc, link = _dashboard(daemon)
            try:
                base = link.split("/login", 1)[0]
                yield Stack(tg, llm, daemon, base, shots), link
            finally:
                proc.terminate()
                proc.wait(20)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


def _script(llm: FakeAnthropic, *replies: Any) -> None:
    queue = list(replies)
    llm.set_responder(lambda body: queue.pop(0) if queue else None)


def _shot(page: Any, stack: Stack, name: str, *, whole: bool = False) -> None:
    page.screenshot(path=str(stack.shots / f"{name}.png"), full_page=whole)


def test_sign_in_approve_and_watch_the_turn_finish(stack: tuple[Stack, str], browser: Any) -> None:
    s, link = stack
    call = [
        {
            "type": "tool_use",
            "id": "toolu_dash1",
            "name": "delete_file",
            "input": {"path": "/tmp/<b>old</b>.txt"},
        }
    ]
    _script(s.llm, call, "Deleted it.")
    s.tg.add_message(OWNER, OWNER, "please delete /tmp/<b>old</b>.txt")
    s.tg.wait_until(
        lambda: any(m["reply_markup"] for m in s.tg.sent if m["chat_id"] == OWNER),
        30,
        "the approval card in the owner's chat",
    )
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    # The pages' own script and style must load under their CSP: no console error at all.
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.goto(link)
    page.get_by_role("button", name="Sign in").click()
    assert page.url == s.base + "/", page.content()
    assert page.get_by_role("heading", name="Now").is_visible()
    _shot(page, s, "now")

    page.get_by_role("link", name="Approvals", exact=True).click()
    card = page.locator("article.approval")
    assert "delete_file" in card.inner_text() and "/tmp/<b>old</b>.txt" in card.inner_text()
    _shot(page, s, "approvals")
    # A tampered CSRF token is refused and changes nothing.
    page.locator("form.decide input[name=csrf]").evaluate("e => e.value = 'forged'")
    card.get_by_role("button", name="Approve").click()
    assert "This form has expired" in page.content()
    page.go_back()
    page.reload()
    page.locator("article.approval").get_by_role("button", name="Approve").click()
    assert page.get_by_role("status").inner_text() == "Approved: delete_file."
    s.tg.wait_until(
        lambda: any(m["plain_text"] == "Deleted it." for m in s.tg.sent), 30, "the turn's reply"
    )
    assert "delete_file /tmp/<b>old</b>.txt" in s.daemon.effects()

    page.get_by_role("link", name="Conversations").click()
    page.get_by_role("link", name=f"chat {OWNER}").click()
    _shot(page, s, "conversation")
    page.get_by_role("link", name="timeline").first.click()
    assert "complete" in page.locator("p").first.inner_text()
    steps = page.locator("ol.timeline").inner_text()
    assert "tool:toolu_dash1" in steps or "toolu_dash1" in page.content()
    tools = page.locator("table", has_text="outcome").inner_text()
    assert "delete_file" in tools and "high" in tools and "approved by dashboard" in tools
    assert "deleted /tmp/<b>old</b>.txt" in tools
    _shot(page, s, "turn", whole=True)
    for name in ("Cost", "Memory", "Schedules", "Skills", "Audit"):
        page.get_by_role("link", name=name, exact=True).click()
        assert page.get_by_role("heading", level=1).first.is_visible()
        _shot(page, s, name.lower())
    page.close()
    # The one refusal the test provoked (the forged CSRF token) is the only error logged.
    assert [e for e in errors if "403" not in e] == []


def test_no_session_means_the_login_page(stack: tuple[Stack, str], browser: Any) -> None:
    s, _ = stack
    context = browser.new_context()
    page = context.new_page()
    for path in ("/", "/approvals", "/turn/anything", "/nowhere"):
        page.goto(s.base + path)
        assert page.url == s.base + "/login"
        assert "Open the sign-in link" in page.inner_text("main")
    response = context.request.post(
        s.base + "/approvals/x", form={"decision": "approve"}, max_redirects=0
    )
    assert response.status in (303, 403)
    context.close()


def test_a_phone_sized_screen(stack: tuple[Stack, str], browser: Any) -> None:
    s, _ = stack
    context = browser.new_context(
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        has_touch=True,
        device_scale_factor=2,
    )
    page = context.new_page()
    page.goto(s.link())
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(s.base + "/")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the Now page is {width}px wide on a 390px screen"
    page.screenshot(path=str(s.shots / "phone-now.png"))
    page.goto(s.base + "/approvals")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    context.close()
