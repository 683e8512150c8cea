"""The browser tools and how much each may do without asking.

Reading (`browser_open`, `browser_read`, `browser_scroll`) is low risk and taints the turn:
every page is outside content. Once the turn is tainted, every action that can change
something on a site asks the owner with a card showing the page's URL, the element as it is
now, what will be typed or chosen, and a picture of the page: typing, choosing, ticking,
clicking anything but a plain link to a site the user named, submitting and downloading. A
submission is always carded and never offers "Always allow". In a tainted turn the browser
opens unasked only a URL the user wrote; a host rule (a fetch card's "Always allow") does not
cover it (see `navigation_risk`). Every action is an at-most-once step: after a crash during
one the owner is told "outcome unknown", and a resumed turn finds its page gone rather than
submitting what was typed before the crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from agentd.browser import actions
from agentd.browser.pages import Element, host_of, render
from agentd.browser.profiles import ProfileError
from agentd.browser.service import BrowserError, BrowserService, Session
from agentd.chat.outfiles import OutgoingFile
from agentd.hands.files import Workspaces, not_in_groups
from agentd.tools.base import ApprovalCard, Assessment, CallState, Tool, ToolContext, mark_untrusted
from agentd.tools.policy import OUTSIDE_REASON
from agentd.tools.toolset import Toolset
from agentd.tools.urls import url_host

Ref = Annotated[
    str,
    Field(
        pattern=r"^[0-9]{1,7}-[0-9]{1,4}$",
        description="An element's number as the page listing shows it, e.g. 3-12",
    ),
]


class OpenArgs(BaseModel):
    url: str = Field(max_length=4096, description="The http or https URL to open")
    profile: str = Field(
        default="",
        max_length=32,
        description="A profile the owner saved for this site (signed in); empty: a fresh one",
    )


class RefArgs(BaseModel):
    ref: Ref


class TypeArgs(BaseModel):
    ref: Ref
    text: str = Field(max_length=4000, description="What to type (replaces the field's text)")


class SelectArgs(BaseModel):
    ref: Ref
    option: str = Field(max_length=300, description="The option's visible text")


class ScrollArgs(BaseModel):
    direction: Literal["down", "up"] = "down"


class TabArgs(BaseModel):
    tab: int = Field(ge=1, le=10_000)


class ShotArgs(BaseModel):
    full_page: bool = False


def _lookup(service: BrowserService, ref: str) -> tuple[Session, Element] | None:
    for found in service.sessions.values():
        if ref in found.refs:
            return found, found.refs[ref]
    return None


def _named_hosts(state: CallState) -> set[str]:
    # Only the user's own words name a site for the browser: a host rule is not among them
    # (see navigation_risk).
    return {url_host(u) for u in state.user_urls}


def _rule_note(host: str, state: CallState) -> str:
    """Why a host the owner allowed still asks here, said on the card (early in the reason:
    the card cuts a long one)."""
    if host not in state.allowed_hosts:
        return ""
    return (
        f"; your rule for {host} covers fetch_url, not the browser, which follows redirects "
        "and runs the page's scripts"
    )


def navigation_risk(url: str, state: CallState) -> Assessment | None:
    """In a tainted turn the browser opens unasked only a URL the user wrote, byte for byte.

    A host rule ("Always allow <host>" on a fetch card) does not cover the browser: the owner
    trusted that server with what a URL carries on a card showing a fetch, whose redirects
    are held on the host (tools/fetch.py). Chromium follows the host's open redirect to any
    server and runs its pages' scripts, which may send the URL anywhere: that is not what
    the card showed. The card offers no "Always allow" either, since a rule would not apply.
    """
    if not state.tainted_by or url in state.user_urls:
        return None
    why = _rule_note(url_host(url), state) or (
        ": its redirects and the page's scripts could carry data in it anywhere"
    )
    # The sources last: the card cuts a long reason, and they are the least of it.
    sources = ", ".join(state.tainted_by[:3])
    return Assessment(
        risk="high",
        reason=f"{OUTSIDE_REASON} and the model wants the browser to open a URL you did not "
        f"write yourself{why} (from {sources})",
    )


def assess_click(service: BrowserService) -> Any:
    """A plain link to a site the user named is a read; anything else clicked in a tainted
    turn asks (the tool's `egress`). A host rule makes no link a read, and no browser card
    offers "Always allow" (see navigation_risk)."""

    def assess(args: RefArgs, state: CallState) -> Assessment | None:
        known = _lookup(service, args.ref)
        if known is None or not state.tainted_by:
            return None
        el = known[1]
        if el.kind != "link" or el.download or not el.href.startswith(("http://", "https://")):
            return None
        host = url_host(el.href)
        if host and host in _named_hosts(state):
            return Assessment(risk="low", reason=f"a link to {host}", egress=False)
        return Assessment(
            risk="high",
            reason=f"{OUTSIDE_REASON} and the link leads to {host or 'elsewhere'}, "
            "a site you did not name: following a link a page shows can send data out"
            f"{_rule_note(host, state)}",
        )

    return assess


def assess_type(service: BrowserService) -> Any:
    """A password field is refused by the tool itself: no card asks the owner to approve a
    call that cannot run (the owner signs in from the dashboard or `agentd browser login`)."""

    def assess(args: TypeArgs, state: CallState) -> Assessment | None:
        known = _lookup(service, args.ref)
        if known is not None and known[1].password:
            return Assessment(risk="low", reason="a password field: refused", egress=False)
        return None

    return assess


def assess_open(args: OpenArgs, state: CallState) -> Assessment | None:
    verdict = navigation_risk(args.url, state)
    if args.profile and (verdict is None or verdict.risk != "high"):
        return Assessment(risk="medium", reason=f"opens the owner's profile {args.profile!r}")
    return verdict


def _preview(service: BrowserService, verb: str) -> Any:
    async def preview(ctx: ToolContext, args: Any) -> ApprovalCard:
        found = await service.session(ctx.instance_id)
        target = await actions.element(service, found, args.ref)
        loc, el = target.locator, target.read
        lines = [f"page: {found.page.url}", f"{verb}: {el.shown()}"]
        if isinstance(args, TypeArgs):
            lines.append(f"will type: {args.text!r}")
            lines.append("the page's scripts can read what is typed and send it anywhere")
        if isinstance(args, SelectArgs):
            lines.append(f"will choose: {args.option!r}")
        if found.profile:
            lines.append(f"signed in with the owner's profile {found.profile!r}")
        image = ""
        if ctx.outgoing_dir:
            try:
                await loc.scroll_into_view_if_needed(timeout=2000)
            except Exception:
                pass  # the picture shows where the page is; the text names the element
            data = await actions.screenshot(service, found)
            name = f"card-{ctx.tool_use_id or ctx.instance_id}.png"
            image = await asyncio.to_thread(_keep_picture, Path(ctx.outgoing_dir), name, data)
        return ApprovalCard(text="\n".join(ctx.redact(line) for line in lines), image=image)

    return preview


def _keep_picture(folder: Path, name: str, data: bytes) -> str:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    os.chmod(path, 0o600)
    return str(path)


def _page(found: Session, text: str) -> str:
    return mark_untrusted(text, found.page.url)


def browser_tools(
    service: BrowserService, spaces: Workspaces, *, owner_id: int | None
) -> list[Tool]:
    """The browser's tools over one service; downloads go to the caller's workspace."""
    kit = Toolset(
        "builtin",
        timeout=service.config.page_timeout * 2 + 15,
        guard=not_in_groups,
        errors=(BrowserError, ProfileError),
        # A browse takes a call per field, choice and submission: a turn that used the
        # browser may take [browser] max_steps calls where a plain turn stops at [llm]'s.
        steps=service.config.max_steps,
    )
    downloads = dataclasses.replace(spaces, max_bytes=service.config.download_max_mb << 20)
    _reading(kit, service, owner_id)
    _acting(kit, service)
    _files(kit, service, downloads)
    return kit.tools()


def _reading(kit: Toolset, service: BrowserService, owner_id: int | None) -> None:
    @kit.tool(name="browser_open", risk="low", taints=True, assess=assess_open)
    async def browser_open(ctx: ToolContext, args: OpenArgs) -> str:
        """Open a URL in a real browser (runs the page's JavaScript) and read it: its text,
        then its links, buttons and fields numbered like [3-12] for the other browser tools.
        Use it for pages fetch_url reads empty. Private network addresses are refused."""
        if args.profile and ctx.user_id != owner_id:
            raise BrowserError("only the owner's own turns may use a saved browser profile")
        found = await service.open_session(ctx.instance_id, args.profile, host_of(args.url))
        snap = await actions.open_url(service, found, args.url)
        return _page(found, render(snap, service.config.max_text_chars))

    @kit.tool(name="browser_read", risk="low", taints=True)
    async def browser_read(ctx: ToolContext) -> str:
        """Read the browser's current page again (after it changed by itself)."""
        found = await service.session(ctx.instance_id)
        return _page(found, await actions.read(service, found))

    @kit.tool(name="browser_scroll", risk="low", taints=True)
    async def browser_scroll(ctx: ToolContext, args: ScrollArgs) -> str:
        """Scroll the current page (for pages that load more as you scroll), then read it."""
        found = await service.session(ctx.instance_id)
        await actions.scroll(found, args.direction == "down")
        return _page(found, await actions.read(service, found))

    @kit.tool(name="browser_tab", risk="low", taints=True)
    async def browser_tab(ctx: ToolContext, args: TabArgs) -> str:
        """Switch to an open tab by the number a reading lists, and read it."""
        found = await service.session(ctx.instance_id)
        service.switch_tab(found, args.tab)
        return _page(found, await actions.read(service, found))


def _acting(kit: Toolset, service: BrowserService) -> None:
    @kit.tool(
        name="browser_click",
        risk="low",
        egress=True,
        taints=True,
        at_most_once=True,
        assess=assess_click(service),
        preview=_preview(service, "will click"),
    )
    async def browser_click(ctx: ToolContext, args: RefArgs) -> str:
        """Click a link or button by its number; returns the page after the click."""
        found = await service.session(ctx.instance_id)
        await actions.click(service, found, args.ref)
        return _page(found, await actions.read(service, found))

    @kit.tool(
        name="browser_type",
        risk="low",
        egress=True,
        at_most_once=True,
        assess=assess_type(service),
        preview=_preview(service, "will type into"),
    )
    async def browser_type(ctx: ToolContext, args: TypeArgs) -> str:
        """Type text into a text field by its number (never a password field). Nothing is
        sent until browser_submit."""
        found = await service.session(ctx.instance_id)
        el = await actions.type_text(service, found, args.ref, args.text)
        return f"Typed {len(args.text)} characters into [{args.ref}] {el.kind} {el.text!r}."

    @kit.tool(
        name="browser_select",
        risk="low",
        egress=True,
        at_most_once=True,
        preview=_preview(service, "will choose in"),
    )
    async def browser_select(ctx: ToolContext, args: SelectArgs) -> str:
        """Choose an option of a drop-down list by its number and the option's text."""
        found = await service.session(ctx.instance_id)
        await actions.select(service, found, args.ref, args.option)
        return f"Chose {args.option!r} in [{args.ref}]."

    @kit.tool(
        name="browser_submit",
        risk="high",
        egress=True,
        taints=True,
        at_most_once=True,
        preview=_preview(service, "will submit the form of"),
    )
    async def browser_submit(ctx: ToolContext, args: RefArgs) -> str:
        """Submit a form: give its submit button's number, or any field of the form. Always
        asks the owner first. Returns the page that answered."""
        found = await service.session(ctx.instance_id)
        await actions.submit(service, found, args.ref)
        return _page(found, await actions.read(service, found))


def _files(kit: Toolset, service: BrowserService, spaces: Workspaces) -> None:
    @kit.tool(name="browser_screenshot", risk="low")
    async def browser_screenshot(ctx: ToolContext, args: ShotArgs) -> OutgoingFile:
        """Take a picture of the current page and send it to the user (when they ask to see
        the page)."""
        found = await service.session(ctx.instance_id)
        data = await actions.screenshot(service, found, args.full_page)
        return OutgoingFile(filename="page.png", data=data, caption=found.page.url[:1000])

    @kit.tool(
        name="browser_download",
        risk="low",
        egress=True,
        at_most_once=True,
        preview=_preview(service, "will download with"),
    )
    async def browser_download(ctx: ToolContext, args: RefArgs) -> str:
        """Download the file a link or button starts into the workspace's downloads folder
        (never replacing a file there). Its content is not read."""
        found = await service.session(ctx.instance_id)
        workspace = spaces.ensure(ctx.user_id)
        path, size = await actions.download(service, found, args.ref, workspace)
        return f"Saved {path} ({size} bytes) in the workspace."
