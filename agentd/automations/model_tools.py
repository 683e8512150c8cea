"""The automations the model may work: `run_<name>` starts one that declares `tool=AsTool(...)`,
`automation_event` passes a caller's answer to one of its instances (checked at the door like
every event) and `automation_status` reads where one is."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agentd.automations import runs
from agentd.durable import InstanceNotFound, InvalidInput, store
from agentd.tools import Tool, ToolContext
from agentd.tools.toolset import Toolset

if TYPE_CHECKING:
    from agentd.automations.runtime import Runtime


class EventArgs(BaseModel):
    instance_id: str = Field(min_length=1, max_length=200)
    event: str = Field(min_length=1, max_length=100)
    data: dict[str, Any] = Field(default_factory=dict)


class StatusArgs(BaseModel):
    instance_id: str = Field(min_length=1, max_length=200)


def model_tools(rt: Runtime) -> list[Tool]:
    """`run_<name>` for each automation that declares `tool=AsTool(...)`; each is a group
    of its own, named after the file it comes from."""
    tools = []
    for name in rt.catalog.names():
        auto = rt.catalog.current(name)
        if auto.tool is None:
            continue

        async def start_it(ctx: ToolContext, args: BaseModel, name: str = name) -> str:
            iid = runs.instance_id_for(name, f"{ctx.instance_id}:{ctx.tool_use_id}", scope="t")
            started = await rt.start(
                name, args.model_dump(mode="json"), instance_id=iid, source="tool"
            )
            return f"Started workflow {name} as {started.instance_id}; it runs on its own."

        # The input model is the automation's own, known only once its file is loaded.
        own = Toolset(f"automation:{auto.source}")
        made = own.add_model(
            name=f"run_{name}",
            description=auto.tool.description,
            args_model=auto.input_model,
            fn=start_it,
            risk=auto.tool.risk,
            # The run acts on arguments the model chose: after outside content, it asks.
            egress=True,
        )
        tools.append(made)
    if tools:
        tools += _driving_tools(rt)
    return tools


def _driving_tools(rt: Runtime) -> list[Tool]:
    """What lets the model work the flows it can start: pass the caller's answers as
    events (checked like every event: the event's model, the choices offered) and read
    where an instance is. Only instances of automations offered as tools."""
    group = Toolset("automations")

    async def send_event(ctx: ToolContext, args: BaseModel) -> str:
        assert isinstance(args, EventArgs)
        inst = await rt.db.read(store.find_instance, args.instance_id)
        if inst is None or not _offered(rt, inst.workflow):
            return f"No instance {args.instance_id} of an automation you can start."
        if args.event.startswith(runs.ANSWER_PREFIX):
            return "Answers to the owner's questions are the owner's, not a tool's."
        try:
            stored = await rt.db.write(
                partial(runs.signal, catalog=rt.catalog),
                inst.id,
                args.event,
                args.data,
                rt.clock.now(),
                f"tool:{ctx.instance_id}:{ctx.tool_use_id}",
            )
        except (InvalidInput, InstanceNotFound, ValueError) as exc:
            return f"Refused, nothing was sent: {exc}"
        rt.kick(inst.key)
        return f"{args.event} sent to {inst.id}." if stored else "Sent before; nothing new."

    async def status(ctx: ToolContext, args: BaseModel) -> str:
        assert isinstance(args, StatusArgs)
        try:
            state = await rt.db.read(runs.state, args.instance_id)
        except InstanceNotFound as exc:
            return str(exc)
        if not _offered(rt, state.workflow):
            return f"No instance {args.instance_id} of an automation you can start."
        return state.model_dump_json(exclude={"input"})

    sent = group.add_model(
        name="automation_event",
        description="Send an event (a caller's answer: a ZIP code, a choice, a yes or no) "
        "to a running automation you started; the automation's rules check it first.",
        args_model=EventArgs,
        fn=send_event,
        risk="medium",
        egress=True,  # what it sends was chosen by the model: after outside content, ask
    )
    read = group.add_model(
        name="automation_status",
        description="Where an automation you started is: its status, the event it waits "
        "for and the choices it offered, its output or error.",
        args_model=StatusArgs,
        fn=status,
        risk="low",
        taints=True,  # its output carries what callers and outside systems said
    )
    return [sent, read]


def _offered(rt: Runtime, workflow: str) -> bool:
    """An automation whose loaded code offers it to the model (`tool=AsTool(...)`)."""
    return any(a.tool is not None for a in rt.catalog.versions.get(workflow, {}).values())
