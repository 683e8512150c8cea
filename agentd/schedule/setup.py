"""Scheduling for a running daemon: its workflow, /reminders, and the model's tools."""

from __future__ import annotations

from agentd.chat.outbox import Outbox
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock, Engine
from agentd.schedule import reminders
from agentd.schedule.tools import schedule_tools
from agentd.schedule.workflow import ScheduleDeps, make_schedule_workflow
from agentd.tools.capability import Contribution


def contribution(
    engine: Engine, config: Config, db: Database, outbox: Outbox, clock: Clock
) -> Contribution:
    """The occurrence workflow, /reminders and its buttons, and the tools for the registry."""
    deps = ScheduleDeps(
        config=config,
        db=db,
        outbox=outbox,
        clock=clock,
        start_workflow=engine.start,
        kick=engine.kick,
    )
    return Contribution(
        tools=schedule_tools(db, config, engine.kick),
        workflows=[make_schedule_workflow(deps)],
        commands=[reminders.command(db)],
        callbacks={reminders.CALLBACK_PREFIX: reminders.press_cancel},
        about="reminders and tasks at a time you choose",
    )
