"""`run()`: open, build, serve, shut down — each a function of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentd.agent.approval_flow import withdraw_approvals
from agentd.config import Config
from agentd.daemon import services
from agentd.daemon.startup import (
    ConfigProblem,
    audit_send_uncertain,
    audit_unfinished,
    every,
    get_me,
    identity,
    open_database_and_bot,
    publish_menu_best_effort,
    set_up_logging,
    tell_parked,
)
from agentd.db import Database
from agentd.durable import Engine, Limits, SystemClock, store
from agentd.llm import LLM, create_llm
from agentd.retention.workflow import run_daily
from agentd.runtime import lease, sdnotify
from agentd.runtime.gc_pause import freeze_startup
from agentd.runtime.logs import Redactor

log = logging.getLogger("agentd")
HEARTBEAT_SECONDS = 15.0


@dataclass
class _Process:
    """What `_open` made; `_shut_down` closes it in reverse."""

    config: Config
    redactor: Redactor
    llm: LLM
    db: Database
    bot: Any
    runner_lock: lease.RunnerLock
    pid: int = field(default_factory=os.getpid)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    poller: Any = None
    engine: Engine | None = None
    # Capabilities' listeners (the webhooks): closed first, before the engine stops.
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    username: str = ""


async def run(config: Config, on_ready: Callable[[str], None] | None = None) -> int:
    """Run the daemon; return the process exit code. `on_ready(bot_username)` once it answers."""
    started_at = time.time()
    redactor = set_up_logging(config)
    proc = await _open(config, redactor)
    try:
        await _build(proc, started_at)
        return await _serve(proc, on_ready)
    finally:
        await _shut_down(proc)


async def _open(config: Config, redactor: Redactor) -> _Process:
    """The model client, the database, the bot and the single-runner lease."""
    db_holder: list[Database] = []

    async def send_uncertain(method: str, chat_id: int | str | None, reason: str) -> None:
        # Bound late: the bot is built before the database, but sends start after it opens.
        await db_holder[0].write(audit_send_uncertain, method, chat_id, reason)

    llm = create_llm(config)
    try:
        db, bot = await open_database_and_bot(config, send_uncertain)
    except BaseException:
        await llm.close()
        raise
    db_holder.append(db)
    runner_lock = lease.RunnerLock(config.db_path)
    try:
        holder = await db.read(lease.current)
        runner_lock.acquire(lambda: lease.describe_holder(holder))
        await db.write(lease.acquire, os.getpid())
    except lease.LeaseHeld:
        runner_lock.release()
        await db.close()
        await bot.session.close()
        await llm.close()
        raise
    return _Process(config, redactor, llm, db, bot, runner_lock)


def _on_unfinished(
    proc: _Process, outbox: Any, wired: list[services.Services]
) -> Callable[[store.InstanceRecord], Awaitable[None]]:
    """Audit an instance that ended unfinished, then the core's and each capability's part."""
    db = proc.db

    async def on_unfinished(inst: store.InstanceRecord) -> None:
        await db.write(audit_unfinished, inst)
        if inst.status == "cancelled":
            await withdraw_approvals(db, outbox, inst.id)
        elif inst.status == "errored" and (inst.error or "").startswith("stopped after"):
            # A parked turn tells its chat, as a notice of its own: the one send path.
            await tell_parked(proc.engine.start, inst)
        if wired:  # bound once built; instances finish after
            await wired[0].on_unfinished(inst)

    return on_unfinished


def _engine(
    proc: _Process, outbox: Any, clock: SystemClock, wired: list[services.Services]
) -> Engine:
    config = proc.config
    return Engine(
        proc.db,
        clock=clock,
        concurrency=config.engine.concurrency,
        limits=Limits(
            max_step_result_bytes=config.engine.max_step_result_bytes,
            max_steps_per_instance=config.engine.max_steps_per_instance,
        ),
        poll_interval=config.engine.event_poll_interval,
        redact=proc.redactor,
        on_finish=_on_unfinished(proc, outbox, wired),
        crash_limit=config.engine.crash_limit,
    )


async def _build(proc: _Process, started_at: float) -> None:
    """getMe, every capability and workflow, then the engine, the services and the poller."""
    from agentd.telegram.bot import retry_policy
    from agentd.telegram.output import TelegramOutbox
    from agentd.tools.capability import ServiceError

    config, db = proc.config, proc.db
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, proc.stop.set)
    outbox = TelegramOutbox(
        proc.bot,
        max_message_chars=config.telegram.max_message_chars,
        progress_delay=config.telegram.progress_delay,
    )
    wired_holder: list[services.Services] = []
    clock = SystemClock()
    engine = proc.engine = _engine(proc, outbox, clock, wired_holder)
    me = identity(config, await get_me(proc.bot, proc.stop, retry_policy(config)))
    proc.username = me.bot_username
    core = services.Core(
        config, db, proc.bot, proc.llm, outbox, clock, engine, proc.redactor, started_at
    )
    wired = await services.build(core, me, proc.stack)
    wired_holder.append(wired)
    await engine.run()
    try:
        proc.closers = await wired.start()
    except ServiceError as exc:
        raise ConfigProblem(str(exc)) from None
    _start_polling(proc, outbox, me, wired, clock)


def _start_polling(
    proc: _Process, outbox: Any, me: Any, wired: services.Services, clock: SystemClock
) -> None:
    from agentd.telegram.bot import retry_policy
    from agentd.telegram.poller import Poller

    config = proc.config
    assert proc.engine is not None
    # The watchdog is fed by the poll loop itself, so a hung poller trips it.
    watchdog = (lambda: sdnotify.notify("WATCHDOG=1")) if sdnotify.watchdog_interval() else None
    proc.poller = Poller(
        proc.bot,
        proc.db,
        proc.engine,
        outbox,
        me,
        poll_timeout=config.telegram.poll_timeout,
        on_callback=wired.on_callback,
        on_command=wired.router.route,
        policy=retry_policy(config),
        request_timeout=config.telegram.request_timeout,
        on_progress=watchdog or (lambda: None),
        busy=config.chat.busy,
    )
    proc.tasks.append(asyncio.create_task(proc.poller.run(), name="poller"))
    # Best effort, so its round trip need not delay the first getUpdates.
    menu = publish_menu_best_effort(proc.bot, wired.router)
    proc.tasks.append(asyncio.create_task(menu, name="menu"))
    if config.retention.enabled:
        proc.tasks.append(asyncio.create_task(run_daily(proc.engine.start, clock, proc.stop)))


async def _serve(proc: _Process, on_ready: Callable[[str], None] | None) -> int:
    """Ready; then wait for SIGTERM or the poller's end."""
    heartbeat = every(
        HEARTBEAT_SECONDS, lambda: proc.db.write(lease.heartbeat, proc.pid), proc.stop
    )
    proc.tasks.append(asyncio.create_task(heartbeat))
    freeze_startup()
    sdnotify.notify("READY=1")
    username = proc.username
    log.info("agentd running", extra={"bot": username, "db": str(proc.config.db_path)})
    if on_ready is not None:
        on_ready(username)
    poller = proc.tasks[0]
    stop_wait = asyncio.create_task(proc.stop.wait())
    done, _ = await asyncio.wait({stop_wait, poller}, return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    if poller in done and poller.exception() is not None:
        log.error("polling stopped", extra={"error": repr(poller.exception())})
        return 1
    return 0


async def _shut_down(proc: _Process) -> None:
    """Stop taking work, let running steps finish within the grace, close in reverse."""
    sdnotify.notify("STOPPING=1")
    proc.stop.set()
    for close in proc.closers:  # no delivery is accepted that the engine will not see start
        await close()
    if proc.poller:
        proc.poller.stop()
    for task in proc.tasks:
        task.cancel()
    await asyncio.gather(*proc.tasks, return_exceptions=True)
    if proc.engine is not None:
        await proc.engine.shutdown(proc.config.engine.shutdown_grace)
    await proc.stack.aclose()
    with contextlib.suppress(Exception):
        await proc.db.write(lease.release, proc.pid)
    await proc.db.close()
    proc.runner_lock.release()
    await proc.bot.session.close()
    await proc.llm.close()
    log.info("agentd stopped")
