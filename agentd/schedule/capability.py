"""The schedule capability: reminders and recurring tasks, /reminders and their workflow."""

from __future__ import annotations

from agentd.tools.capability import Context, Contribution, Simple


async def _build(ctx: Context) -> Contribution:
    from agentd.schedule import setup

    return setup.contribution(ctx.engine, ctx.config, ctx.db, ctx.outbox, ctx.clock)


def capability() -> Simple:
    return Simple("schedule", build=_build)
