"""One tool call, whoever makes it: a turn's model, an automation's `step.tool`.

Every call takes the same journaled path, so each gets the same promises: its arguments are
checked, the risk policy weighs it with the caller's taint, a high-risk call waits for the
owner on the same approval card as any other, an at-most-once call is never run twice (a crash
mid-call is settled by the tool or reported as "outcome unknown"), the tool sees a per-call id
(two calls are two: mail derives a send's Message-ID from it), and an audit row records it.

Steps, by the call's id: `route:<id>`, then (high risk) the approval's steps, `tool:<id>`,
`settle:<id>` / `unknown:<id>` after a crash, `audit:<id>`. A turn's id is the model's
tool_use id; an automation's is its step's name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel

from agentd.agent.approval_flow import Caller, Route, refusal, seek_approval
from agentd.agent.deps import CallDeps
from agentd.agent.taint import TurnTaint
from agentd.chat.delivery import WAITED_OUT, deliver
from agentd.chat.outbox import Outbox
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock, OutcomeUnknown, Step
from agentd.ledger import audit
from agentd.llm.types import ToolUseBlock
from agentd.tools import (
    OWN_WORDS,
    ApprovalCard,
    CallState,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    args_digest,
    call_risk,
    check_args,
    execute,
    hostrules,
    render_args,
)
from agentd.tools.fingerprint import fingerprint

log = logging.getLogger("agentd.agent")
UNKNOWN_OUTCOME = (
    "This action was interrupted by a restart after it had started. It may or may not have "
    "happened, and it was not repeated. Tell the user so they can check."
)
Decided = Literal["auto", "approved", "denied", "timed_out"]


@dataclass(frozen=True)
class CallServices:
    """What a call needs, for a caller that has no turn's TurnDeps (an automation)."""

    config: Config
    db: Database
    outbox: Outbox
    clock: Clock
    registry: ToolRegistry
    redact: Callable[[str], str]


class CallResult(BaseModel):
    outcome: ToolOutcome
    route: Route
    decision: Decided = "auto"  # how a high-risk call was decided; "auto": it did not ask

    @property
    def ran(self) -> bool:
        """False: it was refused (unknown tool, bad arguments, denied or not answered)."""
        return self.route.problem is None and self.decision in ("auto", "approved")


def _context(
    deps: CallDeps,
    caller: Caller,
    instance_id: str,
    use: ToolUseBlock,
    tainted_by: tuple[str, ...] = (),
) -> ToolContext:
    return ToolContext(
        chat_id=caller.chat_id,
        user_id=caller.user_id,
        instance_id=instance_id,
        chat_kind=caller.chat_kind,
        timezone=deps.config.agent.timezone,
        tool_use_id=use.id,
        now=deps.clock.now,
        redact=deps.redact,
        outgoing_dir=str(deps.config.outgoing_dir),
        tainted_by=tainted_by,
    )


# -- step functions ------------------------------------------------------------------------


async def route_tool(deps: CallDeps, use: ToolUseBlock, state: CallState | None = None) -> Route:
    tool = deps.registry.get(use.name)
    if tool is None:
        return Route(name=use.name, problem=deps.registry.unknown(use.name))
    checked = check_args(tool, use.input)
    if isinstance(checked, ToolOutcome):
        return Route(name=tool.name, risk=tool.risk, source=tool.source, problem=checked)
    state = state or CallState()
    if state.tainted_by:  # read while routing, so the journaled route keeps what was allowed
        hosts = await deps.db.read(hostrules.allowed_hosts, state.chat_id, state.user_id)
        state = replace(state, allowed_hosts=frozenset(hosts))
    verdict = call_risk(tool, checked, state)
    # What the owner approves is this tool as it is now: its fingerprint goes on the approval.
    printed = fingerprint(tool) if verdict.risk == "high" else ""
    return Route(
        name=tool.name,
        risk=verdict.risk,
        source=tool.source,
        reason=verdict.reason,
        fingerprint=printed,
        at_most_once=tool.at_most_once,
        settles=tool.settle is not None,
        taints=tool.taints,
        allow_host=verdict.allow_host if verdict.risk == "high" else "",
        previews=tool.preview is not None,
    )


