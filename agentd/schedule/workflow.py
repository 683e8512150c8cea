"""The occurrence workflow: sleep until due, decide (run / missed), deliver, chain the next one.

Each occurrence is its own instance `sched-<id>-<due>`, created in the same transaction that
records the previous one, so a crash at any moment neither skips an occurrence nor runs one
twice: a finished step is never repeated, and the next instance exists exactly once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.access import owners
from agentd.chat import reach
from agentd.chat.delivery import deliver_text
from agentd.chat.inputs import TurnInput
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.chat.outbox import Outbox
from agentd.config import Config, ScheduleConfig
from agentd.db import Database
from agentd.durable import Clock, Step, StepFailed, Workflow, workflow
from agentd.schedule import store
from agentd.schedule.create import creator_words
from agentd.schedule.recurrence import Recurrence
from agentd.schedule.store import OCCURRENCE_WORKFLOW, CatchUp, OccurrenceInput, Schedule

MAX_MISSED_AT_ONCE = 1000  # a longer backlog is recorded over several instances


class Plan(BaseModel):
    """What this occurrence does, decided once (journaled) from the clock and the schedule."""

    action: Literal["run", "missed", "stopped"]
    kind: store.Action = "message"
    lateness: float = 0.0
    missed: list[int] = Field(default_factory=list)  # later occurrences also missed
    chain: int | None = None  # the next occurrence to start
    # Where a private schedule's run goes: its user's private chat now, on the channel
    # [access] notices names, else where they last wrote (chat/reach.py); None: the
    # schedule's own chat (a group's, or a plan journaled before users had several channels).
    chat_id: int | None = None


class OccurrenceOutput(BaseModel):
    outcome: str
    next_due: int | None = None


@dataclass(frozen=True)
class ScheduleDeps:
    config: Config
    db: Database
    outbox: Outbox
    clock: Clock
    # Starts a workflow idempotently: (name, input, instance_id=, key=) — a prompt's turn.
    start_workflow: Callable[..., Awaitable[Any]]
    kick: Callable[[str], None]  # wake the engine for a key created inside a transaction


def grace_for(cfg: ScheduleConfig, rec: Recurrence, due: int) -> float:
    """How late the latest missed run may be and still run ("once"): a share of its period."""
    period = rec.period(due)
    return cfg.max_grace if period is None else min(cfg.max_grace, period * cfg.grace_fraction)


def _grace(deps: ScheduleDeps, sched: Schedule, due: int) -> float:
    return grace_for(deps.config.schedule, sched.recurrence, due)


def decide(sched: Schedule, due: int, now: float, *, on_time: float, grace: float) -> Plan:
    """The catch-up rule (docs/schedule.md, "Missed runs"), as a pure function of time."""
    if sched.state != "active":
        return Plan(action="stopped")
    return catch_up(sched.recurrence, sched.catch_up, due, now, on_time=on_time, grace=grace)


def catch_up(
    rec: Recurrence, policy: CatchUp, due: int, now: float, *, on_time: float, grace: float
) -> Plan:
    """`decide` for anything that recurs like a schedule (a watch too)."""
    lateness = max(0.0, now - due)
    nxt = rec.next_after(due)
    if lateness <= on_time or policy == "all":
        return Plan(action="run", lateness=lateness, chain=nxt)
    # Late past the on-time window: the agent was down. Collect the backlog up to now.
    backlog: list[int] = []
    while nxt is not None and nxt <= now and len(backlog) < MAX_MISSED_AT_ONCE:
        backlog.append(nxt)
        nxt = rec.next_after(nxt)
    if policy == "skip":
        missed = [t for t in backlog if now - t > on_time]
        rest = backlog[len(missed) :]
        return Plan(
            action="missed", lateness=lateness, missed=missed, chain=rest[0] if rest else nxt
        )
    if backlog:  # "once": only the latest missed occurrence may still run
        return Plan(action="missed", lateness=lateness, missed=backlog[:-1], chain=backlog[-1])
    action: Literal["run", "missed"] = "run" if lateness <= grace else "missed"
    return Plan(action=action, lateness=lateness, chain=nxt)


def stop_unserved(conn: Any, schedule_id: str, due: int, access: Any, now: float) -> bool:
    """A schedule of someone no longer served (removed from the config, or `agentd users rm`
    while the daemon was down) is cancelled instead of run; True when it was."""
    sched = store.get(conn, schedule_id)
    if owners.is_served(conn, access, sched.user_id):
        return False
    conn.execute(
        "UPDATE schedules SET state = 'cancelled', next_run = NULL, updated_at = ? WHERE id = ?",
        (now, schedule_id),
    )
    store.record_run(conn, sched, due, "refused", now, detail="the user is no longer served")
    return True


async def plan_occurrence(deps: ScheduleDeps, inp: OccurrenceInput) -> Plan:
    sched = await deps.db.read(store.get, inp.schedule_id)
    access = deps.config.access
    # Every run re-checks who is served; only a refusal costs a write.
    if not await deps.db.read(owners.is_served, access, sched.user_id):
        now = deps.clock.now()
        if await deps.db.write(stop_unserved, inp.schedule_id, inp.due, access, now):
            return Plan(action="stopped")
    grace = _grace(deps, sched, inp.due)
    on_time = deps.config.schedule.on_time_window
    plan = decide(sched, inp.due, deps.clock.now(), on_time=on_time, grace=grace)
    chat = None
    if sched.chat_kind == "private":
        prefer = deps.config.access.notices
        chat = await deps.db.read(reach.private_chat, sched.user_id, prefer)
    return plan.model_copy(update={"kind": sched.action, "chat_id": chat})


async def send_message(step: Step, deps: ScheduleDeps, inp: OccurrenceInput, plan: Plan) -> int:
    """A reminder, through the one send path (chat/delivery.py): marked, so a kill after
    the channel took it and before its id was committed is re-sent once and counted; kept
    as a notice, so a reply to it quotes what was sent."""
    sched = await deps.db.read(store.get, inp.schedule_id)
    chat = plan.chat_id if plan.chat_id is not None else sched.chat_id
    return await deliver_text(step, deps.db, "send", deps.outbox, chat, sched.text, notice=True)


async def start_turn(
    deps: ScheduleDeps, inp: OccurrenceInput, instance_id: str, chat: int | None = None
) -> str:
    """A prompt runs as an ordinary turn in the owner's chat: same tools, risk policy, budget."""
    sched = await deps.db.read(store.get, inp.schedule_id)
    if chat is not None:
        sched = sched.model_copy(update={"chat_id": chat})
    # Who set it up, and what outside content they had read: the turn says so, and a task a
    # page planted runs tainted (its egress asks the owner again).
    by, after = creator_words(sched.created_by)
    turn = TurnInput(
        origin="schedule",
        chat_id=sched.chat_id,
        chat_kind=sched.chat_kind,
        user_id=sched.user_id,
        date=deps.clock.now(),
        kind="text",
        text=sched.text,
        schedule_id=sched.id,
        scheduled_by=by,
        scheduled_after=after,
    )
    turn_id = f"{instance_id}-turn"
    await deps.start_workflow(TURN_WORKFLOW, turn, instance_id=turn_id, key=chat_key(turn.chat_id))
    return turn_id


