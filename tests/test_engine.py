"""Units for the durable engine: memoization, retries, timeouts, sleeps, events, recovery."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentd.db import Database
from agentd.durable import (
    Engine,
    FakeClock,
    InvalidInput,
    Limits,
    NonRetryable,
    OutcomeUnknown,
    Retry,
    Step,
    StepFailed,
    store,
    workflow,
)
from agentd.runtime.redact import Redactor


class In(BaseModel):
    n: int = 0
    label: str = ""


class Out(BaseModel):
    value: object = None


class Calls:
    """Counts executions of named effects, the DBOS way (STYLE.md 4)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())


async def make_engine(db: Database, *workflows, clock=None, **kw) -> Engine:
    kw.setdefault("poll_interval", 0.02)
    engine = Engine(db, clock=clock or FakeClock(auto_advance=True), **kw)
    for wf in workflows:
        engine.register(wf)
    await engine.run()
    return engine


async def test_steps_are_memoized_across_a_restart(db: Database) -> None:
    calls = Calls()

    async def effect(name: str) -> int:
        calls.counts[name] += 1
        if name == "second":
            await calls.gate("second").wait()
        return len(name)

    @workflow("two_steps")
    async def two_steps(step: Step, inp: In) -> Out:
        a = await step.do("first", effect, "first")
        b = await step.do("second", effect, "second")
        return Out(value=a + b)

    engine = await make_engine(db, two_steps)
    await engine.start("two_steps", In(), instance_id="i1")
    while calls.counts["second"] == 0:
        await asyncio.sleep(0.005)
    await engine.shutdown(grace=0)  # like a crash in the middle of "second"
    assert (await db.read(store.get_instance, "i1")).status == "running"

    calls.gate("second").set()
    engine2 = await make_engine(db, two_steps)
    inst = await engine2.wait_for("i1")
    assert inst.status == "complete"
    assert Out.model_validate_json(inst.output).value == 11
    assert calls.counts == {"first": 1, "second": 2}  # first replayed, second re-run
    attempts = await db.read(store.load_attempts, "i1")
    # At-least-once steps write no row before their effect (R-DUR-7 asks that only of
    # at-most-once ones), so the interrupted run of "second" left nothing to count.
    assert [(a.ordinal, a.attempt, a.outcome) for a in attempts] == [
        (1, 1, "complete"),
        (2, 1, "complete"),
    ]
    await engine2.shutdown()


async def test_retries_with_backoff_then_success(db: Database) -> None:
    clock = FakeClock(auto_advance=True)
    calls = Calls()

    async def flaky() -> str:
        calls.counts["flaky"] += 1
        if calls.counts["flaky"] < 3:
            raise ConnectionError("boom")
        return "ok"

    @workflow("flaky")
    async def wf(step: Step, inp: In) -> Out:
        t0 = step.clock.now()
        value = await step.do("flaky", flaky, retry=Retry(limit=5, delay=2, backoff="exponential"))
        return Out(value=[value, step.clock.now() - t0])

    engine = await make_engine(db, wf, clock=clock)
    await engine.start("flaky", In(), instance_id="f")
    inst = await engine.wait_for("f")
    value, waited = Out.model_validate_json(inst.output).value
    assert value == "ok" and calls.counts["flaky"] == 3
    assert waited == pytest.approx(2 + 4)  # exponential: 2 s, then 4 s
    attempts = await db.read(store.load_attempts, "f")
    assert [a.outcome for a in attempts] == ["failed", "failed", "complete"]
    assert "ConnectionError: boom" in attempts[0].error
    await engine.shutdown()


@pytest.mark.parametrize(("backoff", "expected"), [("constant", [3, 3, 3]), ("linear", [3, 6, 9])])
async def test_backoff_shapes(db: Database, backoff: str, expected: list[float]) -> None:
    clock = FakeClock(auto_advance=True)
    times: list[float] = []

    async def always_fails() -> None:
        times.append(clock.now())
        raise RuntimeError("no")

    @workflow("shape")
    async def wf(step: Step, inp: In) -> Out:
        try:
            await step.do("x", always_fails, retry=Retry(limit=4, delay=3, backoff=backoff))
        except StepFailed as exc:
            return Out(value=exc.error_type)
        return Out()

    engine = await make_engine(db, wf, clock=clock)
    await engine.start("shape", In(), instance_id="s")
    inst = await engine.wait_for("s")
    assert Out.model_validate_json(inst.output).value == "RuntimeError"
    assert [b - a for a, b in itertools.pairwise(times)] == expected
    await engine.shutdown()


