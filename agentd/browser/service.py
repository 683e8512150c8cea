"""One browser for the daemon: started on first use, one fresh context (profile) per turn or
task, closed when no turn has used it for `idle_seconds`, killed when its process tree passes
`memory_mb`.

A turn's pages live in its context until the turn's workflow ends (they survive its approval
waits, which can last an hour); the service asks the database which of its turns are still
open. Nothing of a page survives a restart of agentd: a later call in a resumed turn is told
the page is gone, so nothing typed before the crash is ever submitted after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.browser import jail, profiles, worlds
from agentd.browser.pages import (
    DESCRIBE_JS,
    REF_ATTR,
    SUBMIT_JS,
    Described,
    Element,
    Snapshot,
    Tab,
    host_of,
)
from agentd.browser.proxy import Allowlist, BrowserProxy, Resolve
from agentd.config import BrowserConfig
from agentd.hands.sandbox import SandboxUnavailable
from agentd.hands.seccomp import SeccompUnavailable
from agentd.runtime.redact import clip

log = logging.getLogger("agentd.browser")
OpenInstances = Callable[[list[str]], Awaitable[set[str]]]
_REAP_SECONDS = 2.0
REMOTE_VIEW = (1280, 800)  # the owner's sign-in page: its picture's size, in CSS pixels
_WATCH_SECONDS = 0.5
_MAX_PAGES = 4  # a turn's windows: its page and the popups its clicks opened
# How often a download browser_download waits for is measured against download_max_mb: what
# can arrive past the limit is what the link carries in this long.
_DOWNLOAD_POLL_SECONDS = 0.2
_CHROMIUM_ARGS = [
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=DnsOverHttps,Translate,MediaRouter,AutofillServerCommunication,"
    "OptimizationHints,CertificateTransparencyComponentUpdater,SafeBrowsing",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--no-pings",
    # Every address, loopback included, through the proxy (Chromium bypasses loopback else).
    "--proxy-bypass-list=<-loopback>",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--renderer-process-limit=4",
    "--js-flags=--max-old-space-size=512",
]


STAGING = "agentd-browser-"  # + the daemon's pid: the downloads staging folder's name


def remove_stale_staging(folder: Path) -> list[Path]:
    """Staging folders of a process that died without removing its own (a kill -9): every
    `agentd-browser-<pid>-*` whose pid is gone. A live pid's, even another user's, stays."""
    removed = []
    for path in folder.glob(f"{STAGING}*-*"):
        pid = path.name[len(STAGING) :].split("-", 1)[0]
        if not pid.isdecimal() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def staged_bytes(folder: Path) -> int:
    """What the downloads under way and done occupy in the staging folder."""
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            total += path.lstat().st_size if path.is_file() else 0
    return total


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BrowserError(Exception):
    """What the model is told when the browser cannot do what was asked."""


GONE = (
    "No page is open in this turn: the browser was closed since (agentd restarted, the browser "
    "ran out of memory, or it idled out), and whatever was typed into a page is gone with it. "
    "Open the page again with browser_open and redo the steps; nothing was submitted."
)


@dataclass
class Session:
    """One turn's context: its current page and the elements the model read on it.

    The current page is the one the model chose: the page it opened, a tab it switched to, or
    the window the link it clicked opened; when it closes, the one it chose before. A window a
    page opened by itself (a script, a button's handler, a timer spending the click's user
    activation) is kept as a tab and listed at the next reading, never made the current
    page."""

    instance_id: str
    context: Any
    page: Any
    profile: str = ""
    site: str = ""
    loaded_at: float | None = None  # the profile's saved_at when the turn loaded it
    refs: dict[str, Element] = field(default_factory=dict)
    frame_of: dict[str, str] = field(default_factory=dict)  # a ref read in a frame → its frame
    tabs: dict[int, Any] = field(default_factory=dict)  # number → page
    next_tab: int = 1  # a closed tab's number is not given to another
    popups: set[int] = field(default_factory=set)  # tabs a page opened by itself
    unseen: set[int] = field(default_factory=set)  # of those, the ones not listed yet
    # The open tabs the model chose (opened, switched to, followed a link to), the latest
    # last: where the turn goes back to when its page closes.
    chosen: list[int] = field(default_factory=list)
    # The address of the link the model clicked last: a window opening at it is the one it
    # asked for, and becomes the current page.
    asked: str = ""
    # Where a navigation that began at a clicked link's address was redirected, and that link:
    # a window opening there is the link's too (its address is no longer the link's).
    led_to: dict[str, str] = field(default_factory=dict)
    note: str = ""  # what the next reading tells about the turn's tabs
    used: float = field(default_factory=time.monotonic)
    # browser_download is waiting for the file its click starts: the one download kept.
    fetching: bool = False
    # Why the service cancelled that download (over download_max_mb), for the tool to say.
    cancelled: str = ""

    def choose(self, number: int) -> None:
        """The tab `number` becomes the current page, the model's latest choice."""
        self.page = self.tabs[number]
        self.unseen.discard(number)
        if number in self.chosen:
            self.chosen.remove(number)
        self.chosen.append(number)


