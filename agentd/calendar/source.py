"""Where events come from and go to: a CalDAV calendar (python-caldav, its redirects vetted by
the safe fetch's rules) or a read-only .ics feed (the project's safe fetch: one deadline for
the whole answer, a size cap, every redirect's address vetted).

CalDAV is synchronous (caldav and its HTTP client block): the tools call it in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import aiohttp
from yarl import URL

from agentd.config import CalendarConfig, read_secret
from agentd.net.safe_fetch import (
    FetchError,
    FetchPolicy,
    SyncResolve,
    fetch_raw,
    system_resolve_sync,
)
from agentd.runtime.redact import clip

# A feed is anyone's file: the daemon reads no more of it than this (a busy public calendar
# with years of history is a few MB; caldav's client held 370 MB for a 50 MB feed).
MAX_FEED_BYTES = 20 * 1024 * 1024


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


class CalendarError(Exception):
    """A calendar could not be used; the message names the calendar, the step and the cause."""

    def __init__(self, name: str, stage: str, detail: str) -> None:
        super().__init__(f"{name}: {stage} failed: {detail}")
        self.stage = stage


def _login_failed(config: CalendarConfig) -> CalendarError:
    return CalendarError(
        config.name,
        "login",
        f"the server rejected the user {config.username!r} or its password ({config.password_env})",
    )


def _refuse_caldav_dumps(config: CalendarConfig, env: Mapping[str, str]) -> None:
    """caldav reads debug switches of its own from the process environment: one writes every
    request and answer, the password included, to files under /tmp; another stops in a
    debugger the daemon has no terminal for. Neither is agentd's to turn on silently (`env`:
    the environment agentd was handed, which caldav reads too)."""
    named = [
        name
        for name, value in (
            ("PYTHON_CALDAV_COMMDUMP", env.get("PYTHON_CALDAV_COMMDUMP", "")),
            ("PYTHON_CALDAV_DEBUGMODE", env.get("PYTHON_CALDAV_DEBUGMODE", "")),
        )
        if value and (name.endswith("COMMDUMP") or value.upper().startswith("DEBUG"))
    ]
    if named:
        raise CalendarError(
            config.name,
            "environment",
            f"{' and '.join(named)} set in agentd's environment would have the caldav library "
            "write each request, the password included, to files under /tmp or stop in a "
            "debugger, so no calendar server was asked; unset it and restart agentd",
        )


def _explain(config: CalendarConfig, exc: BaseException) -> CalendarError:
    import socket
    import ssl

    from caldav.lib import error

    from agentd.net.pinned import OffOrigin

    if isinstance(exc, OffOrigin):
        return CalendarError(
            config.name,
            "calendar home",
            f"the server at {config.url} named {exc.target} for the calendars, on another "
            f"server ({exc}); agentd sends the password only to the configured one, so it "
            f"sent nothing there. If that server is your provider's, set url = "
            f'"{exc.target}" (docs/calendar.md)',
        )
    if isinstance(exc, FetchError):  # a redirect, or an address a host resolves to, refused
        return CalendarError(
            config.name, "redirect", f"{exc}; set the url to where the calendar really is"
        )
    text = clip(f"{type(exc).__name__}: {exc}", 300)
    for cause in (exc, exc.__cause__, exc.__context__):
        if isinstance(cause, socket.gaierror):
            return CalendarError(config.name, "DNS", f"cannot resolve the host of {config.url}")
        if isinstance(cause, ssl.SSLError):
            return CalendarError(config.name, "TLS", f"no trusted TLS with {config.url} ({cause})")
    if isinstance(exc, error.AuthorizationError) or "401" in text:
        return _login_failed(config)
    if isinstance(exc, error.NotFoundError) or "404" in text:
        return CalendarError(config.name, "calendar", f"nothing found at {config.url}")
    if "onnect" in text or isinstance(exc, OSError):
        return CalendarError(config.name, "connection", f"cannot reach {config.url} ({text})")
    return CalendarError(config.name, "request", text)


class Source:
    """One configured calendar; `password` is read once and never put in an error. `resolve`
    answers DNS for CalDAV's connections (the system's; tests answer for names of their own)."""

    def __init__(
        self,
        config: CalendarConfig,
        env: Mapping[str, str],
        resolve: SyncResolve = system_resolve_sync,
    ) -> None:
        self.config = config
        self.password = read_secret(config.password_env, env)
        self._env = env
        self._resolve = resolve
        self._calendar: Any = None

    @property
    def read_only(self) -> bool:
        return self.config.is_feed

    def _client(self) -> Any:
        from caldav import DAVClient

        from agentd.net.pinned import pinned_session

        client = DAVClient(
            url=self.config.url,
            username=self.config.username or None,
            password=self.password or None,
            timeout=int(self.config.timeout),
            # The url is the calendar's own (the config insists on http:// or https://): no
            # DNS SRV/TXT lookup or well-known request of caldav's, which no vetting sees.
            enable_rfc6764=False,
            require_tls=self.config.url.startswith("https://"),
        )
        # caldav's HTTP client (niquests) follows redirects itself, and moves to the host a
        # server names for the calendars: every connection goes only to an address vetted as
        # the feed's are, so a server pointing elsewhere (or a DNS answer changed meanwhile)
        # cannot have agentd ask the LAN or a cloud metadata service, password and all.
        client.session.close()
        client.session = pinned_session(self.config.url, self._policy(), self._resolve)
        return client

    def _policy(self, **limits: Any) -> FetchPolicy:
        """The configured server is the owner's, so its host may be on their network;
        wherever it redirects to is vetted like any fetch (`limits`: a feed's size cap and
        deadline)."""
        host = URL(self.config.url).host or ""
        return FetchPolicy(allowed_hosts=(host,), keep_https=True, **limits)

    def calendar(self) -> Any:
        """The CalDAV calendar by display name (or the first), looked up once."""
        if self._calendar is not None:
            return self._calendar
        _refuse_caldav_dumps(self.config, self._env)
        try:
            calendars = self._client().principal().calendars()
        except Exception as exc:
            raise _explain(self.config, exc) from None
        if not calendars:
            raise CalendarError(self.config.name, "calendar", "the account has no calendars")
        if self.config.calendar:
            named = [c for c in calendars if (c.get_display_name() or "") == self.config.calendar]
            if not named:
                names = ", ".join(repr(c.get_display_name()) for c in calendars)
                raise CalendarError(
                    self.config.name,
                    "calendar",
                    f"no calendar {self.config.calendar!r}; there are {names}",
                )
            calendars = named
        self._calendar = calendars[0]
        return self._calendar

    async def fetch_raw(self, start: datetime, end: datetime) -> bytes:
        """Every event (masters with their overrides) that may touch [start, end), as the
        server wrote it: one iCalendar document after another, parsed by `merged` alone."""
        if self.read_only:
            return await self._feed()
        return await asyncio.to_thread(self._search, start, end)

    def _search(self, start: datetime, end: datetime) -> bytes:
        cal = self.calendar()
        try:
            found = cal.search(start=start, end=end, event=True, expand=False)
        except Exception as exc:
            raise _explain(self.config, exc) from None
        return b"\r\n".join(_bytes(obj.data) for obj in found)

    def feed_policy(self) -> FetchPolicy:
        """The calendar's policy (`_policy`) with the feed's size cap and deadline (a public
        feed can point at the LAN)."""
        return self._policy(
            max_bytes=MAX_FEED_BYTES,
            timeout=self.config.timeout,
            user_agent="agentd",
        )

    async def _feed(self) -> bytes:
        """The feed's bytes, at most MAX_FEED_BYTES within the calendar's timeout (the whole
        answer's, not each read's: a feed sending a byte at a time ends there). The password
        goes only to the feed's own address; a redirect elsewhere never sees it."""
        login = self.config.username
        auth = aiohttp.encode_basic_auth(login, self.password or "") if login else None
        try:
            raw = await fetch_raw(self.config.url, self.feed_policy(), authorization=auth)
        except FetchError as exc:
            raise CalendarError(self.config.name, "feed", str(exc)) from None
        if raw.status == 401:
            raise _login_failed(self.config)
        if raw.status != 200:
            raise CalendarError(self.config.name, "feed", f"HTTP {raw.status} from {raw.url}")
        if raw.truncated:
            raise CalendarError(
                self.config.name,
                "feed",
                f"the feed at {self.config.url} is larger than "
                f"{MAX_FEED_BYTES // 2**20} MB; subscribe to a smaller one (a shorter range)",
            )
        return raw.body

    def save(self, ical: str) -> None:
        """Create or replace (same UID: the same resource) one event."""
        try:
            self.calendar().save_event(ical)
        except Exception as exc:
            raise _explain(self.config, exc) from None

    def by_uid(self, uid: str) -> Any:
        from caldav.lib import error

        try:
            return self.calendar().event_by_uid(uid)
        except error.NotFoundError:
            raise CalendarError(self.config.name, "event", f"no event with uid {uid!r}") from None
        except Exception as exc:
            raise _explain(self.config, exc) from None
