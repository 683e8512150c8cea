"""The task workflow: a model and its tools, working in the background on one brief.

Like a turn's agent loop — every model call is `llm#n`, every tool call takes the one path all
calls take (agent/calls.py: risk policy, approval card, at-most-once, audit) — but with the
task's own tool subset, step limit and token budget, its usage counted to the chat and user
that started it (and held to their [limits] daily budgets before each call: `limits#n`), and
its result sent to that chat through the one send path, replying to the message that asked.
"""

from __future__ import annotations

from functools import partial

from agentd.access import ratelimit
from agentd.agent import budget, together
from agentd.agent.approval_flow import Caller, Route
from agentd.agent.calls import make_call
from agentd.agent.deps import TurnDeps
from agentd.agent.taint import TurnTaint
from agentd.agent.toolloop import current_prefix, fallback_row
from agentd.chat.delivery import deliver_text
from agentd.chat.names import TASK_WORKFLOW
from agentd.durable import Step, Workflow, workflow
from agentd.ledger import usage
from agentd.llm.billing import answer_row, bill, complete_billed, cut_rows
from agentd.llm.types import (
    CutAttempt,
    LLMResponse,
    Message,
    SystemBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentd.tasks.model import TaskInput, TaskOutput
from agentd.tools import ToolOutcome

TASK_RULE = (
    "You are working on a background task the user delegated; nobody reads along while you "
    "work. Use your tools as needed, then answer with the result itself, complete and concise: "
    "it is sent to the user as it is."
)


def task_brief(inp: TaskInput) -> str:
    return f"Task:\n{inp.text}"


async def call_task_llm(
    deps: TurnDeps, inp: TaskInput, conversation: list[Message], instance_id: str, name: str
) -> LLMResponse:
    """One model call with the task's tools only; its tokens count to the chat and user."""
    prefix = (await current_prefix(deps, inp)).request
    allowed = set(inp.tools)
    req = prefix.model_copy(
        update={
            "purpose": "task",  # its own model if [llm.models] names one, else the chat's
            "system": [*prefix.system, SystemBlock(text=TASK_RULE)],
            "tools": [t for t in prefix.tools if t.name in allowed],
            "server_tools": [],
            "messages": conversation,
        }
    )
    row = partial(
        usage.record,
        purpose="task",
        chat_id=inp.chat_id,
        instance_id=instance_id,
        step=name,
        user_id=inp.user_id,
        now=deps.clock.now,  # the day the budgets count
    )
    cut: list[CutAttempt] = []  # attempts cut short (a stop mid-call), as they end
    response = await complete_billed(deps.db, deps.llm, req, row, cut)
    rows = [*cut_rows(row, cut), answer_row(row, response)]
    if response.fallback_reason:
        rows.append(fallback_row(response, inp, instance_id, name))
    await bill(deps.db, rows)
    return response


async def refused_call(step: Step, deps: TurnDeps, inp: TaskInput, n: int) -> ratelimit.TokenLimit:
    """Which daily budget stops model call `n` ("": it may go ahead): agent/budget.py."""
    return await budget.refused_call(step, deps, inp, n)


def spent(response: LLMResponse) -> int:
    return response.usage.total


async def run_calls(
    step: Step, deps: TurnDeps, inp: TaskInput, uses: list[ToolUseBlock], taint: TurnTaint
) -> list[ToolResultBlock]:
    """Each call by the one path (independent reads at once, agent/together.py); a tool
    outside the task's subset is refused, not run."""
    caller = Caller(
        chat_id=inp.chat_id,
        chat_kind=inp.chat_kind,
        user_id=inp.user_id,
        text=inp.text,
        waiting=False,
    )

    async def handle(at: Step, use: ToolUseBlock, t: TurnTaint) -> tuple[ToolOutcome, Route]:
        if use.name not in inp.tools:
            text = f"{use.name} is not among this task's tools ({', '.join(inp.tools) or 'none'})."
            return ToolOutcome(ok=False, content=text, error_kind="refused"), Route(name=use.name)
        result = await make_call(at, deps, caller, use, t)
        return result.outcome, result.route

    ran = await together.run_calls(step, deps, uses, taint, handle)
    return [
        ToolResultBlock(
            tool_use_id=use.id, content=outcome.content or "(empty)", is_error=not outcome.ok
        )
        for use, (outcome, _) in zip(uses, ran, strict=True)
    ]


async def work(step: Step, deps: TurnDeps, inp: TaskInput) -> TaskOutput:
    """Model and tools until an answer, the step limit or the token budget."""
    conversation = [Message(role="user", content=task_brief(inp))]
    taint, tokens, last = TurnTaint(), 0, ""
    for source in inp.tainted_by:
        taint.add_source(source)
    for n in range(1, inp.max_steps + 1):
        name = f"llm#{n}"
        if limit := await refused_call(step, deps, inp, n):
            note = budget.stopped_note(limit, deps, n)
            return TaskOutput(
                outcome="rate_limited", text=f"{last}\n\n{note}".strip(), tokens=tokens
            )
        response = await step.do(
            name, call_task_llm, deps, inp, conversation, step.instance_id, name
        )
        tokens += spent(response)
        last = response.text or last
        if not response.tool_uses:
            return TaskOutput(outcome="done", text=response.text or "(no answer)", tokens=tokens)
        if tokens >= inp.token_budget:
            note = (
                f"(Stopped: this task used {tokens:,} tokens, its budget is {inp.token_budget:,}.)"
            )
            return TaskOutput(outcome="budget", text=f"{last}\n\n{note}".strip(), tokens=tokens)
        if n == inp.max_steps:
            break
        conversation.append(Message(role="assistant", content=response.content))
        results = await run_calls(step, deps, inp, response.tool_uses, taint)
        conversation.append(Message(role="user", content=results))
    note = f"(Stopped after {inp.max_steps} model calls, this task's step limit.)"
    return TaskOutput(outcome="step_limit", text=f"{last}\n\n{note}".strip(), tokens=tokens)


def result_text(inp: TaskInput, out: TaskOutput) -> str:
    brief = " ".join(inp.text.split())
    brief = brief if len(brief) <= 80 else brief[:79] + "…"
    return f"Task done — “{brief}”:\n\n{out.text}"


def make_task_workflow(deps: TurnDeps) -> Workflow[TaskInput, TaskOutput]:
    @workflow(TASK_WORKFLOW)
    async def task(step: Step, inp: TaskInput) -> TaskOutput:
        out = await work(step, deps, inp)
        text = result_text(inp, out)
        message_id = await deliver_text(
            step,
            deps.db,
            "send-result",
            deps.outbox,
            inp.chat_id,
            text,
            reply_to=inp.reply_to,
            notice=True,
        )
        return out.model_copy(update={"message_id": message_id})

    return task
