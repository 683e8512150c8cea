"""The web capability: web_search (and the fetch tool's settings live under [tools.fetch])."""

from __future__ import annotations

from agentd.config import Config
from agentd.tools.capability import Context, Contribution, Simple


def _secrets(config: Config) -> list[str]:
    return [config.web.api_key_env] if config.web.provider == "tavily" else []


async def _build(ctx: Context) -> Contribution:
    from agentd.web import build_web_tools

    tools, problems = build_web_tools(ctx.config, ctx.secrets, ctx.db, ctx.clock)
    return Contribution(tools=tools, problems=problems)


def capability() -> Simple:
    return Simple("web", build=_build, secrets=_secrets)
