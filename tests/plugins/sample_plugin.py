"""An example plugin: every top-level `@tool` here is registered when the module is listed."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentd.tools import ToolContext, tool


@tool(risk="medium", timeout=5)
async def shout(
    ctx: ToolContext,
    text: Annotated[str, Field(description="What to shout", max_length=200)],
    times: Annotated[int, Field(ge=1, le=5, description="How many times")] = 1,
) -> str:
    """Repeat the text in capitals, as if shouted."""
    return " ".join([text.upper() + "!"] * times)
