"""One automation that writes to the owner and asks them, for tests/test_automation_reach.py;
`tests/data/reach_journal/record.py` journals it with the code of the day (the journal the
test replays was made by the code from before automations reached the owner through
chat/reach.py). Change nothing here: the journal must keep matching it."""

from __future__ import annotations

from pydantic import BaseModel

from agentd.automations import AutoStep, workflow


class Note(BaseModel):
    text: str = ""


class Noted(BaseModel):
    choice: str | None = None


@workflow("reach_flow", input=Note, output=Noted, version="1")
async def reach_flow(step: AutoStep, inp: Note) -> Noted:
    await step.send("greet", "hello")
    choice = await step.ask_owner("Go on?", ["Yes", "No"], name="q")
    await step.send("done", f"chose {choice}")
    return Noted(choice=choice)
