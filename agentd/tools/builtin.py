"""Built-in tools that need nothing but the call context (and the fetch policy)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from agentd.config import ToolsConfig
from agentd.config.clock import UnknownZone, zone
from agentd.tools.base import Tool, ToolContext, ToolError
from agentd.tools.declare import tool
from agentd.tools.fetch import fetch_policy, fetch_url_tool


@tool(risk="low", timeout=5)
async def current_time(
    ctx: ToolContext,
    timezone: Annotated[
        str | None,
        Field(description="IANA time zone, e.g. 'Asia/Tokyo'; defaults to the owner's"),
    ] = None,
) -> str:
    """Current date and time in ISO 8601, in the owner's time zone unless another is asked."""
    name = timezone or ctx.timezone
    try:
        now = datetime.fromtimestamp(ctx.now(), tz=zone(name))
    except UnknownZone as exc:
        said = str(exc)
        raise ToolError(f"{said[:1].upper()}{said[1:]}.") from None
    return f"{now.isoformat(timespec='seconds')} ({name}, {now:%A})"


def builtin_tools(config: ToolsConfig) -> list[Tool]:
    """The built-in tools of this module, configured from `[tools]`."""
    return [
        current_time,
        fetch_url_tool(fetch_policy(config.fetch), max_chars=config.fetch.max_chars),
    ]
