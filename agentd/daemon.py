"""`agentd run`: build everything from config, run until SIGTERM, stop without losing work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass

from agentd import approvals, audit, lease, sdnotify
from agentd.agent.turn import TurnDeps, make_turn_workflow
from agentd.commands import chat as chat_commands
from agentd.commands.deps import CommandDeps
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Engine, Limits, SystemClock, store
from agentd.knowledge.tools import docs_tools
from agentd.llm import create_llm
from agentd.logs import Redactor, setup_logging
from agentd.memory.embedders import build_embedder
from agentd.memory.summarise import SummaryDeps, make_summary_workflow
from agentd.memory.tools import memory_tools
from agentd.retention_workflow import make_retention_workflow, run_daily
from agentd.telegram.bot import make_bot
from agentd.telegram.classify import Identity
from agentd.telegram.commands import CommandRouter
from agentd.telegram.files import TelegramFiles
from agentd.telegram.menu import publish_menu
from agentd.telegram.output import TelegramOutbox
from agentd.telegram.poller import Poller
from agentd.tools import McpServers, ToolRegistry
from agentd.vision import VisionDeps
from agentd.web import build_web_tools

log = logging.getLogger("agentd")
HEARTBEAT_SECONDS = 15.0


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


class TokenRejected(StartupError):
    """Telegram does not accept the token: a configuration problem (exit code 78)."""


@dataclass
class _Running:
    tasks: list[asyncio.Task[None]]
    stop: asyncio.Event


async def _get_me(bot, stop: asyncio.Event) -> Identity:  # type: ignore[no-untyped-def]
    """Ask Telegram who we are, retrying while the network is down (not on a bad token)."""
    from aiogram.exceptions import (
        TelegramNetworkError,
        TelegramNotFound,
        TelegramServerError,
        TelegramUnauthorizedError,
    )

    delay = 1.0
    while True:
        try:
            return await bot.get_me()
        except (TelegramUnauthorizedError, TelegramNotFound):
            raise TokenRejected(
                "Telegram rejected the bot token; check TELEGRAM_BOT_TOKEN (from @BotFather) "
                "and telegram.api_base"
            ) from None
        except (TelegramNetworkError, TelegramServerError) as exc:
            log.warning("Telegram not reachable yet", extra={"error": type(exc).__name__})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
            if stop.is_set():
                raise StartupError("stopped before Telegram answered getMe") from None
            delay = min(delay * 2, 30.0)


async def _every(seconds: float, fn, stop: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        if not stop.is_set():
            try:
                await fn()
            except Exception:
                log.exception("periodic task failed")


async def run(config: Config) -> int:
    """Run the daemon; return the process exit code."""
    started_at = time.time()
    secrets = [
        v.get_secret_value()
        for v in (config.secrets.telegram_bot_token, config.secrets.anthropic_api_key)
        if v is not None
    ]
    setup_logging(config.log.level, config.log.format, secrets)
    redactor = Redactor(secrets)
    stack = contextlib.AsyncExitStack()
    bot = make_bot(config)
    llm = create_llm(config)
    db = await Database.open(config.db_path)
    pid = os.getpid()
    runner_lock = lease.RunnerLock(config.db_path)
    try:
        holder = await db.read(lease.current)
        runner_lock.acquire(lambda: lease.describe_holder(holder))
        await db.write(lease.acquire, pid)
    except lease.LeaseHeld:
        runner_lock.release()
        await db.close()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    clock = SystemClock()
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
        on_finish=lambda inst: db.write(_audit_unfinished, inst),
    )
    outbox = TelegramOutbox(
        bot, retries=config.telegram.send_retries, max_retry_after=config.telegram.max_retry_after
    )
    poller: Poller | None = None
    tasks: list[asyncio.Task[None]] = []
    exit_code = 0
    try:
        me_user = await _get_me(bot, stop)
        me = Identity(
            bot_id=me_user.id,
            bot_username=me_user.username or "",
            allowed_user_ids=frozenset(config.telegram.allowed_user_ids),
            allow_groups=config.telegram.allow_groups,
        )
        if not config.telegram.allowed_user_ids:
            log.warning("telegram.allowed_user_ids is empty: every message will be dropped")
        embedder = build_embedder(config.memory, os.environ)
        stack.push_async_callback(embedder.aclose)
        mcp = await stack.enter_async_context(McpServers(config.tools.mcp))
        web, web_problems = build_web_tools(config, os.environ, db, clock)
        registry, problems = ToolRegistry.build(
            config.tools,
            extra=[
                *memory_tools(db, embedder, config.memory),
                *docs_tools(db, embedder, config),
                *web,
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
            redact=redactor, embedder=embedder, start_workflow=engine.start,
            vision=VisionDeps(config=config.vision, db=db, llm=llm, files=TelegramFiles(bot))
            if config.vision.enabled else None,
        )  # fmt: skip
        engine.register(make_turn_workflow(deps))
        summary_deps = SummaryDeps(config=config, db=db, llm=llm, embedder=embedder, clock=clock)
        engine.register(make_summary_workflow(summary_deps))
        router = CommandRouter(bot_username=me.bot_username)
        router.callback("ap", approvals.handle_callback)
        chat_commands.install(router, CommandDeps(
            config=config, db=db, outbox=outbox, clock=clock, cancel=engine.cancel,
            started_at=started_at,
        ))  # fmt: skip
        engine.register(router.workflow(outbox, db))
        engine.register(make_retention_workflow(db, config.retention, clock))
        await engine.run()
        await publish_menu(bot, router.menu())
        # The watchdog is fed by the poll loop itself, so a hung poller trips it.
        watchdog = (lambda: sdnotify.notify("WATCHDOG=1")) if sdnotify.watchdog_interval() else None
        poller = Poller(bot, db, engine, outbox, me, poll_timeout=config.telegram.poll_timeout,
                        on_callback=router.on_callback, on_command=router.route,
                        on_progress=watchdog or (lambda: None))  # fmt: skip
        tasks.append(asyncio.create_task(poller.run(), name="poller"))
        if config.retention.enabled:
            tasks.append(asyncio.create_task(run_daily(engine.start, clock, stop)))
        tasks.append(
            asyncio.create_task(
                _every(HEARTBEAT_SECONDS, lambda: db.write(lease.heartbeat, pid), stop)
            )
        )
        sdnotify.notify("READY=1")
        log.info("agentd running", extra={"bot": me.bot_username, "db": str(config.db_path)})
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
