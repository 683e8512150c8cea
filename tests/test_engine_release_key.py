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
