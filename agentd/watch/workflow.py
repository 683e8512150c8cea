"""A watch's check, one durable instance per due time (`sched-<id>-<due>`, key `watch-<id>`):
sleep until due, decide by the schedule's catch-up rule, read, compare, (only on a change)
ask the small model, and record the outcome with the next occurrence in one commit.

Each step is journaled, so a crash at any moment neither repeats a finished step nor records
a check twice: the read after a crash is read again, the decision once made is kept, and the
check row, what was seen, the messages to send and the next occurrence are one transaction.
Messages leave by their own instance (`watch_tell_v2`), which waits out /mute (`/mute off` ends
the wait) and then quiet hours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel

from agentd.chat.delivery import deliver_text
from agentd.chat.outbox import Outbox
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock, Engine, Step, StepFailed, Workflow, workflow
from agentd.durable.store import OPEN_STATUSES, InstanceRecord
from agentd.llm import LLM
from agentd.llm.structured import StructuredOutputError
from agentd.memory.history import save_message
from agentd.schedule.workflow import Plan, catch_up, grace_for
from agentd.watch import budget, detect, store
from agentd.watch.decide import decide
from agentd.watch.model import ITEM_KINDS, Change, Verdict
from agentd.watch.sources import SourceDeps, read
from agentd.watch.store import TELL_WORKFLOW, WATCH_WORKFLOW, OccurrenceInput, Outcome, Watch

READ_TIMEOUT = 300.0  # seconds


@dataclass(frozen=True)
class WatchDeps:
    config: Config
    db: Database
    outbox: Outbox
    clock: Clock
    llm: LLM
    sources: SourceDeps
    engine: Engine
    kick: Callable[[str], None]


class Observation(BaseModel):
    """One read, compared: the change, or why the source could not be read."""

    ok: bool
    error: str = ""
    change: Change | None = None


class Decision(BaseModel):
    verdict: Verdict | None = None  # None: a cap held the second ask (`cap` says which)
    tokens: int
    # Why a cap held the second ask, after a first answer that did not fit spent up to it.
    cap: str = ""


class Result(BaseModel):
    outcome: Outcome
    detail: str = ""
    tokens: int = 0
    change: Change | None = None
    message: str = ""  # what to tell the owner (told)
    cap: str = ""  # why a cap holds (capped)
    error: str = ""  # why the read failed (failed)


class CheckOutput(BaseModel):
    outcome: str
    next_due: int | None = None


class TellInput(BaseModel):
    watch_id: str
    chat_id: int
    user_id: int
    text: str
    # From the source (a verdict): kept in the chat's history as outside content, so a turn
    # that has it in view is tainted and asks before anything leaves.
    outside: bool = False
    origin_ref: str = ""


class TellOutput(BaseModel):
    message_id: int


class CheckPlan(BaseModel):
    """The catch-up decision, and whether today's cap holds the check: journaled together, so
    a replay past midnight decides as the first run did."""

    plan: Plan
    held: bool = False


async def plan_check(deps: WatchDeps, inp: OccurrenceInput) -> CheckPlan:
    w = await deps.db.read(store.get_any, inp.watch_id)
    if w is None or w.state != "active":
        return CheckPlan(plan=Plan(action="stopped"))
    cfg, now = deps.config.schedule, deps.clock.now()
    grace = grace_for(cfg, w.recurrence, inp.due)
    plan = catch_up(w.recurrence, w.catch_up, inp.due, now, on_time=cfg.on_time_window, grace=grace)
    return CheckPlan(plan=plan, held=w.capped_day == store.utc_day(now))


async def observe(deps: WatchDeps, inp: OccurrenceInput) -> Observation:
    w = await deps.db.read(store.get, inp.watch_id)
    reading = await read(w.source, w.user_id, deps.sources, deps.clock.now())
    if not reading.ok:
        return Observation(ok=False, error=reading.error)
    limit = deps.config.watch.max_change_chars
    if w.source.kind in ITEM_KINDS:
        change = detect.compare_items(w.seen, reading, limit)
    else:  # a diff of two pages is CPU work: off the loop
        change = await asyncio.to_thread(
            partial(
                detect.compare_text,
                w.seen,
                reading,
                w.source.focus,
                limit,
                at=deps.clock.now(),
                memory=deps.config.watch.same_news_hours * 3600,
            )
        )
    if change.kind == "none":  # nothing new to store: keep the journal small
        change = change.model_copy(update={"seen": detect.Seen()})
    return Observation(ok=True, change=change)


async def cap_check(deps: WatchDeps, inp: OccurrenceInput) -> str:
    w = await deps.db.read(store.get, inp.watch_id)
    return await deps.db.read(budget.cap_reason, deps.config, w, deps.clock.now()) or ""


async def run_decision(deps: WatchDeps, inp: OccurrenceInput, shown: str, iid: str) -> Decision:
    w = await deps.db.read(store.get, inp.watch_id)
    held = ""

    async def ask_again() -> bool:
        # The answer that did not fit may have reached a cap alone: the caps hold the second
        # ask as they held the first, counting it (in the ledger as it arrived).
        nonlocal held
        held = await deps.db.read(budget.cap_reason, deps.config, w, deps.clock.now()) or ""
        return not held

    try:
        verdict, tokens = await decide(
            deps.llm,
            deps.db,
            w,
            shown,
            instance_id=iid,
            step="decide",
            ask_again=ask_again,
            now=deps.clock.now,
        )
    except StructuredOutputError as exc:
        if not (exc.stopped and held):
            raise
        # A budget refusal like the one before the first ask: capped, not failed.
        return Decision(tokens=exc.spent.usage.total, cap=held)
    return Decision(verdict=verdict, tokens=tokens)


async def check(step: Step, deps: WatchDeps, inp: OccurrenceInput, held: bool) -> Result:
    if held:
        return Result(outcome="capped", detail="held by today's cap")
    # Each source bounds its own wait (fetch, IMAP, sandbox); this bounds a stuck one.
    seen = await step.do("read", observe, deps, inp, timeout=READ_TIMEOUT)
    if not seen.ok or seen.change is None:
        return Result(outcome="failed", detail=seen.error, error=seen.error)
    change = seen.change
    if change.kind != "changed":
        outcome: Outcome = "baseline" if change.kind == "baseline" else "unchanged"
        detail = "a state decided lately" if change.kind == "decided_before" else ""
        return Result(outcome=outcome, change=change, detail=detail)
    cap = await step.do("cap", cap_check, deps, inp)
    if cap:  # what changed is decided once the cap lifts: `seen` stays as it was
        return Result(outcome="capped", cap=cap, detail=cap)
    made = await step.do("decide", run_decision, deps, inp, change.shown, step.instance_id)
    v = made.verdict
    if v is None:  # the cap came with the first answer: decided once the cap lifts
        return Result(outcome="capped", cap=made.cap, detail=made.cap, tokens=made.tokens)
    if not v.speak or not v.message.strip():
        return Result(outcome="quiet", change=change, tokens=made.tokens, detail=v.reason)
    return Result(
        outcome="told",
        change=change,
        tokens=made.tokens,
        detail=v.reason,
        message=v.message.strip(),
    )


def make_watch_workflow(deps: WatchDeps) -> Workflow[OccurrenceInput, CheckOutput]:
    @workflow(WATCH_WORKFLOW)
    async def occurrence(step: Step, inp: OccurrenceInput) -> CheckOutput:
        await step.sleep_until("due", float(inp.due))
        decided = await step.do("plan", plan_check, deps, inp)
        plan = decided.plan
        if plan.action == "stopped":
            return CheckOutput(outcome="stopped")
        if plan.action == "missed":
            result = Result(outcome="missed", detail=f"{plan.lateness:.0f}s late; catch-up policy")
        else:
            try:
                result = await check(step, deps, inp, decided.held)
            except StepFailed as exc:  # a read or the model failed for good: loudly
                why = f"{'deciding' if exc.step == 'decide' else 'reading'} failed: {exc.message}"
                result = Result(outcome="failed", detail=why, error=why)
        nxt = await step.do("record", record, deps, inp, plan, result)
        return CheckOutput(outcome=result.outcome, next_due=nxt)

    return occurrence


# -- the record: one commit ---------------------------------------------------------------


def _tell(deps: WatchDeps, conn: Any, w: Watch, iid: str, text: str, **extra: Any) -> str:
    inp = TellInput(watch_id=w.id, chat_id=w.chat_id, user_id=w.user_id, text=text, **extra)
    deps.engine.prepare_start(conn, TELL_WORKFLOW, inp, instance_id=iid, key=iid)
    return iid


def _on_failure(deps: WatchDeps, conn: Any, w: Watch, due: int, error: str) -> list[str]:
    """One more failed check in a row; the owner is told once, at `failures_to_tell`."""
    streak = w.fail_streak + 1
    tell = streak >= deps.config.watch.failures_to_tell and not w.failing_told
    conn.execute(
        "UPDATE watches SET fail_streak = ?, failing_told = ? WHERE id = ?",
        (streak, int(w.failing_told or tell), w.id),
    )
    if not tell:
        return []
    times = f"{streak} time{'s' if streak != 1 else ''}"
    text = (
        f"⚠️ Watch {w.id} ({w.label}) failed to check {w.source.describe()} {times} in a row: "
        f"{error}. It keeps trying; `agentd watch show {w.id}` has each check."
    )
    return [_tell(deps, conn, w, f"watch-{w.id}-failing-{due}", text)]


def _on_success(deps: WatchDeps, conn: Any, w: Watch, due: int) -> list[str]:
    """A check that read its source ends a failure streak, and says so if it was told."""
    if not (w.fail_streak or w.failing_told):
        return []
    conn.execute("UPDATE watches SET fail_streak = 0, failing_told = 0 WHERE id = ?", (w.id,))
    if not w.failing_told:
        return []
    text = f"✅ Watch {w.id} ({w.label}) reads its source again."
    return [_tell(deps, conn, w, f"watch-{w.id}-back-{due}", text)]


def _on_cap(deps: WatchDeps, conn: Any, w: Watch, cap: str, now: float) -> list[str]:
    """Held until the next UTC day; told once that day."""
    day = store.utc_day(now)
    conn.execute("UPDATE watches SET capped_day = ? WHERE id = ?", (day, w.id))
    text = (
        f"⏸ Watch {w.id} ({w.label}) is paused until 00:00 UTC: {cap}. What changed will be "
        f"checked then; `agentd watch resume {w.id}` goes on today."
    )
    return [_tell(deps, conn, w, f"watch-{w.id}-capped-{day}", text)]


def _on_read(
    deps: WatchDeps, conn: Any, w: Watch, due: int, result: Result, now: float
) -> list[str]:
    """What was seen is stored (a decided state with when), and a verdict to speak is sent."""
    change = result.change
    if change is not None and (result.outcome != "unchanged" or change.kind == "decided_before"):
        seen = change.seen
        if result.outcome in ("told", "quiet"):
            seen = detect.decided(seen, now)
        store.save_seen(conn, w.id, seen, now)
    if result.outcome != "told":
        return []
    text = f"🔔 {w.label}: {result.message}\n— watch {w.id}, {w.source.describe()}"
    ref = f"a watch on {w.source.describe()}"[:200]
    iid = f"watch-{w.id}-told-{due}"
    return [_tell(deps, conn, w, iid, text, outside=True, origin_ref=ref)]


def _outcome_effects(
    deps: WatchDeps, conn: Any, w: Watch, inp: OccurrenceInput, result: Result, now: float
) -> list[str]:
    """What the outcome changes beyond its row; the ids of the tell instances it starts."""
    if result.outcome == "failed":
        return _on_failure(deps, conn, w, inp.due, result.error)
    if result.outcome == "missed" or (result.outcome == "capped" and not result.cap):
        return []  # nothing was read
    started = _on_success(deps, conn, w, inp.due)
    if result.outcome == "capped":
        return [*started, *_on_cap(deps, conn, w, result.cap, now)]
    return [*started, *_on_read(deps, conn, w, inp.due, result, now)]


async def record(deps: WatchDeps, inp: OccurrenceInput, plan: Plan, result: Result) -> int | None:
    now = deps.clock.now()

    def write(conn: Any) -> tuple[int | None, list[str]]:
        w = store.get_any(conn, inp.watch_id)
        if w is None:
            return None, []
        started: list[str] = []
        if store.record_check(
            conn, w, inp.due, result.outcome, now, tokens=result.tokens, detail=result.detail
        ):
            started = _outcome_effects(deps, conn, w, inp, result, now)
            for due in plan.missed:
                store.record_check(conn, w, due, "missed", now, detail="the agent was not running")
        fresh = store.get_any(conn, inp.watch_id)
        if fresh is None or fresh.state != "active" or plan.chain is None:
            return None, started
        store.start_occurrence(conn, fresh, plan.chain, now)
        return plan.chain, started

    chained, started = await deps.db.write(write)
    for iid in started:
        deps.kick(iid)
    if chained is not None:
        deps.kick(store.watch_key(inp.watch_id))
    return chained


# -- a check that ended unfinished ----------------------------------------------------------


def _rechain(conn: Any, deps: WatchDeps, inp: OccurrenceInput, error: str, now: float) -> list[str]:
    """The check errored (a step that failed for good, or a crash loop parked it): its row says
    so, the owner is told once, and the watch goes on from its next due time."""
    w = store.get_any(conn, inp.watch_id)
    if w is None or w.state != "active":
        return []
    store.record_check(conn, w, inp.due, "failed", now, detail=error)
    text = (
        f"⚠️ Watch {w.id} ({w.label}): a check stopped with an error ({error[:200]}). It goes "
        f"on from the next check; `agentd watch show {w.id}` has each one."
    )
    started = [_tell(deps, conn, w, f"watch-{w.id}-broke-{inp.due}", text)]
    open_ones = conn.execute(
        f"SELECT COUNT(*) FROM workflow_instances WHERE key = ? AND status IN {OPEN_STATUSES!r}",
        (store.watch_key(w.id),),
    ).fetchone()[0]
    due = w.recurrence.next_after(now)
    if not open_ones and due is not None:
        store.start_occurrence(conn, w, due, now, resumed=True)
        started.append(store.watch_key(w.id))
    return started


async def on_unfinished(deps: WatchDeps, inst: InstanceRecord) -> None:
    if inst.workflow != WATCH_WORKFLOW or inst.status != "errored":
        return  # a cancelled check is a pause or a removal: nothing to tell
    inp = OccurrenceInput.model_validate_json(inst.input)
    now = deps.clock.now()
    error = inst.error or "unknown error"
    for key in await deps.db.write(_rechain, deps, inp, error, now):
        deps.kick(key)


# -- telling ------------------------------------------------------------------------------


async def hold(deps: WatchDeps, inp: TellInput) -> float:
    """Quiet hours and /mute at once: the hold of the legacy flow."""
    muted = await deps.db.read(store.muted_until, inp.chat_id)
    cfg = deps.config
    return budget.hold_until(deps.clock.now(), cfg.watch.quiet_hours, cfg.agent.timezone, muted)


async def mute_left(deps: WatchDeps, inp: TellInput) -> float:
    """Seconds the chat's /mute still holds the message (journaled: a replay waits the same)."""
    muted = await deps.db.read(store.muted_until, inp.chat_id)
    return max(0.0, muted - deps.clock.now())