async def test_non_retryable_stops_at_once_and_failure_replays(db: Database) -> None:
    calls = Calls()

    async def bad() -> None:
        calls.counts["bad"] += 1
        raise NonRetryable("400 from upstream")

    @workflow("nr")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("bad", bad, retry=Retry(limit=5, delay=1))
        return Out()

    engine = await make_engine(db, wf)
    await engine.start("nr", In(), instance_id="nr1")
    inst = await engine.wait_for("nr1")
    assert inst.status == "errored"
    assert "400 from upstream" in inst.error
    assert calls.counts["bad"] == 1
    await engine.shutdown()


async def test_attempt_timeout(db: Database) -> None:
    async def hangs() -> None:
        await asyncio.sleep(30)

    @workflow("hang")
    async def wf(step: Step, inp: In) -> Out:
        try:
            await step.do("hang", hangs, timeout=0.05, retry=Retry(limit=2, delay=0))
        except StepFailed as exc:
            return Out(value=exc.message)
        return Out()

    engine = await make_engine(db, wf)
    await engine.start("hang", In(), instance_id="h")
    inst = await engine.wait_for("h")
    assert "timed out after 0.05s" in Out.model_validate_json(inst.output).value
    attempts = await db.read(store.load_attempts, "h")
    assert [a.outcome for a in attempts] == ["failed", "failed"]
    await engine.shutdown()


async def test_sleep_survives_restart_and_wakes_at_original_time(db: Database) -> None:
    clock = FakeClock()

    @workflow("sleeper")
    async def wf(step: Step, inp: In) -> Out:
        await step.sleep("nap", 3600)
        return Out(value=step.clock.now())

    engine = await make_engine(db, wf, clock=clock)
    start = clock.now()
    await engine.start("sleeper", In(), instance_id="z")
    while (await db.read(store.get_instance, "z")).status != "sleeping":
        await asyncio.sleep(0.005)
    inst = await db.read(store.get_instance, "z")
    assert inst.wake_at == start + 3600
    await engine.shutdown()

    clock.advance(1800)
    engine2 = await make_engine(db, wf, clock=clock)
    while clock.sleepers == 0:
        await asyncio.sleep(0.005)
    clock.advance(1799)
    # advance() wakes every due sleeper before it returns: the one at +3600 is still asleep.
    assert clock.sleepers == 1
    assert (await db.read(store.get_instance, "z")).status == "sleeping"
    clock.advance(1)
    inst = await engine2.wait_for("z")
    assert Out.model_validate_json(inst.output).value == start + 3600
    await engine2.shutdown()


async def test_sleep_until_past_time_wakes_at_once(db: Database) -> None:
    clock = FakeClock()

    @workflow("late")
    async def wf(step: Step, inp: In) -> Out:
        await step.sleep_until("when", step.clock.now() - 10)
        return Out(value="woke")

    engine = await make_engine(db, wf, clock=clock)
    await engine.start("late", In(), instance_id="l")
    assert (await engine.wait_for("l")).status == "complete"
    await engine.shutdown()


def _waiting_workflow(timeout: float = 60):
    @workflow("waiter")
    async def wf(step: Step, inp: In) -> Out:
        event = await step.wait_for_event("approval", timeout=timeout)
        return Out(value=None if event is None else event.payload)

    return wf


async def test_event_sent_before_the_wait_is_kept(db: Database) -> None:
    engine = Engine(db, clock=FakeClock(), poll_interval=0.02)
    engine.register(_waiting_workflow())
    # The event arrives before the instance even exists or runs.
    await db.write(store.insert_event, "w1", "approval", {"ok": True}, 0.0, "evt-1")
    await engine.start("waiter", In(), instance_id="w1")
    await engine.run()
    inst = await engine.wait_for("w1")
    assert Out.model_validate_json(inst.output).value == {"ok": True}
    await engine.shutdown()


