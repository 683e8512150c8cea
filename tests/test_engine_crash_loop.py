"""Units: a step that is running every time the process dies is parked, a bystander is not.

A process death is simulated as the engine tests do (shutdown with no grace leaves the
instances running), plus the engine's "running" mark put back, which only a real death leaves.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from agentd.db import Database
from agentd.durable import Engine, FakeClock, Step, store, workflow


class In(BaseModel):
    n: int = 0


class Out(BaseModel):
    value: int = 0


async def test_the_culprit_is_parked_and_a_bystander_is_not(db: Database) -> None:
    entered: dict[str, int] = {"culprit": 0, "bystander": 0}
    finished: list[store.InstanceRecord] = []

    async def parse() -> int:
        entered["culprit"] += 1
        await asyncio.Event().wait()  # the parser that never comes back: the process dies
        return 0

    async def think() -> int:
        entered["bystander"] += 1
        await asyncio.sleep(0.3)  # a slow model call: mid-step whenever the culprit strikes,
        return 1  # unless the two are kept apart

    @workflow("culprit")
    async def culprit(step: Step, inp: In) -> Out:
        await step.do("fetch", asyncio.sleep, 0)
        return Out(value=await step.do("parse", parse))

    @workflow("bystander")
    async def bystander(step: Step, inp: In) -> Out:
        return Out(value=await step.do("llm", think))

    async def on_finish(inst: store.InstanceRecord) -> None:
        finished.append(inst)

    async def start() -> Engine:
        engine = Engine(
            db,
            clock=FakeClock(auto_advance=True),
            poll_interval=0.02,
            on_finish=on_finish,
            crash_limit=3,
        )
        engine.register(culprit)
        engine.register(bystander)
        await engine.run()
        return engine

    async def die(engine: Engine) -> None:
        await engine.shutdown(grace=0)
        await db.write(store.note_engine_start, 0.0)  # the mark a dead process leaves behind

    async def until(check) -> None:  # type: ignore[no-untyped-def]
        while not check():
            await asyncio.sleep(0.005)

    engine = await start()
    await engine.start("culprit", In(), instance_id="c", key="chat-1")
    await engine.start("bystander", In(), instance_id="b", key="chat-2")
    await until(lambda: entered["culprit"] == 1 and entered["bystander"] == 1)
    await die(engine)  # death 1: both were mid-step
    for deaths in (2, 3):
        engine = await start()
        await until(lambda deaths=deaths: entered["culprit"] == deaths)
        await die(engine)  # the culprit killed it again, at the same step
    engine = await start()
    parked = await engine.wait_for("c")
    assert parked.status == "errored"
    assert parked.error is not None and parked.error.startswith("stopped after 3 crashes: ")
    assert entered["culprit"] == 3  # not run a fourth time
    assert (await engine.wait_for("b")).status == "complete"
    assert [i.id for i in finished] == ["c"]  # told once
    await engine.shutdown()
    # A clean stop leaves no mark: the next start counts nothing.
    engine = await start()
    assert (await db.read(store.get_instance, "c")).status == "errored"
    assert [i.id for i in finished] == ["c"]
    await engine.shutdown()


async def test_progress_between_deaths_resets_the_count(db: Database) -> None:
    clock = FakeClock(auto_advance=True)
    # Journal frontier moves: 1 step, then 2 steps settled. Three deaths, never at one point.
    await db.write(
        lambda conn: store.insert_instance(
            conn, instance_id="p", workflow="w", key="k", input_json="{}", now=0.0
        )
    )
    for settled in (0, 1, 1):

        def die(conn: object, settled: int = settled) -> tuple[list[str], list[str]]:
            conn.execute("UPDATE workflow_instances SET status = 'running' WHERE id = 'p'")  # type: ignore[attr-defined]
            for ordinal in range(1, settled + 1):
                store.record_step(
                    conn,
                    "p",
                    ordinal,
                    f"s{ordinal}",
                    delivery="at_least_once",
                    attempt=1,
                    started_at=0.0,
                    now=0.0,
                )
            store.note_engine_start(conn, 0.0)
            return store.count_crashes(conn, clock.now(), 3)

        parked, suspects = await db.write(die)
        assert parked == [] and suspects == ["p"]
    row = await db.read(
        lambda conn: conn.execute(  # type: ignore[attr-defined]
            "SELECT frontier, crashes, step FROM workflow_crashes WHERE instance_id = 'p'"
        ).fetchone()
    )
    assert tuple(row) == (1, 2, "the step after s1")
