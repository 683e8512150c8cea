"""End to end (`agentd run`, the real clients): watches stay quiet, cheap and loud on failure.

A watch on a local page (the safe fetch, the real aiohttp client) checks every second; the fake
Anthropic server counts the model calls each watch made (its label is in the request). Waits
are on the checks the database records, never on a fixed sleep.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentd.chat.names import chat_key
from tests.daemon_process import OWNER, Daemon, daemon_env, poll, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.site import FakeSite

CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools"]
approval_timeout = 60

[tools.fetch]
allowed_hosts = ["127.0.0.1"]

[schedule]
# A check a loaded test machine starts a second late still runs (what is tested is the
# count of checks and calls, not punctuality).
on_time_window = 5

[watch]
min_interval = 1
failures_to_tell = 3
"""


def verdict(speak: bool, message: str = "", reason: str = "") -> list[dict[str, Any]]:
    answer = {"speak": speak, "message": message, "reason": reason or "test"}
    return [{"type": "tool_use", "id": "toolu_v", "name": "watch_verdict", "input": answer}]


class Stack:
    """The daemon, its fakes and a page site; the model answers each watch by its label: the
    first rule whose text is in the shown source decides."""

    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, site: FakeSite, d: Daemon) -> None:
        self.tg, self.llm, self.site, self.daemon = tg, llm, site, d
        self.rules: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
        self.scripts: dict[str, list[tuple[str, Any]]] = {}
        llm.set_responder(self._respond)

    def _respond(self, body: dict[str, Any]) -> Any:
        text = json.dumps(body["messages"])
        if body.get("tool_choice", {}).get("name") == "watch_verdict":
            for label, rules in self.rules.items():
                if f"Watch: {label}" in text:
                    return next((reply for needle, reply in rules if needle in text), None)
        done = {
            b.get("tool_use_id")
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
        }
        for marker, steps in self.scripts.items():
            if marker in text:
                # (tool_use id, reply): each given until its id has a result ("" last).
                return next((reply for use_id, reply in steps if use_id not in done), None)
        return None

    def page(self, path: str, text: str, status: int = 200) -> str:
        return self.site.page(path, f"<h1>Shop</h1><p>{text}</p>", title="Shop", status=status)

    def add(self, label: str, url: str, *args: str) -> dict[str, Any]:
        return self.daemon.cli_json(
            "watch", "add", "--label", label, "--url", url, "--every", "1s", *args
        )

    def checks(self, wid: str) -> list[tuple[str, int]]:
        rows = self.daemon.query(
            "SELECT outcome, tokens FROM watch_checks WHERE watch_id = ? ORDER BY due", (wid,)
        )
        return [(r[0], r[1]) for r in rows]

    def wait_checks(self, wid: str, n: int, timeout: float = 60) -> list[tuple[str, int]]:
        return poll(lambda: len(c := self.checks(wid)) >= n and c, timeout, f"{n} checks")

    def calls(self, label: str) -> int:
        return sum(
            1
            for r in self.llm.requests
            if f"Watch: {label}" in json.dumps(r["body"]["messages"])
            and r["body"].get("tool_choice", {}).get("name") == "watch_verdict"
        )

    def sent(self, needle: str = "") -> list[str]:
        texts = [m["plain_text"] for m in self.tg.sent if m["chat_id"] == OWNER]
        return [t for t in texts if needle in t]

    def wait_sent(self, needle: str, n: int = 1, timeout: float = 60) -> list[str]:
        return self.tg.wait_until(
            lambda: len(s := self.sent(needle)) >= n and s, timeout, f"{n} × {needle!r}"
        )

    def stop(self, wid: str) -> None:
        """Pause the watch and let its last check finish: nothing more can come of it."""
        self.daemon.cli_json("watch", "pause", wid)
        self.daemon.wait_idle(f"watch-{wid}")


