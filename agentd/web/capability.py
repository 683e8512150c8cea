"""The web capability: web_search, and the fetch tool's "Always allow this host" rule book
(its settings live under [tools.fetch])."""

from __future__ import annotations

from agentd.config import Config
from agentd.tools.capability import Context, Contribution, Simple


def _secrets(config: Config) -> list[str]:
    return [config.web.api_key_env] if config.web.provider == "tavily" else []


async def _build(ctx: Context) -> Contribution:
    from agentd.access import owners
    from agentd.tools import hostrules
    from agentd.web import build_web_tools

    tools, problems = build_web_tools(ctx.config, ctx.secrets, ctx.db, ctx.clock)
    # The fetch tool's "Always allow this host" button: only an approver, on the card itself.
    may_approve = owners.resolve(ctx.config.access).may_approve
    return Contribution(
        tools=tools,
        problems=problems,
        callbacks={hostrules.CALLBACK_PREFIX: hostrules.callback_handler(may_approve)},
        about="search the web and read pages",
    )


def capability() -> Simple:
    return Simple("web", build=_build, secrets=_secrets)
