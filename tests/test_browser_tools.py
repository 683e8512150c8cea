"""The browser tools' rules, on their real declarations (no browser started): which calls ask
in a tainted turn and which do not, that a fetch's host rule makes no browser navigation a
read, that a submission never offers "Always allow", that a
password field is refused without a card, that an element the page changed is not acted on,
and the proxy's allowlist with ports."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

import pytest

from agentd.browser import profiles
from agentd.browser.pages import Element, Snapshot, render, same_element
from agentd.browser.proxy import Allowlist, split_host_port
from agentd.browser.service import STAGING, BrowserService, Paths, Session, remove_stale_staging
from agentd.browser.tools import browser_tools
from agentd.config import BrowserConfig
from agentd.hands.files import Workspaces
from agentd.net.safe_fetch import FetchPolicy
from agentd.tools import CallState, Tool, ToolDeclarationError, call_risk, tool
from agentd.tools.base import ApprovalCard
from agentd.tools.fetch import fetch_url_tool

SITE = "http://shop.example.org/cart"
TAINTED = CallState(
    tainted_by=("browser_open (http://shop.example.org/cart)",), user_urls=frozenset({SITE})
)


def _ignored(values: list[str]) -> None:
    """No redactor: these tests never load a profile."""


async def _never(ids: list[str]) -> set[str]:
    return set()


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Tool]:
    service = BrowserService(
        BrowserConfig(enabled=True), Paths(tmp_path, tmp_path / "run"), _never, learn=_ignored
    )
    session = Session("turn-1", context=None, page=None)
    session.refs = {
        "1-1": Element(
            ref="1-1", tag="a", kind="link", text="Next", href="http://shop.example.org/p2"
        ),
        "1-2": Element(ref="1-2", tag="a", kind="link", text="Deal", href="http://evil.example/x"),
        "1-3": Element(
            ref="1-3", tag="button", kind="submit", text="Pay", form_action=SITE, form_method="post"
        ),
        "1-4": Element(
            ref="1-4", tag="input", kind="input", type="password", text="Password", password=True
        ),
        "1-5": Element(ref="1-5", tag="input", kind="input", text="Name", form_action=SITE),
    }
    service.sessions["turn-1"] = session
    spaces = Workspaces(tmp_path, frozenset(), 1000, 1.0, None)
    return {t.name: t for t in browser_tools(service, spaces, owner_id=42)}


def _risk(
    tools: dict[str, Tool], name: str, state: CallState = TAINTED, **args: object
) -> tuple[str, str]:
    found = tools[name]
    verdict = call_risk(found, found.parse_args(dict(args)), state)
    return verdict.risk, verdict.allow_host


def test_a_staging_folder_a_killed_daemon_left_is_removed_and_a_live_ones_kept(
    tmp_path: Path,
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = tmp_path / f"{STAGING}{gone.pid}-abc"
    mine = tmp_path / f"{STAGING}{os.getpid()}-def"
    other = tmp_path / f"{STAGING}test-ghi"  # not a daemon's: no pid in its name
    for folder in (stale, mine, other):
        (folder / "part").mkdir(parents=True)
    assert remove_stale_staging(tmp_path) == [stale]
    assert not stale.exists() and mine.exists() and other.exists()


def test_a_turn_that_browses_may_take_the_browsers_step_allowance(
    tools: dict[str, Tool],
) -> None:
    assert {t.steps for t in tools.values()} == {BrowserConfig().max_steps} == {15}


def test_reading_is_low_and_taints(tools: dict[str, Tool]) -> None:
    for name in ("browser_open", "browser_read", "browser_scroll", "browser_tab"):
        assert tools[name].taints and tools[name].risk == "low"
    assert _risk(tools, "browser_open", url=SITE) == ("low", "")
    # A URL the user did not write, in a tainted turn, asks as fetch_url does.
    assert _risk(tools, "browser_open", url="http://evil.example/?q=secret")[0] == "high"


def test_a_link_to_the_users_site_is_a_read_and_one_elsewhere_asks(tools: dict[str, Tool]) -> None:
    assert _risk(tools, "browser_click", ref="1-1") == ("low", "")
    # No "Always allow": a host rule would not make the browser's next click a read.
    assert _risk(tools, "browser_click", ref="1-2") == ("high", "")


def test_a_fetch_host_rule_makes_no_browser_navigation_a_read_in_a_tainted_turn(
    tools: dict[str, Tool],
) -> None:
    """A host rule was pressed on a fetch card, whose redirects stay on the host; the browser
    follows them anywhere and runs the page's scripts, so it asks, and the card says why."""
    ruled = CallState(
        tainted_by=TAINTED.tainted_by,
        user_urls=TAINTED.user_urls,
        allowed_hosts=frozenset({"evil.example", "shop.example.org"}),
    )
    bounce = "http://evil.example/go?to=http%3A%2F%2Fcollector.example%2F%3Fpin%3D4711"
    opener = tools["browser_open"]
    opened = call_risk(opener, opener.parse_args({"url": bounce}), ruled)
    assert (opened.risk, opened.allow_host) == ("high", "")
    assert "your rule for evil.example covers fetch_url, not the browser" in opened.reason
    assert _risk(tools, "browser_click", ruled, ref="1-2") == ("high", "")
    # The rule still lets fetch_url read the host: its redirects are held there.
    fetch = fetch_url_tool(FetchPolicy())
    assert _risk({"fetch_url": fetch}, "fetch_url", ruled, url=bounce) == ("low", "")
    # The user's own words still open unasked, the rule or not.
    assert _risk(tools, "browser_open", ruled, url=SITE) == ("low", "")
    assert _risk(tools, "browser_click", ruled, ref="1-1") == ("low", "")


