"""Independent tool calls of one model reply, run at the same time.

A reply that asks for several reads (three searches, two fetches) need not wait for each in
turn. Which calls go together is itself a journaled step (`plan:<first id>`), so a replay
takes the same path whatever the registry says by then: low-risk tools that are not
at-most-once — and, once the turn has read outside content, not egress either (their routing
could then turn on the taint, and such a call asks). Calls of one reply were all chosen by the
model before any of their results existed, so routing them with the taint the reply was
written under is what the policy means; it never lets a result steer a sibling call. Each
runs by the one path every call takes
(calls.make_call: its own `route:`, `tool:`, `audit:` steps with the model's tool_use id in
their names) in a branch of the journal of its own (Step.fork), so whichever finishes first,
the journal replays the same. What they read taints the turn in the reply's order.

Every other call — medium or high risk, egress, at-most-once — runs after them, one at a time
in the reply's order, exactly as before: its routing sees what the reads brought in (a fetch's
page taints a later mail_send, which then asks), and a call that needs approval gets a card of
its own. One card each rather than one for several: each decision is about one effect the owner
can read whole on a phone, can approve one and deny another, and stays one approval row, one
audit row and one at-most-once step, as a single call's does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agentd.agent.approval_flow import Route
from agentd.agent.deps import TurnDeps
from agentd.agent.taint import TurnTaint
from agentd.durable import Step
from agentd.llm.types import ToolUseBlock
from agentd.tools import ToolOutcome

Handle = Callable[[Step, ToolUseBlock, TurnTaint], Awaitable[tuple[ToolOutcome, Route]]]


async def plan_together(
    deps: TurnDeps, uses: list[ToolUseBlock], tainted: bool = False
) -> list[str]:
    """The ids of the calls that may run at the same time (none if fewer than two)."""
    ids = []
    for use in uses:
        tool = deps.registry.get(use.name)
        if tool is None or tool.risk != "low" or tool.at_most_once:
            continue
        if not (tool.egress and tainted):
            ids.append(use.id)
    return ids if len(ids) > 1 else []


def merge_taint(into: TurnTaint, branch: TurnTaint) -> None:
    for source in branch.sources:
        into.add_source(source)
    into.add_urls(branch.urls)


async def run_together(
    step: Step, uses: list[ToolUseBlock], taint: TurnTaint, handle: Handle
) -> list[tuple[ToolOutcome, Route]]:
    branches = step.fork(len(uses))
    taints = [taint.model_copy(deep=True) for _ in uses]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(handle(branch, use, t))
                for branch, use, t in zip(branches, uses, taints, strict=True)
            ]
    except ExceptionGroup as exc:  # the turn handles one failure as it would a single call's
        raise exc.exceptions[0] from None
    for t in taints:
        merge_taint(taint, t)
    return [task.result() for task in tasks]


async def run_calls(
    step: Step, deps: TurnDeps, uses: list[ToolUseBlock], taint: TurnTaint, handle: Handle
) -> list[tuple[ToolOutcome, Route]]:
    """Every call of one reply, results in the reply's order."""
    together: list[str] = []
    if len(uses) > 1:
        together = await step.do(
            f"plan:{uses[0].id}",
            plan_together,
            deps,
            uses,
            bool(taint.sources),
            delivery="idempotent",
        )
    done: dict[str, tuple[ToolOutcome, Route]] = {}
    if together:
        group = [u for u in uses if u.id in together]
        for use, result in zip(group, await run_together(step, group, taint, handle), strict=True):
            done[use.id] = result
    for use in uses:
        if use.id not in done:
            done[use.id] = await handle(step, use, taint)
    return [done[use.id] for use in uses]
