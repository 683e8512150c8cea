"""The tasks capability: `delegate` (registered like every tool, so `[tools] disabled` and
`[tools.risk]` apply), the task workflow (made from the turn's deps, once they exist), and the
owner's /task and /tasks."""

from __future__ import annotations

from agentd.tools.capability import Context, Contribution, Simple


async def _build(ctx: Context) -> Contribution:
    from agentd.tasks.commands import commands
    from agentd.tasks.install import Tasks

    tasks = Tasks(ctx.engine)
    return Contribution(
        tools=tasks.tools(),
        turn_workflows=[tasks.workflow],
        commands=commands(ctx.engine, tasks),
        about="hand longer work to background tasks and tell you when each ends",
    )


def capability() -> Simple:
    return Simple("tasks", build=_build)