@contextmanager
def stack_of(tmp: Path) -> Iterator[Stack]:
    (tmp / "agentd.toml").write_text(CONFIG)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm, FakeSite.running() as site:
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_CHAT__STREAMING="false",
        )
        tg.add_chat(OWNER)  # the owner has started the bot: it may write to them
        with running_daemon(tmp, env) as daemon:
            yield Stack(tg, llm, site, daemon)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of(tmp_path_factory.mktemp("watch")) as s:
        yield s


def test_a_page_that_changes_once_in_ten_ticks_costs_one_call_and_one_message(
    stack: Stack,
) -> None:
    s = stack
    url = s.page("/camera", "Fuji X100: 250 EUR")
    s.rules["camera"] = [
        ("180 EUR", verdict(True, "The Fuji X100 is down to 180 EUR.")),
        ("EUR", verdict(False, reason="not under 200")),
    ]
    added = s.add("camera", url, "--if", "the price drops under 200")
    wid = added["id"]
    # Before the first check: an estimate from the interval (86400 checks a day at 1 s).
    assert added["forecast"]["measured_checks"] == 0
    assert added["forecast"]["checks_per_day"] == 86400
    # The first check reads the page as it is: the condition may hold already (it does not).
    assert s.wait_checks(wid, 1)[0][0] == "quiet"
    s.wait_checks(wid, 3)
    s.page("/camera", "Fuji X100: 180 EUR")
    s.wait_sent("🔔 camera")
    s.wait_checks(wid, 12)
    s.stop(wid)
    outcomes = s.checks(wid)
    ticks = [o for o in outcomes[1:] if o[0] != "missed"][:10]
    assert len(ticks) == 10
    assert [o for o, _ in ticks].count("told") == 1
    assert [o for o, _ in ticks].count("unchanged") == 9
    assert all(tokens == 0 for o, tokens in ticks if o == "unchanged")  # no model call
    assert s.calls("camera") == 2  # the first read, and the one change
    told = s.sent("🔔 camera")
    assert told == [f"🔔 camera: The Fuji X100 is down to 180 EUR.\n— watch {wid}, {url}"]
    # What it cost is the watch's, by its id, and measured from now on.
    shown = s.daemon.cli_json("watch", "show", wid)
    assert shown["stats"]["told"] == 1 and shown["stats"]["tokens"] > 0
    assert shown["forecast"]["measured_checks"] >= 11
    usage = s.daemon.cli_json("usage", "--schedule", wid)
    assert sum(day["calls"] for day in usage) == 2
    said = s.daemon.cli("usage", "--schedule", wid).stdout
    assert f"watch {wid}: " in said and "1 told" in said and "9 unchanged" not in said


def test_a_change_that_does_not_meet_the_condition_sends_nothing(stack: Stack) -> None:
    s = stack
    url = s.page("/tv", "TV: 900 EUR")
    s.rules["tv"] = [("EUR", verdict(False, reason="not under 500"))]
    wid = s.add("tv", url, "--if", "the price drops under 500")["id"]
    s.wait_checks(wid, 2)
    s.page("/tv", "TV: 850 EUR")
    poll(lambda: s.calls("tv") == 2, 30, "the change decided")
    s.wait_checks(wid, len(s.checks(wid)) + 2)
    s.stop(wid)
    outcomes = [o for o, _ in s.checks(wid)]
    assert outcomes.count("quiet") == 2 and "told" not in outcomes
    assert s.sent("tv") == []
    assert s.calls("tv") == 2  # the first read and the change; the same 850 again: none


def test_a_failing_source_is_told_once_with_the_reason(stack: Stack) -> None:
    s = stack
    url = s.page("/gone", "Status: fine")
    s.rules["status"] = [("Status", verdict(False))]
    wid = s.add("status", url, "--if", "the status is not fine")["id"]
    s.wait_checks(wid, 1)
    s.page("/gone", "down", status=503)
    s.wait_sent("⚠️ Watch")
    s.wait_checks(wid, len(s.checks(wid)) + 3)  # three more failures: nothing more is told
    assert len(s.sent("⚠️ Watch")) == 1
    [told] = s.sent("⚠️ Watch")
    assert "3 times in a row" in told and "HTTP 503" in told and wid in told
    s.page("/gone", "Status: fine")
    s.wait_sent("reads its source again")
    s.stop(wid)
    assert len(s.sent("⚠️ Watch")) == 1 and len(s.sent("reads its source again")) == 1


