"""Plugin tools for the end-to-end tests: each run leaves a line in $AGENTD_TEST_EFFECTS."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from agentd.tools import ToolContext, tool


def _effect(line: str) -> None:
    with Path(os.environ["AGENTD_TEST_EFFECTS"]).open("a") as f:
        f.write(line + "\n")


@tool(risk="high")
async def delete_file(ctx: ToolContext, path: str) -> str:
    """Delete a file (pretend: records that it ran)."""
    _effect(f"delete_file {path}")
    return f"deleted {path}"


@tool(risk="medium")
async def add_note(ctx: ToolContext, text: str) -> str:
    """Add a note to the owner's notebook."""
    _effect(f"add_note {text}")
    return "note added"


@tool(risk="low")
async def count_words(ctx: ToolContext, text: str) -> str:
    """Count the words in a text."""
    _effect(f"count_words {text}")
    return str(len(text.split()))


@tool(risk="low")
async def explode(ctx: ToolContext) -> str:
    """Always fails."""
    raise RuntimeError("the tool blew up")


@tool(risk="low", timeout=0.5)
async def hang(ctx: ToolContext) -> str:
    """Never finishes."""
    await asyncio.sleep(3600)
    return "unreachable"


@tool(risk="low", timeout=20)
async def rendezvous(ctx: ToolContext, name: str, party: int) -> str:
    """Wait until `party` calls of the group `name` (the part before '-') are under way at
    once: "met" if they were, "alone" after 10 s if not (run one after another, they never
    meet)."""
    _effect(f"rendezvous {name}")
    group = name.split("-", 1)[0]
    path = Path(os.environ["AGENTD_TEST_EFFECTS"])
    for _ in range(200):
        lines = path.read_text().splitlines()
        if sum(line.startswith(f"rendezvous {group}-") for line in lines) >= party:
            return "met"
        await asyncio.sleep(0.05)
    return "alone"
