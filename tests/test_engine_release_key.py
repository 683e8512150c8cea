"""Units for a wait that lets go of its key: the key's later instances run meanwhile, the
waiting instance takes the key back before its next step, and a restart replays the same."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from agentd.db import Database
from agentd.durable import Engine, FakeClock, Step, store, workflow


class In(BaseModel):
    label: str
    wait: bool = False


class Out(BaseModel):
    value: str = ""


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())


def make_workflow(log: Log):  # type: ignore[no-untyped-def]
    async def note(what: str) -> str:
        log.events.append(what)
        gate = log.gates.get(what)
        if gate is not None:
            await gate.wait()
        return what

    @workflow("chatty")
    async def chatty(step: Step, inp: In) -> Out:
        await step.do("before", note, f"{inp.label}:before")
        if inp.wait:
            event = await step.wait_for_event("go", timeout=3600, release_key=True)
            assert event is not None
            await step.do("after", note, f"{inp.label}:after")
        return Out(value=inp.label)

    return chatty


async def make_engine(db: Database, log: Log) -> Engine:
    engine = Engine(db, clock=FakeClock(), poll_interval=0.02)
    engine.register(make_workflow(log))
    await engine.run()
    return engine


async def until(predicate, what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.005)


async def status(db: Database, instance_id: str) -> str:
    return (await db.read(store.get_instance, instance_id)).status


async def test_later_instances_of_the_key_run_while_one_waits(db: Database) -> None:
    log = Log()
    engine = await make_engine(db, log)
    await engine.start("chatty", In(label="a", wait=True), instance_id="a", key="chat")
    for label in ("b", "c", "d"):
        await engine.start("chatty", In(label=label), instance_id=label, key="chat")
    for label in ("b", "c", "d"):
        assert (await engine.wait_for(label)).status == "complete"
    assert await status(db, "a") == "waiting"
    assert log.events == ["a:before", "b:before", "c:before", "d:before"]
    await engine.send_event("a", "go", {})
    assert (await engine.wait_for("a")).status == "complete"
    assert log.events[-1] == "a:after"
    await engine.shutdown(grace=0)


async def test_a_resumed_wait_takes_the_key_back_after_the_instance_holding_it(
    db: Database,
) -> None:
    log = Log()
    engine = await make_engine(db, log)
    log.gate("b:before")  # b is working when a's event comes
    await engine.start("chatty", In(label="a", wait=True), instance_id="a", key="chat")
    await until(lambda: "a:before" in log.events, "a started")
    await engine.start("chatty", In(label="b"), instance_id="b", key="chat")
    await until(lambda: "b:before" in log.events, "b started while a waits")
    await engine.send_event("a", "go", {})
    await asyncio.sleep(0.05)  # a chance for a to run its next step, which it must not take
    assert "a:after" not in log.events
    log.gate("b:before").set()
    assert (await engine.wait_for("a")).status == "complete"
    assert log.events == ["a:before", "b:before", "a:after"]
    await engine.shutdown(grace=0)


async def test_a_restart_while_one_waits_and_another_runs_replays_the_same(db: Database) -> None:
    log = Log()
    engine = await make_engine(db, log)
    log.gate("b:before")
    await engine.start("chatty", In(label="a", wait=True), instance_id="a", key="chat")
    await engine.start("chatty", In(label="b"), instance_id="b", key="chat")
    await until(lambda: "b:before" in log.events, "b runs while a waits")
    await engine.shutdown(grace=0)  # like kill -9: a waits, b is mid-step
    log.gates.clear()

    engine2 = await make_engine(db, log)
    await engine2.start("chatty", In(label="c"), instance_id="c", key="chat")
    assert (await engine2.wait_for("b")).status == "complete"
    assert (await engine2.wait_for("c")).status == "complete"
    assert await status(db, "a") == "waiting"
    await engine2.send_event("a", "go", {})
    assert (await engine2.wait_for("a")).status == "complete"
    assert log.events.count("a:before") == 1 and log.events.count("a:after") == 1
    await engine2.shutdown(grace=0)


async def test_cancelling_a_waiting_instance_that_let_go_of_its_key(db: Database) -> None:
    log = Log()
    engine = await make_engine(db, log)
    await engine.start("chatty", In(label="a", wait=True), instance_id="a", key="chat")
    await until(lambda: "a:before" in log.events, "a started")
    await until(lambda: engine._released, "a let go of its key")
    await engine.cancel("a")
    assert (await engine.wait_for("a")).status == "cancelled"
    await engine.start("chatty", In(label="b"), instance_id="b", key="chat")
    assert (await engine.wait_for("b")).status == "complete"
    await engine.shutdown(grace=0)


async def test_forked_branches_replay_whichever_finished_first(db: Database) -> None:
    """Steps run at once (Step.fork) journal into blocks of their own: a restart in the
    middle replays the finished branch and runs only the other."""
    runs: list[str] = []
    gates = {"slow": asyncio.Event()}

    async def effect(what: str) -> str:
        runs.append(what)
        if what in gates:
            await gates[what].wait()
        return what

    @workflow("forked")
    async def forked(step: Step, inp: In) -> Out:
        a, b = step.fork(2)
        async with asyncio.TaskGroup() as group:
            slow = group.create_task(a.do("slow", effect, "slow"))
            fast = group.create_task(b.do("fast", effect, "fast"))
        after = await step.do("after", effect, "after")
        return Out(value=f"{slow.result()}+{fast.result()}+{after}")

    engine = Engine(db, clock=FakeClock(), poll_interval=0.02)
    engine.register(forked)
    await engine.run()
    await engine.start("forked", In(label="x"), instance_id="f")
    await until(lambda: "fast" in runs and "slow" in runs, "both branches ran")
    for _ in range(500):  # the fast branch's result journaled
        steps = await db.read(store.load_steps, "f")
        if any(r.name == "fast" and r.status == "complete" for r in steps.values()):
            break
        await asyncio.sleep(0.01)
    await engine.shutdown(grace=0)  # "slow" never finished
    gates.clear()
    engine2 = Engine(db, clock=FakeClock(), poll_interval=0.02)
    engine2.register(forked)
    await engine2.run()
    done = await engine2.wait_for("f")
    assert (
        done.status == "complete" and done.output == Out(value="slow+fast+after").model_dump_json()
    )
    assert runs.count("fast") == 1 and runs.count("slow") == 2 and runs.count("after") == 1
    await engine2.shutdown(grace=0)
