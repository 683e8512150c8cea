"""What the browser does for a tool call, on a turn's session: open, read, act, picture,
download. Every action finds its element again and refuses when the page changed it since
the model read it; waits are bounded; a page that stops answering is closed."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentd.browser.pages import Element, Snapshot, is_web_url, render, same_element
from agentd.browser.service import BrowserError, BrowserService, Session
from agentd.hands.workspace import Workspace, WorkspaceError

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]+")
_SETTLE_SECONDS = 3.0  # after a click, how long a navigation it started may take to load


async def element(service: BrowserService, found: Session, ref: str) -> tuple[Any, Element]:
    """The element `ref` names, checked against what the model read."""
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
    return service.locator(found, ref).first, read


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


async def navigating(found: Session, action: Callable[[], Awaitable[Any]], seconds: float) -> None:
    """Run `action`, then let the navigation it starts reach its load event, waiting at most
    `seconds` (an action that navigates nowhere costs that wait; its own errors go on)."""
    from playwright.async_api import TimeoutError as NoNavigation

    with contextlib.suppress(NoNavigation):
        async with found.page.expect_navigation(wait_until="load", timeout=seconds * 1000):
            await action()


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
    loc, _ = await element(service, found, ref)
    try:
        await navigating(found, loc.click, _SETTLE_SECONDS)
    except Exception as exc:
        raise BrowserError(f"could not click [{ref}]: {_short(exc)}") from None


async def type_text(service: BrowserService, found: Session, ref: str, text: str) -> Element:
    loc, read_as = await element(service, found, ref)
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
    loc, read_as = await element(service, found, ref)
    if read_as.kind != "select":
        raise BrowserError(f"[{ref}] is a {read_as.kind}, not a list to choose from")
    try:
        await loc.select_option(label=option)
    except Exception as exc:
        raise BrowserError(f"could not choose {option!r} in [{ref}]: {_short(exc)}") from None


async def submit(service: BrowserService, found: Session, ref: str) -> None:
    loc, read_as = await element(service, found, ref)
    if read_as.kind == "submit":
        action = loc.click
    elif read_as.form_action:

        async def action() -> None:
            await loc.evaluate("el => (el.form || el.closest('form')).requestSubmit()")
    else:
        raise BrowserError(f"[{ref}] is not in a form and not a submit button")
    try:
        await navigating(found, action, service.config.page_timeout)
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
    loc, _ = await element(service, found, ref)
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
