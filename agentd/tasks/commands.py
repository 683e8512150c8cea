"""`/task TEXT` (the owner starts a task) and `/tasks` (list them; `/tasks stop N|all`)."""

from __future__ import annotations

import time
from typing import Any

from agentd.access import owners
from agentd.agent.deps import TurnDeps
from agentd.chat.command import ChatCommand, CommandInput, CommandReply
from agentd.durable import Engine
from agentd.tasks import store as tasks
from agentd.tasks.install import DelegateArgs, Scope, Tasks, plan_task, start_task
from agentd.tasks.model import task_instance_id
from agentd.tools import ToolContext, ToolError

STATE = {"queued": "⏳", "running": "⚙️", "waiting": "🔐", "sleeping": "💤"}
STATE_DONE = {"complete": "✅", "errored": "⚠️", "cancelled": "🚫"}


def task_line(n: int, row: tasks.TaskRow) -> str:
    mark = STATE.get(row.status) or STATE_DONE.get(row.status, "•")
    brief = " ".join(row.text.split())
    brief = brief if len(brief) <= 60 else brief[:59] + "…"
    return (
        f"{n}. {mark} “{brief}” — {row.status}, {row.model_calls}/{row.max_steps} model calls, "
        f"{row.tokens:,}/{row.token_budget:,} tokens, ≈ ${row.cost_usd:.4f} — `{row.id}`"
    )


async def task_command(engine: Engine, deps: TurnDeps, inp: CommandInput) -> CommandReply:
    if inp.user_id != owners.resolve(deps.config.access).owner_id:
        return CommandReply(text="Only the owner starts background tasks.")
    if not inp.args.strip():
        return CommandReply(text="Say what to do: `/task find the three cheapest flights to Oslo`.")
    root = f"task-command:{inp.chat_id}:{inp.message_id}"
    ctx = ToolContext(
        chat_id=inp.chat_id, user_id=inp.user_id, instance_id=root, chat_kind=inp.chat_kind
    )
    scope = Scope(tools=deps.registry.names(), depth=1, reply_to=inp.message_id)
    try:
        task = plan_task(deps, scope, DelegateArgs(task=inp.args.strip()), ctx, inp.chat_id)
    except ToolError as exc:
        return CommandReply(text=str(exc))
    instance_id = task_instance_id(root, "task")
    if not await start_task(engine, deps, task, instance_id):
        return CommandReply(
            text=f"Not started: {deps.config.tasks.max_running} tasks already run in this chat "
            "(see /tasks)."
        )
    return CommandReply(
        text=f"Started `{instance_id}`; its result comes as a reply to your message "
        "(/tasks shows its progress)."
    )


async def tasks_command(engine: Engine, deps: TurnDeps, inp: CommandInput) -> CommandReply:
    asked = inp.args.strip().split()
    if asked and asked[0].lower() != "stop":
        return CommandReply(
            text=f"I don't know `/tasks {asked[0][:40]}`: `/tasks` lists this chat's tasks, "
            "`/tasks stop N` or `/tasks stop all` stops running ones."
        )
    prices = deps.config.llm.prices
    rows = await deps.db.read(lambda c: tasks.list_tasks(c, chat_id=inp.chat_id, prices=prices))
    running = [r for r in rows if r.status in STATE]
    args = inp.args.strip().lower().split()
    if args[:1] == ["stop"]:
        return await stop_tasks(engine, deps, running, args[1:])
    if not rows:
        return CommandReply(text="No background tasks in this chat (start one with /task).")
    shown = running + [r for r in rows if r.status not in STATE][:5]
    lines = [task_line(n, r) for n, r in enumerate(shown, 1)]
    hint = "\n\n`/tasks stop N` or `/tasks stop all` stops running ones." if running else ""
    return CommandReply(text="Background tasks:\n\n" + "\n".join(lines) + hint)


async def stop_tasks(
    engine: Engine, deps: TurnDeps, running: list[tasks.TaskRow], picks: list[str]
) -> CommandReply:
    """Each picked task (numbered as /tasks lists them) and every task it started."""
    if not running:
        return CommandReply(text="No task is running in this chat.")
    if picks == ["all"]:
        chosen = running
    elif picks and all(p.isdecimal() and 1 <= int(p) <= len(running) for p in picks):
        chosen = [running[int(p) - 1] for p in picks]
    else:
        return CommandReply(text=f"Say which: `/tasks stop 1` … `{len(running)}`, or `all`.")
    stopped: list[str] = []
    for row in chosen:
        flagged = await deps.db.write(tasks.cancel_tree, row.id, time.time())
        for instance_id in flagged:  # at once, before another write lets them step on
            engine.stop_flagged(instance_id)
        stopped += flagged
    return CommandReply(
        text=f"Stopped {len(stopped)} task(s): " + ", ".join(f"`{i}`" for i in stopped)
    )


def commands(engine: Engine, installed: Tasks) -> list[ChatCommand]:
    """/task and /tasks, reading the turn's deps when they run (set once the daemon built them)."""

    def bind(fn: Any) -> Any:
        async def run(inp: CommandInput) -> CommandReply:
            return await fn(engine, installed.ready(), inp)

        return run

    return [
        ChatCommand(
            "task",
            bind(task_command),
            "Start a background task: /task WHAT TO DO",
            owner_only=True,
        ),
        ChatCommand(
            "tasks", bind(tasks_command), "Background tasks: progress, cost; /tasks stop N"
        ),
    ]