def test_a_watch_over_its_cap_pauses_and_says_so_once(stack: Stack) -> None:
    s = stack
    url = s.page("/stock", "Stock: 3 left")
    s.rules["stock"] = [("left", verdict(False))]
    # The first decision spends more than 10 tokens: the next change meets the cap.
    wid = s.add("stock", url, "--if", "it is sold out", "--daily-tokens", "10")["id"]
    s.wait_checks(wid, 1)
    s.page("/stock", "Stock: 2 left")
    s.wait_sent("⏸ Watch")
    requests_then = s.site.requests.count("/stock")
    s.page("/stock", "Stock: 1 left")
    s.wait_checks(wid, len(s.checks(wid)) + 3)
    s.stop(wid)
    [told] = s.sent("⏸ Watch")
    assert wid in told and "daily cap of 10 tokens" in told
    assert s.calls("stock") == 1  # nothing was decided past the cap
    assert s.site.requests.count("/stock") == requests_then  # held checks read nothing
    outcomes = [o for o, _ in s.checks(wid)]
    assert outcomes[0] == "quiet" and outcomes.count("capped") >= 3


def test_what_a_watch_told_taints_the_chat_so_a_fetch_asks_first(stack: Stack) -> None:
    s = stack
    url = s.page("/news", "Headline: calm day")
    planted = s.site.url("/exfil")
    s.rules["news"] = [
        ("Headline: storm", verdict(True, f"Storm warning. More at {planted}")),
        ("Headline", verdict(False)),
    ]
    wid = s.add("news", url, "--if", "there is a storm warning")["id"]
    s.wait_checks(wid, 1)
    s.page("/news", "Headline: storm warning")
    s.wait_sent("🔔 news")
    s.stop(wid)
    before = len(s.tg.sent)
    # The owner asks to follow the link the watch's message showed; the model fetches it.
    fetch = [{"type": "tool_use", "id": "toolu_f", "name": "fetch_url", "input": {"url": planted}}]
    s.scripts["open the storm link"] = [("toolu_f", fetch)]
    s.tg.add_message(OWNER, OWNER, "open the storm link please")
    card = s.tg.wait_until(
        lambda: next(
            (m for m in s.tg.sent[before:] if m["chat_id"] == OWNER and m["reply_markup"]), None
        ),
        60,
        "an approval card",
    )
    assert "fetch_url" in card["plain_text"] and "a watch on" in card["plain_text"]
    assert "/exfil" not in s.site.requests  # nothing left before the owner said yes
    deny = next(
        b["callback_data"]
        for row in card["reply_markup"]["inline_keyboard"]
        for b in row
        if "Deny" in b["text"]
    )
    s.tg.add_callback_query(OWNER, OWNER, card["message_id"], deny)
    s.daemon.wait_idle(chat_key(OWNER))
    assert "/exfil" not in s.site.requests


def test_kill9_during_a_check_records_the_tick_once(tmp_path: Path) -> None:
    with stack_of(tmp_path) as s:
        url = s.page("/ticket", "Tickets: sold out")
        s.rules["ticket"] = [
            ("Tickets: available", verdict(True, "Tickets are available.")),
            ("Tickets", verdict(False)),
        ]
        wid = s.add("ticket", url, "--if", "tickets are available")["id"]
        s.wait_checks(wid, 2)
        s.llm.hold()  # the decision about the change will be in flight when the process dies
        s.page("/ticket", "Tickets: available")
        s.llm.wait_for_held(1, timeout=30)
        checked = len(s.checks(wid))
        s.daemon.kill9()
        s.llm.release()
        s.daemon.start()
        s.wait_sent("🔔 ticket")
        s.wait_checks(wid, checked + 3)
        s.stop(wid)
        outcomes = [o for o, _ in s.checks(wid)]
        assert outcomes.count("told") == 1
        assert s.sent("🔔 ticket") == [f"🔔 ticket: Tickets are available.\n— watch {wid}, {url}"]
        # The tick in flight is one row: the one after the last recorded before the kill.
        assert outcomes[checked] == "told"
        parked = s.daemon.query(
            "SELECT COUNT(*) FROM workflow_instances WHERE key = ? AND status = 'errored'",
            (f"watch-{wid}",),
        )[0][0]
        assert parked == 0


