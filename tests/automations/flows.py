"""Automations for the end-to-end tests (loaded from this folder by `[automations] folder`).
Each effect leaves a line in $AGENTD_TEST_EFFECTS, so a test can count how often it ran."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from agentd.automations import AsTool, AutoStep, workflow


def effect(line: str) -> None:
    with Path(os.environ["AGENTD_TEST_EFFECTS"]).open("a") as f:
        f.write(line + "\n")


class Greeting(BaseModel):
    name: str = Field(min_length=1)
    times: int = 1


class Greeted(BaseModel):
    text: str
    said: str | None


@workflow(
    "greet",
    input=Greeting,
    output=Greeted,
    version=1,
    tool=AsTool(description="Greet someone by name, then wait for a go signal."),
)
async def greet(step: AutoStep, inp: Greeting) -> Greeted:
    """Greet, then wait for `go` and echo what it said."""
    text = f"Hello, {inp.name}!" * inp.times
    # No [automations.chats] desk in the tests' configs: the owner's chat it is.
    await step.send("hello", text, to="desk")
    go = await step.wait_for_event("go", timeout=120)
    return Greeted(text=text, said=go.payload.get("say") if go else None)


class Chain(BaseModel):
    tag: str
    gap: float = 0.0


class ChainOut(BaseModel):
    steps: list[int]


async def touch(tag: str, n: int) -> int:
    effect(f"{tag} step{n}")
    return n


@workflow("chain", input=Chain, output=ChainOut)
async def chain(step: AutoStep, inp: Chain) -> ChainOut:
    """Three steps with a durable gap after each: a kill -9 lands between two steps."""
    done = []
    for n in (1, 2, 3):
        done.append(await step.do(f"step{n}", touch, inp.tag, n))
        if inp.gap:
            await step.sleep(f"gap{n}", inp.gap)
    return ChainOut(steps=done)


class Ask(BaseModel):
    question: str
    timeout: float = 600


class Answer(BaseModel):
    choice: str | None


@workflow("ask", input=Ask, output=Answer)
async def ask(step: AutoStep, inp: Ask) -> Answer:
    choice = await step.ask_owner(inp.question, ["Yes", "No"], timeout=inp.timeout, default="No")
    await step.do("after", touch, f"answered {choice}", 0)
    return Answer(choice=choice)


class Bad(BaseModel):
    pass


class Strict(BaseModel):
    count: int


@workflow("bad_output", input=Bad, output=Strict)
async def bad_output(step: AutoStep, inp: Bad) -> dict[str, str]:
    return {"count": "many"}


class Page(BaseModel):
    text: str
    max_tokens: int | None = None  # the author's cap on the answer (None: [llm] max_tokens)


class Verdict(BaseModel):
    verdict: str
    score: int


@workflow("judge", input=Page, output=Verdict)
async def judge(step: AutoStep, inp: Page) -> Verdict:
    """One structured model call, costed like any other."""
    prompt = f"judge-marker: rate this: {inp.text}"
    return await step.llm("judge", prompt, output=Verdict, max_tokens=inp.max_tokens)


class Tidy(BaseModel):
    note: str
    path: str


class Tidied(BaseModel):
    note: str
    removed: bool


@workflow("tidy", input=Tidy, output=Tidied)
async def tidy(step: AutoStep, inp: Tidy) -> Tidied:
    """A medium-risk tool runs; a high-risk one asks the owner first."""
    note = await step.tool("note", "add_note", {"text": inp.note})
    removed = await step.tool("remove", "delete_file", {"path": inp.path})
    return Tidied(note=note.content, removed=removed.ran and removed.ok)