async def test_event_after_the_wait_from_another_connection(db: Database, tmp_path: Path) -> None:
    engine = await make_engine(db, _waiting_workflow(), clock=FakeClock())
    await engine.start("waiter", In(), instance_id="w2")
    while (await db.read(store.get_instance, "w2")).status != "waiting":
        await asyncio.sleep(0.005)
    # The CLI writes through its own connection; the engine's poller must notice.
    other = await Database.open(tmp_path / "test.db")
    assert await other.write(store.insert_event, "w2", "approval", {"by": "cli"}, 0.0, "e2")
    assert not await other.write(store.insert_event, "w2", "approval", {"by": "cli"}, 0.0, "e2")
    await other.close()
    inst = await engine.wait_for("w2", timeout=5)
    assert Out.model_validate_json(inst.output).value == {"by": "cli"}
    await engine.shutdown()


async def test_wait_times_out_and_the_workflow_handles_it(db: Database) -> None:
    clock = FakeClock()
    engine = await make_engine(db, _waiting_workflow(timeout=100), clock=clock)
    await engine.start("waiter", In(), instance_id="w3")
    while clock.sleepers == 0:
        await asyncio.sleep(0.005)
    clock.advance(100)
    inst = await engine.wait_for("w3")
    assert inst.status == "complete"
    assert Out.model_validate_json(inst.output).value is None
    await engine.shutdown()


async def test_wait_survives_restart(db: Database) -> None:
    clock = FakeClock()
    engine = await make_engine(db, _waiting_workflow(timeout=100), clock=clock)
    await engine.start("waiter", In(), instance_id="w4")
    while clock.sleepers == 0:
        await asyncio.sleep(0.005)
    await engine.shutdown()
    clock.advance(60)
    engine2 = await make_engine(db, _waiting_workflow(timeout=100), clock=clock)
    while clock.sleepers == 0:
        await asyncio.sleep(0.005)
    clock.advance(39)
    await engine2.send_event("w4", "approval", {"late": True})
    inst = await engine2.wait_for("w4")
    assert Out.model_validate_json(inst.output).value == {"late": True}
    await engine2.shutdown()


async def test_cancel_a_waiting_instance_and_a_queued_one(db: Database) -> None:
    engine = await make_engine(db, _waiting_workflow(), clock=FakeClock())
    await engine.start("waiter", In(), instance_id="c1", key="chat")
    await engine.start("waiter", In(), instance_id="c2", key="chat")
    while (await db.read(store.get_instance, "c1")).status != "waiting":
        await asyncio.sleep(0.005)
    assert await engine.cancel("c2") == "cancelled"  # queued behind c1: cancelled at once
    assert await engine.cancel("c1") == "cancel_requested"
    assert (await engine.wait_for("c1")).status == "cancelled"
    assert (await engine.wait_for("c2")).status == "cancelled"
    await engine.shutdown()


async def test_divergent_replay_is_detected(db: Database) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    async def blocked() -> None:
        entered.set()
        await gate.wait()

    async def nothing() -> int:
        return 1

    @workflow("div")
    async def v1(step: Step, inp: In) -> Out:
        await step.do("alpha", nothing)
        await step.do("beta", blocked)
        return Out()

    @workflow("div")
    async def v2(step: Step, inp: In) -> Out:
        await step.do("renamed", nothing)
        return Out()

    engine = await make_engine(db, v1)
    await engine.start("div", In(), instance_id="d")
    await asyncio.wait_for(entered.wait(), 5)
    assert len(await db.read(store.load_steps, "d")) == 1  # "beta" is in flight, not journaled
    await engine.shutdown(grace=0)
    engine2 = await make_engine(db, v2)
    inst = await engine2.wait_for("d")
    assert inst.status == "errored"
    assert "diverged at step 1" in inst.error and "'alpha'" in inst.error
    await engine2.shutdown()