def changed_since_approval(name: str) -> ToolOutcome:
    text = (
        f"The tool {name} changed after the owner approved this call (its code, schema or "
        "source is different now), so it was NOT run. Tell the user to ask again."
    )
    return ToolOutcome(ok=False, content=text, error_kind="refused")


async def run_tool(
    deps: CallDeps,
    name: str,
    caller: Caller,
    instance_id: str,
    use: ToolUseBlock,
    approved_fingerprint: str = "",
    tainted_by: tuple[str, ...] = (),
) -> ToolOutcome:
    tool = deps.registry.get(name)
    if tool is None:  # gone since it was routed (e.g. its MCP server did not come back)
        return deps.registry.unknown(name)
    if approved_fingerprint and fingerprint(tool) != approved_fingerprint:
        log.warning("tool changed since its call was approved; not run", extra={"tool": name})
        return changed_since_approval(name)
    ctx = _context(deps, caller, instance_id, use, tainted_by)
    if not caller.waiting:
        return await execute(tool, ctx, use.input)
    async with deps.outbox.typing(caller.chat_id):
        return await execute(tool, ctx, use.input)


async def preview_tool(
    deps: CallDeps, name: str, caller: Caller, instance_id: str, use: ToolUseBlock
) -> ApprovalCard | None:
    """The card of a call that shows live state (Tool.preview); None: the usual card. A
    preview that fails says so on the card instead of hiding the call."""
    tool = deps.registry.get(name)
    checked = check_args(tool, use.input) if tool is not None else None
    if tool is None or tool.preview is None or isinstance(checked, ToolOutcome):
        return None
    try:
        ctx = _context(deps, caller, instance_id, use)
        return await asyncio.wait_for(tool.preview(ctx, checked), tool.timeout)
    except Exception as exc:
        text = f"(no preview: {deps.redact(str(exc) or type(exc).__name__)[:300]})"
        return ApprovalCard(text=text)


async def settle_tool(
    deps: CallDeps, name: str, caller: Caller, instance_id: str, use: ToolUseBlock
) -> ToolOutcome | None:
    """A call cut short by a crash: let the tool find out what happened, never run it again.
    None: it cannot say (no settle, arguments no longer valid, settling failed)."""
    tool = deps.registry.get(name)
    checked = check_args(tool, use.input) if tool is not None else None
    if tool is None or tool.settle is None or isinstance(checked, ToolOutcome):
        return None
    try:
        found = await tool.settle(_context(deps, caller, instance_id, use), checked)
    except Exception as exc:
        log.warning(
            "could not settle an interrupted call",
            extra={"tool": name, "error": type(exc).__name__},
        )
        return None
    kind = "tool_error" if found.is_error else None
    return ToolOutcome(ok=not found.is_error, content=deps.redact(found.content), error_kind=kind)


async def report_unknown(
    deps: CallDeps, caller: Caller, route: Route, use: ToolUseBlock
) -> ToolOutcome:
    """A crash cut an at-most-once call short: tell the user plainly, with what it was, and
    never run it again by ourselves (the model is told the same)."""
    shown = deps.redact(render_args(use.input, limit=600, value_limit=500))
    fenced = shown.replace("```", "'''")
    text = (
        f"⚠️ Outcome unknown: `{route.name}` may or may not have run (a restart cut it "
        f"short); it was not run again.\n\n```\n{fenced}\n```"
    )
    try:
        await deps.outbox.send_text(caller.chat_id, text)
    except WAITED_OUT:
        raise
    except Exception as exc:  # the model's answer still says it
        log.warning(
            "could not send the outcome-unknown notice", extra={"error": type(exc).__name__}
        )
    content = f"{UNKNOWN_OUTCOME} The call was: {route.name} {shown}"
    return ToolOutcome(ok=False, content=content, error_kind="exception")


async def settle_or_report(
    step: Step, deps: CallDeps, caller: Caller, route: Route, use: ToolUseBlock
) -> ToolOutcome:
    """After a crash during an at-most-once call: the tool's own account of what happened
    (a mail found in Sent) where it has one, else the plain "outcome unknown" notice, sent
    through the one send path."""
    if route.settles:  # journaled in the route, so a replay takes the same steps
        found = await step.do(
            f"settle:{use.id}", settle_tool, deps, route.name, caller, step.instance_id, use
        )
        if found is not None:
            return found
    report = partial(report_unknown, deps, caller, route, use)
    name = f"unknown:{use.id}"
    return await deliver(step, deps.db, name, caller.chat_id, report, result_type=ToolOutcome)


