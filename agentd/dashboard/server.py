"""The dashboard's aiohttp application: login, session, CSRF and Origin checks, headers.

A request without a live session learns nothing: every path (known or not) answers with the
same redirect to a login page that says nothing about the agent. Every POST needs the
session, a same-origin Origin (or Referer) and the session's CSRF token.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import jinja2
from aiohttp import web

from agentd.dashboard import auth
from agentd.dashboard.access import Access
from agentd.dashboard.config import DashboardConfig

HERE = Path(__file__).parent
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# `Redactor.learn` of the serving process.
Learn = Callable[[Iterable[str]], object]


def _learn_nothing(values: Iterable[str]) -> None:
    """A site with no process around it (a test's, built from the app alone)."""


# No inline script or style anywhere: a string that slipped past escaping still cannot run.
# connect-src: scripts talk to this origin alone (the sign-in page's clicks and keys,
# the web chat's posts and event stream).
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: with no-referrer Chromium sends "Origin: null" on our own
    # forms, and the Origin check needs the real one; other sites still learn nothing.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass
class Site:
    """What the handlers need, passed down explicitly (app["site"])."""

    access: Access
    config: DashboardConfig
    prices: dict[str, Any] = field(default_factory=dict)
    daily_tokens: int = 0
    accounts: list[dict[str, str]] = field(default_factory=list)
    # Memory's embedder, when the daemon serves the dashboard: editing and restoring a memory
    # re-embed it, so without one the memory page offers them only from the CLI.
    embedder: Any = None
    # Where the browser's profiles live (beside the database), and the browser's sign-in
    # desk (agentd.browser.remote.SignIns) when the browser is on, else why it is not.
    browser_data: Path = Path()
    signin: Any = None
    signin_why: str = ""
    # Channels' pages served here (`chat.channel.WebPages`), behind this login: the web chat.
    pages: list[Any] = field(default_factory=list)
    # The schema the database should have: the core's migrations and each channel's, handed
    # down by whoever knows the channels (None: the core's alone).
    schema: list[Any] | None = None
    # The serving process's `Redactor.learn`: each live session id it sees (the cookie) is
    # taught to it, so a log line or an error that quotes the cookie shows `[REDACTED]`.
    learn: Learn = _learn_nothing
    templates: jinja2.Environment = field(init=False)

    def __post_init__(self) -> None:
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every template, whatever its name: outside text is escaped
        )
        from agentd.dashboard import views

        views.add_filters(self.templates)


SITE = web.AppKey("site", Site)
CSRF_KEY = web.RequestKey("csrf_key", str)
SESSION = web.RequestKey("session", str)


def site_of(request: web.Request) -> Site:
    return request.app[SITE]


def render(request: web.Request, name: str, **context: Any) -> web.Response:
    site = site_of(request)
    key = request.get(CSRF_KEY)
    said = request.query.get("done", "")
    # Only what this server said after a change, sealed for this session (flash_url): never
    # words from a link, and never on a page without a session (the login page).
    shown = said if key and auth.flash_ok(key, said, request.query.get("seal")) else ""
    body = site.templates.get_template(name).render(
        csrf=auth.csrf_token(key) if key else "",
        path=request.path,
        flash=shown[:200],
        channel_pages=[(p.path, p.title) for p in site.pages],
        **context,
    )
    return web.Response(text=body, content_type="text/html")


def flash_url(request: web.Request, back: str, said: str) -> str:
    """`back` with the message the server says there, sealed for this session."""
    from urllib.parse import urlencode

    key = request.get(CSRF_KEY) or ""
    seal = auth.flash_sig(key, said) if key else ""
    return f"{back}?{urlencode({'done': said, 'seal': seal})}"


def _to_login() -> NoReturn:
    raise web.HTTPSeeOther("/login")


_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def trusted_host(host: str, config: DashboardConfig) -> bool:
    """Whether the Host header names this dashboard: a loopback name, the address it was told
    to listen on, or the public URL's host. A page on another site whose name an attacker
    re-pointed at 127.0.0.1 (DNS rebinding) sends its own name, and is turned away. Only a
    wildcard bind beyond loopback with no public URL cannot tell, and accepts any."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    names = {*_LOOPBACK_NAMES, config.host, f"[{config.host}]"}
    if config.public_url:
        names.add(urlsplit(config.public_url).hostname or "")
    elif config.allow_remote and config.host in ("0.0.0.0", "::", ""):
        return True
    return name.lower() in names


def _same_origin(request: web.Request, config: DashboardConfig) -> bool:
    claimed = request.headers.get("Origin") or request.headers.get("Referer")
    if not claimed or claimed == "null":
        return False
    parts = urlsplit(claimed)
    origin = f"{parts.scheme}://{parts.netloc}"
    allowed = {f"{request.scheme}://{request.host}"}
    if config.public_url:
        allowed.add(config.public_url)
    return origin in allowed


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Headers on everything; a session for everything but login and static files."""
    site = site_of(request)
    try:
        response = await _guarded(request, handler, site)
    except web.HTTPException as exc:
        exc.headers.update(HEADERS)
        raise
    response.headers.update(HEADERS)
    return response


async def _guarded(request: web.Request, handler: Handler, site: Site) -> web.StreamResponse:
    if not trusted_host(request.host, site.config):
        raise web.HTTPMisdirectedRequest(text="Unknown host.")
    open_paths = request.path in ("/login", "/favicon.ico") or request.path.startswith("/static/")
    if request.method == "POST" and not _same_origin(request, site.config):
        raise web.HTTPForbidden(text="Cross-site request refused.")
    if open_paths:
        return await handler(request)
    cookie = request.cookies.get(auth.cookie_name(site.config.secure))
    key = await site.access.read(auth.session_key, cookie, time.time()) if cookie else None
    if key is None or not cookie:
        _to_login()
    # Taught at each request, not only at login: a session made before a restart, or by
    # `agentd dashboard` beside the daemon, is one this process never saw made.
    site.learn([cookie])
    request[CSRF_KEY] = key
    request[SESSION] = cookie
    if request.method == "POST":
        form = await request.post()
        if not auth.csrf_ok(key, str(form.get("csrf", ""))):
            raise web.HTTPForbidden(text="This form has expired; reload the page and try again.")
    return await handler(request)


async def _favicon(request: web.Request) -> web.FileResponse:
    return web.FileResponse(
        HERE / "static" / "favicon.svg", headers={"Content-Type": "image/svg+xml"}
    )


def make_app(site: Site) -> web.Application:
    from agentd.dashboard import views

    app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
    # A streamed response (the web chat's events) sends its headers before `guard` sees it:
    # they are added as any response is about to be sent, whoever built it.
    app.on_response_prepare.append(_with_headers)
    app[SITE] = site
    app.router.add_static("/static/", HERE / "static", show_index=False)
    # Browsers ask for it on pages without an icon link (a refusal's plain text).
    app.router.add_get("/favicon.ico", _favicon)
    views.add_routes(app.router)
    for pages in site.pages:
        pages.add(app, csrf_of)
    return app


async def _with_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(HEADERS)


def csrf_of(request: web.Request) -> str:
    """The CSRF token of the request's session, for a channel's own pages (set by `guard`)."""
    key = request.get(CSRF_KEY)
    return auth.csrf_token(key) if key else ""