@dataclass
class Paths:
    data_dir: Path  # profiles live here
    run_dir: Path  # daemon-private: the wrapper, the seccomp filter, the browser's pid


class BrowserService:
    """See the module docstring. `open_instances` answers which of the given workflow
    instances are still unfinished."""

    def __init__(
        self,
        config: BrowserConfig,
        paths: Paths,
        open_instances: OpenInstances,
        *,
        learn: Callable[[list[str]], object],
        run_as: tuple[int, int] | None = None,
        resolve: Resolve | None = None,
    ) -> None:
        self.config = config
        # The process's redactor's (required, so no process runs a browser without one): a
        # profile's cookies are secrets its log, its errors and the model must not see.
        self._learn = learn
        self.paths = paths
        self.open_instances = open_instances
        self.run_as = run_as
        self.proxy = BrowserProxy(Allowlist.of(config.allowed_hosts), resolve=resolve)
        self.sessions: dict[str, Session] = {}
        # The owner's sign-in from the dashboard (remote.py): a context no turn can reach, never
        # closed by the reaper, discarded unless the owner keeps it.
        self.remote: Session | None = None
        self.started_at = 0.0  # monotonic; 0: not running
        self.start_seconds = 0.0
        self.stopped_why = ""
        self._playwright: Any = None
        self._browser: Any = None
        self._lock = asyncio.Lock()
        self._generation = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._last_use = time.monotonic()
        self._stopping: asyncio.Task[None] | None = None
        self._root: int | None = None
        self._policing: set[asyncio.Task[None]] = set()
        # Staged downloads: a folder of its own under /tmp, which the sandbox's user can reach
        # wherever agentd's data lives; moved into the workspace, removed at stop.
        self.downloads = Path()

    # -- the process ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._browser is not None

    @property
    def marker(self) -> str:
        """The argument only this service's browser carries (its proxy's address)."""
        return f"--proxy-server=http://127.0.0.1:{self.proxy.port}"

    def root_pid(self) -> int | None:
        """The browser tree's root process while it runs (checked, never a reused pid)."""
        if not self.running:
            return None
        if self._root is None or not jail.carries(self._root, self.marker):
            self._root = jail.find_root(self.marker)
        return self._root

    async def _start(self) -> None:
        from playwright.async_api import async_playwright

        began = time.monotonic()
        if self._playwright is not None:  # a browser that died: its driver and tasks go first
            await self._stop_locked()
        if not self.proxy.port:
            await self.proxy.start()
        await asyncio.to_thread(self.paths.run_dir.mkdir, 0o700, True, True)
        await asyncio.to_thread(remove_stale_staging, Path(tempfile.gettempdir()))
        prefix = f"{STAGING}{os.getpid()}-"
        self.downloads = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=prefix))
        if self.run_as is not None:
            os.chown(self.downloads, *self.run_as)
        launch: dict[str, Any] = {
            "args": [*_CHROMIUM_ARGS, self.marker],
            "downloads_path": str(self.downloads),
            # Playwright turns Chromium's popup blocker off; on, a page opens a window only
            # from a click (one per click), not in a loop from a timer (90 windows in 6 s,
            # each the page the turn reads next, until memory_mb killed the browser).
            "ignore_default_args": ["--disable-popup-blocking"],
            "timeout": self.config.page_timeout * 1000,
            "handle_sigint": False,
            "handle_sigterm": False,
            "handle_sighup": False,
            "env": {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.paths.run_dir)},
        }
        if self.config.sandbox == "bwrap":
            spec = jail.Jail(
                run_dir=self.paths.run_dir,
                downloads=self.downloads,
                chromium=self.config.executable,
                run_as=self.run_as,
                proxy_port=self.proxy.port,
            )
            launch["executable_path"] = str(await self._wrapper(spec))
        else:
            launch["executable_path"] = self.config.executable
            launch["chromium_sandbox"] = True
        self._playwright = await async_playwright().start()
        try:
            self._browser = await self._playwright.chromium.launch(**launch)
        except BaseException as exc:
            await self._playwright.stop()
            self._playwright = None
            await asyncio.to_thread(shutil.rmtree, self.downloads, True)
            if isinstance(exc, Exception):
                first = clip(str(exc).splitlines()[0], 300) if str(exc) else type(exc).__name__
                raise BrowserError(
                    f"the browser could not start: {first} (`agentd doctor` tries its sandbox)"
                ) from None
            raise
        self._browser.on("disconnected", lambda _: self._lost("the browser process ended"))
        self.started_at = time.monotonic()
        self.start_seconds = self.started_at - began
        self.stopped_why = ""
        self._tasks = [
            asyncio.create_task(self._reaper(), name="browser-reaper"),
            asyncio.create_task(self._watch_memory(), name="browser-memory"),
        ]
        log.info("browser started", extra={"seconds": round(self.start_seconds, 2)})

    async def _wrapper(self, spec: jail.Jail) -> Path:
        """The sandbox's wrapper script; a missing bwrap, Chromium or libseccomp is a
        BrowserError, which says what to install, as a failed launch is."""
        try:
            await asyncio.to_thread(jail.check_tools, spec)
            return await asyncio.to_thread(jail.write_wrapper, spec)
        except (SandboxUnavailable, SeccompUnavailable) as exc:
            await asyncio.to_thread(shutil.rmtree, self.downloads, True)
            raise BrowserError(f"the browser cannot start: {exc}") from None

    def _why_not(self, exc: Exception) -> str:
        if not self.running:
            return f"the browser stopped ({self.stopped_why or 'it ended'}); try again"
        return f"could not open a page ({type(exc).__name__})"

    def _lost(self, why: str) -> None:
        if self._browser is None:
            return
        self.stopped_why = why
        self._browser = None
        self.sessions.clear()
        self.remote = None
        log.warning("browser stopped", extra={"why": why})

    async def stop(self) -> None:
        """Close every context (saving named profiles), the browser and Playwright."""
        async with self._lock:
            await self._stop_locked()

    async def _stop_if_idle(self) -> None:
        async with self._lock:
            idle = time.monotonic() - self._last_use
            if self._unused() and idle > self.config.idle_seconds:
                log.info("browser idle; closing it", extra={"idle_seconds": round(idle)})
                await self._stop_locked()

    async def _stop_if_dead(self) -> None:
        async with self._lock:
            if self._browser is None and self._playwright is not None:
                await self._stop_locked()

    async def _stop_locked(self) -> None:
        for instance_id in list(self.sessions):
            await self._close_session(instance_id)
        await self._drop_remote()
        for task in [*self._tasks, *self._policing]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._policing, return_exceptions=True)
        self._tasks = []
        browser, self._browser = self._browser, None
        if browser is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 10)
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._playwright.stop(), 10)
            self._playwright = None
        self._kill_tree()
        self.started_at = 0.0
        if self.downloads.parts:
            await asyncio.to_thread(shutil.rmtree, self.downloads, True)
            self.downloads = Path()

    async def close(self) -> None:
        await self.stop()
        await self.proxy.close()

    def _kill_tree(self) -> None:
        pid = self._root
        if pid is not None and jail.carries(pid, self.marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)  # bwrap --die-with-parent takes the rest
        self._root = None

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(_REAP_SECONDS)
            try:
                await self._reap()
            except Exception as exc:
                log.warning("browser reaper", extra={"error": type(exc).__name__})

    async def _reap(self) -> None:
        if self.sessions:
            still = await self.open_instances(list(self.sessions))
            for instance_id in [i for i in self.sessions if i not in still]:
                async with self._lock:
                    await self._close_session(instance_id)
        idle = time.monotonic() - self._last_use
        if self._unused() and idle > self.config.idle_seconds and self.running:
            # Its own task: stopping cancels this reaper. Rechecked under the lock, so a turn
            # that opened a page meanwhile keeps its browser.
            self._stopping = asyncio.get_running_loop().create_task(self._stop_if_idle())

    async def _watch_memory(self) -> None:
        limit = self.config.memory_mb << 20
        while True:
            await asyncio.sleep(_WATCH_SECONDS)
            pid = await asyncio.to_thread(self.root_pid)
            if pid is None:
                continue
            used = await asyncio.to_thread(jail.tree_rss, pid)
            if used > limit:
                why = f"the browser used {used >> 20} MB, over [browser] memory_mb"
                self._lost(why)
                self._kill_tree()
                # Its own task (stopping cancels this watchdog); a turn that restarted the
                # browser meanwhile keeps the new one.
                self._stopping = asyncio.get_running_loop().create_task(self._stop_if_dead())
                return

    # -- sessions ---------------------------------------------------------------------------

    async def session(self, instance_id: str) -> Session:
        """The turn's open session; BrowserError(GONE) when it has none."""
        found = self.sessions.get(instance_id)
        if found is None or not self.running:
            raise BrowserError(GONE)
        found.used = self._last_use = time.monotonic()
        await self._current(found)
        return found

    async def open_session(self, instance_id: str, profile: str = "", host: str = "") -> Session:
        """The turn's session, made (and the browser started) if it has none yet."""
        async with self._lock:
            self._last_use = time.monotonic()
            if not self.running:
                await self._start()
            found = self.sessions.get(instance_id)
            if found is not None and found.profile == profile:
                await self._current(found)
                return found
            if found is not None:
                await self._close_session(instance_id)
            state, site, loaded_at = None, "", None
            if profile:
                loaded_at = profiles.saved_at(self.paths.data_dir, profile)
                site, state = profiles.load(self.paths.data_dir, profile)
                if not profiles.site_matches(site, host):
                    raise BrowserError(
                        f"the profile {profile!r} is for {site}; it is never used on {host}"
                    )
                self._teach(state)
            context, page = await self._new_context(
                storage_state=state, accept_downloads=True, viewport={"width": 1280, "height": 900}
            )
            made = Session(
                instance_id, context, page, profile=profile, site=site, loaded_at=loaded_at
            )
            made.choose(self._keep_tab(made, page))
            context.on("page", lambda p: self._follow(made, p))  # a popup
            context.on("request", lambda r: _note_redirect(made, r))
            self._guard_downloads(made, page)
            self.sessions[instance_id] = made
            return made

    def _follow(self, found: Session, page: Any) -> None:
        """A new window: a tab of the turn's, and its current page only when it is the link
        the model clicked (at the link's address, or where that address redirected). Past
        _MAX_PAGES a window is closed as it opens (a click's user activation lets a page's
        timer open several), unless it is that link's: it takes the place of the newest window
        a page opened by itself."""
        if page in found.tabs.values():
            return  # agentd's own (a wedged page's replacement)
        asked = bool(found.asked) and found.asked in (page.url, found.led_to.get(page.url))
        if len(found.tabs) >= _MAX_PAGES:
            spare = [n for n in found.popups if found.tabs[n] is not found.page]
            if not asked or not spare:
                log.info("a page opened more windows than a turn keeps; closed the new one")
                self._close_later(page)
                return
            self._close_later(self._drop_tab(found, max(spare)))
        number = self._keep_tab(found, page)
        self._guard_downloads(found, page)
        if asked:
            found.asked = ""
            found.led_to.clear()
            found.choose(number)
            found.note = f"the link opened in a new tab (tab {number}); this is that tab"
        else:
            found.popups.add(number)
            found.unseen.add(number)

    def _close_later(self, page: Any) -> None:
        self._keep(asyncio.get_running_loop().create_task(_close_page(page)))

    def _keep(self, task: asyncio.Task[None]) -> None:
        """A task of the browser's to finish by itself, cancelled if the browser stops first."""
        self._policing.add(task)
        task.add_done_callback(self._policing.discard)

    @staticmethod
    def _keep_tab(found: Session, page: Any) -> int:
        number = found.next_tab
        found.next_tab += 1
        found.tabs[number] = page

        def closed(_: Any) -> None:
            if found.tabs.get(number) is page:
                BrowserService._drop_tab(found, number)

        page.on("close", closed)
        return number

    @staticmethod
    def _drop_tab(found: Session, number: int) -> Any:
        page = found.tabs.pop(number)
        found.unseen.discard(number)
        found.popups.discard(number)
        if number in found.chosen:
            found.chosen.remove(number)
        return page

    async def _current(self, found: Session) -> None:
        """A current page that closed (its script called window.close(), or agentd closed it
        as wedged) gives way to the open tab the model chose last, as a browser goes back to
        the tab a closed one was opened from; the next reading says so. Never to a window a
        page opened by itself: with none of the model's tabs left, a fresh empty one."""
        if not found.page.is_closed():
            return
        back = [n for n in reversed(found.chosen) if not found.tabs[n].is_closed()]
        if back:
            found.choose(back[0])
            found.note = f"the tab this turn was on closed; this is tab {back[0]}"
            return
        with contextlib.suppress(Exception):  # else the read says it could not
            found.page = await self._new_page(found)
            found.note = (
                "the tab this turn was on closed, and no other tab it chose is open; this "
                "is a new, empty tab (browser_open opens a page, browser_tab switches)"
            )

    def switch_tab(self, found: Session, number: int) -> None:
        """Make the tab `number` the current page (the model's choice)."""
        page = found.tabs.get(number)
        if page is None or page.is_closed():
            listed = ", ".join(str(n) for n in sorted(found.tabs)) or "none"
            raise BrowserError(f"there is no tab {number}; the open tabs are: {listed}")
        found.choose(number)

    def _guard_downloads(self, found: Session, page: Any) -> None:
        """A page can start a download by itself (a script clicking a link, a redirect to a
        file), and Chromium writes it to the host's staging folder at whatever size the server
        sends. Only the download browser_download waits for is kept, and only up to
        download_max_mb; any other is cancelled as it starts."""

        def started(download: Any) -> None:
            self._keep(asyncio.get_running_loop().create_task(self._police(found, download)))

        page.on("download", started)

    async def _police(self, found: Session, download: Any) -> None:
        if not found.fetching:
            log.info(
                "a page started a download nobody asked for; cancelled",
                extra={"host": host_of(download.url)},
            )
            await _discard(download)
            return
        limit = self.config.download_max_mb << 20
        while found.fetching:
            if await asyncio.to_thread(staged_bytes, self.downloads) > limit:
                found.cancelled = (
                    f"the download passed [browser] download_max_mb "
                    f"({self.config.download_max_mb} MB) and was cancelled; nothing was saved"
                )
                await _discard(download)
                return
            await asyncio.sleep(_DOWNLOAD_POLL_SECONDS)

    async def _new_context(self, **options: Any) -> tuple[Any, Any]:
        """A context with this service's time limits and no service workers, and its page."""
        try:
            context = await self._browser.new_context(service_workers="block", **options)
            context.set_default_timeout(self.config.action_timeout * 1000)
            context.set_default_navigation_timeout(self.config.page_timeout * 1000)
            return context, await context.new_page()
        except Exception as exc:
            raise BrowserError(self._why_not(exc)) from None

    def _unused(self) -> bool:
        return not self.sessions and self.remote is None

    async def open_remote(self) -> Session:
        """A fresh context for the owner's sign-in (started browser and all), replacing any
        earlier one; it is not a turn's session, so no tool call can reach it."""
        async with self._lock:
            self._last_use = time.monotonic()
            if not self.running:
                await self._start()
            await self._drop_remote()
            context, page = await self._new_context(
                accept_downloads=False,
                viewport={"width": REMOTE_VIEW[0], "height": REMOTE_VIEW[1]},
            )
            made = Session("sign-in", context, page)
            context.on("page", lambda p: setattr(made, "page", p))  # an SSO popup
            self.remote = made
            return made

    async def close_remote(self, found: Session, keep: bool) -> dict[str, Any] | None:
        """Close the sign-in context `found`; with `keep`, its storage state first (None when
        it is no longer the open one: the browser stopped or another sign-in replaced it)."""
        async with self._lock:
            self._last_use = time.monotonic()
            if self.remote is not found:
                return None
            state = None
            if keep:
                try:
                    state = await self.storage_state(found)
                except Exception as exc:
                    why = type(exc).__name__
                    raise BrowserError(f"could not read the page's cookies ({why})") from None
            await self._drop_remote()
            return state

    async def _drop_remote(self) -> None:
        found, self.remote = self.remote, None
        if found is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(found.context.close(), 10)

    async def _close_session(self, instance_id: str) -> None:
        found = self.sessions.pop(instance_id, None)
        if found is None:
            return
        try:
            if found.profile and self._still_as_loaded(found):
                state = await self.storage_state(found)
                profiles.save(self.paths.data_dir, found.profile, found.site, state, time.time())
            await asyncio.wait_for(found.context.close(), 10)
        except Exception as exc:
            log.info("could not close a browser context", extra={"error": type(exc).__name__})

    def _still_as_loaded(self, found: Session) -> bool:
        """A turn keeps its cookies only if nobody saved or removed the profile since it
        loaded it: the owner's fresh sign-in (or `profiles rm`) wins over a turn's older state."""
        now = profiles.saved_at(self.paths.data_dir, found.profile)
        if now == found.loaded_at:
            return True
        log.info(
            "a browser profile changed during the turn; kept it", extra={"profile": found.profile}
        )
        return False

    def next_generation(self) -> int:
        self._generation += 1
        return self._generation

    async def snapshot(self, found: Session) -> Snapshot:
        """Read the current page and its frames (bounded in each; a page that never answers
        is closed, a frame that does not is left out). A page that closed itself since the
        call began (a click on a button that calls window.close()) gives way first."""
        await self._current(found)
        gen = self.next_generation()
        caps = worlds.Caps(
            self.config.max_text_chars,
            self.config.max_elements,
            frame_seconds=self.config.action_timeout / 2,
        )
        for attempt in range(3):
            try:
                snap, frame_of = await asyncio.wait_for(
                    worlds.read_page(found.context, found.page, self._keep, gen, caps),
                    self.config.action_timeout,
                )
                break
            except TimeoutError:
                await self._drop_page(found)
                raise BrowserError(
                    f"the page did not answer within {self.config.action_timeout:g} s (a "
                    "script kept it busy); it was closed. Try another page."
                ) from None
            except Exception as exc:
                # An action's navigation replaced the document while it was read: read the
                # new one once it has loaded.
                if not _navigated(exc) or attempt == 2:
                    raise BrowserError(f"could not read the page ({type(exc).__name__})") from None
                with contextlib.suppress(Exception):
                    await found.page.wait_for_load_state(
                        "load", timeout=self.config.page_timeout * 1000
                    )
        found.refs = {e.ref: e for e in snap.elements}
        found.frame_of = frame_of
        snap.tabs = [
            Tab(number=n, url=p.url, current=p is found.page, new=n in found.unseen)
            for n, p in sorted(found.tabs.items())
        ]
        snap.note, found.note = found.note, ""
        found.unseen.clear()
        if found.profile:
            await self._learn_cookies(found)
        return snap

    async def describe(self, found: Session, ref: str) -> Described:
        """How many elements carry `ref` in its frame now, and the first one's description,
        read in agentd's own world as the snapshot is (unbounded: the caller bounds it)."""
        try:
            raw = await self._in_world(found, ref, f"({DESCRIBE_JS})({json.dumps(ref)})")
        except (worlds.PageScriptError, worlds.FrameGone):
            raise BrowserError(
                f"the element [{ref}] could not be checked on the page; read the page again"
            ) from None
        return Described.model_validate(raw)

    async def submit_form(self, found: Session, ref: str) -> None:
        """Submit the form of the element `ref`, from agentd's own world (see SUBMIT_JS)."""
        try:
            done = await self._in_world(found, ref, f"({SUBMIT_JS})({json.dumps(ref)})")
        except (worlds.PageScriptError, worlds.FrameGone):
            done = "changed"
        if done != "submitted":
            why = "is in no form" if done == "no form" else "changed since it was read"
            raise BrowserError(f"the element [{ref}] {why}; read the page again")

    async def _in_world(self, found: Session, ref: str, expression: str) -> Any:
        frame = found.frame_of.get(ref, "")
        return await worlds.run(found.context, found.page, self._keep, frame, expression)

    async def _learn_cookies(self, found: Session) -> None:
        """A signed-in site may renew its session cookie while a turn uses it: the new value
        is learned before the page that may show it goes to the model."""
        try:
            cookies = await asyncio.wait_for(found.context.cookies(), 5)
        except Exception as exc:  # the page was read; what it shows is redacted as known
            log.info("could not read the profile's cookies", extra={"error": type(exc).__name__})
            return
        self._teach({"cookies": cookies})

    async def storage_state(self, found: Session) -> dict[str, Any]:
        """`found`'s cookies and local storage, to keep as a profile; taught first."""
        state: dict[str, Any] = await asyncio.wait_for(found.context.storage_state(), 10)
        self._teach(state)
        return state

    def _teach(self, state: dict[str, Any]) -> None:
        """Every profile this process loads, keeps or renews: its token-like values are hidden
        from the log, errors and the model from now on."""
        self._learn(profiles.secret_values(state))

    async def _drop_page(self, found: Session) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(found.page.close(run_before_unload=False), 5)
        with contextlib.suppress(Exception):
            found.page = await self._new_page(found)

    async def _new_page(self, found: Session) -> Any:
        """A page of agentd's own in the turn's context: a tab, not a window a page opened."""
        page = await asyncio.wait_for(found.context.new_page(), 5)
        if page not in found.tabs.values():  # else _follow took it for a popup: it is not
            self._keep_tab(found, page)
            self._guard_downloads(found, page)
        for number, tab in list(found.tabs.items()):
            if tab is page:
                found.popups.discard(number)
                found.choose(number)
        return page

    async def locate(self, found: Session, ref: str) -> tuple[Any, Any]:
        """The element `ref` for Playwright to act on, and the frame it is in: the page's
        own, or the one frame whose document carries it (none or two: the page moved it)."""
        selector = f'[{REF_ATTR}="{ref}"]'
        if ref not in found.frame_of:
            return found.page.locator(selector).first, found.page.main_frame
        hits = []
        for frame in found.page.frames[1:]:
            with contextlib.suppress(Exception):
                count = await asyncio.wait_for(frame.locator(selector).count(), 5)
                hits.extend([frame] * count)
        if len(hits) != 1:
            raise BrowserError(
                f"the page moved the element [{ref}] since it was read; read the page again"
            )
        return hits[0].locator(selector).first, hits[0]


_MAX_REDIRECTS_KEPT = 32  # a clicked link's redirects remembered, until a window takes them


def _note_redirect(found: Session, request: Any) -> None:
    """A navigation redirected from the address of the link the model clicked: where it went.
    A new window's first requests come before the window is known, so this is the one way to
    tell the link's own window, redirected, from one the page opened by itself."""
    if not found.asked or request.redirected_from is None:
        return
    if not request.is_navigation_request():
        return
    first = request.redirected_from
    while first.redirected_from is not None:
        first = first.redirected_from
    if first.url != found.asked:
        return
    if len(found.led_to) >= _MAX_REDIRECTS_KEPT:
        found.led_to.clear()
    found.led_to[request.url] = found.asked


async def _close_page(page: Any) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(page.close(run_before_unload=False), 5)


async def _discard(download: Any) -> None:
    """Stop a download and remove what Chromium staged of it."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(download.cancel(), 10)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(download.delete(), 10)


def _navigated(exc: Exception) -> bool:
    """The document was replaced while it was read (an action's navigation)."""
    text = str(exc)
    return "context was destroyed" in text or "Cannot find context" in text
