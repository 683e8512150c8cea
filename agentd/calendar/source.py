"""Where events come from and go to: a CalDAV calendar (python-caldav) or a read-only .ics feed
(a plain GET with the standard library, read up to a cap).

Synchronous (caldav and its HTTP client block): the tools call these in a thread.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentd.config import CalendarConfig, read_secret

# A feed is anyone's file: the daemon reads no more of it than this (a busy public calendar
# with years of history is a few MB; caldav's client held 370 MB for a 50 MB feed).
MAX_FEED_BYTES = 20 * 1024 * 1024


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


class _Redirects(urllib.request.HTTPRedirectHandler):
    """A feed follows redirects over HTTP(S) only, and never from https down to http."""

    def __init__(self, url: str) -> None:
        self.allowed = ("https",) if url.startswith("https://") else ("http", "https")

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in self.allowed:
            raise urllib.error.HTTPError(
                newurl, code, f"a redirect to {scheme or 'no'} scheme was refused", headers, fp
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class CalendarError(Exception):
    """A calendar could not be used; the message names the calendar, the step and the cause."""

    def __init__(self, name: str, stage: str, detail: str) -> None:
        super().__init__(f"{name}: {stage} failed: {detail}")
        self.stage = stage


def _explain(config: CalendarConfig, exc: BaseException) -> CalendarError:
    import socket
    import ssl

    from caldav.lib import error

    text = f"{type(exc).__name__}: {exc}"[:300]
    # urllib (a feed) wraps the cause in URLError.reason.
    for cause in (exc, exc.__cause__, exc.__context__, getattr(exc, "reason", None)):
        if isinstance(cause, socket.gaierror):
            return CalendarError(config.name, "DNS", f"cannot resolve the host of {config.url}")
        if isinstance(cause, ssl.SSLError):
            return CalendarError(config.name, "TLS", f"no trusted TLS with {config.url} ({cause})")
    if isinstance(exc, error.AuthorizationError) or "401" in text:
        return CalendarError(
            config.name,
            "login",
            f"the server rejected the user "
            f"{config.username!r} or its password ({config.password_env})",
        )
    if isinstance(exc, error.NotFoundError) or "404" in text:
        return CalendarError(config.name, "calendar", f"nothing found at {config.url}")
    if "onnect" in text or isinstance(exc, OSError):
        return CalendarError(config.name, "connection", f"cannot reach {config.url} ({text})")
    return CalendarError(config.name, "request", text)


class Source:
    """One configured calendar; `password` is read once and never put in an error."""

    def __init__(self, config: CalendarConfig, env: Mapping[str, str]) -> None:
        self.config = config
        self.password = read_secret(config.password_env, env)
        self._calendar: Any = None

    @property
    def read_only(self) -> bool:
        return self.config.is_feed

    def _client(self) -> Any:
        from caldav import DAVClient

        return DAVClient(
            url=self.config.url,
            username=self.config.username or None,
            password=self.password or None,
            timeout=int(self.config.timeout),
            require_tls=self.config.url.startswith("https://"),
        )

    def calendar(self) -> Any:
        """The CalDAV calendar by display name (or the first), looked up once."""
        if self._calendar is not None:
            return self._calendar
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

    def fetch_raw(self, start: datetime, end: datetime) -> bytes:
        """Every event (masters with their overrides) that may touch [start, end), as the
        server wrote it: one iCalendar document after another, parsed by `merged` alone."""
        if self.read_only:
            return self._feed()
        cal = self.calendar()
        try:
            found = cal.search(start=start, end=end, event=True, expand=False)
        except Exception as exc:
            raise _explain(self.config, exc) from None
        return b"\r\n".join(_bytes(obj.data) for obj in found)

    def _feed(self) -> bytes:
        """The feed's bytes, at most MAX_FEED_BYTES. The password goes only to the feed's own
        address, when it asks (a redirect elsewhere never sees it)."""
        handlers: list[urllib.request.BaseHandler] = [_Redirects(self.config.url)]
        if self.config.username:
            keys = urllib.request.HTTPPasswordMgrWithDefaultRealm()
            keys.add_password(None, self.config.url, self.config.username, self.password)
            handlers.append(urllib.request.HTTPBasicAuthHandler(keys))
        request = urllib.request.Request(self.config.url, headers={"User-Agent": "agentd"})
        try:
            with urllib.request.build_opener(*handlers).open(
                request, timeout=self.config.timeout
            ) as response:
                data = response.read(MAX_FEED_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise _explain(self.config, exc) from None
            refused = f": {exc.msg}" if "refused" in str(exc.msg) else ""
            raise CalendarError(self.config.name, "feed", f"HTTP {exc.code}{refused}") from None
        except Exception as exc:
            raise _explain(self.config, exc) from None
        if len(data) > MAX_FEED_BYTES:
            raise CalendarError(
                self.config.name,
                "feed",
                f"the feed at {self.config.url} is larger than "
                f"{MAX_FEED_BYTES // 2**20} MB; subscribe to a smaller one (a shorter range)",
            )
        return data

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