async def test_limits_result_size_and_steps(db: Database) -> None:
    async def big() -> str:
        return "x" * 5000

    async def small() -> int:
        return 1

    @workflow("big")
    async def wf_big(step: Step, inp: In) -> Out:
        await step.do("big", big, retry=Retry(limit=3, delay=0))
        return Out()

    @workflow("many")
    async def wf_many(step: Step, inp: In) -> Out:
        for i in range(20):
            await step.do(f"s#{i}", small)
        return Out()

    engine = await make_engine(
        db, wf_big, wf_many, limits=Limits(max_step_result_bytes=1024, max_steps_per_instance=10)
    )
    await engine.start("big", In(), instance_id="b")
    await engine.start("many", In(), instance_id="m")
    inst = await engine.wait_for("b")
    assert inst.status == "errored" and "1024-byte limit" in inst.error
    assert len(await db.read(store.load_attempts, "b")) == 1  # not retried
    inst = await engine.wait_for("m")
    assert inst.status == "errored" and "exceeded 10 steps" in inst.error
    with pytest.raises(InvalidInput):
        await engine.start("big", {"n": "not a number"}, instance_id="bad")
    assert await db.read(store.find_instance, "bad") is None
    await engine.shutdown()


async def test_same_key_runs_in_order_and_keys_run_concurrently(db: Database) -> None:
    log: list[tuple[str, str]] = []
    running = Counter[str]()
    peak = {"n": 0}

    async def work(label: str) -> None:
        running["all"] += 1
        peak["n"] = max(peak["n"], running["all"])
        log.append(("start", label))
        await asyncio.sleep(0.01)
        log.append(("end", label))
        running["all"] -= 1

    @workflow("ordered")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("work", work, inp.label)
        return Out()

    engine = await make_engine(db, wf, concurrency=3)
    for i in range(6):
        for chat in ("a", "b", "c", "d"):
            await engine.start(
                "ordered", In(label=f"{chat}{i}"), instance_id=f"{chat}{i}", key=chat
            )
    for chat in "abcd":
        await engine.wait_for(f"{chat}5")
    for chat in "abcd":
        starts = [label for kind, label in log if kind == "start" and label[0] == chat]
        assert starts == [f"{chat}{i}" for i in range(6)]
        # one at a time per chat: every start of a chat follows the end of its previous turn
        events = [(kind, label) for kind, label in log if label[0] == chat]
        assert all(events[i][0] != events[i + 1][0] for i in range(len(events) - 1))
    assert peak["n"] == 3  # concurrent across chats, capped by the limit
    await engine.shutdown()


async def test_idempotent_start(db: Database) -> None:
    calls = Calls()

    async def once() -> None:
        calls.counts["once"] += 1

    @workflow("once")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("once", once)
        return Out()

    engine = await make_engine(db, wf)
    first = await engine.start("once", In(), instance_id="tg-update-7")
    second = await engine.start("once", In(), instance_id="tg-update-7")
    assert first.created and not second.created
    await engine.wait_for("tg-update-7")
    await engine.wait_idle()
    assert calls.counts["once"] == 1
    await engine.shutdown()


async def test_at_most_once_step_reports_unknown_after_a_crash(db: Database) -> None:
    calls = Calls()

    async def dangerous() -> str:
        calls.counts["dangerous"] += 1
        await calls.gate("dangerous").wait()
        return "done"

    @workflow("amo")
    async def wf(step: Step, inp: In) -> Out:
        try:
            return Out(value=await step.do("rm", dangerous, delivery="at_most_once"))
        except OutcomeUnknown:
            return Out(value="unknown")

    engine = await make_engine(db, wf)
    await engine.start("amo", In(), instance_id="a")
    while calls.counts["dangerous"] == 0:
        await asyncio.sleep(0.005)
    await engine.shutdown(grace=0)
    engine2 = await make_engine(db, wf)
    inst = await engine2.wait_for("a")
    assert Out.model_validate_json(inst.output).value == "unknown"
    assert calls.counts["dangerous"] == 1
    await engine2.shutdown()


