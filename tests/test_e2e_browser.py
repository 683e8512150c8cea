"""The browser end to end: `agentd run` drives Debian's Chromium (in bubblewrap, behind its
proxy) against local sites the test serves, the fake model scripting the tool calls. A
JavaScript-only page, a hostile page's instruction stopped on a card that shows the page, a
two-step form, a download, a password never typed by the model and a profile the owner signs
in to, kill -9 between typing and submitting and during a submission, and a fetch's host rule
that never lets the browser follow the host's open redirect unasked in a tainted turn."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from agentd.browser import profiles
from agentd.browser.capability import _missing
from agentd.config import Config
from tests.browser_sites import PASSWORD, PRICE, RENEWED, SESSION, Elsewhere, Site, sites
from tests.daemon_process import AGENTD, OWNER, Daemon, daemon_env, running_daemon
from tests.db_scan import rows_holding
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.site import FakeSite
from tests.hands_support import alive, reachable_dir
from tests.test_e2e_taint import Stack, tool_use

PROBLEM = _missing(Config.model_validate({"browser": {"enabled": True}}))
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no browser here: {PROBLEM}")
Step = Callable[[dict[str, Any]], Any]


def _results(body: dict[str, Any]) -> list[str]:
    """Every tool result the model was sent, the latest first."""
    texts = []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            inner = block.get("content", "") if block.get("type") == "tool_result" else ""
            if isinstance(inner, list):
                inner = " ".join(b.get("text", "") for b in inner)
            texts.append(str(inner))
    return texts[::-1]


def ref(label: str) -> Callable[[dict[str, Any]], str]:
    """The number the latest page listing gave the element labelled `label`."""
    pattern = re.compile(r"\[(\d+-\d+)\] \w+ \"" + re.escape(label) + '"')

    def find(body: dict[str, Any]) -> str:
        for text in _results(body):
            if found := pattern.search(text):
                return found.group(1)
        raise AssertionError(f"no element {label!r} in any page the model read")

    return find


def call(name: str, use_id: str, **args: Any) -> Step:
    def reply(body: dict[str, Any]) -> list[dict[str, Any]]:
        given = {k: v(body) if callable(v) else v for k, v in args.items()}
        return [{"type": "tool_use", "id": use_id, "name": name, "input": given}]

    return reply


def say(text: str) -> Step:
    return lambda body: text


class Browse:
    def __init__(
        self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon, site: Site, other: Elsewhere
    ) -> None:
        self.tg, self.llm, self.daemon, self.site, self.other = tg, llm, daemon, site, other
        self.pressed: list[int] = []
        self.ws = Path()

    def turn(self, text: str, *steps: Step) -> None:
        queue = list(steps)
        self.llm.reset()
        self.llm.set_responder(lambda body: queue.pop(0)(body) if queue else None)
        self.tg.add_message(OWNER, OWNER, text)

    def cards(self) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == OWNER and m["reply_markup"]]

    def wait_card(self, n: int) -> dict[str, Any]:
        return self.tg.wait_until(
            lambda: len(c := self.cards()) >= n and c[n - 1], 60, f"approval card {n}"
        )

    def press(self, card: dict[str, Any], col: int) -> None:
        data = card["reply_markup"]["inline_keyboard"][0][col]["callback_data"]
        self.tg.add_callback_query(OWNER, OWNER, card["message_id"], data)

    def approve_next(self) -> dict[str, Any]:
        """Approve the next card not pressed yet."""
        card = self.tg.wait_until(
            lambda: next((c for c in self.cards() if c["message_id"] not in self.pressed), None),
            60,
            f"approval card {len(self.pressed) + 1}",
        )
        self.pressed.append(card["message_id"])
        self.press(card, 0)
        return card

    def wait_text(self, text: str, timeout: float = 60) -> dict[str, Any]:
        return self.tg.wait_until(
            lambda: next((m for m in self.tg.sent if text in m["plain_text"]), None), timeout, text
        )

    def result(self, use_id: str) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for request in self.llm.requests:
                for message in request["body"]["messages"]:
                    for block in message["content"] if isinstance(message["content"], list) else []:
                        if block.get("tool_use_id") == use_id:
                            return block  # type: ignore[no-any-return]
            return None

        return self.llm.wait_until(find, 90, f"the result of {use_id}")


def _config(tmp: Path, ws: Path, site: Site) -> dict[str, str]:
    return {
        "AGENTD_CONFIG": str(tmp / "agentd.toml"),
        "text": (
            f'[tools]\napproval_timeout = 300\n\n[tools.workspace]\npath = "{ws}"\n\n'
            # No [llm] max_steps: a browsing turn takes [browser] max_steps calls by itself.
            "[memory]\nhistory_limit = 0\n\n"
            f'[browser]\nenabled = true\nallowed_hosts = ["127.0.0.1:{site.port}"]\n'
            "page_timeout = 20.0\n"
        ),
    }


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
            )
            daemon = Daemon(tmp_path, env).start()
            stack = Browse(tg, llm, daemon, site, other)
            stack._pressed = []
            stack.ws = ws  # type: ignore[attr-defined]
            try:
                yield stack
            finally:
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.stop()
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def test_a_javascript_only_page_is_read_whole_and_as_outside_content(browse: Browse) -> None:
    url = f"{browse.site.base}/js"
    browse.turn(
        f"what does {url} say? show me",
        call("browser_open", "b_js", url=url),
        call("browser_screenshot", "b_shot"),
        say("42 EUR."),
    )
    browse.wait_text("42 EUR.")
    result = browse.result("b_js")["content"]
    assert PRICE in str(result) and "<untrusted_content" in str(result)
    assert browse.cards() == []  # a URL the owner wrote, only read: nothing to approve
    shot = browse.tg.wait_until(
        lambda: next((d for d in browse.tg.documents if d["chat_id"] == OWNER), None),
        30,
        "the page's picture sent to the owner",
    )
    assert shot["data"][:4] == b"\x89PNG" and shot["caption"] == url


def test_a_hostile_pages_instruction_stops_on_a_card_showing_the_page(browse: Browse) -> None:
    url = f"{browse.site.base}/hostile"
    browse.turn(
        f"find me flights on {url}",
        call("browser_open", "b_h1", url=url),
        call("browser_type", "b_h2", ref=ref("data"), text="the owner's notes"),
        call("browser_submit", "b_h3", ref=ref("Continue")),
        say("I did not send anything."),
    )
    card = browse.wait_card(1)
    shown = card["plain_text"]
    assert f"page: {url}" in shown and 'will type: "the owner\'s notes"' in shown, shown
    assert f"{browse.other.base}/steal" in shown  # where the form would go
    assert "outside content" in shown
    picture = browse.tg.wait_until(
        lambda: next(
            (d for d in browse.tg.documents if d["reply_to_message_id"] == card["message_id"]),
            None,
        ),
        30,
        "the page's picture under the card",
    )
    assert picture["file_name"] == "page.png" and picture["data"][:4] == b"\x89PNG"
    browse.press(card, 1)  # deny
    second = browse.wait_card(2)
    assert "will submit the form of" in second["plain_text"]
    # A submission never offers "Always allow": Approve and Deny, nothing else.
    assert [len(row) for row in second["reply_markup"]["inline_keyboard"]] == [2]
    browse.press(second, 1)
    browse.wait_text("I did not send anything.")
    # Neither the form nor the page's own scripts reached the other server.
    assert browse.other.hits == []


def test_a_two_step_form_asks_for_every_change_and_submits_once(browse: Browse) -> None:
    url = f"{browse.site.base}/form"
    browse.turn(
        f"order one at {url}, name Ann, email ann@example.org",
        call("browser_open", "b_f1", url=url),
        call("browser_type", "b_f2", ref=ref("Name"), text="Ann"),
        call("browser_submit", "b_f3", ref=ref("Name")),
        call("browser_type", "b_f4", ref=ref("Email"), text="ann@example.org"),
        call("browser_select", "b_f5", ref=ref("Size"), option="M"),
        call("browser_submit", "b_f6", ref=ref("Place order")),
        say("Ordered."),
    )
    cards = [browse.approve_next() for _ in range(5)]
    assert "will choose: 'M'" in cards[3]["plain_text"]
    browse.wait_text("Ordered.")
    assert browse.site.posted("/form/2") == [{"name": "Ann"}]
    done = [{"name": "Ann", "email": "ann@example.org", "size": "M"}]
    assert browse.site.posted("/form/done") == done
    assert "Order placed" in str(browse.result("b_f6")["content"])


def test_a_download_lands_in_the_workspace_downloads_folder(browse: Browse) -> None:
    url = f"{browse.site.base}/files"
    browse.turn(
        f"get the report from {url}",
        call("browser_open", "b_d1", url=url),
        call("browser_download", "b_d2", ref=ref("Get the report")),
        say("Saved it."),
    )
    card = browse.approve_next()
    assert "will download with" in card["plain_text"]
    browse.wait_text("Saved it.")
    saved = browse.ws / "downloads" / "report.txt"
    assert saved.read_text() == "quarterly report: all good\n"
    assert "downloads/report.txt" in str(browse.result("b_d2")["content"])


def test_the_model_never_types_a_password_and_the_owner_signs_in_for_it(
    browse: Browse,
) -> None:
    login = f"{browse.site.base}/login"
    browse.turn(
        f"sign in at {login}",
        call("browser_open", "b_l1", url=login),
        call("browser_type", "b_l2", ref=ref("Password"), text=PASSWORD),
        say("I cannot type passwords."),
    )
    browse.wait_text("I cannot type passwords.")
    refused = browse.result("b_l2")
    assert refused["is_error"] and "never types into a password field" in str(refused["content"])
    assert browse.cards() == []  # refused at once, no card to approve in vain
    assert browse.site.posted("/login") == []

    signed = subprocess.run(
        [*AGENTD, "browser", "login", "shop", login],
        env=browse.daemon.env,
        cwd=browse.daemon.tmp,
        input=f"owner\n{PASSWORD}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert signed.returncode == 0, signed.stderr
    listed = browse.daemon.cli_json("browser", "profiles", "--json")
    assert [(p["name"], p["site"], p["cookies"]) for p in listed] == [("shop", "127.0.0.1", 1)]

    members = f"{browse.site.base}/members"
    browse.turn(
        f"what does {members} say?",
        call("browser_open", "b_l3", url=members, profile="shop"),
        say("You are signed in."),
    )
    browse.wait_text("You are signed in.")
    assert "Welcome back, owner" in str(browse.result("b_l3")["content"])
    # The session's cookie lives in the profile file alone: not the journal, not a log.
    browse.daemon.stop()
    assert SESSION.encode() not in browse.daemon.db_path.read_bytes()
    for log in browse.daemon.tmp.glob("agentd-*.log"):
        assert SESSION not in log.read_text()
    assert PASSWORD not in browse.daemon.log()
    removed = browse.daemon.cli("browser", "profiles", "rm", "shop")
    assert removed.returncode == 0 and browse.daemon.cli_json("browser", "profiles", "--json") == []


def test_a_page_showing_the_profiles_session_cookie_shows_it_to_nobody(browse: Browse) -> None:
    """The owner's signed-in profile is used on a page that prints its session id and renews
    it (a site's "your sessions" page): the model, the journal and the log see neither the
    stored cookie nor the renewed one."""
    cookie = {"name": "session", "value": SESSION, "domain": "127.0.0.1", "path": "/"}
    state = {"cookies": [{**cookie, "expires": -1, "httpOnly": True, "secure": False}]}
    profiles.save(browse.daemon.tmp, "shop", "127.0.0.1", state, time.time())
    account = f"{browse.site.base}/account"
    browse.turn(
        f"what does {account} say?",
        call("browser_open", "b_a1", url=account, profile="shop"),
        call("browser_read", "b_a2"),
        say("Your account is fine."),
    )
    browse.wait_text("Your account is fine.")
    for use in ("b_a1", "b_a2"):
        shown = str(browse.result(use)["content"])
        assert "Signed in. This session: [REDACTED], renewed to [REDACTED]" in shown, shown
    browse.daemon.wait_idle(timeout=60)
    browse.daemon.stop()
    for value in (SESSION, RENEWED):
        assert rows_holding(browse.daemon.db_path, value) == [], value
        assert value not in browse.daemon.log()
        assert all(value not in str(r["body"]) for r in browse.llm.requests)
    # The renewed session is the profile's now (the turn kept its cookies).
    assert profiles.load(browse.daemon.tmp, "shop")[1]["cookies"][0]["value"] == RENEWED


def test_kill_9_between_typing_and_submitting_never_submits_after_restart(
    browse: Browse,
) -> None:
    url = f"{browse.site.base}/form"
    browse.turn(
        f"order one at {url} for Ann",
        call("browser_open", "b_k1", url=url),
        call("browser_type", "b_k2", ref=ref("Name"), text="Ann"),
        call("browser_submit", "b_k3", ref=ref("Next")),
    )
    browse.approve_next()  # the typing
    submit_card = browse.wait_card(2)
    assert "will submit the form of" in submit_card["plain_text"]
    # The card is in the chat once Telegram has it, before the daemon has journaled sending
    # it: killed in between, the daemon sends it again and only the new card decides (the
    # next test). Killed here, the turn is waiting for the owner: between typing and submitting.
    browse.daemon.wait_for_instances(1, status="waiting")
    sandbox = "agentd-browser-"
    assert alive(sandbox)
    browse.daemon.kill9()
    browse.tg.wait_until(lambda: not alive(sandbox), 20, "the browser gone with the daemon")
    browse.llm.reset()
    browse.llm.enqueue_text("The page was lost; nothing was sent.")
    browse.daemon.start()
    browse.press(submit_card, 0)  # the card still works after the restart
    browse.wait_text("nothing was sent")
    refused = browse.result("b_k3")
    assert refused["is_error"] and "nothing was submitted" in str(refused["content"])
    assert browse.site.posted("/form/2") == []


def test_kill_9_while_the_submit_card_is_sent_sends_it_again_and_only_that_one_decides(
    browse: Browse,
) -> None:
    url = f"{browse.site.base}/form"
    browse.turn(
        f"order one at {url} for Ann",
        call("browser_open", "b_c1", url=url),
        call("browser_type", "b_c2", ref=ref("Name"), text="Ann"),
        call("browser_submit", "b_c3", ref=ref("Next")),
    )
    typing = browse.wait_card(1)
    # The next message, the submit card, reaches the chat and its answer is held: the daemon
    # dies before it knows the card was sent.
    browse.tg.fail_next("sendMessage", mode="land", delay=20)
    browse.press(typing, 0)
    first = browse.wait_card(2)
    browse.daemon.kill9()
    browse.llm.reset()
    browse.llm.enqueue_text("The page was lost; nothing was sent.")
    browse.daemon.start()
    again = browse.wait_card(3)  # sent again after the restart (counted as send_uncertain)
    assert again["plain_text"] == first["plain_text"]
    browse.press(first, 0)
    refused = browse.tg.wait_until(
        lambda: [a for a in browse.tg.callback_answers if "does not belong" in (a["text"] or "")],
        30,
        "the first card's press refused",
    )
    assert refused
    browse.press(again, 0)
    browse.wait_text("nothing was sent")
    assert browse.site.posted("/form/2") == []
    uncertain = browse.daemon.query("SELECT detail FROM audit WHERE kind = 'send_uncertain'")
    assert any("ask:b_c3" in row[0] for row in uncertain)


def test_kill_9_during_a_submission_reports_outcome_unknown_and_never_resubmits(
    browse: Browse,
) -> None:
    url = f"{browse.site.base}/hold"
    browse.turn(
        f"pay 5 at {url}",
        call("browser_open", "b_p1", url=url),
        call("browser_type", "b_p2", ref=ref("Amount"), text="5"),
        call("browser_submit", "b_p3", ref=ref("Pay")),
    )
    browse.approve_next()
    browse.approve_next()
    assert browse.site.held.wait(60), "the submission never reached the site"
    browse.daemon.kill9()
    browse.llm.reset()
    browse.llm.enqueue_text("It may have gone through; please check.")
    browse.daemon.start()
    notice = browse.wait_text("Outcome unknown")
    assert "browser_submit" in notice["plain_text"]
    browse.wait_text("please check")
    browse.daemon.wait_for_instances(1)
    assert len(browse.site.posted("/hold")) == 1  # once, never again


@pytest.fixture
def open_web(tmp_path: Path) -> Iterator[Stack]:
    """Two servers the browser may reach (stand-ins for two public sites: `[browser]
    allowed_hosts` only lets its proxy reach loopback at all, it is no approval rule), and
    fetch_url allowed loopback for the same reason."""
    ws = reachable_dir()
    try:
        with (
            FakeTelegram.running() as tg,
            FakeAnthropic.running() as llm,
            FakeSite.running() as site,
            FakeSite.running() as evil,
        ):
            reachable = ", ".join(f'"{s.url("/").split("/")[2]}"' for s in (site, evil))
            (tmp_path / "agentd.toml").write_text(
                "[tools]\napproval_timeout = 60\n\n"
                '[tools.fetch]\nallowed_hosts = ["127.0.0.1"]\n\n'
                f'[tools.workspace]\npath = "{ws}"\n\n'
                "[browser]\nenabled = true\npage_timeout = 20.0\n"
                f"allowed_hosts = [{reachable}]\n"
            )
            env = daemon_env(
                tmp_path,
                tg.base_url,
                llm.base_url,
                AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
                AGENTD_CHAT__STREAMING="false",
            )
            with running_daemon(tmp_path, env) as daemon:
                yield Stack(tg, llm, site, evil, daemon)
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def test_a_fetch_host_rule_never_lets_the_browser_follow_its_redirect_unasked(
    open_web: Stack,
) -> None:
    """The owner pressed "Always allow" for a site on a fetch_url card in a tainted turn. The
    rule lets fetch_url read the site (its open redirect held on the host), but the browser,
    which would follow that redirect anywhere, asks; denied, the other server sees nothing.
    In an untainted turn the rule changes nothing: the browser opens the site unasked."""
    web = open_web
    article = web.site.page("/b-article", "<p>An article.</p>")
    web.site.page("/b-second", "<p>Second.</p>")
    leak = web.evil.url("/collect-browser?pin=4711")
    bounce = web.site.url("/go?to=") + quote(leak, safe="")
    web.script(
        "bmark",
        ("toolu_b1", tool_use("fetch_url", {"url": article}, "toolu_b1")),
        ("toolu_b2", tool_use("fetch_url", {"url": web.site.url("/b-second")}, "toolu_b2")),
        ("toolu_b3", tool_use("fetch_url", {"url": bounce}, "toolu_b3")),
        ("toolu_b4", tool_use("browser_open", {"url": bounce}, "toolu_b4")),
        ("", "Browser done."),
    )
    before = web.cards_so_far()
    web.tg.add_message(OWNER, OWNER, f"bmark: read {article}")
    web.press(web.card(before, "fetch_url"), 1, 0)  # "Always allow" the site
    card = web.card(before, "browser_open")
    # fetch_url ran unasked under the rule, its redirect held on the host…
    assert web.site.requests.count("/go") == 1
    # …and the browser asks, saying why the rule does not cover it, offering no rule itself.
    assert "covers fetch_url, not the browser" in card["plain_text"]
    assert len(card["reply_markup"]["inline_keyboard"]) == 1
    assert web.evil.requests == []
    web.press(card, 0, 1)  # deny
    web.answer(OWNER, "Browser done.")
    assert web.evil.requests == [] and web.site.requests.count("/go") == 1

    # A fresh window: nothing outside in view, so the browser opens the site unasked, as before.
    web.tg.add_message(OWNER, OWNER, "/new")
    plain = web.site.page("/b-plain", "<p>Plain.</p>")
    web.script(
        "cmark",
        ("toolu_c1", tool_use("browser_open", {"url": plain}, "toolu_c1")),
        ("", "Plain done."),
    )
    before = web.cards_so_far()
    web.tg.add_message(OWNER, OWNER, "cmark: open the plain page of the site")
    web.answer(OWNER, "Plain done.")
    assert "/b-plain" in web.site.requests
    assert [m for m in web.sent(OWNER)[before:] if m["reply_markup"]] == []
