"""The owner signs in to a site from the dashboard: the sandboxed browser's page is shown as
pictures, the owner's clicks (coordinates on the picture), text and keys are sent to it, and
"Done" keeps the site's cookies and storage as a named profile; "Cancel" discards them.

The page lives in the model's own browser — the same service, sandbox and proxy — in a
context of its own that is no turn's session: no tool call can reach it, and the model is not
told it exists. What the owner types goes to the page's keyboard and nowhere else (it is not
kept, logged, stored or put in an error message); only the storage state is saved, in the
profile store (`profiles.py`). One sign-in at a time; one the owner leaves without a click,
key or text for `[browser] signin_idle_seconds` is closed and discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.browser import profiles
from agentd.browser.pages import host_of, is_web_url
from agentd.browser.service import REMOTE_VIEW, BrowserError, BrowserService, Session

log = logging.getLogger("agentd.browser")

# The keys the dashboard offers beside typed text (Playwright's names).
Key = Literal[
    "Enter",
    "Tab",
    "Shift+Tab",
    "Backspace",
    "Delete",
    "Escape",
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
    "Home",
    "End",
    "PageUp",
    "PageDown",
]
MAX_TEXT = 1000
_QUALITY = 70


class SignInError(Exception):
    """What the owner is told; never carries what they typed."""


class Click(BaseModel):
    x: int = Field(ge=0, lt=REMOTE_VIEW[0])
    y: int = Field(ge=0, lt=REMOTE_VIEW[1])


class Typed(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_TEXT)


class Pressed(BaseModel):
    key: Key


class View(BaseModel):
    """The sign-in as the dashboard shows it (no cookie, nothing typed)."""

    name: str
    site: str
    url: str
    title: str
    idle_left: float
    width: int = REMOTE_VIEW[0]
    height: int = REMOTE_VIEW[1]


@dataclass
class _Open:
    name: str
    site: str
    session: Session
    last_input: float
    watcher: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SignIns:
    """At most one sign-in at a time, over the browser service the model uses."""

    def __init__(
        self,
        service: BrowserService,
        data_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.data_dir = data_dir
        self.clock = clock
        self.current: _Open | None = None
        self._lock = asyncio.Lock()  # start, done, cancel: one at a time

    @property
    def idle_seconds(self) -> float:
        return self.service.config.signin_idle_seconds

    async def start(self, name: str, url: str) -> View:
        """Open `url` for the profile `name`; refused while another sign-in is open."""
        try:
            profiles.check_name(name)
        except profiles.ProfileError as exc:
            raise SignInError(str(exc)) from None
        site = _site_of(url)
        async with self._lock:
            if self.current is not None and self._alive(self.current):
                raise SignInError(
                    f"a sign-in for the profile {self.current.name!r} is open; finish it (Done) "
                    "or cancel it first"
                )
            if self.current is not None:
                self._end(self.current)  # the browser stopped under it
            try:
                session = await self.service.open_remote()
            except BrowserError as exc:
                raise SignInError(str(exc)) from None
            opened = _Open(name, site, session, self.clock())
            self.current = opened
            opened.watcher = asyncio.create_task(self._watch(opened), name="browser-sign-in")
            log.info("dashboard sign-in started", extra={"profile": name, "site": site})
        try:
            await asyncio.wait_for(
                session.page.goto(url, wait_until="load"), self.service.config.page_timeout + 5
            )
        except Exception as exc:
            # The page may still show something (a refusal of the proxy's, half a page).
            log.info("sign-in page did not load", extra={"error": type(exc).__name__})
        return await self.view()

    async def view(self) -> View | None:
        opened = self._open_or_none()
        if opened is None:
            return None
        page = self._page(opened)
        title = ""
        with contextlib.suppress(Exception):
            title = await asyncio.wait_for(page.title(), 5)
        left = max(0.0, opened.last_input + self.idle_seconds - self.clock())
        return View(
            name=opened.name, site=opened.site, url=page.url, title=title[:200], idle_left=left
        )

    async def picture(self) -> bytes:
        """The page as it is now, a JPEG of the viewport."""
        opened = self._open()
        async with opened.lock:
            try:
                return await asyncio.wait_for(
                    self._page(opened).screenshot(type="jpeg", quality=_QUALITY),
                    self.service.config.action_timeout,
                )
            except Exception as exc:
                raise SignInError(f"could not take the page's picture ({_kind(exc)})") from None

    async def click(self, at: Click) -> None:
        await self._input(lambda page: page.mouse.click(at.x, at.y), "click")

    async def type_text(self, typed: Typed) -> None:
        """Into whatever has the page's focus, key by key (as a person types)."""
        await self._input(lambda page: page.keyboard.type(typed.text), "type")

    async def press(self, pressed: Pressed) -> None:
        await self._input(lambda page: page.keyboard.press(pressed.key), "press a key")

    async def done(self) -> profiles.ProfileInfo:
        """Keep the page's cookies and storage as the profile; the sign-in ends."""
        async with self._lock:
            opened = self._open()
            try:
                state = await self.service.close_remote(opened.session, keep=True)
            except BrowserError as exc:
                raise SignInError(str(exc)) from None
            self._end(opened)
            if state is None:
                raise SignInError(GONE)
            await asyncio.to_thread(
                profiles.save, self.data_dir, opened.name, opened.site, state, time.time()
            )
            log.info("dashboard sign-in kept", extra={"profile": opened.name, "site": opened.site})
        found = await asyncio.to_thread(profiles.listing, self.data_dir)
        return next(p for p in found if p.name == opened.name)

    async def cancel(self, why: str = "cancelled") -> str | None:
        """Discard the open sign-in; the profile's name, or None when none was open."""
        async with self._lock:
            opened = self.current
            if opened is None:
                return None
            self._end(opened)
            await self.service.close_remote(opened.session, keep=False)
            log.info("dashboard sign-in discarded", extra={"profile": opened.name, "why": why})
            return opened.name

    async def close(self) -> None:
        await self.cancel("agentd stopped")

    # -- inside --------------------------------------------------------------------------

    def _alive(self, opened: _Open) -> bool:
        return self.service.remote is opened.session

    def _open_or_none(self) -> _Open | None:
        opened = self.current
        if opened is not None and not self._alive(opened):
            self._end(opened)  # the browser stopped under it
            return None
        return opened

    def _open(self) -> _Open:
        opened = self._open_or_none()
        if opened is None:
            raise SignInError(GONE)
        return opened

    def _end(self, opened: _Open) -> None:
        if self.current is opened:
            self.current = None
        if opened.watcher is not None and opened.watcher is not asyncio.current_task():
            opened.watcher.cancel()

    @staticmethod
    def _page(opened: _Open) -> Any:
        page = opened.session.page
        if page.is_closed():  # a popup that closed itself: back to the page under it
            alive = [p for p in opened.session.context.pages if not p.is_closed()]
            if alive:
                page = opened.session.page = alive[-1]
        return page

    async def _input(self, act: Callable[[Any], Any], what: str) -> None:
        opened = self._open()
        opened.last_input = self.clock()
        async with opened.lock:
            try:
                await asyncio.wait_for(act(self._page(opened)), self.service.config.action_timeout)
            except Exception as exc:
                # The exception's text could quote what was typed: its kind only.
                raise SignInError(f"could not {what} on the page ({_kind(exc)})") from None

    async def _watch(self, opened: _Open) -> None:
        while self.current is opened:
            left = opened.last_input + self.idle_seconds - self.clock()
            if left <= 0:
                if not self._alive(opened):
                    self._end(opened)
                    return
                await self.cancel(f"no input for {self.idle_seconds:g} s")
                return
            await asyncio.sleep(min(left, 5.0))


GONE = (
    "no sign-in is open: it was cancelled, idled out or the browser stopped; start it again "
    "(nothing was kept)"
)


def _site_of(url: str) -> str:
    if not is_web_url(url) or len(url) > 2000:
        raise SignInError(f"{url[:100]!r} is not an http(s) address; give the site's sign-in page")
    return host_of(url)


def _kind(exc: BaseException) -> str:
    return "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
