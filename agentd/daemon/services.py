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
from agentd.commands import chat as chat_commands
from agentd.commands.deps import CommandDeps
from agentd.commands.router import CommandRouter
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock, Engine
from agentd.knowledge.tools import docs_tools
from agentd.llm import LLM
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
    extra: list[Tool] = [
        *memory_tools(db, embedder, config.memory, memory_bits),
        *docs_tools(db, embedder, config),
        *web,
        *chat_document_tools(doc_deps),
        *schedule_tools,
        *mcp.tools,
    ]
    registry = _registry(config, extra, [*web_problems], mcp)
    deps = TurnDeps(
        config=config, db=db, llm=core.llm, outbox=core.outbox, clock=core.clock,
        registry=registry, redact=core.redactor, embedder=embedder, memory_bits=memory_bits,
        start_workflow=engine.start,
        vision=VisionDeps(config=config.vision, db=db, llm=core.llm, files=files)
        if config.vision.enabled else None,
        voice=VoiceDeps(config=config.media, db=db, files=files, transcriber=transcriber)
        if transcriber is not None else None,
        docs=doc_deps,
    )  # fmt: skip
    engine.register(make_turn_workflow(deps))
    summary = SummaryDeps(config=config, db=db, llm=core.llm, embedder=embedder, clock=core.clock)
    engine.register(make_summary_workflow(summary))
    engine.register(make_ingest_workflow(doc_deps, core.outbox))
    engine.register(make_retention_workflow(db, config.retention, core.clock))
    engine.register(make_leave_workflow(core.bot, db))
    # "doc:" buttons (add a document sent in chat) first; the router takes every other prefix.
    return Services(router=router, on_callback=document_callbacks(engine, router.on_callback))


def _command_router(core: Core, me: Identity) -> CommandRouter:
    router = CommandRouter(bot_username=me.bot_username)
    # Only approvers decide, and only on the card itself (access/approvals.py).
    router.callback(
        "ap", approvals.callback_handler(owners.resolve(core.config.telegram).may_approve)
    )
    chat_commands.install(router, CommandDeps(
        config=core.config, db=core.db, outbox=core.outbox, clock=core.clock,
        cancel=core.engine.cancel, started_at=core.started_at,
    ))  # fmt: skip
    core.engine.register(router.workflow(core.outbox, core.db))
    return router


def _transcriber(config: Config, stack: contextlib.AsyncExitStack) -> Transcriber | None:
    transcriber, problem = build_transcriber(config.media, os.environ)
    if problem:
        log.warning("media problem", extra={"problem": problem})
    if transcriber is not None:
        stack.push_async_callback(transcriber.aclose)
    return transcriber


def _registry(
    config: Config, extra: list[Tool], web_problems: list[str], mcp: McpServers
) -> ToolRegistry:
    registry, problems = ToolRegistry.build(config.tools, extra=extra)
    for problem in web_problems:
        log.warning("tool problem", extra={"source": "web", "problem": problem})
    for item in [*problems, *mcp.problems]:
        log.warning("tool problem", extra={"source": item.source, "problem": item.message})
    log.info("tools registered", extra={"tools": {t.name: t.risk for t in registry.tools()}})
    return registry
