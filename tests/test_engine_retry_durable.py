"""A long retry backoff is a durable sleep: a restart neither restarts the wait nor skips it,
the attempts count across restarts, and an owner's retry gives the step its attempts again."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from pydantic import BaseModel

from agentd.db import Database
from agentd.durable import Engine, FakeClock, Retry, Step, StepFailed, store, workflow
from agentd.durable.step import DURABLE_BACKOFF_AFTER

FLAKY_WORKFLOW = "flaky_slow"


class In(BaseModel):
    succeed_on: int = 3
    catch: bool = True


class Out(BaseModel):
    value: str = ""


def flaky_workflow(calls: Counter[str], times: list[float], clock: FakeClock):  # type: ignore[no-untyped-def]
    async def flaky(succeed_on: int) -> str:
        calls["flaky"] += 1
        times.append(clock.now())
        if calls["flaky"] < succeed_on:
            raise ConnectionError(f"down (try {calls['flaky']})")
        return "up"

    @workflow(FLAKY_WORKFLOW)
    async def wf(step: Step, inp: In) -> Out:
        policy = Retry(limit=3, delay=60, backoff="exponential", max_delay=600)
        try:
            return Out(value=await step.do("flaky", flaky, inp.succeed_on, retry=policy))
        except StepFailed as exc:
            if not inp.catch:
                raise
            return Out(value=f"gave up: {exc.error_type}")

    return wf


async def started(
    db: Database, clock: FakeClock, calls: Counter[str], times: list[float]
) -> Engine:
    engine = Engine(db, clock=clock, poll_interval=0.01)
    engine.register(flaky_workflow(calls, times, clock))
    await engine.run()
    return engine


async def until(
    db: Database, iid: str, ok: Callable[[store.InstanceRecord], bool]
) -> store.InstanceRecord:
    for _ in range(4000):
        inst = await db.read(store.get_instance, iid)
        if ok(inst):
            return inst
        await asyncio.sleep(0.005)
    raise AssertionError(f"{iid}: {inst}")


async def test_a_restart_keeps_the_backoffs_wake_up_time(db: Database) -> None:
    assert DURABLE_BACKOFF_AFTER < 60
    clock, calls, times = FakeClock(), Counter[str](), list[float]()
    t0 = clock.now()
    engine = await started(db, clock, calls, times)
    await engine.start(FLAKY_WORKFLOW, In(), instance_id="f")
    slept = await until(db, "f", lambda i: i.status == "sleeping")  # the slot is given back
    assert slept.wake_at == t0 + 60 and calls["flaky"] == 1
    await engine.shutdown(grace=0.5)

    clock.advance(30)  # down for 30 s: the wait is not restarted from now
    engine = await started(db, clock, calls, times)
    resumed = await until(db, "f", lambda i: i.status == "sleeping" and i.runs == 2)
    assert resumed.wake_at == t0 + 60 and calls["flaky"] == 1
    clock.advance(29)
    await engine.settled()
    assert calls["flaky"] == 1  # not a second early
    clock.advance(1)
    second = await until(db, "f", lambda i: i.status == "sleeping" and calls["flaky"] == 2)
    assert times == [t0, t0 + 60] and second.wake_at == t0 + 60 + 120  # exponential
    await engine.shutdown(grace=0.5)

    clock.advance(500)  # down past the wake-up: the attempt runs at once, not after 120 s more
    engine = await started(db, clock, calls, times)
    done = await until(db, "f", lambda i: i.status == "complete")
    assert Out.model_validate_json(done.output or "").value == "up"
    assert calls["flaky"] == 3 and times[2] == t0 + 560
    await engine.shutdown()


async def test_attempts_count_across_restarts_and_an_owners_retry_starts_afresh(
    db: Database,
) -> None:
    clock, calls, times = FakeClock(), Counter[str](), list[float]()
    engine = await started(db, clock, calls, times)
    await engine.start(FLAKY_WORKFLOW, In(succeed_on=99, catch=False), instance_id="g")
    await until(db, "g", lambda i: i.status == "sleeping")
    await engine.shutdown(grace=0.5)
    clock.advance(1000)  # a restart in the backoff: attempt 2 now, then a backoff again
    engine = await started(db, clock, calls, times)
    await until(db, "g", lambda i: i.status == "sleeping" and calls["flaky"] == 2)
    await engine.shutdown(grace=0.5)
    clock.advance(1000)  # and again: attempt 3 is the last (3 in all, not 3 per run)
    engine = await started(db, clock, calls, times)
    inst = await until(db, "g", lambda i: i.status == "errored")
    assert calls["flaky"] == 3 and "ConnectionError" in (inst.error or "")
    # The owner's retry: a new sequence with all its attempts (and its backoffs) again. (A
    # second later: the sequence is told apart by time, which a FakeClock would not move.)
    clock.advance(1)
    await engine.retry("g")
    await until(db, "g", lambda i: i.status == "sleeping" and calls["flaky"] == 4)
    clock.advance(60)
    await until(db, "g", lambda i: i.status == "sleeping" and calls["flaky"] == 5)
    clock.advance(120)
    await until(db, "g", lambda i: i.status == "errored" and calls["flaky"] == 6)
    await engine.shutdown()
