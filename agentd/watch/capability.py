"""The watch capability: the check and tell workflows, /watches and /mute, the model's tools."""

from __future__ import annotations

from functools import partial

from agentd.tools.capability import Context, Contribution, Simple


async def _build(ctx: Context) -> Contribution:
    from agentd.tools.fetch import fetch_policy
    from agentd.watch import commands
    from agentd.watch.sources import SourceDeps
    from agentd.watch.tools import watch_tools
    from agentd.watch.workflow import (
        WatchDeps,
        make_tell_workflow,
        make_watch_workflow,
        on_unfinished,
    )

    config = ctx.config
    sources = SourceDeps(
        config=config,
        db=ctx.db,
        policy=fetch_policy(config.tools.fetch),
        env=ctx.secrets,
    )
    deps = WatchDeps(
        config=config,
        db=ctx.db,
        outbox=ctx.outbox,
        clock=ctx.clock,
        llm=ctx.llm,
        sources=sources,
        engine=ctx.engine,
        kick=ctx.engine.kick,
    )
    ctx.engine.register(make_watch_workflow(deps))
    ctx.engine.register(make_tell_workflow(deps))
    commands.register(ctx.router, ctx.db, config)
    return Contribution(
        tools=watch_tools(ctx.db, config, ctx.engine.kick),
        on_unfinished=partial(on_unfinished, deps),
    )


def capability() -> Simple:
    return Simple("watch", build=_build)