def write_tool_audit(
    conn: Any,
    caller: Caller,
    instance_id: str,
    tool: Route,
    use: ToolUseBlock,
    outcome: ToolOutcome,
    decision: str,
    decided_by: str | None,
) -> None:
    audit.record(
        conn,
        "tool_call",
        chat_id=caller.chat_id,
        user_id=caller.user_id,
        instance_id=instance_id,
        source_key=f"{instance_id}:tool:{use.id}",
        detail={
            "tool": tool.name,
            "risk": tool.risk,
            "source": tool.source,
            "args_digest": args_digest(use.input),
            "decision": decision,
            "decided_by": decided_by,
            "ok": outcome.ok,
            "error_kind": outcome.error_kind,
            "duration_ms": outcome.duration_ms,
        },
    )


def note_result(taint: TurnTaint, route: Route, use: ToolUseBlock, outcome: ToolOutcome) -> None:
    """What a call that ran adds to the caller's taint: its source, if the tool taints (or
    this result said it holds outside content), whether it succeeded or failed on what it met.
    URLs a result shows earn nothing."""
    if not outcome.ok and outcome.error_kind in OWN_WORDS:
        return
    if route.taints or outcome.outside:
        first = next((v for v in use.input.values() if isinstance(v, str) and v.strip()), "")
        first = " ".join(first.split())
        taint.add_source(f"{route.name} ({first[:80]})" if first else route.name)


# -- the path --------------------------------------------------------------------------------


async def _execute(
    step: Step, deps: CallDeps, caller: Caller, route: Route, use: ToolUseBlock, taint: TurnTaint
) -> ToolOutcome:
    """The run itself: at most once for a high-risk or at-most-once call (settled or
    reported after a crash), else an ordinary step a crash runs again."""
    iid = step.instance_id
    if not (route.risk == "high" or route.at_most_once):
        return await step.do(
            f"tool:{use.id}", run_tool, deps, route.name, caller, iid, use, "", taint.tainted_by
        )
    try:
        return await step.do(
            f"tool:{use.id}",
            run_tool,
            deps,
            route.name,
            caller,
            iid,
            use,
            route.fingerprint,
            taint.tainted_by,
            delivery="at_most_once",
        )
    except OutcomeUnknown:
        return await settle_or_report(step, deps, caller, route, use)


async def make_call(
    step: Step, deps: CallDeps, caller: Caller, use: ToolUseBlock, taint: TurnTaint
) -> CallResult:
    """One call → its outcome, through validation, the risk policy, approval and the
    journal. `taint` grows with what the call read, for the caller's later calls."""
    iid = step.instance_id
    state = CallState(
        chat_kind=caller.chat_kind,
        tainted_by=taint.tainted_by,
        user_urls=frozenset(taint.user_urls),
        chat_id=caller.chat_id,
        user_id=caller.user_id,
    )
    route = await step.do(f"route:{use.id}", route_tool, deps, use, state, delivery="idempotent")
    if route.problem is not None:
        return CallResult(outcome=route.problem, route=route)  # no approval asked
    decision: Decided = "auto"
    by = None
    if route.risk == "high":
        previewed = None
        if route.previews:
            previewed = await step.do(
                f"preview:{use.id}", preview_tool, deps, route.name, caller, iid, use
            )
        verdict = await seek_approval(step, deps, route, caller, use, previewed)
        decision, by = verdict.status, verdict.by
        if verdict.status != "approved":
            outcome = refusal(route, verdict, deps.config.tools.approval_timeout)
            await step.local(
                f"audit:{use.id}", write_tool_audit, caller, iid, route, use, outcome, decision, by
            )
            return CallResult(outcome=outcome, route=route, decision=decision)
    outcome = await _execute(step, deps, caller, route, use, taint)
    note_result(taint, route, use, outcome)  # whichever way it ran (or was settled / reported)
    await step.local(
        f"audit:{use.id}", write_tool_audit, caller, iid, route, use, outcome, decision, by
    )
    return CallResult(outcome=outcome, route=route, decision=decision)