async def record(
    deps: ScheduleDeps,
    inp: OccurrenceInput,
    plan: Plan,
    outcome: str,
    instance_id: str | None,
    detail: str,
) -> int | None:
    """This occurrence's outcome, the backlog it skipped, and the next instance: one commit."""
    now = deps.clock.now()

    def write(conn: Any) -> int | None:
        sched = store.get(conn, inp.schedule_id)
        store.record_run(conn, sched, inp.due, outcome, now, instance_id=instance_id, detail=detail)
        for due in plan.missed:
            store.record_run(conn, sched, due, "missed", now, detail="the agent was not running")
        if sched.state != "active":
            return None
        if plan.chain is None:
            conn.execute(
                "UPDATE schedules SET state = 'done', next_run = NULL, updated_at = ? WHERE id = ?",
                (now, sched.id),
            )
            return None
        store.start_occurrence(conn, sched, plan.chain, now)
        return plan.chain

    chained = await deps.db.write(write)
    if chained is not None:
        deps.kick(store.schedule_key(inp.schedule_id))
    return chained


def make_schedule_workflow(deps: ScheduleDeps) -> Workflow[OccurrenceInput, OccurrenceOutput]:
    @workflow(OCCURRENCE_WORKFLOW)
    async def occurrence(step: Step, inp: OccurrenceInput) -> OccurrenceOutput:
        await step.sleep_until("due", float(inp.due))
        plan = await step.do("plan", plan_occurrence, deps, inp)
        if plan.action == "stopped":
            return OccurrenceOutput(outcome="stopped")
        outcome, ref, detail = plan.action, None, ""
        if plan.action == "missed":
            detail = f"{plan.lateness:.0f}s late; catch-up policy"
        else:
            try:
                if plan.kind == "message":
                    msg_id = await send_message(step, deps, inp, plan)
                    outcome, detail = "sent", f"message {msg_id}"  # the chat's own id, any channel
                else:
                    ref = await step.do(
                        "start-turn", start_turn, deps, inp, step.instance_id, plan.chat_id
                    )
                    outcome = "started"
            except StepFailed as exc:
                outcome, detail = "failed", f"{exc.step}: {exc.message}"
            if plan.lateness > deps.config.schedule.on_time_window:
                detail = f"{detail}; caught up {plan.lateness:.0f}s late".lstrip("; ")
        nxt = await step.do("record", record, deps, inp, plan, outcome, ref, detail)
        return OccurrenceOutput(outcome=outcome, next_due=nxt)

    return occurrence