async def test_retry_an_errored_instance_reuses_completed_steps(db: Database) -> None:
    calls = Calls()
    broken = {"on": True}

    async def fine() -> int:
        calls.counts["fine"] += 1
        return 1

    async def fragile() -> int:
        calls.counts["fragile"] += 1
        if broken["on"]:
            raise RuntimeError("upstream down")
        return 2

    @workflow("retryable")
    async def wf(step: Step, inp: In) -> Out:
        a = await step.do("fine", fine)
        b = await step.do("fragile", fragile)
        return Out(value=a + b)

    engine = await make_engine(db, wf)
    await engine.start("retryable", In(), instance_id="r")
    assert (await engine.wait_for("r")).status == "errored"
    broken["on"] = False
    await engine.retry("r")
    inst = await engine.wait_for("r")
    assert inst.status == "complete" and Out.model_validate_json(inst.output).value == 3
    assert calls.counts == {"fine": 1, "fragile": 2}
    await engine.shutdown()


async def test_typed_step_results_round_trip(db: Database) -> None:
    class Reply(BaseModel):
        text: str
        ids: list[int]

    async def make() -> Reply:
        return Reply(text="hi", ids=[1, 2])

    @workflow("typed")
    async def wf(step: Step, inp: In) -> Out:
        reply = await step.do("make", make, result_type=Reply)
        assert isinstance(reply, Reply)
        with pytest.raises(StepFailed, match="pass result_type"):
            await step.do("untyped", make)  # a local class cannot be resolved from annotations
        return Out(value=reply.ids)

    engine = await make_engine(db, wf)
    await engine.start("typed", In(), instance_id="t")
    assert Out.model_validate_json((await engine.wait_for("t")).output).value == [1, 2]
    await engine.shutdown()


async def test_cancel_during_a_retrying_step_is_not_swallowed(db: Database) -> None:
    calls = Calls()

    async def slow() -> None:
        calls.counts["slow"] += 1
        await asyncio.sleep(30)

    @workflow("slow")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("slow", slow, retry=Retry(limit=3, delay=0))
        return Out()

    engine = await make_engine(db, wf)
    await engine.start("slow", In(), instance_id="s1")
    while calls.counts["slow"] == 0:
        await asyncio.sleep(0.005)
    await engine.cancel("s1")
    assert (await engine.wait_for("s1")).status == "cancelled"
    assert calls.counts["slow"] == 1  # not retried after the cancel
    await engine.shutdown(grace=0)


async def test_a_step_cancelled_from_inside_fails_instead_of_looping(db: Database) -> None:
    calls = Calls()

    async def cancels_itself() -> None:
        calls.counts["inner"] += 1
        raise asyncio.CancelledError()

    @workflow("inner")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("inner", cancels_itself, retry=Retry(limit=2, delay=0))
        return Out()

    engine = await make_engine(db, wf)
    await engine.start("inner", In(), instance_id="x")
    inst = await engine.wait_for("x")
    assert inst.status == "errored" and "cancelled from inside" in inst.error
    assert calls.counts["inner"] == 2
    await engine.shutdown()


async def test_cancel_while_waiting_for_a_slot_sticks(db: Database) -> None:
    gate = asyncio.Event()
    calls = Calls()

    async def hold(label: str) -> None:
        calls.counts[label] += 1
        await gate.wait()

    @workflow("slot")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("hold", hold, inp.label)
        return Out()

    engine = await make_engine(db, wf, concurrency=1)
    await engine.start("slot", In(label="a"), instance_id="a", key="ka")
    while calls.counts["a"] == 0:
        await asyncio.sleep(0.005)
    await engine.start("slot", In(label="b"), instance_id="b", key="kb")
    # b's runner now waits for the only slot (asyncio.Semaphore has no public waiter count).
    while not engine._slots._waiters:
        await asyncio.sleep(0.005)
    await db.write(store.request_cancel, "b", 0.0)  # as the CLI would, via the database
    gate.set()
    await engine.wait_for("a")
    assert (await engine.wait_for("b")).status == "cancelled"
    assert calls.counts["b"] == 0
    await engine.shutdown()


async def test_errors_are_redacted_before_they_are_journaled(db: Database) -> None:
    secret = "123456:SECRET-token"

    async def leaky() -> None:
        raise RuntimeError(f"GET https://api.telegram.org/file/bot{secret}/x failed")

    @workflow("leaky")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("leaky", leaky)
        return Out()

    engine = Engine(
        db,
        clock=FakeClock(auto_advance=True),
        poll_interval=0.02,
        redact=lambda text: text.replace(secret, "[REDACTED]"),
    )
    engine.register(wf)
    await engine.run()
    await engine.start("leaky", In(), instance_id="l")
    inst = await engine.wait_for("l")
    rows = await db.fetchall("SELECT error FROM workflow_steps")
    rows += await db.fetchall("SELECT error FROM workflow_attempts")
    dump = " ".join(str(r[0]) for r in rows)
    assert "failed" in dump
    assert secret not in (inst.error or "") and secret not in dump
    assert "[REDACTED]" in inst.error
    await engine.shutdown()


