"""Build the dashboard from the agent's config and serve it (what `agentd dashboard` and
the daemon's dashboard capability call)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from agentd.dashboard.access import Access
from agentd.dashboard.config import DashboardConfig, check_bind
from agentd.dashboard.server import Site, make_app
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
) -> Site:
    """`embedder`: the daemon's, when it serves the dashboard (memory edit and restore);
    `signin`: the browser's sign-in desk, when the browser is on."""
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
    )


def _why_no_browser(config: Any) -> str:
    if not config.browser.enabled:
        return (
            "Signing in to a site needs the browser: set [browser] enabled = true "
            "(docs/browser.md) and restart agentd."
        )
    return "The browser is not offered here: `agentd doctor` says why."


async def serve(site: Site, started: asyncio.Future[int] | None = None) -> web.AppRunner:
    """Listen (loopback unless allowed otherwise); `started` gets the port actually bound."""
    check_bind(site.config)
    runner = web.AppRunner(make_app(site), access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, site.config.host, site.config.port)
    await tcp.start()
    port = runner.addresses[0][1] if runner.addresses else site.config.port
    if started is not None:
        started.set_result(port)
    return runner
