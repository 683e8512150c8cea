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
from functools import partial
from typing import Any

from agentd.access import owners
from agentd.agent.approval_flow import withdraw_approvals
from agentd.agent.streaming import end_left_drafts, end_unanswered
from agentd.chat import reach
from agentd.chat.channel import CredentialsRejected, Intake, Opened
from agentd.chat.notice import make_notice_workflow, post_notice
from agentd.chat.route import RoutedFiles, RoutedOutbox
from agentd.config import Config
from agentd.daemon import services
from agentd.daemon.startup import (
    ConfigProblem,
    audit_send_uncertain,
    audit_unfinished,
    every,
    log_trust,
    open_database_and_channels,
    publish_menus,
    set_up_logging,
    tell_parked,
)
from agentd.db import Database
from agentd.durable import Engine, Limits, SystemClock, store
from agentd.llm import LLM, create_llm
from agentd.retention.workflow import run_daily
from agentd.runtime import lease, sdnotify
from agentd.runtime.gc_pause import freeze_startup
from agentd.runtime.redact import Redactor

log = logging.getLogger("agentd")
HEARTBEAT_SECONDS = 15.0
# How long a stopping daemon waits for its last notice to the owner to be sent.
NOTICE_WAIT = 15.0
# The owner's notice that a channel's credentials stopped agentd: one a UTC day (its id).
STOPPED_NOTICE = "channel-stopped:"


@dataclass
class _Process:
    """What `_open` made; `_shut_down` closes it in reverse."""

    config: Config
    redactor: Redactor
    llm: LLM
    db: Database
    channels: list[Opened]
    runner_lock: lease.RunnerLock
    pid: int = field(default_factory=os.getpid)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    hurry: asyncio.Event = field(default_factory=asyncio.Event)  # a second stop: do not wait
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # Each channel's intake: the daemon ends when one fails (a rejected token, say).
    intakes: list[asyncio.Task[None]] = field(default_factory=list)
    engine: Engine | None = None
    # Capabilities' listeners (the webhooks): closed first, before the engine stops.
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    username: str = ""


async def run(
    config: Config,
    on_ready: Callable[[str], None] | None = None,
    redactor: Redactor | None = None,
) -> int:
    """Run the daemon; return the process exit code. `on_ready(names)` once it answers;
    `redactor`: the process's one, when its caller set up the logging already."""
    started_at = time.time()
    redactor = redactor or set_up_logging(config)
    proc = await _open(config, redactor)
    try:
        await _build(proc, started_at)
        return await _serve(proc, on_ready)
    finally:
        await _shut_down(proc)


async def _open(config: Config, redactor: Redactor) -> _Process:
    """The model client, the database, the channels and the single-runner lease."""
    db_holder: list[Database] = []

    async def send_uncertain(method: str, chat_id: int | str | None, reason: str) -> None:
        # Bound late: a channel's client is built before the database, sends start after.
        await db_holder[0].write(audit_send_uncertain, method, chat_id, reason)

    llm = create_llm(config)
    stack = contextlib.AsyncExitStack()
    try:
        db, channels = await open_database_and_channels(config, send_uncertain, stack, redactor)
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
        for one in channels:
            await one.open.close()
        await llm.close()
        raise
    return _Process(config, redactor, llm, db, channels, runner_lock, stack=stack)


def _on_unfinished(
    proc: _Process, outbox: Any, wired: list[services.Services], started_at: float
) -> Callable[[store.InstanceRecord], Awaitable[None]]:
    """Audit an instance that ended unfinished, then the core's and each capability's part.
    `started_at`: when this process began (a turn older than that may have drafts an earlier
    process sent)."""
    db = proc.db

    async def on_unfinished(inst: store.InstanceRecord) -> None:
        await db.write(audit_unfinished, inst)
        # Before any notice about it reaches the chat.
        await end_unanswered(db, outbox, inst, started_at=started_at)
        if inst.status == "cancelled":
            await withdraw_approvals(db, outbox, inst.id)
        elif inst.status == "errored" and (inst.error or "").startswith("stopped after"):
            # A parked turn tells its chat, as a notice of its own: the one send path.
            await tell_parked(proc.engine.start, inst)
        if wired:  # bound once built; instances finish after
            await wired[0].on_unfinished(inst)

    return on_unfinished


def _engine(
    proc: _Process,
    outbox: Any,
    clock: SystemClock,
    wired: list[services.Services],
    started_at: float,
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
        on_finish=_on_unfinished(proc, outbox, wired, started_at),
        crash_limit=config.engine.crash_limit,
    )