async def test_a_secret_a_step_returns_is_journaled_and_handed_back_hidden(db: Database) -> None:
    """The journal keeps no secret, and the run reads what the journal holds: live and after
    a restart the step's value is the same, the secret hidden, whatever shape it has."""
    secret = "123456"  # a number-like secret: hiding it must leave valid JSON
    token = "s3cr3t-token"
    seen: list[object] = []
    gate, reached = asyncio.Event(), asyncio.Event()
    calls = Calls()

    async def leaky() -> dict[str, object]:
        calls.counts["leaky"] += 1
        return {"pin": secret, "n": 7, "nested": [f"Bearer {token}", "plain"]}

    @workflow("leaky")
    async def wf(step: Step, inp: In) -> Out:
        got = await step.do("fetch", leaky)
        seen.append(got)
        if len(seen) == 1:
            reached.set()
            await gate.wait()  # the first run stops here; the second replays the step
        return Out(value=got)

    first = await make_engine(db, wf, redact=Redactor([secret, token]))
    await first.start("leaky", In(), instance_id="x")
    await reached.wait()
    await first.shutdown()
    second = await make_engine(db, wf, redact=Redactor([secret, token]))
    inst = await second.wait_for("x")
    await second.shutdown()
    hidden = {"pin": "[REDACTED]", "n": 7, "nested": ["Bearer [REDACTED]", "plain"]}
    assert seen == [hidden, hidden] and calls.counts["leaky"] == 1
    assert inst.status == "complete"
    rows = await db.fetchall("SELECT result FROM workflow_steps")
    rows += await db.fetchall("SELECT output FROM workflow_instances")
    dump = " ".join(str(r[0]) for r in rows)
    assert secret not in dump and token not in dump and "[REDACTED]" in dump


async def test_an_error_that_says_it_is_not_retryable_is_not_retried(db: Database) -> None:
    calls = Calls()

    class Rejected(Exception):
        retryable = False

    async def rejected() -> None:
        calls.counts["rejected"] += 1
        raise Rejected("400 bad request")

    @workflow("rejected")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("call", rejected, retry=Retry(limit=3, delay=0))
        return Out()

    engine = await make_engine(db, wf)
    await engine.start("rejected", In(), instance_id="r")
    assert (await engine.wait_for("r")).status == "errored"
    assert calls.counts["rejected"] == 1
    await engine.shutdown()


@pytest.mark.parametrize("delivery", ["marked", "at_most_once"])
async def test_a_cancel_committed_before_an_effect_begins_stops_it(
    db: Database, delivery: str
) -> None:
    """The intake flags a turn for cancel in its own commit and tells the runner afterwards;
    the turn's send must not begin in between (the answer the user asked to drop)."""
    gate = asyncio.Event()
    calls = Calls()

    async def think() -> str:
        await gate.wait()
        return "answer"

    async def send(text: str) -> None:
        calls.counts["send"] += 1

    @workflow("answer")
    async def wf(step: Step, inp: In) -> Out:
        text = await step.do("think", think)
        if delivery == "marked":
            await step.do("send", send, text, mark=True)
        else:
            await step.do("send", send, text, delivery="at_most_once")
        return Out()

    engine = await make_engine(db, wf, poll_interval=3600)
    await engine.start("answer", In(), instance_id="t")
    while not await db.read(
        lambda c: (
            c.execute("SELECT 1 FROM workflow_steps WHERE instance_id = 't'").fetchone()
            or c.execute("SELECT runs FROM workflow_instances WHERE id = 't'").fetchone()[0]
        )
    ):
        await asyncio.sleep(0.005)
    assert await db.write(store.request_cancel, "t", 0.0) == "cancel_requested"
    gate.set()
    inst = await engine.wait_for("t")
    assert inst.status == "cancelled"
    assert calls.counts["send"] == 0
    assert not await db.read(
        lambda c: c.execute(
            "SELECT 1 FROM workflow_steps WHERE instance_id = 't' AND name = 'send'"
        ).fetchone()
    )
    await engine.shutdown()