def test_an_untainted_turn_browses_unasked_with_or_without_a_host_rule(
    tools: dict[str, Tool],
) -> None:
    for state in (CallState(), CallState(allowed_hosts=frozenset({"evil.example"}))):
        assert _risk(tools, "browser_open", state, url="http://evil.example/page") == ("low", "")
        assert _risk(tools, "browser_click", state, ref="1-2") == ("low", "")


def test_every_change_asks_once_tainted_and_a_submission_never_offers_always_allow(
    tools: dict[str, Tool],
) -> None:
    assert _risk(tools, "browser_click", ref="1-3") == ("high", "")
    assert _risk(tools, "browser_type", ref="1-5", text="Ann") == ("high", "")
    assert _risk(tools, "browser_select", ref="1-5", option="x") == ("high", "")
    assert _risk(tools, "browser_download", ref="1-1") == ("high", "")
    assert _risk(tools, "browser_submit", ref="1-3") == ("high", "")
    # Untainted, a submission still asks; it is at most once like every action.
    assert _risk(tools, "browser_submit", CallState(), ref="1-3") == ("high", "")
    for name in (
        "browser_click",
        "browser_type",
        "browser_select",
        "browser_submit",
        "browser_download",
    ):
        assert tools[name].at_most_once and tools[name].preview is not None, name


def test_a_password_field_is_refused_without_a_card(tools: dict[str, Tool]) -> None:
    assert _risk(tools, "browser_type", ref="1-4", text="hunter2") == ("low", "")


def test_refs_are_checked_before_the_tool_runs(tools: dict[str, Tool]) -> None:
    from agentd.tools.base import InvalidArguments

    with pytest.raises(InvalidArguments):
        tools["browser_click"].parse_args({"ref": '1-1"] , body'})


def test_an_element_the_page_changed_is_not_the_one_read() -> None:
    read = Element(ref="1-3", tag="button", kind="submit", text="Cancel", form_action=SITE)
    assert same_element(read, read.model_copy())
    assert not same_element(read, read.model_copy(update={"text": "Pay 500 EUR"}))
    assert not same_element(read, read.model_copy(update={"form_action": "http://evil.example/"}))


def test_the_page_is_capped_for_the_model() -> None:
    shown = render(Snapshot(url=SITE, title="t", text="x" * 50_000), 1000)
    assert "[Truncated" in shown and len(shown) < 1300


def test_a_preview_must_be_async() -> None:
    def not_async(ctx: object, args: object) -> ApprovalCard:
        return ApprovalCard(text="")

    with pytest.raises(ToolDeclarationError, match="preview must be an async"):

        @tool(preview=not_async)  # type: ignore[arg-type]
        async def shown(ctx: object) -> str:
            """A tool."""
            return ""


def test_the_proxy_allowlist_names_ports() -> None:
    assert split_host_port("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert split_host_port("[::1]:81") == ("::1", 81)
    assert split_host_port("10.0.0.0/8") == ("10.0.0.0/8", None)
    allow = Allowlist.of(["127.0.0.1:8080", "nas.lan", "10.1.0.0/16"])
    loop = ipaddress.ip_address("127.0.0.1")
    assert allow.refusal("127.0.0.1", 8080, loop) is None
    assert allow.refusal("127.0.0.1", 8081, loop) is not None
    assert allow.refusal("nas.lan", 443, ipaddress.ip_address("192.168.1.5")) is None
    assert allow.refusal("x", 80, ipaddress.ip_address("10.1.2.3")) is None
    metadata = allow.refusal("m", 80, ipaddress.ip_address("169.254.169.254"))
    assert metadata is not None and "metadata" in metadata


class _Context:
    """What a turn's browser context gives back when it closes: its cookies."""

    def __init__(self, cookie: str) -> None:
        self.cookie = cookie
        self.closed = False

    async def storage_state(self) -> dict[str, object]:
        return {"cookies": [{"name": "sid", "value": self.cookie}], "origins": []}

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("meanwhile", ["signed_in_again", "removed", "nothing"])
async def test_a_turn_never_overwrites_a_profile_changed_while_it_ran(
    tmp_path: Path, meanwhile: str
) -> None:
    """The owner signs in again (or removes the profile) while a turn still browses with the
    old one: the turn's older cookies must not replace the fresh sign-in (nor bring back a
    removed profile); untouched, the turn keeps what it did."""
    site = "shop.example.org"
    profiles.save(tmp_path, "shop", site, {"cookies": [{"name": "sid", "value": "v1"}]}, 100.0)
    service = BrowserService(
        BrowserConfig(enabled=True), Paths(tmp_path, tmp_path / "run"), _never, learn=_ignored
    )
    context = _Context("from-the-turn")
    service.sessions["turn-1"] = Session(
        "turn-1", context, None, profile="shop", site=site, loaded_at=100.0
    )
    if meanwhile == "signed_in_again":
        fresh = {"cookies": [{"name": "sid", "value": "fresh"}]}
        profiles.save(tmp_path, "shop", site, fresh, 200.0)
    elif meanwhile == "removed":
        profiles.remove(tmp_path, "shop")
    await service._close_session("turn-1")
    assert context.closed
    if meanwhile == "removed":
        assert profiles.saved_at(tmp_path, "shop") is None
        return
    cookie = profiles.load(tmp_path, "shop")[1]["cookies"][0]["value"]
    assert cookie == {"signed_in_again": "fresh", "nothing": "from-the-turn"}[meanwhile]