async def _build(proc: _Process, started_at: float) -> None:
    """Who we are on each channel, every capability and workflow, then the engine, the
    services and each channel's intake."""
    from agentd.tools.capability import ServiceError

    config, db = proc.config, proc.db
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, partial(_on_stop_signal, proc))
    # `systemctl reload agentd` (ExecReload sends SIGHUP): load the automations again.
    loop.add_signal_handler(signal.SIGHUP, partial(_on_reload_signal, proc))
    outbox = RoutedOutbox({one.channel.block: one.open.outbox for one in proc.channels})
    wired_holder: list[services.Services] = []
    clock = SystemClock()
    engine = proc.engine = _engine(proc, outbox, clock, wired_holder, started_at)
    refused = await _identify(proc)
    if refused is not None:
        await _tell_owner_at_start(proc, *refused)
        raise refused[1]
    if await db.read(store.open_ids_like, STOPPED_NOTICE):  # rare: no write (fsync) otherwise
        await db.write(forget_stopped_notices, time.time())
    log_trust(config)
    proc.username = ", ".join(
        one.identity.username or one.channel.name
        for one in proc.channels
        if one.identity is not None
    )
    files = RoutedFiles([one.open.files for one in proc.channels if one.open.files is not None])
    core = services.Core(
        config, db, proc.llm, outbox, files, clock, engine, proc.redactor, started_at
    )
    wired = await services.build(core, proc.channels, proc.stack)
    wired_holder.append(wired)
    # Before the engine runs: no resumed notice reaches a chat before its stopped draft
    # ends, and the daily prune (a workflow) cannot drop the draft's record first.
    if ended := await end_left_drafts(db, outbox):
        log.info("drafts of turns that ended unanswered ended at start", extra={"count": ended})
    await engine.run()
    try:
        proc.closers = await wired.start()
    except ServiceError as exc:
        raise ConfigProblem(str(exc)) from None
    _start_intake(proc, wired, clock)


async def _identify(proc: _Process) -> tuple[Opened, CredentialsRejected] | None:
    """Who we are on each channel. One whose network refuses agentd's credentials does not
    keep the others from being asked (briefly), so the owner can be told on one of them."""
    refused: tuple[Opened, CredentialsRejected] | None = None
    for one in proc.channels:
        try:
            if refused is None:
                one.identity = await one.open.identify(proc.stop)
                continue
            async with asyncio.timeout(NOTICE_WAIT):
                one.identity = await one.open.identify(proc.stop)
        except CredentialsRejected as exc:
            refused = refused or (one, exc)
        except TimeoutError:
            if refused is None:
                raise
            log.warning("channel not reached", extra={"channel": one.channel.name})
    return refused


async def _tell_owner_at_start(proc: _Process, dead: Opened, problem: CredentialsRejected) -> None:
    """A channel's credentials refused at start: agentd will not run, so an engine of the
    notice alone (nothing else resumed) tells the owner on a channel that answered."""
    live = [one for one in proc.channels if one.identity is not None]
    if not live:
        return
    engine = Engine(proc.db, clock=SystemClock(), redact=proc.redactor)
    for one in live:  # a channel's outbox sends once the daemon has asked for its workflows
        for flow in one.open.workflows(proc.db):
            engine.register(flow)
    outbox = RoutedOutbox({one.channel.block: one.open.outbox for one in live})
    engine.register(make_notice_workflow(proc.db, outbox))
    try:
        await _notice_owner(proc, engine, dead.channel.name, live, problem)
    finally:
        await engine.shutdown(0)


def forget_stopped_notices(conn: Any, now: float) -> int:
    """Every channel took agentd's credentials at this start: a notice that one had refused
    them, still unsent (the other channel was down too), is no longer true, and is cancelled
    rather than sent late. Returns how many."""
    stale = store.open_ids_like(conn, STOPPED_NOTICE)
    for instance_id in stale:
        store.request_cancel(conn, instance_id, now)
    return len(stale)


def _on_stop_signal(proc: _Process) -> None:
    """The first SIGINT or SIGTERM stops gracefully; another one stops without waiting."""
    if proc.stop.is_set():
        proc.hurry.set()
    else:
        proc.stop.set()


def _on_reload_signal(proc: _Process) -> None:
    """SIGHUP: what `agentd automations reload` asks, as a run of its workflow."""
    from agentd.automations.catalog import RELOAD_WORKFLOW
    from agentd.automations.runs import instance_id_for

    engine = proc.engine
    if engine is None or proc.stop.is_set():
        return
    start = engine.start(RELOAD_WORKFLOW, {}, instance_id=instance_id_for(RELOAD_WORKFLOW, None))
    task = asyncio.create_task(start, name="reload")
    proc.tasks.append(task)  # type: ignore[arg-type]
    task.add_done_callback(_said_if_failed)


