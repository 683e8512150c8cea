"""A plugin tool that kills the daemon every time it runs: the crash loop the engine parks."""

from __future__ import annotations

import os
import signal

from agentd.tools import ToolContext, tool


@tool(risk="low")
async def crash_now(ctx: ToolContext) -> str:
    """Stand-in for a parser a hostile file kills: the process dies in the middle of the step."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"
