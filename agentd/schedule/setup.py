"""Wire scheduling into a running daemon: its workflow, /reminders, and the model's tools."""

from __future__ import annotations

from agentd.chat.outbox import Outbox
from agentd.commands.router import CommandRouter
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock, Engine
from agentd.schedule import reminders
from agentd.schedule.tools import schedule_tools
from agentd.schedule.workflow import ScheduleDeps, make_schedule_workflow
from agentd.tools import Tool


def install(
    engine: Engine,
    config: Config,
    db: Database,
    outbox: Outbox,
    clock: Clock,
    router: CommandRouter,
) -> list[Tool]:
    """Register the occurrence workflow and /reminders; return the tools for the registry."""
    deps = ScheduleDeps(
        config=config,
        db=db,
        outbox=outbox,
        clock=clock,
        start_workflow=engine.start,
        kick=engine.kick,
    )
    engine.register(make_schedule_workflow(deps))
    reminders.register(router, db)
    return schedule_tools(db, config, engine.kick)
