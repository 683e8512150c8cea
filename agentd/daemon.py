"""`agentd run`: build everything from config, run until SIGTERM, stop without losing work."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentd import approvals, audit, lease, sdnotify
from agentd.agent.deps import TurnDeps
from agentd.agent.toolloop import withdraw_approvals
from agentd.agent.turn import make_turn_workflow
from agentd.commands import chat as chat_commands
from agentd.commands.deps import CommandDeps
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Engine, Limits, SystemClock, store
from agentd.gc_pause import freeze_startup, pausing
from agentd.knowledge.tools import docs_tools
from agentd.llm import api_key, create_llm
from agentd.llm.deferred import DeferredLLM
from agentd.logs import Redactor, setup_logging
from agentd.media.chatdocs import (
    DocDeps,
    chat_document_tools,
    document_callbacks,
    make_ingest_workflow,
)
from agentd.media.transcribe import build_transcriber, read_key
from agentd.media.voice import VoiceDeps
from agentd.memory.bits import BitCache
from agentd.memory.embedders import build_embedder
from agentd.memory.summarise import SummaryDeps, make_summary_workflow
from agentd.memory.tools import memory_tools
from agentd.retention_workflow import make_retention_workflow, run_daily
from agentd.schedule import setup as scheduling
from agentd.telegram import aiogram_loader
from agentd.telegram.classify import Identity
from agentd.telegram.commands import CommandRouter
from agentd.tools import McpServers, ToolRegistry
from agentd.vision import VisionDeps
from agentd.web import build_web_tools

if TYPE_CHECKING:
    from agentd.telegram.session import RetryPolicy

log = logging.getLogger("agentd")
HEARTBEAT_SECONDS = 15.0


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


class ConfigProblem(StartupError):
    """A configuration problem (exit code 78): a missing or malformed secret, a bad token."""


class TokenRejected(ConfigProblem):
    """Telegram does not accept the token."""


@dataclass
class _Running:
    tasks: list[asyncio.Task[None]]
    stop: asyncio.Event


async def _get_me(bot, stop: asyncio.Event, policy: RetryPolicy) -> Identity:  # type: ignore[no-untyped-def]
    """Ask Telegram who we are, waiting for the network (systemd may start us before it).

    Only a rejected token ends the wait: Telegram answers 401 for a wrong token and 404 (as
    Bot API JSON) for one that is not a token at all. Anything else is retried, capped.
    """
    from aiogram.exceptions import TelegramNotFound

    from agentd.telegram.session import classify

    failures = 0
    while True:
        try:
            me = await bot.get_me()
        except Exception as exc:
            fault = classify(exc)
            if fault.kind == "unauthorized" or isinstance(exc, TelegramNotFound):
                raise TokenRejected(
                    "Telegram rejected the bot token; check TELEGRAM_BOT_TOKEN (from @BotFather) "
                    "and telegram.api_base"
                ) from None
            failures += 1
            wait = policy.wait(failures, fault.retry_after)
            sdnotify.notify(f"STATUS=waiting for Telegram: {fault.reason}")
            log.warning("waiting for Telegram", extra={"reason": fault.reason,
                        "attempt": failures, "wait_s": round(wait, 2)})  # fmt: skip
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
            if stop.is_set():
                raise StartupError("stopped before Telegram answered getMe") from None
            continue
        sdnotify.notify("STATUS=running")
        return me


async def _every(seconds: float, fn, stop: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        if not stop.is_set():
            try:
                await fn()
            except Exception:
                log.exception("periodic task failed")


async def _publish_menu(bot, menu: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    from agentd.telegram.menu import publish_menu

    try:
        await publish_menu(bot, menu)
    except Exception:  # it already logs what Telegram refused; this is anything else
        log.exception("publishing the command menu failed")


async def _open_database_and_bot(
    config: Config, on_uncertain: Callable[..., Any]
) -> tuple[Database, Any]:
    """The database opens (and migrates) while aiogram imports in a thread."""
    db_open = asyncio.create_task(
        Database.open(config.db_path, synchronous=config.storage.synchronous)
    )
    try:
        await asyncio.to_thread(pausing(aiogram_loader.load), lazy=config.startup.lazy_aiogram)
        from agentd.telegram.bot import TokenMissing, make_bot

        try:
            bot = make_bot(config, on_uncertain=on_uncertain)
        except TokenMissing as exc:
            raise ConfigProblem(str(exc)) from None
    except BaseException:
        with contextlib.suppress(Exception):
            await (await db_open).close()
        raise
    return await db_open, bot


async def run(config: Config, on_ready: Callable[[str], None] | None = None) -> int:
    """Run the daemon; return the process exit code. `on_ready(bot_username)` once it answers."""
    started_at = time.time()
    secrets = [
        v.get_secret_value()
        for v in (config.secrets.telegram_bot_token, config.secrets.anthropic_api_key)
        if v is not None
    ]
    stt_key = read_key(config.media.transcription_key_env, os.environ)
    if config.media.transcription == "openai" and stt_key:
        secrets.append(stt_key)  # kept out of logs and errors like the other keys
    setup_logging(config.log.level, config.log.format, secrets)
    redactor = Redactor(secrets)
    api_key(config)  # a missing key is a config error now, not after the SDK import
    # Start-up overlaps instead of queueing: the model SDK imports in a thread while getMe,
    # the first getUpdates and the turn it starts go ahead; only the model call waits for it.
    stack = contextlib.AsyncExitStack()

    async def send_uncertain(method: str, chat_id: int | str | None, reason: str) -> None:
        # Bound late: the bot is built before the database, but sends start after it opens.
        await db.write(_audit_send_uncertain, method, chat_id, reason)

    # First, so the SDK import also overlaps the database, aiogram's import and getMe.
    llm = DeferredLLM(config.llm.model, pausing(functools.partial(create_llm, config)))
    try:
        db, bot = await _open_database_and_bot(config, send_uncertain)
    except BaseException:
        await llm.close()
        raise
    pid = os.getpid()
    runner_lock = lease.RunnerLock(config.db_path)
    try:
        holder = await db.read(lease.current)
        runner_lock.acquire(lambda: lease.describe_holder(holder))
        await db.write(lease.acquire, pid)
    except lease.LeaseHeld:
        runner_lock.release()
        await db.close()
        await bot.session.close()
        await llm.close()
        raise
    from agentd.telegram.bot import retry_policy
    from agentd.telegram.files import TelegramFiles
    from agentd.telegram.output import TelegramOutbox
    from agentd.telegram.poller import Poller

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    clock = SystemClock()
    outbox = TelegramOutbox(bot, max_message_chars=config.telegram.max_message_chars,
                            progress_delay=config.telegram.progress_delay)  # fmt: skip

    async def on_unfinished(inst: store.InstanceRecord) -> None:
        await db.write(_audit_unfinished, inst)
        if inst.status == "cancelled":
            await withdraw_approvals(db, outbox, inst.id)

    engine = Engine(
        db,
        clock=clock,
        concurrency=config.engine.concurrency,
        limits=Limits(
            max_step_result_bytes=config.engine.max_step_result_bytes,
            max_steps_per_instance=config.engine.max_steps_per_instance,
        ),
        poll_interval=config.engine.event_poll_interval,
        redact=redactor,
        on_finish=on_unfinished,
    )
    poller: Poller | None = None
    tasks: list[asyncio.Task[None]] = []
    exit_code = 0
    try:
        me_user = await _get_me(bot, stop, retry_policy(config))
        me = Identity(
            bot_id=me_user.id,
            bot_username=me_user.username or "",
            allowed_user_ids=frozenset(config.telegram.allowed_user_ids),
            allow_groups=config.telegram.allow_groups,
        )
        if not config.telegram.allowed_user_ids:
            log.warning("telegram.allowed_user_ids is empty: every message will be dropped")
        embedder = build_embedder(config.memory, os.environ)
        # The daemon's copy of its users' sign bits: recall and search_memory share it.
        memory_bits = BitCache()
        stack.push_async_callback(embedder.aclose)
        mcp = await stack.enter_async_context(McpServers(config.tools.mcp))
        web, web_problems = build_web_tools(config, os.environ, db, clock)
        router = CommandRouter(bot_username=me.bot_username)
        router.callback("ap", approvals.handle_callback)
        chat_commands.install(router, CommandDeps(
            config=config, db=db, outbox=outbox, clock=clock, cancel=engine.cancel,
            started_at=started_at,
        ))  # fmt: skip
        engine.register(router.workflow(outbox, db))
        schedule_tools = scheduling.install(engine, config, db, outbox, clock, router)
        files = TelegramFiles(bot)
        doc_deps = DocDeps(config=config, db=db, files=files, embedder=embedder)
        transcriber, media_problem = build_transcriber(config.media, os.environ)
        if media_problem:
            log.warning("media problem", extra={"problem": media_problem})
        if transcriber is not None:
            stack.push_async_callback(transcriber.aclose)
        registry, problems = ToolRegistry.build(
            config.tools,
            extra=[
                *memory_tools(db, embedder, config.memory, memory_bits),
                *docs_tools(db, embedder, config),
                *web,
                *chat_document_tools(doc_deps),
                *schedule_tools,
                *mcp.tools,
            ],
        )
        for problem in web_problems:
            log.warning("tool problem", extra={"source": "web", "problem": problem})
        for problem in [*problems, *mcp.problems]:
            log.warning(
                "tool problem", extra={"source": problem.source, "problem": problem.message}
            )
        log.info("tools registered", extra={"tools": {t.name: t.risk for t in registry.tools()}})
        deps = TurnDeps(
            config=config, db=db, llm=llm, outbox=outbox, clock=clock, registry=registry,
            redact=redactor, embedder=embedder, memory_bits=memory_bits,
            start_workflow=engine.start,
            vision=VisionDeps(config=config.vision, db=db, llm=llm, files=files)
            if config.vision.enabled else None,
            voice=VoiceDeps(config=config.media, db=db, files=files, transcriber=transcriber)
            if transcriber is not None else None,
            docs=doc_deps,
        )  # fmt: skip
        engine.register(make_turn_workflow(deps))
        summary_deps = SummaryDeps(config=config, db=db, llm=llm, embedder=embedder, clock=clock)
        engine.register(make_summary_workflow(summary_deps))
        engine.register(make_ingest_workflow(doc_deps, outbox))
        engine.register(make_retention_workflow(db, config.retention, clock))
        await engine.run()
        # "doc:" buttons (add a document sent in chat) first; the router takes every other prefix.
        on_callback = document_callbacks(engine, router.on_callback)
        # The watchdog is fed by the poll loop itself, so a hung poller trips it.
        watchdog = (lambda: sdnotify.notify("WATCHDOG=1")) if sdnotify.watchdog_interval() else None
        poller = Poller(bot, db, engine, outbox, me, poll_timeout=config.telegram.poll_timeout,
                        on_callback=on_callback, on_command=router.route,
                        policy=retry_policy(config),
                        request_timeout=config.telegram.request_timeout,
                        on_progress=watchdog or (lambda: None))  # fmt: skip
        tasks.append(asyncio.create_task(poller.run(), name="poller"))
        # Best effort, so its round trip need not delay the first getUpdates.
        tasks.append(asyncio.create_task(_publish_menu(bot, router.menu()), name="menu"))
        if config.retention.enabled:
            tasks.append(asyncio.create_task(run_daily(engine.start, clock, stop)))
        await llm.ready()  # the poller persists and starts turns meanwhile
        tasks.append(
            asyncio.create_task(
                _every(HEARTBEAT_SECONDS, lambda: db.write(lease.heartbeat, pid), stop)
            )
        )
        freeze_startup()
        sdnotify.notify("READY=1")
        log.info("agentd running", extra={"bot": me.bot_username, "db": str(config.db_path)})
        if on_ready is not None:
            on_ready(me.bot_username)
        stop_wait = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({stop_wait, tasks[0]}, return_when=asyncio.FIRST_COMPLETED)
        if tasks[0] in done and tasks[0].exception() is not None:
            log.error("polling stopped", extra={"error": repr(tasks[0].exception())})
            exit_code = 1
        stop_wait.cancel()
    finally:
        sdnotify.notify("STOPPING=1")
        stop.set()
        if poller:
            poller.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await engine.shutdown(config.engine.shutdown_grace)
        await stack.aclose()
        with contextlib.suppress(Exception):
            await db.write(lease.release, pid)
        await db.close()
        runner_lock.release()
        await bot.session.close()
        await llm.close()
        log.info("agentd stopped")
    return exit_code


def _audit_unfinished(conn: object, inst: store.InstanceRecord) -> None:
    """R-TURN-3: every instance that ends in error (or is cancelled) is in the audit log."""
    audit.record(
        conn, f"workflow_{inst.status}", instance_id=inst.id,
        detail={"workflow": inst.workflow, "key": inst.key, "error": (inst.error or "")[:500]},
        source_key=f"{inst.id}:finished:{inst.runs}",
    )  # fmt: skip


def _audit_send_uncertain(
    conn: object, method: str, chat_id: int | str | None, reason: str
) -> None:
    """A send whose answer was lost may have reached the user: a possible duplicate (README)."""
    chat = chat_id if isinstance(chat_id, int) else None
    audit.record(conn, "send_uncertain", chat_id=chat, detail={"method": method, "reason": reason})
