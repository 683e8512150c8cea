"""The wiring: every capability of the one list contributes, then the turn is built over them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentd.access import owners
from agentd.agent.deps import TurnDeps
from agentd.agent.turn import make_turn_workflow
from agentd.channels import kept_tables, migrations
from agentd.chat.channel import Opened
from agentd.chat.notice import make_notice_workflow
from agentd.commands import chat as chat_commands
from agentd.commands import model as model_commands
from agentd.commands.deps import CommandDeps
from agentd.commands.router import CommandRouter
from agentd.config import Config
from agentd.daemon.capabilities import capabilities
from agentd.db import Database
from agentd.durable import Clock, Engine
from agentd.durable.store import InstanceRecord
from agentd.llm import LLM
from agentd.retention.workflow import make_retention_workflow
from agentd.retrieval import spend
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import build_embedder
from agentd.runtime.redact import Redactor
from agentd.tools import ToolRegistry
from agentd.tools.capability import Capability, Context, Contribution

log = logging.getLogger("agentd")


@dataclass
class Core:
    """What start-up opened, handed to the wiring."""

    config: Config
    db: Database
    llm: LLM
    outbox: Any  # chat.route.RoutedOutbox: each chat's output to the channel that owns it
    files: Any  # chat.route.RoutedFiles: what users sent, read through their channel
    clock: Clock
    engine: Engine
    redactor: Redactor
    started_at: float


@dataclass
class Services:
    router: CommandRouter
    on_callback: Callable[..., Awaitable[Any]]
    contributions: list[Contribution] = field(default_factory=list)

    async def on_unfinished(self, inst: InstanceRecord) -> None:
        """Each capability's own handling of an instance that ended unfinished."""
        for part in self.contributions:
            if part.on_unfinished is not None:
                await part.on_unfinished(inst)

    async def start(self) -> list[Callable[[], Awaitable[None]]]:
        """Start each capability's services (the engine runs); return what to close first."""
        closers = []
        for part in self.contributions:
            for start in part.start:
                close = await start()
                if close is not None:
                    closers.append(close)
        return closers


async def build(core: Core, channels: list[Opened], stack: contextlib.AsyncExitStack) -> Services:
    """Every capability contributes; then the registry, the commands, the turn and the core
    workflows are built over what they returned."""
    config, db, engine = core.config, core.db, core.engine
    secrets = config.secret_source()
    embedder = build_embedder(config.memory, secrets)
    stack.push_async_callback(embedder.aclose)
    spend.counted(db, embedder, stack)  # a remote embedder's calls, in the ledger
    # The daemon's copy of its users' sign bits: recall and search_memory share it.
    shared: dict[str, Any] = {"embedder": embedder, "memory_bits": BitCache(), "files": core.files}
    # Channels served in the owner's browser (chat.channel.WebPages): the dashboard mounts them.
    shared["web_pages"] = [w for one in channels if (w := getattr(one.open, "web", None))]
    # The whole schema, channels' tables included: the dashboard's health check reads it.
    shared["schema"] = migrations()
    ctx = Context(
        config=config,
        secrets=secrets,
        db=db,
        clock=core.clock,
        engine=engine,
        outbox=core.outbox,
        llm=core.llm,
        redactor=core.redactor,
        stack=stack,
        shared=shared,
    )
    caps = capabilities()
    parts = [await cap.contribute(ctx) for cap in caps]
    for part in parts:
        shared.update(part.shares)
    registry = _registry(config, parts)
    names = frozenset(one.identity.username for one in channels if one.identity is not None)
    router = _command_router(core, names - {""}, embedder, abilities(caps, parts, registry))
    turn: dict[str, Any] = {}
    for part in parts:
        _add_to_router(router, part)
        turn.update(part.turn)
        for wired in part.wired:
            wired(registry)
    engine.register(router.workflow(core.outbox, core.db))
    deps = TurnDeps(
        config=config,
        db=db,
        llm=core.llm,
        outbox=core.outbox,
        clock=core.clock,
        registry=registry,
        redact=core.redactor,
        embedder=embedder,
        memory_bits=ctx.shared["memory_bits"],
        start_workflow=engine.start,
        **turn,
    )
    engine.register(make_turn_workflow(deps))
    sweeps = {name: sweep for part in parts for name, sweep in part.sweeps.items()}
    kept = kept_tables(config)
    engine.register(make_retention_workflow(db, config.retention, core.clock, sweeps, kept))
    # Parked and failed runs, held skills: notices, to a user where [access] notices says.
    engine.register(make_notice_workflow(db, core.outbox, prefer=config.access.notices))
    for one in channels:
        for flow in one.open.workflows(db):
            engine.register(flow)
    for part in parts:
        for flow in [*part.workflows, *(make(deps) for make in part.turn_workflows)]:
            engine.register(flow)
    on_callback = router.on_callback
    for part in reversed(parts):  # the first capability's buttons are tried first
        if part.on_callback is not None:
            on_callback = part.on_callback(on_callback)
    return Services(router=router, on_callback=on_callback, contributions=parts)


def _add_to_router(router: CommandRouter, part: Contribution) -> None:
    """A capability's commands, buttons and awaited replies, as it returned them."""
    for command in part.commands:
        router.add(command)
    for prefix, handler in part.callbacks.items():
        router.callback(prefix, handler)
    for claim in part.awaits:
        router.awaits(claim)


def _command_router(
    core: Core, bot_names: frozenset[str], embedder: Any, can: list[str]
) -> CommandRouter:
    """The core's own commands (/help, /stop, /model, …) and approvals' buttons."""
    trust = owners.resolve(core.config.access)
    router = CommandRouter(bot_usernames=bot_names, owner_id=trust.owner_id, abilities=can)
    command_deps = CommandDeps(
        config=core.config,
        db=core.db,
        outbox=core.outbox,
        clock=core.clock,
        cancel=core.engine.cancel,
        started_at=core.started_at,
        embedder=embedder,
        start=core.engine.prepare_start,
        llm=core.llm,
    )
    chat_commands.install(router, command_deps)
    model_commands.install(router, command_deps)
    return router


def _registry(config: Config, parts: list[Contribution]) -> ToolRegistry:
    # Plugins are one of the capabilities: the registry must not load them a second time.
    tools_config = config.tools.model_copy(update={"plugins": []})
    registry, problems = ToolRegistry.build(
        tools_config,
        extra=[t for part in parts for t in part.tools],
        late=[t for part in parts for t in part.late_tools],
    )
    for part in parts:
        for problem in part.problems:
            log.warning("tool problem", extra={"problem": problem})
    for item in problems:
        log.warning("tool problem", extra={"source": item.source, "problem": item.message})
    tools = registry.tools()
    # One line at INFO (how many, and which could do harm); the whole list at DEBUG.
    high = sorted(t.name for t in tools if t.risk == "high")
    log.info("tools registered", extra={"count": len(tools), "high_risk": high})
    log.debug("tools registered", extra={"tools": {t.name: t.risk for t in tools}})
    return registry


def abilities(
    caps: list[Capability], parts: list[Contribution], registry: ToolRegistry
) -> list[str]:
    """One line per capability that registered a tool: what it does (its `about`), and its
    tools."""
    lines = []
    for cap, part in zip(caps, parts, strict=True):
        tools = [t.name for t in (*part.tools, *part.late_tools) if registry.get(t.name) is t]
        if tools:
            extra = [part.about_tools[t] for t in tools if t in part.about_tools]
            about = [part.about or cap.name, *extra]
            lines.append(f"{', and '.join(about)} — {', '.join(dict.fromkeys(tools))}")
    return lines
