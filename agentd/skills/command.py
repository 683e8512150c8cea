"""/skills: the Agent Skills the owner enabled, and the ones held back (with the reason).
Owned by the skills capability, which offers it even with skills off (it says so)."""

from __future__ import annotations

import asyncio

from agentd.chat.command import ChatCommand, CommandInput, CommandReply
from agentd.config import Config
from agentd.db import Database
from agentd.skills.catalog import scan_config
from agentd.skills.overview import overview
from agentd.skills.store import records

HINT = "Skills are added on the server: `agentd skills add PATH|URL`."


def command(config: Config, db: Database) -> ChatCommand:
    async def skills(inp: CommandInput) -> CommandReply:
        return await skills_command(config, db, inp)

    return ChatCommand("skills", skills, "The skills I can use, and any held back")


async def skills_command(config: Config, db: Database, inp: CommandInput) -> CommandReply:
    if not config.skills.enabled:
        return CommandReply(text="Skills are off (`[skills] enabled = false`).")
    catalog = await asyncio.to_thread(scan_config, config)
    states = overview(catalog, await db.read(records))
    enabled = [s for s in states if s.state == "enabled"]
    held = [s for s in states if s.state in ("changed", "missing", "invalid")]
    idle = [s for s in states if s.state in ("disabled", "not enabled")]
    if not states:
        return CommandReply(text=f"No skills yet. {HINT}")
    lines = []
    if enabled:
        lines.append("**Skills I use when a task fits:**")
        lines += [f"• `{s.name}` — {_short(s.description)}" for s in enabled]
    else:
        lines.append("No skill is enabled.")
    if held:
        lines.append("\n**Held back:**")
        lines += [f"• `{s.name}` — {s.state}: {_short(s.reason)}" for s in held]
        lines.append("Check them on the server, then `agentd skills enable NAME`.")
    if idle:
        lines.append("\n**Not enabled:** " + ", ".join(f"`{s.name}`" for s in idle))
    return CommandReply(text="\n".join(lines))


def _short(text: str, limit: int = 160) -> str:
    """One line of a skill's own text, inert in the chat's Markdown: no links, no code spans."""
    text = " ".join(text.split()).replace("](", "] (").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"
