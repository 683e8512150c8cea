"""The watch capability: the check and tell workflows, /watches and /mute, the model's tools."""

from __future__ import annotations

from functools import partial
from typing import Any

from agentd.config import Config
from agentd.tools.capability import Check, Checks, Context, Contribution, Probe, Simple


async def _build(ctx: Context) -> Contribution:
    from agentd.tools.fetch import fetch_policy
    from agentd.watch import commands
    from agentd.watch.sources import SourceDeps
    from agentd.watch.tools import watch_tools
    from agentd.watch.workflow import (
        WatchDeps,
        make_legacy_tell_workflow,
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
    return Contribution(
        tools=watch_tools(ctx.db, config, ctx.engine.kick),
        workflows=[
            make_watch_workflow(deps),
            make_tell_workflow(deps),
            make_legacy_tell_workflow(deps),
        ],
        commands=commands.commands(ctx.db, config),
        callbacks=commands.callbacks(config),
        about="watch a page, your mail, a calendar or a command and tell you only when it matters",
        on_unfinished=partial(on_unfinished, deps),
    )


def _doctor(config: Config, probe: Probe) -> list[Check]:
    """How many watches run, and which are failing or held by a cap today: a watch is never
    silently wrong about having checked."""
    from agentd.watch import store

    def read(conn: Any) -> list[store.Watch]:
        return store.list_watches(conn)

    found = probe.read(read)
    checks = Checks()
    if not found:
        return checks
    failing = [w.id for w in found if w.fail_streak >= config.watch.failures_to_tell]
    capped = [w.id for w in found if w.capped_day]
    paused = [w.id for w in found if w.state == "paused"]
    detail = f"{len(found)} ({len(paused)} paused)"
    if failing:
        detail += f"; failing: {', '.join(failing)} (`agentd watch show ID` says why)"
    if capped:
        detail += f"; held by a cap: {', '.join(capped)}"
    checks.add("watches", True, detail, warn=bool(failing or capped))
    return checks


def capability() -> Simple:
    return Simple("watch", build=_build, doctor=_doctor)