def _said_if_failed(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not reload the automations", extra={"error": repr(task.exception())})


def _start_intake(proc: _Process, wired: services.Services, clock: SystemClock) -> None:
    config = proc.config
    assert proc.engine is not None
    # The watchdog is fed by the intake loops themselves, so a hung one trips it.
    watchdog = (lambda: sdnotify.notify("WATCHDOG=1")) if sdnotify.watchdog_interval() else None
    intake = Intake(
        db=proc.db,
        engine=proc.engine,
        on_command=wired.router.route,
        on_callback=wired.on_callback,
        busy=config.chat.busy,
        on_progress=watchdog or (lambda: None),
    )
    for one in proc.channels:
        one.task = one.open.serve(intake)
        proc.intakes.append(one.task)
    # Best effort, so its round trip need not delay the first poll.
    proc.tasks.append(asyncio.create_task(publish_menus(proc.channels, wired.router), name="menu"))
    if config.retention.enabled:
        proc.tasks.append(asyncio.create_task(run_daily(proc.engine.start, clock, proc.stop)))


async def _serve(proc: _Process, on_ready: Callable[[str], None] | None) -> int:
    """Ready; then wait for SIGTERM or the end of a channel's intake."""
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
    stop_wait = asyncio.create_task(proc.stop.wait())
    done, _ = await asyncio.wait({stop_wait, *proc.intakes}, return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    for intake in proc.intakes:
        if intake in done and intake.exception() is not None:
            problem = intake.exception()
            log.error(
                "intake stopped", extra={"channel": intake.get_name(), "error": repr(problem)}
            )
            if isinstance(problem, CredentialsRejected):
                await _tell_owner_elsewhere(proc, intake, problem)
            return 1
    return 0


async def _tell_owner_elsewhere(
    proc: _Process, dead: asyncio.Task[None], problem: CredentialsRejected
) -> None:
    """A channel's network refused its credentials: agentd stops (what it would send there
    waits for the fix, rather than failing), but the owner hears why on a channel still open,
    once a UTC day, before it does."""
    live = [one for one in proc.channels if one.task not in (None, dead) and not one.task.done()]
    gone = [one.channel.name for one in proc.channels if one.task is dead]
    if live and gone and proc.engine is not None:
        await _notice_owner(proc, proc.engine, gone[0], live, problem)


async def _notice_owner(
    proc: _Process, engine: Engine, gone: str, live: list[Opened], problem: CredentialsRejected
) -> None:
    """The owner's notice that channel `gone` stopped agentd, in the private chat they last
    wrote in on a `live` channel: once a UTC day (its instance id), waited for at most
    NOTICE_WAIT."""
    owner = owners.resolve(proc.config.access).owner_id
    if owner is None:
        return
    names = [one.channel.name for one in live]
    chat = await proc.db.read(reach.private_chat_among, owner, names)
    if chat is None:
        log.warning("no chat to tell the owner why agentd stops", extra={"channels": names})
        return
    day = time.strftime("%Y-%m-%d", time.gmtime())
    instance = f"{STOPPED_NOTICE}{gone}:{day}"
    text = f"agentd stopped: {problem}. Fix it, then start agentd again."
    try:
        await post_notice(engine.start, instance, chat, text)
        await engine.wait_for(instance, timeout=NOTICE_WAIT)
    except Exception as exc:  # stopping goes on whatever became of the notice
        log.warning("could not tell the owner why agentd stops", extra={"error": repr(exc)})


async def _shut_down(proc: _Process) -> None:
    """Stop taking work, let running steps finish within the grace, close in reverse."""
    sdnotify.notify("STOPPING=1")
    proc.stop.set()
    for close in proc.closers:  # no delivery is accepted that the engine will not see start
        await close()
    for one in proc.channels:
        one.open.stop()
    for task in (*proc.intakes, *proc.tasks):
        task.cancel()
    await asyncio.gather(*proc.intakes, *proc.tasks, return_exceptions=True)
    if proc.engine is not None:
        await proc.engine.shutdown(proc.config.engine.shutdown_grace, proc.hurry)
    await proc.stack.aclose()
    with contextlib.suppress(Exception):
        await proc.db.write(lease.release, proc.pid)
    await proc.db.close()
    proc.runner_lock.release()
    for one in proc.channels:
        await one.open.close()
    await proc.llm.close()
    log.info("agentd stopped")
