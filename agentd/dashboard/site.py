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


def site_for(config: Any, dashboard: DashboardConfig, access: Access, embedder: Any = None) -> Site:
    """`embedder`: the daemon's, when it serves the dashboard (memory edit and restore)."""
    return Site(
        access=access,
        config=dashboard,
        prices=price_table(config.llm),
        daily_tokens=config.limits.daily_tokens_total,
        accounts=accounts(config),
        embedder=embedder,
    )


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