async def quiet_until(deps: WatchDeps, inp: TellInput) -> float:
    cfg = deps.config
    return budget.hold_until(deps.clock.now(), cfg.watch.quiet_hours, cfg.agent.timezone, 0.0)


async def remember(deps: WatchDeps, inp: TellInput, message_id: int, instance_id: str) -> None:
    await deps.db.write(
        partial(
            save_message,
            chat_id=inp.chat_id,
            user_id=None,
            role="assistant",
            content=inp.text,
            source_key=f"{instance_id}:told",
            instance_id=instance_id,
            telegram_message_ids=[message_id],
            origin="outside",
            origin_ref=inp.origin_ref,
        )
    )


async def _send(step: Step, deps: WatchDeps, inp: TellInput) -> TellOutput:
    message_id = await deliver_text(
        step, deps.db, "send", deps.outbox, inp.chat_id, inp.text, notice=True
    )
    if inp.outside:
        await step.do("remember", remember, deps, inp, message_id, step.instance_id)
    return TellOutput(message_id=message_id)


def make_tell_workflow(deps: WatchDeps) -> Workflow[TellInput, TellOutput]:
    @workflow(TELL_WORKFLOW)
    async def tell(step: Step, inp: TellInput) -> TellOutput:
        left = await step.do("muted", mute_left, deps, inp)
        if left > 0:  # `/mute off` sends the event; else the mute's end times it out
            await step.wait_for_event(store.UNMUTE_EVENT, left, name="mute")
        # Journaled, so a replay waits for the same moment (a past one returns at once).
        until = await step.do("hold", quiet_until, deps, inp)
        await step.sleep_until("quiet", until)
        return await _send(step, deps, inp)

    return tell


def make_legacy_tell_workflow(deps: WatchDeps) -> Workflow[TellInput, TellOutput]:
    """The flow of messages held before /mute was an event wait: quiet hours and mute in one
    sleep, kept so that a message asleep in it across an upgrade is still delivered."""

    @workflow(store.LEGACY_TELL_WORKFLOW)
    async def tell(step: Step, inp: TellInput) -> TellOutput:
        until = await step.do("hold", hold, deps, inp)
        await step.sleep_until("quiet", until)
        return await _send(step, deps, inp)

    return tell
