"""Build the dashboard from the agent's config and serve it (what `agentd dashboard` and
the daemon's dashboard capability call)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import MutableMapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from agentd.dashboard.access import Access
from agentd.dashboard.config import DashboardConfig, check_bind
from agentd.dashboard.server import Learn, Site, make_app
from agentd.llm.pricing import price_table


def accounts(config: Any) -> list[dict[str, str]]:
    """Mail and calendar accounts by name and address only: never a host login or secret."""
    found = [
        {"kind": "mail", "name": m.name, "address": m.address} for m in getattr(config, "mail", [])
    ]
    for c in getattr(config, "calendar", []):
        found.append({"kind": "calendar", "name": c.name, "address": ""})
    return found


def site_for(
    config: Any,
    dashboard: DashboardConfig,
    access: Access,
    embedder: Any = None,
    signin: Any = None,
    signin_why: str = "",
    *,
    learn: Learn,
) -> Site:
    """`embedder`: the daemon's, when it serves the dashboard (memory edit and restore);
    `signin`: the browser's sign-in desk, when the browser is on; `learn`: the process's
    `Redactor.learn`, taught every live session id the site sees."""
    return Site(
        access=access,
        config=dashboard,
        prices=price_table(config.llm),
        daily_tokens=config.limits.daily_tokens_total,
        accounts=accounts(config),
        embedder=embedder,
        browser_data=config.db_path.parent,
        signin=signin,
        signin_why=signin_why or _why_no_browser(config),
        learn=learn,
    )


def _why_no_browser(config: Any) -> str:
    if not config.browser.enabled:
        return (
            "Signing in to a site needs the browser: set [browser] enabled = true "
            "(docs/browser.md) and restart agentd."
        )
    return "The browser is not offered here: `agentd doctor` says why."


class _NoRawRequests(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server log, less the raw request line a request it could not parse carries in
    its exception: that line may hold a sign-in link's token (`/login?t=…`), and a link made
    by another process (`agentd dashboard --link` beside the daemon) is one this process's
    redactor never learned."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            kwargs["exc_info"] = None
            msg = f"{msg} ({type(exc).__name__}: HTTP {exc.code}, a request it could not parse)"
        return msg, kwargs


async def serve(site: Site, started: asyncio.Future[int] | None = None) -> web.AppRunner:
    """Listen (loopback unless allowed otherwise); `started` gets the port actually bound."""
    check_bind(site.config)
    server_log = _NoRawRequests(logging.getLogger("aiohttp.server"), {})
    runner = web.AppRunner(make_app(site), access_log=None, logger=server_log)
    await runner.setup()
    tcp = web.TCPSite(runner, site.config.host, site.config.port)
    await tcp.start()
    port = runner.addresses[0][1] if runner.addresses else site.config.port
    if started is not None:
        started.set_result(port)
    return runner
