"""R-DUR-10: the seed's human-in-the-loop flows, written with the engine's primitives.

Identity verification with two attempts then escalation to a supervisor; select → confirm →
apply. Each survives a restart at its waits.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from pydantic import BaseModel

from agentd.db import Database
from agentd.durable import Engine, FakeClock, Step, store, workflow

CODE = "4711"


class VerifyIn(BaseModel):
    customer: str


class VerifyOut(BaseModel):
    verified: bool
    by: str
    attempts: int


class ChangeIn(BaseModel):
    options: list[str]


class ChangeOut(BaseModel):
    applied: str | None


def flows(effects: Counter[str]) -> list:  # type: ignore[type-arg]
    async def ask(what: str) -> str:
        effects[f"ask:{what}"] += 1
        return what

    async def apply(choice: str) -> str:
        effects[f"apply:{choice}"] += 1
        return choice

    @workflow("verify_identity")
    async def verify(step: Step, inp: VerifyIn) -> VerifyOut:
        for attempt in (1, 2):
            await step.do(f"ask-code#{attempt}", ask, f"code#{attempt}")
            event = await step.wait_for_event("code", timeout=300, name=f"code#{attempt}")
            if event is not None and event.payload.get("code") == CODE:
                return VerifyOut(verified=True, by="customer", attempts=attempt)
        await step.do("escalate", ask, "supervisor")
        decision = await step.wait_for_event("supervisor", timeout=3600)
        approved = decision is not None and decision.payload.get("approve") is True
        return VerifyOut(verified=approved, by="supervisor", attempts=2)

    @workflow("change_plan")
    async def change(step: Step, inp: ChangeIn) -> ChangeOut:
        await step.do("offer", ask, ",".join(inp.options))
        selected = await step.wait_for_event("select", timeout=600)
        if selected is None or selected.payload.get("option") not in inp.options:
            return ChangeOut(applied=None)
        choice = selected.payload["option"]
        await step.do("confirm?", ask, f"confirm {choice}")
        confirmed = await step.wait_for_event("confirm", timeout=600)
        if confirmed is None or not confirmed.payload.get("yes"):
            return ChangeOut(applied=None)
        return ChangeOut(applied=await step.do("apply", apply, choice, delivery="at_most_once"))

    return [verify, change]


async def engine_for(db: Database, clock: FakeClock, effects: Counter[str]) -> Engine:
    engine = Engine(db, clock=clock, poll_interval=0.02)
    for wf in flows(effects):
        engine.register(wf)
    await engine.run()
    return engine


async def waiting_for(db: Database, instance_id: str, event_type: str) -> None:
    while True:
        inst = await db.read(store.get_instance, instance_id)
        if inst.status == "waiting" and inst.waiting_for == event_type:
            return
        await asyncio.sleep(0.005)


async def test_two_wrong_codes_escalate_to_a_supervisor_across_a_restart(db: Database) -> None:
    clock, effects = FakeClock(), Counter[str]()
    engine = await engine_for(db, clock, effects)
    await engine.start("verify_identity", VerifyIn(customer="c1"), instance_id="v1")
    await waiting_for(db, "v1", "code")
    await engine.send_event("v1", "code", {"code": "0000"})
    await waiting_for(db, "v1", "code")
    await engine.shutdown()  # restart in the middle of the second attempt

    engine = await engine_for(db, clock, effects)
    await engine.send_event("v1", "code", {"code": "1234"})
    await waiting_for(db, "v1", "supervisor")
    await engine.send_event("v1", "supervisor", {"approve": True})
    inst = await engine.wait_for("v1")
    assert VerifyOut.model_validate_json(inst.output) == VerifyOut(
        verified=True, by="supervisor", attempts=2
    )
    assert effects == {"ask:code#1": 1, "ask:code#2": 1, "ask:supervisor": 1}
    await engine.shutdown()


async def test_right_code_on_the_second_attempt(db: Database) -> None:
    clock, effects = FakeClock(), Counter[str]()
    engine = await engine_for(db, clock, effects)
    await engine.start("verify_identity", VerifyIn(customer="c2"), instance_id="v2")
    await waiting_for(db, "v2", "code")
    clock.advance(300)  # the customer never answers the first time: a timeout, not a failure
    while "code#2" not in {s.name for s in (await db.read(store.load_steps, "v2")).values()}:
        await asyncio.sleep(0.005)
    await engine.send_event("v2", "code", {"code": CODE})
    inst = await engine.wait_for("v2")
    assert VerifyOut.model_validate_json(inst.output).attempts == 2
    await engine.shutdown()


async def test_select_confirm_apply_applies_once(db: Database) -> None:
    clock, effects = FakeClock(), Counter[str]()
    engine = await engine_for(db, clock, effects)
    await engine.start("change_plan", ChangeIn(options=["basic", "pro"]), instance_id="c")
    # The selection arrives before the workflow even waits for it: the mailbox keeps it.
    await engine.send_event("c", "select", {"option": "pro"})
    await waiting_for(db, "c", "confirm")
    await engine.shutdown()
    engine = await engine_for(db, clock, effects)
    await engine.send_event("c", "confirm", {"yes": True}, event_id="confirm-1")
    await engine.send_event("c", "confirm", {"yes": True}, event_id="confirm-1")  # duplicate
    inst = await engine.wait_for("c")
    assert ChangeOut.model_validate_json(inst.output).applied == "pro"
    assert effects["apply:pro"] == 1
    await engine.shutdown()
