"""The wiring: tools, workflows and commands built from the configuration and registered."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentd.access import approvals, owners
from agentd.agent.deps import TurnDeps
from agentd.agent.turn import make_turn_workflow
from agentd.automations.catalog import builtin_names, load_catalog
from agentd.automations.runtime import CALLBACK_PREFIX, Runtime
from agentd.chat.notice import make_notice_workflow as make_chat_notice_workflow
from agentd.commands import chat as chat_commands
from agentd.commands.deps import CommandDeps
from agentd.commands.router import CommandRouter
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock, Engine
from agentd.hands import rules as shell_rules
from agentd.hands.background import job_starter, make_job_workflow
from agentd.hands.files import workspace_tools
from agentd.hands.shell import chat_progress, shell_deps, shell_tool
from agentd.knowledge.tools import docs_tools
from agentd.llm import LLM
from agentd.mail.notice import make_notice_workflow
from agentd.media.chatdocs import (
    DocDeps,
    chat_document_tools,
    document_callbacks,
    make_ingest_workflow,
)
from agentd.media.transcribe import Transcriber, build_transcriber
from agentd.media.vision import VisionDeps
from agentd.media.voice import VoiceDeps
from agentd.memory.summarise import SummaryDeps, make_summary_workflow
from agentd.memory.tools import memory_tools
from agentd.retention.workflow import make_retention_workflow
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import build_embedder
from agentd.runtime.logs import Redactor
from agentd.schedule import setup as scheduling
from agentd.skills import store as skill_store
from agentd.skills import tools as skills
from agentd.tasks.install import Tasks
from agentd.telegram.classify import Identity
from agentd.tools import McpServers, Tool, ToolRegistry
from agentd.web import build_web_tools

log = logging.getLogger("agentd")


@dataclass
class Core:
    """What start-up opened, handed to the wiring."""

    config: Config
    db: Database
    bot: Any
    llm: LLM
    outbox: Any
    clock: Clock
    engine: Engine
    redactor: Redactor
    started_at: float


@dataclass
class Services:
    router: CommandRouter
    on_callback: Callable[..., Awaitable[Any]]
    automations: Runtime


async def build(core: Core, me: Identity, stack: contextlib.AsyncExitStack) -> Services:
    """Build and register every workflow; resources that need closing go on `stack`."""
    from agentd.telegram.files import TelegramFiles
    from agentd.telegram.groups import make_leave_workflow

    config, db, engine = core.config, core.db, core.engine
    embedder = build_embedder(config.memory, os.environ)
    stack.push_async_callback(embedder.aclose)
    # The daemon's copy of its users' sign bits: recall and search_memory share it.
    memory_bits = BitCache()
    mcp = await stack.enter_async_context(McpServers(config.tools.mcp))
    web, web_problems = build_web_tools(config, os.environ, db, core.clock)
    router = _command_router(core, me)
    schedule_tools = scheduling.install(engine, config, db, core.outbox, core.clock, router)
    files = TelegramFiles(core.bot)
    doc_deps = DocDeps(config=config, db=db, files=files, embedder=embedder)
    transcriber = _transcriber(config, stack)
    shell = await _shell(core)
    automations = _automations(core, router)
    skill_tools, skill_listing = await _skills(config, db, core.clock)
    tasks = Tasks(engine)  # background tasks: `delegate` here, the rest once deps exist
    extra: list[Tool] = [
        *memory_tools(db, embedder, config.memory, memory_bits),
        *docs_tools(db, embedder, config),
        *web,
        *chat_document_tools(doc_deps),
        *schedule_tools,
        *_mail_and_calendar_tools(config, db),
        *skill_tools,
        *mcp.tools,
        *automations.model_tools(),
        *tasks.tools(),
    ]
    hands = [*workspace_tools(config, db, files.download), *shell]
    registry = _registry(config, extra, [*web_problems], mcp, hands)
    automations.registry = registry
    deps = TurnDeps(
        config=config,
        db=db,
        llm=core.llm,
        outbox=core.outbox,
        clock=core.clock,
        registry=registry,
        redact=core.redactor,
        embedder=embedder,
        memory_bits=memory_bits,
        start_workflow=engine.start,
        vision=VisionDeps(config=config.vision, db=db, llm=core.llm, files=files)
        if config.vision.enabled
        else None,
        voice=VoiceDeps(config=config.media, db=db, files=files, transcriber=transcriber)
        if transcriber is not None
        else None,
        docs=doc_deps,
        skill_listing=skill_listing,
    )
    engine.register(make_turn_workflow(deps))
    tasks.install(deps, router)  # the task workflow, /task and /tasks
    summary = SummaryDeps(config=config, db=db, llm=core.llm, embedder=embedder, clock=core.clock)
    engine.register(make_summary_workflow(summary))
    engine.register(make_ingest_workflow(doc_deps, core.outbox))
    engine.register(make_retention_workflow(db, config.retention, core.clock))
    engine.register(make_notice_workflow(db, core.outbox))  # pending notices recover too
    engine.register(make_chat_notice_workflow(db, core.outbox))  # parked, failed: notices
    engine.register(make_leave_workflow(core.bot, db))
    for flow in automations.workflows():
        engine.register(flow)
    await _mail_watchers(core, stack)
    # "doc:" buttons (add a document sent in chat) first; the router takes every other prefix.
    return Services(
        router=router,
        on_callback=document_callbacks(engine, router.on_callback),
        automations=automations,
    )


def _automations(core: Core, router: CommandRouter) -> Runtime:
    """The owner's workflows: loaded from their folder, /run and their answer buttons."""
    catalog = load_catalog(core.config, builtin_names())
    runtime = Runtime(
        config=core.config,
        db=core.db,
        clock=core.clock,
        catalog=catalog,
        outbox=core.outbox,
        llm=core.llm,
        kick=core.engine.kick,
        redact=core.redactor,
    )
    router.command("run", runtime.run_command, "Run one of your automations: /run NAME {json}")
    router.callback(CALLBACK_PREFIX, runtime.on_answer)
    if catalog.names():
        log.info("automations loaded", extra={"automations": catalog.names()})
    return runtime