async def test_a_flag_committed_by_an_intake_stops_the_next_ordinary_step(db: Database) -> None:
    """An intake flags a working turn in its commit and then stops its task. The turn's
    pending step may finish in the same moment (its model answer arriving): the step after it,
    an ordinary one (a low-risk tool) that reads no flag, must not run."""
    gate = asyncio.Event()
    calls = Calls()
    loop = asyncio.get_running_loop()

    async def think() -> str:
        await gate.wait()
        return "use the tool"

    async def tool(text: str) -> None:
        calls.counts["tool"] += 1

    @workflow("turn")
    async def wf(step: Step, inp: In) -> Out:
        await step.do("tool", tool, await step.do("think", think))
        return Out()

    def flag_as_the_answer_arrives(conn) -> str:
        status = store.request_cancel(conn, "t", 0.0)
        loop.call_soon_threadsafe(gate.set)  # the answer lands while the intake commits
        return status

    engine = await make_engine(db, wf, poll_interval=3600)
    await engine.start("turn", In(), instance_id="t")
    while not await db.read(
        lambda c: c.execute("SELECT runs FROM workflow_instances WHERE id = 't'").fetchone()[0]
    ):
        await asyncio.sleep(0.005)
    assert await db.write(flag_as_the_answer_arrives) == "cancel_requested"
    engine.stop_flagged("t")
    assert (await engine.wait_for("t")).status == "cancelled"
    assert calls.counts["tool"] == 0
    await engine.shutdown()


@pytest.mark.parametrize("delivery", ["marked", "at_most_once", "retried"])
async def test_a_step_that_needs_a_restart_waits_for_it_and_then_runs_once(
    db: Database, delivery: str
) -> None:
    """An error saying its effect cannot happen while this process runs (credentials the
    network refused) neither fails the instance nor is tried again here: the instance waits,
    its key kept, and the next start runs the step again, with nothing counted as a send that
    may have landed."""
    calls = Calls()
    refused = {"on": True}

    class Refused(Exception):
        needs_restart = True

    async def send() -> int:
        calls.counts["send"] += 1
        if refused["on"]:
            raise Refused("401 the token was rejected")
        return 7

    async def later() -> None:
        calls.counts["later"] += 1

    @workflow("held")
    async def held(step: Step, inp: In) -> Out:
        if inp.label == "later":
            await step.do("later", later)
            return Out()
        kw: dict = {
            "marked": {"mark": True},
            "at_most_once": {"delivery": "at_most_once"},
            "retried": {"retry": Retry(limit=3, delay=0)},
        }[delivery]
        return Out(value=await step.do("send", send, **kw))

    engine = await make_engine(db, held)
    await engine.start("held", In(), instance_id="h", key="chat")
    await engine.start("held", In(label="later"), instance_id="l", key="chat")
    while (await db.read(store.get_instance, "h")).status in ("queued", "running"):
        await asyncio.sleep(0.005)
    await engine.settled()
    assert (await db.read(store.get_instance, "h")).status == "waiting"
    assert (calls.counts["send"], calls.counts["later"]) == (1, 0)  # no retry; the key kept
    assert (await db.read(store.get_instance, "h")).waiting_for == "restart"
    await engine.shutdown(grace=0)
    assert (await db.read(store.get_instance, "h")).status == "waiting"

    refused["on"] = False
    engine = await make_engine(db, held)
    assert (await engine.wait_for("h")).output == '{"value":7}'
    assert (await engine.wait_for("l")).status == "complete"
    assert (calls.counts["send"], calls.counts["later"]) == (2, 1)
    outcomes = await db.read(
        lambda c: c.execute(
            "SELECT outcome FROM workflow_attempts WHERE instance_id = 'h' ORDER BY attempt"
        ).fetchall()
    )
    assert [row[0] for row in outcomes] == ["failed", "complete"]  # none left "running"
    await engine.shutdown()
