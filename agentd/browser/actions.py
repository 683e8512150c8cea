"""What the browser does for a tool call, on a turn's session: open, read, act, picture,
download. Every action finds its element again and refuses when the page changed it since
the model read it; waits are bounded; a page that stops answering is closed."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentd.browser.pages import Element, Snapshot, is_web_url, render, same_element
from agentd.browser.service import BrowserError, BrowserService, Session
from agentd.hands.workspace import Workspace, WorkspaceError
from agentd.runtime.redact import clip

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]+")
_SETTLE_SECONDS = 3.0  # after a click, how long a navigation it started may take to load


@dataclass(frozen=True)
class Target:
    """An element checked against what the model read: its locator and the frame it is in."""

    locator: Any
    read: Element
    frame: Any


async def element(service: BrowserService, found: Session, ref: str) -> Target:
    """The element `ref` names, checked against what the model read. A new action: the link
    clicked before it no longer names the window the model asked for."""
    found.asked = ""
    read = found.refs.get(ref)
    if read is None:
        raise BrowserError(
            f"there is no element [{ref}] on the page as last read; read the page again "
            "(browser_read) and use a number it shows"
        )
    try:
        seen = await asyncio.wait_for(service.describe(found, ref), service.config.action_timeout)
    except TimeoutError:
        raise BrowserError(
            f"the page did not answer within {service.config.action_timeout:g} s; read it again"
        ) from None
    except BrowserError:
        raise
    except Exception as exc:
        raise BrowserError(f"the element [{ref}] cannot be reached ({_short(exc)})") from None
    now = seen.element
    if (
        seen.count != 1
        or now is None
        or not same_element(read, now.model_copy(update={"ref": ref}))
    ):
        raise BrowserError(
            f"the page changed the element [{ref}] since it was read ({read.shown()}); read "
            "the page again before acting on it"
        )
    loc, frame = await service.locate(found, ref)
    return Target(loc, read, frame)


def _short(exc: BaseException) -> str:
    return clip(str(exc).splitlines()[0], 200) if str(exc) else type(exc).__name__


async def navigating(frame: Any, action: Callable[[], Awaitable[Any]], seconds: float) -> None:
    """Run `action`, then let the navigation it starts in `frame` reach its load event, waiting
    at most `seconds` (an action that navigates nowhere costs that wait; its own errors go
    on, unless it closed the page)."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as NoNavigation

    try:
        async with frame.expect_navigation(wait_until="load", timeout=seconds * 1000):
            await action()
    except NoNavigation:
        pass
    except PlaywrightError as exc:
        if frame.page.is_closed():
            return  # the action closed the window (window.close()): the reading says so
        if "Navigating frame was detached" not in str(exc):
            raise
        # A frame's link or form led the whole page away (target=_top): the page's load.
        with contextlib.suppress(PlaywrightError):
            await frame.page.wait_for_load_state("load", timeout=seconds * 1000)


async def read(service: BrowserService, found: Session) -> str:
    snap = await service.snapshot(found)
    return render(snap, service.config.max_text_chars)


async def open_url(service: BrowserService, found: Session, url: str) -> Snapshot:
    if not is_web_url(url):
        raise BrowserError(
            f"{url[:100]!r} is not an http(s) URL; the browser opens web pages only (not "
            "file:, chrome:, view-source: or data: ones)"
        )
    from playwright.async_api import TimeoutError as NotLoaded

    found.asked = ""
    try:
        response = await found.page.goto(url, wait_until="load")
    except NotLoaded:
        # A page that never finishes loading (a body that never ends, a script in a dialog
        # loop): what arrived is read; a page too busy to answer is closed by the read, so
        # the turn's next page opens in a fresh one.
        snap = await service.snapshot(found)
        return snap.model_copy(update={"unfinished": service.config.page_timeout})
    except Exception as exc:
        raise BrowserError(f"could not open {url}: {_short(exc)}") from None
    if response is not None and response.status == 403:
        text = await response.text()
        if "agentd:" in text:
            raise BrowserError(f"{url}: {text.split('agentd:', 1)[1].split('<', 1)[0].strip()}")
    return await service.snapshot(found)


async def click(service: BrowserService, found: Session, ref: str) -> None:
    """Click `ref`. A window opening at the address of the link clicked is the one the model
    asked for, and becomes the current page; any other a page opens is listed as a tab."""
    target = await element(service, found, ref)
    found.asked = target.read.href if target.read.kind == "link" else ""
    try:
        await navigating(target.frame, target.locator.click, _SETTLE_SECONDS)
    except Exception as exc:
        raise BrowserError(f"could not click [{ref}]: {_short(exc)}") from None