def _mail_and_calendar_tools(config: Config, db: Database) -> list[Tool]:
    """Imported only when configured: icalendar and caldav cost start-up time for nobody else."""
    tools: list[Tool] = []
    if config.mail:
        from agentd.mail.tools import build_mail_tools

        tools += build_mail_tools(config, db, config.secret_env(os.environ))
    if config.calendar:
        from agentd.calendar.tools import build_calendar_tools

        tools += build_calendar_tools(config, config.secret_env(os.environ))
    return tools


async def _mail_watchers(core: Core, stack: contextlib.AsyncExitStack) -> None:
    if not any(account.watch for account in core.config.mail):
        return
    from agentd.mail.watch import start_watchers

    watchers = start_watchers(
        core.config,
        core.db,
        core.outbox,
        core.engine,
        core.clock,
        core.config.secret_env(os.environ),
    )
    if watchers is not None:
        stack.push_async_callback(watchers.stop)


def _command_router(core: Core, me: Identity) -> CommandRouter:
    router = CommandRouter(bot_username=me.bot_username)
    # Only approvers decide, and only on the card itself (access/approvals.py): Approve /
    # Deny and "Always allow this" alike.
    trust = owners.resolve(core.config.telegram)
    router.callback("ap", approvals.callback_handler(trust.may_approve))
    router.callback(shell_rules.CALLBACK_PREFIX, shell_rules.callback_handler(trust.may_approve))
    chat_commands.install(
        router,
        CommandDeps(
            config=core.config,
            db=core.db,
            outbox=core.outbox,
            clock=core.clock,
            cancel=core.engine.cancel,
            started_at=core.started_at,
        ),
    )
    core.engine.register(router.workflow(core.outbox, core.db))
    return router


async def _shell(core: Core) -> list[Tool]:
    """The shell tool and its background jobs' workflow, or nothing and a logged reason."""
    sdeps, problem = await shell_deps(core.config, core.db, chat_progress(core.outbox))
    if problem:
        log.warning("tool problem", extra={"source": "shell", "problem": problem})
    if sdeps is None:
        return []
    sdeps.redact = core.redactor
    sdeps.start_background = job_starter(core.engine.start)
    core.engine.register(make_job_workflow(sdeps, core.outbox))
    return [shell_tool(sdeps)]


async def _skills(config: Config, db: Database, clock: Clock) -> tuple[list[Tool], Any]:
    """The skill tools and the listing the prompt reads; changed skills are held back here."""
    if not config.skills.enabled:
        return [], None
    tools, _ = await skills.start(config, db, clock.now())

    async def listing() -> tuple[tuple[str, str], ...]:
        return await db.read_inline(skill_store.listing)

    return tools, listing


def _transcriber(config: Config, stack: contextlib.AsyncExitStack) -> Transcriber | None:
    transcriber, problem = build_transcriber(config.media, os.environ)
    if problem:
        log.warning("media problem", extra={"problem": problem})
    if transcriber is not None:
        stack.push_async_callback(transcriber.aclose)
    return transcriber


def _registry(
    config: Config, extra: list[Tool], web_problems: list[str], mcp: McpServers, hands: list[Tool]
) -> ToolRegistry:
    # The hands' tools come last: an owner's plugin or MCP tool named `delete_file` (say)
    # keeps working as before, and the built-in one is reported and not offered.
    registry, problems = ToolRegistry.build(config.tools, extra=extra, late=hands)
    for problem in web_problems:
        log.warning("tool problem", extra={"source": "web", "problem": problem})
    for item in [*problems, *mcp.problems]:
        log.warning("tool problem", extra={"source": item.source, "problem": item.message})
    log.info("tools registered", extra={"tools": {t.name: t.risk for t in registry.tools()}})
    return registry
