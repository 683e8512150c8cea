"""Tasks wired in: the workflow and the `delegate` tool (the owner's `/task` and `/tasks` are
in commands.py; tasks/capability.py returns them all)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from agentd.agent.deps import TurnDeps
from agentd.chat.names import TASK_WORKFLOW
from agentd.durable import Engine, store
from agentd.tasks import store as tasks
from agentd.tasks.model import TaskInput, task_instance_id, task_key
from agentd.tasks.workflow import make_task_workflow
from agentd.tools import Tool, ToolContext, ToolError

DELEGATE = "delegate"


class DelegateArgs(BaseModel):
    task: str = Field(
        min_length=1,
        max_length=20_000,
        description="What to do, self-contained: the task sees nothing of this conversation.",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="Names of the tools the task may use; empty: every tool you may use.",
    )
    max_steps: int | None = Field(default=None, ge=1, description="Model calls, at most.")
    token_budget: int | None = Field(default=None, ge=1, description="Tokens, at most.")


class Scope(BaseModel):
    """What the instance that starts a task may give it."""

    tools: list[str]
    depth: int
    reply_to: int | None
    token_budget: int | None = None


def scope_of(
    parent: store.InstanceRecord | None, all_tools: list[str], max_depth: int = 2
) -> Scope:
    if parent is not None and parent.workflow == TASK_WORKFLOW:
        inp = TaskInput.model_validate_json(parent.input)
        return Scope(
            tools=inp.tools,
            depth=inp.depth + 1,
            reply_to=inp.reply_to,
            token_budget=inp.token_budget,
        )
    # A turn's task answers the turn's message; an automation's has none to answer.
    value = json.loads(parent.input).get("message_id") if parent is not None else None
    tools = [t for t in all_tools if t != DELEGATE] if 1 >= max_depth else all_tools
    return Scope(tools=tools, depth=1, reply_to=value if isinstance(value, int) else None)


def plan_task(
    deps: TurnDeps, scope: Scope, args: DelegateArgs, ctx: ToolContext, chat_id: int
) -> TaskInput:
    """The child's input: never more tools or budget than its parent has."""
    cfg = deps.config.tasks
    unknown = [t for t in args.tools if t not in scope.tools]
    if unknown:
        raise ToolError(
            f"Not started: {', '.join(unknown)} not among the tools this task may be given "
            f"({', '.join(scope.tools)})."
        )
    chosen = args.tools or list(scope.tools)
    if scope.depth >= cfg.max_depth:  # the child may not start tasks of its own
        chosen = [t for t in chosen if t != DELEGATE]
    budget = min(args.token_budget or cfg.token_budget, cfg.token_budget)
    if scope.token_budget is not None:
        budget = min(budget, scope.token_budget)
    return TaskInput(
        chat_id=chat_id,
        chat_kind=ctx.chat_kind,
        user_id=ctx.user_id,
        text=args.task,
        parent=ctx.instance_id,
        reply_to=scope.reply_to,
        tools=chosen,
        max_steps=min(args.max_steps or cfg.max_steps, cfg.max_steps),
        token_budget=budget,
        depth=scope.depth,
        tainted_by=list(ctx.tainted_by),
    )


async def start_task(engine: Engine, deps: TurnDeps, inp: TaskInput, instance_id: str) -> bool:
    """Start it unless the chat has its fill of running tasks; False: refused."""
    limit = deps.config.tasks.max_running

    def start(conn: Any) -> bool:
        if store.find_instance(conn, instance_id) is not None:
            return True  # started already (a replayed call)
        if tasks.open_count(conn, inp.chat_id) >= limit:
            return False
        engine.prepare_start(
            conn, TASK_WORKFLOW, inp, instance_id=instance_id, key=task_key(instance_id)
        )
        return True

    started = await deps.db.write(start)
    if started:
        engine.kick(task_key(instance_id))
    return started


def delegate_tool(tasks: Tasks) -> Tool:
    async def delegate(ctx: ToolContext, args: DelegateArgs) -> str:
        engine, deps = tasks.engine, tasks.ready()
        parent = await deps.db.read(store.find_instance, ctx.instance_id)
        scope = scope_of(parent, deps.registry.names(), deps.config.tasks.max_depth)
        inp = plan_task(deps, scope, args, ctx, ctx.chat_id)
        instance_id = task_instance_id(ctx.instance_id, ctx.tool_use_id)
        if not await start_task(engine, deps, inp, instance_id):
            raise ToolError(
                f"Not started: {deps.config.tasks.max_running} tasks already run in this chat "
                "(tasks.max_running). Do it yourself, or wait for one to end."
            )
        return (
            f"Started task {instance_id} in the background ({inp.max_steps} model calls, "
            f"{inp.token_budget:,} tokens at most). Its result comes to the user as a message of "
            "its own when it ends: say it was started; do not wait for it or repeat its work."
        )

    return Tool.from_model(
        name=DELEGATE,
        description="Start a background task: another agent works on it with the tools you "
        "give it, and its result is sent to the user when it ends, while you answer now. Use "
        "it for long or splittable work (several tasks at once for independent parts).",
        args_model=DelegateArgs,
        fn=delegate,
        risk="medium",
        timeout=10,
    )


class Tasks:
    """The task capability. Its tool goes into the registry with every other tool (so
    `[tools] disabled` and `[tools.risk]` apply to it); the turn's deps, built from that
    registry, are handed over by `install` and read when the tool is called."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.deps: TurnDeps | None = None

    def tools(self) -> list[Tool]:
        return [delegate_tool(self)]

    def ready(self) -> TurnDeps:
        if self.deps is None:
            raise ToolError("Background tasks are not set up yet; try again in a moment.")
        return self.deps

    def workflow(self, deps: TurnDeps) -> Any:
        """The task workflow, made from the turn's deps once the registry exists; the tool and
        the commands read the same deps from then on."""
        self.deps = deps
        return make_task_workflow(deps)