async def type_text(service: BrowserService, found: Session, ref: str, text: str) -> Element:
    target = await element(service, found, ref)
    loc, read_as = target.locator, target.read
    if read_as.password:
        raise BrowserError(
            "agentd never types into a password field: the owner signs in to a site "
            "themselves (the dashboard's Browser page, or `agentd browser login`), and a "
            "password the model read is never used"
        )
    if read_as.kind not in ("input", "textarea"):
        raise BrowserError(f"[{ref}] is a {read_as.kind}, not a text field")
    try:
        await loc.fill(text)
    except Exception as exc:
        raise BrowserError(f"could not type into [{ref}]: {_short(exc)}") from None
    return read_as


async def select(service: BrowserService, found: Session, ref: str, option: str) -> None:
    target = await element(service, found, ref)
    loc, read_as = target.locator, target.read
    if read_as.kind != "select":
        raise BrowserError(f"[{ref}] is a {read_as.kind}, not a list to choose from")
    try:
        await loc.select_option(label=option)
    except Exception as exc:
        raise BrowserError(f"could not choose {option!r} in [{ref}]: {_short(exc)}") from None


async def submit(service: BrowserService, found: Session, ref: str) -> None:
    """Click a submit button, or submit a field's form from agentd's own world (a page's
    rewritten `requestSubmit` is not the one called)."""
    target = await element(service, found, ref)
    read_as = target.read
    if read_as.kind == "submit":
        action = target.locator.click
    elif read_as.form_action:

        async def action() -> None:
            await service.submit_form(found, ref)
    else:
        raise BrowserError(f"[{ref}] is not in a form and not a submit button")
    try:
        await navigating(target.frame, action, service.config.page_timeout)
    except BrowserError:
        raise
    except Exception as exc:
        raise BrowserError(f"could not submit with [{ref}]: {_short(exc)}") from None


async def scroll(found: Session, down: bool) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(found.page.mouse.wheel(0, 800 if down else -800), timeout=5)
    with contextlib.suppress(Exception):
        await found.page.wait_for_load_state("load", timeout=1000)


async def screenshot(service: BrowserService, found: Session, full: bool = False) -> bytes:
    try:
        return await asyncio.wait_for(
            found.page.screenshot(type="png", full_page=full), service.config.action_timeout
        )
    except Exception as exc:
        raise BrowserError(f"could not take a picture of the page: {_short(exc)}") from None


async def download(
    service: BrowserService, found: Session, ref: str, workspace: Workspace
) -> tuple[str, int]:
    """Click `ref`, take the file it starts, and save it under downloads/ (never replacing a
    file there); returns its path in the workspace and its size."""
    loc = (await element(service, found, ref)).locator
    limit = service.config.download_max_mb << 20
    # The service keeps only the download this click starts, and cancels it past the limit.
    found.fetching, found.cancelled = True, ""
    try:
        async with found.page.expect_download(timeout=service.config.page_timeout * 1000) as info:
            await loc.click()
        started = await info.value
        staged = Path(await started.path())
    except Exception as exc:
        why = found.cancelled or f"[{ref}] started no download: {_short(exc)}"
        raise BrowserError(why) from None
    finally:
        found.fetching = False
    if found.cancelled:
        raise BrowserError(found.cancelled)
    try:
        size = (await asyncio.to_thread(staged.stat)).st_size
        if size > limit:
            raise BrowserError(
                f"the download is {size >> 20} MB, over [browser] download_max_mb; not saved"
            )
        data = await asyncio.to_thread(staged.read_bytes)
        name = _UNSAFE_NAME.sub("_", started.suggested_filename).strip(". ")[:120] or "download"
        return await asyncio.to_thread(_save, workspace, name, data), size
    finally:
        with contextlib.suppress(Exception):
            await started.delete()


def _save(workspace: Workspace, name: str, data: bytes) -> str:
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    for n in range(1, 100):
        candidate = name if n == 1 else f"{stem} ({n}){dot}{ext}"
        try:
            workspace.write(f"downloads/{candidate}", data, overwrite=False)
        except WorkspaceError as exc:
            if "already exists" in str(exc):
                continue
            raise BrowserError(str(exc)) from None
        return f"downloads/{candidate}"
    raise BrowserError("downloads/ holds 99 files of that name; remove some")
