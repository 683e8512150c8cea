"""Commands left running in the background: a durable workflow of their own per job.

The turn approves the command as usual, starts the job and answers at once; the job runs the
command as an at-most-once step (with `background_wall_seconds`) under the starting call's id,
then sends the user a notice with how it ended, by the one send path (chat/delivery.py). A
crash during the command ends the job with "outcome unknown" (never a second run); `agentd
workflows cancel <job>` kills its process tree. At most `max_background_jobs` run at once:
each holds one of the engine's slots and its command's memory for up to an hour, so more
would starve the chat of slots and the server of memory the cards never added up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from agentd.chat.delivery import deliver_text
from agentd.chat.inputs import Place
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import Engine, OutcomeUnknown, Step, Workflow, store, workflow
from agentd.hands.shell import ShellArgs, ShellDeps, run_command
from agentd.tools.base import ToolContext, ToolError, ToolRefused

BACKGROUND_WORKFLOW = "shell-background"


class JobInput(Place):
    chat_id: int
    user_id: int
    args: ShellArgs
    approval: str  # how the turn's call was approved (for the audit)
    call_id: str = ""  # the turn's tool_use id that started the job: the run's per-call id


class JobOutput(BaseModel):
    outcome: str  # done | failed | unknown
    notice: str


def job_id(ctx: ToolContext) -> str:
    # From the call, so a replayed start finds the job it already made.
    return f"job-{ctx.instance_id}-{ctx.tool_use_id}"[:120]


def _fence(text: str) -> str:
    return text.replace("```", "'''")


async def _run(deps: ShellDeps, inp: JobInput, instance_id: str) -> str:
    ctx = ToolContext(
        chat_id=inp.chat_id,
        user_id=inp.user_id,
        instance_id=instance_id,
        chat_kind=inp.chat_kind,
        tool_use_id=inp.call_id or "run",
        redact=deps.redact,
    )
    wall = deps.config.tools.shell.background_wall_seconds
    try:
        # No "running…" message: a job may run for an hour; its notice says how it ended.
        return await run_command(
            deps, ctx, inp.args, approval=inp.approval, wall=wall, progress=False
        )
    except ToolError as exc:
        return f"Could not run it: {exc}"


def make_job_workflow(deps: ShellDeps, outbox: Outbox) -> Workflow[JobInput, JobOutput]:
    async def notify(step: Step, chat_id: int, text: str) -> int:
        return await deliver_text(step, deps.db, "notify", outbox, chat_id, text, notice=True)

    @workflow(BACKGROUND_WORKFLOW)
    async def job(step: Step, inp: JobInput) -> JobOutput:
        command = _fence(deps.redact(inp.args.command))
        try:
            result = await step.do(
                "run", _run, deps, inp, step.instance_id, delivery="at_most_once"
            )
        except OutcomeUnknown:
            text = (
                f"⚠️ Background job `{step.instance_id}`: outcome unknown — it may or may "
                f"not have run (a restart cut it short); it was not run again.\n\n"
                f"```\n$ {command}\n```"
            )
            await notify(step, inp.chat_id, text)
            return JobOutput(outcome="unknown", notice=text)
        text = (
            f"🏁 Background job `{step.instance_id}` ended.\n\n```\n$ {command}\n```\n\n"
            f"```\n{_fence(result)[-3000:]}\n```"
        )
        await notify(step, inp.chat_id, text)
        return JobOutput(
            outcome="done" if result.startswith("Exit code 0") else "failed", notice=text
        )

    return job


def running_jobs(conn: Any) -> list[str]:
    marks = ",".join("?" * len(store.OPEN_STATUSES))
    rows = conn.execute(
        f"SELECT id FROM workflow_instances WHERE workflow = ? AND status IN ({marks}) "
        "ORDER BY seq",
        (BACKGROUND_WORKFLOW, *store.OPEN_STATUSES),
    )
    return [str(r[0]) for r in rows]


def job_starter(engine: Engine, db: Database, limit: int) -> Callable[..., Awaitable[str]]:
    """What the shell tool calls for `background: true`: start the job, answer at once; refused
    while `limit` jobs run (counted and started in one transaction, so two calls at once
    cannot both take the last place)."""

    async def start_job(ctx: ToolContext, args: ShellArgs, approval: str) -> str:
        jid = job_id(ctx)
        inp = JobInput(
            chat_id=ctx.chat_id,
            chat_kind=ctx.chat_kind,
            user_id=ctx.user_id,
            args=args,
            approval=approval,
            call_id=ctx.tool_use_id,
        )

        def start(conn: Any) -> list[str]:
            if store.find_instance(conn, jid) is not None:
                return []  # started already: a replayed call
            running = running_jobs(conn)
            if len(running) >= limit:
                return running
            engine.prepare_start(conn, BACKGROUND_WORKFLOW, inp, instance_id=jid, key=jid)
            return []

        running = await db.write(start)
        if running:
            raise ToolRefused(
                f"Not started: {len(running)} background jobs are running "
                f"({', '.join(running)}; [tools.shell] max_background_jobs = {limit}). Tell "
                "the user; once one ends, or is stopped with `agentd workflows cancel JOB`, "
                "it can start."
            )
        engine.kick(jid)
        return (
            f"Started in the background as job {jid}. The user gets a notice when it ends; "
            f"`agentd workflows cancel {jid}` stops it."
        )

    return start_job