def test_the_owner_adds_a_watch_in_chat_and_pauses_it_from_watches(stack: Stack) -> None:
    s = stack
    url = s.page("/lamp", "Lamp: sold out")
    s.rules["lamp"] = [("Lamp", verdict(False))]
    args = {
        "label": "lamp",
        "condition": "the lamp is back in stock",
        "source": {"kind": "page", "url": url},
        "every": "1h",
    }
    use = [{"type": "tool_use", "id": "toolu_w", "name": "watch_add", "input": args}]
    s.scripts["keep an eye on the lamp"] = [("toolu_w", use), ("", "I'm watching it.")]
    # What earlier watches told is outside content in this chat's window: a fresh context,
    # so adding a watch (a thing left behind, like a schedule) needs no card here.
    before = len(s.sent())
    s.tg.add_message(OWNER, OWNER, "/new")
    s.tg.wait_until(lambda: len(s.sent()) > before, 30, "the /new reply")
    before = len(s.sent())
    s.tg.add_message(OWNER, OWNER, f"keep an eye on the lamp at {url}")
    reply = s.tg.wait_until(
        lambda: next((t for t in s.sent()[before:] if "watching it" in t), None), 60, "a reply"
    )
    assert "watch_add" in reply  # medium risk: the reply says what was done
    result = next(
        str(b["content"])
        for r in s.llm.requests
        for m in r["body"]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("tool_use_id") == "toolu_w"
    )
    assert "Watching." in result and "24 checks a day" in result and "/month" in result
    [wid] = [w["id"] for w in s.daemon.cli_json("watch", "ls", "--json") if w["label"] == "lamp"]
    s.wait_checks(wid, 1)
    count = len(s.tg.sent)
    s.tg.add_message(OWNER, OWNER, "/watches")
    listing = s.tg.wait_until(
        lambda: next((m for m in s.tg.sent[count:] if m["reply_markup"]), None), 30, "/watches"
    )
    assert "lamp" in listing["plain_text"] and "1 checks" in listing["plain_text"]
    pause = next(
        b["callback_data"]
        for row in listing["reply_markup"]["inline_keyboard"]
        for b in row
        if b["text"] == f"Pause {wid}"
    )
    s.tg.add_callback_query(OWNER, OWNER, listing["message_id"], pause)
    poll(
        lambda: s.daemon.query("SELECT state FROM watches WHERE id = ?", (wid,))[0][0] == "paused",
        30,
        "the watch paused",
    )
    s.daemon.wait_idle(f"watch-{wid}")
    # /mute holds watch messages for this chat until the time it says; /mute off ends it.
    count = len(s.tg.sent)
    s.tg.add_message(OWNER, OWNER, "/mute 2h")
    muted = s.tg.wait_until(
        lambda: len(s.tg.sent) > count and s.tg.sent[-1]["plain_text"], 30, "the /mute reply"
    )
    assert "wait until" in muted and "none is lost" in muted
    until = s.daemon.query("SELECT until FROM watch_mutes WHERE chat_id = ?", (OWNER,))[0][0]
    assert 7100 < until - time.time() <= 7200
    count = len(s.tg.sent)
    s.tg.add_message(OWNER, OWNER, "/mute off")
    s.tg.wait_until(lambda: len(s.tg.sent) > count, 30, "the /mute off reply")
    assert s.daemon.query("SELECT COUNT(*) FROM watch_mutes")[0][0] == 0
