"""The agent loop (R-TOOL-2…5): model → tools under the risk policy → model, at most max_steps.

Every model call is step `llm#n` and every tool run step `tool:<tool_use_id>`, so a crash never
repeats a finished call or tool. A high-risk call first stores an approval, asks the owner with
Approve / Deny buttons and waits durably; a timeout is recorded as timed out, never as denied.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from agentd import approvals, audit, usage
from agentd.agent.deps import Recall, TurnDeps
from agentd.agent.prompt import ToolInfo, build_context, build_system, with_breakpoints
from agentd.agent.streaming import DraftStreamer, draft_id
from agentd.approvals import Approval
from agentd.db import Database
from agentd.durable import OutcomeUnknown, Step
from agentd.durable.pending import Pending
from agentd.llm.types import (
    LLMRequest,
    LLMResponse,
    Message,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from agentd.media.outfiles import SpooledFile
from agentd.outbox import Button, Outbox
from agentd.tools import (
    ToolContext,
    ToolOutcome,
    args_digest,
    check_args,
    execute,
    render_args,
)

if TYPE_CHECKING:
    from agentd.agent.inputs import TurnInput

log = logging.getLogger("agentd.agent")
EMPTY_ANSWER = "(The model returned an empty answer.)"
UNKNOWN_OUTCOME = (
    "This action was interrupted by a restart after it had started. It may or may not have "
    "happened, and it was not repeated. Tell the user so they can check."
)


SERVER_WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}


def with_sources(text: str, sources: list[tuple[str, str]]) -> str:
    """Web pages the answer cites, as links (R-WEB-1)."""
    if not sources:
        return text
    links = "\n".join(f"- [{title.replace(']', ')')}]({url})" for title, url in sources)
    return f"{text}\n\nSources:\n{links}"


def step_limit_note(max_steps: int) -> str:
    return f"(I stopped after {max_steps} model calls — my step limit — before finishing.)"


class AgentResult(BaseModel):
    text: str
    calls: int
    outcome: Literal["answered", "step_limit"] = "answered"
    reported_actions: list[str] = Field(default_factory=list)
    files: list[SpooledFile] = Field(default_factory=list)  # from tools, sent after the text


class Route(BaseModel):
    """How a tool call is handled, journaled so a replay takes the same path even if the
    registry changed meanwhile (an MCP server not yet back, a new risk override)."""

    name: str
    risk: Literal["low", "medium", "high"] | None = None  # None: no such tool
    source: str = ""
    problem: ToolOutcome | None = None  # unknown tool or invalid arguments: not run


class Decision(BaseModel):
    status: Literal["approved", "denied", "timed_out"]
    by: str | None = None
    reason: str | None = None


def _context(deps: TurnDeps, inp: TurnInput, instance_id: str, use: ToolUseBlock) -> ToolContext:
    return ToolContext(
        chat_id=inp.chat_id,
        user_id=inp.user_id,
        instance_id=instance_id,
        timezone=deps.config.agent.timezone,
        tool_use_id=use.id,
        now=deps.clock.now,
        redact=deps.redact,
        outgoing_dir=str(deps.config.outgoing_dir),
    )


# -- step functions ------------------------------------------------------------------------


async def route_tool(deps: TurnDeps, use: ToolUseBlock) -> Route:
    tool = deps.registry.get(use.name)
    if tool is None:
        return Route(name=use.name, problem=deps.registry.unknown(use.name))
    checked = check_args(tool, use.input)
    problem = checked if isinstance(checked, ToolOutcome) else None
    return Route(name=tool.name, risk=tool.risk, source=tool.source, problem=problem)


async def run_tool(
    deps: TurnDeps, name: str, inp: TurnInput, instance_id: str, use: ToolUseBlock
) -> ToolOutcome:
    tool = deps.registry.get(name)
    if tool is None:  # gone since it was routed (e.g. its MCP server did not come back)
        return deps.registry.unknown(name)
    async with deps.outbox.typing(inp.chat_id):
        return await execute(tool, _context(deps, inp, instance_id, use), use.input)


def create_approval(
    conn: Any, deps: TurnDeps, tool: Route, inp: TurnInput, instance_id: str, use: ToolUseBlock
) -> Approval:
    now = deps.clock.now()
    approval = Approval(
        id=approvals.new_id(),
        instance_id=instance_id,
        tool_use_id=use.id,
        chat_id=inp.chat_id,
        user_id=inp.user_id,
        tool=tool.name,
        risk=tool.risk or "high",
        args_digest=args_digest(use.input),
        args_preview=deps.redact(render_args(use.input)),
        status="pending",
        created_at=now,
        expires_at=now + deps.config.tools.approval_timeout,
    )

    stored = approvals.create(conn, approval)
    audit.record(conn, "approval_requested", chat_id=inp.chat_id, user_id=inp.user_id,
                 instance_id=instance_id, at=now, source_key=f"approval-requested:{stored.id}",
                 detail={"approval": stored.id, "tool": tool.name, "risk": tool.risk,
                         "args_digest": stored.args_digest})  # fmt: skip
    return stored


def _approval_text(approval: Approval, timeout: float) -> str:
    preview = approval.args_preview.replace("```", "'''")
    minutes = max(1, round(timeout / 60))
    return (
        f"🔐 **Approval needed** — `{approval.tool}` ({approval.risk} risk)\n\n"
        f"```\n{preview}\n```\n\n"
        f"Approve or deny within {minutes} min, or: `agentd approve {approval.id}`"
    )


def outcome_text(approval: Approval, status: str, by: str | None) -> str:
    label = {
        "approved": f"✅ Approved{f' by {by}' if by else ''} — running.",
        "denied": f"❌ Denied{f' by {by}' if by else ''} — not run.",
        "timed_out": "⌛ No answer in time — not run.",
        "cancelled": "🚫 The request was cancelled — not run.",
    }[status]
    preview = approval.args_preview.replace("```", chr(39) * 3)
    return f"`{approval.tool}`: {label}\n\n```\n{preview}\n```"


async def ask_owner(deps: TurnDeps, approval: Approval) -> int | None:
    """Send the Approve / Deny buttons; if Telegram is down the CLI can still decide."""
    buttons = [
        [
            Button(text="✅ Approve", data=approvals.callback_data(approval.id, True)),
            Button(text="❌ Deny", data=approvals.callback_data(approval.id, False)),
        ]
    ]
    text = _approval_text(approval, approval.expires_at - approval.created_at)
    try:
        message_id = await deps.outbox.send_text(approval.chat_id, text, buttons=buttons)
    except Exception as exc:
        log.warning("could not send the approval request; `agentd approve` still works",
                    extra={"approval": approval.id, "error": type(exc).__name__})  # fmt: skip
        return None
    await deps.db.write(approvals.set_message_id, approval.id, message_id)
    return message_id


async def settle_timeout(deps: TurnDeps, approval_id: str) -> Decision:
    """A decision that landed just before the deadline still counts; else record timed_out."""
    stored = await deps.db.write(approvals.expire, approval_id, deps.clock.now())
    if stored.status == "timed_out":
        await deps.db.write(
            lambda conn: audit.record(
                conn, "approval_timed_out", chat_id=stored.chat_id, instance_id=stored.instance_id,
                detail={"approval": stored.id, "tool": stored.tool},
                source_key=f"approval-timeout:{stored.id}",
            )
        )  # fmt: skip
    return Decision(status=stored.status, by=stored.decided_by)  # type: ignore[arg-type]


async def show_outcome(
    deps: TurnDeps, approval: Approval, message_id: int | None, d: Decision
) -> None:
    """Edit the approval message to show what happened, removing the buttons (best effort:
    the decision stands whatever Telegram says)."""
    if message_id is None:
        return
    try:
        await deps.outbox.edit_text(
            approval.chat_id, message_id, outcome_text(approval, d.status, d.by)
        )
    except Exception as exc:
        log.info("could not edit the approval message", extra={"error": type(exc).__name__})


async def withdraw_approvals(db: Database, outbox: Outbox, instance_id: str) -> None:
    """A turn that ended while it waited (cancelled): take its buttons down and say so."""
    for approval in await db.read(approvals.undecided_of, instance_id):
        if approval.message_id is None:
            continue
        text = outcome_text(approval, "cancelled", None)
        try:
            await outbox.edit_text(approval.chat_id, approval.message_id, text)
        except Exception as exc:
            log.info("could not withdraw the approval request", extra={"error": type(exc).__name__})


def write_tool_audit(
    conn: Any, inp: TurnInput, instance_id: str, tool: Route, use: ToolUseBlock,
    outcome: ToolOutcome, decision: str, decided_by: str | None,
) -> None:  # fmt: skip
    audit.record(
        conn, "tool_call", chat_id=inp.chat_id, user_id=inp.user_id, instance_id=instance_id,
        source_key=f"{instance_id}:tool:{use.id}",
        detail={"tool": tool.name, "risk": tool.risk, "source": tool.source,
                "args_digest": args_digest(use.input), "decision": decision,
                "decided_by": decided_by, "ok": outcome.ok, "error_kind": outcome.error_kind,
                "duration_ms": outcome.duration_ms},
    )  # fmt: skip


# -- the loop --------------------------------------------------------------------------------


async def _approval(step: Step, deps: TurnDeps, tool: Route, inp: TurnInput,
                    use: ToolUseBlock) -> Decision:  # fmt: skip
    iid = step.instance_id
    approval = await step.local(f"approval:{use.id}", create_approval, deps, tool, inp, iid, use)
    message_id = await step.do(f"ask:{use.id}", ask_owner, deps, approval)
    event = await step.wait_for_event(
        approvals.event_type(approval.id),
        timeout=max(0.0, approval.expires_at - approval.created_at),
        name=f"wait:{use.id}",
    )
    if event is None:
        decision = await step.do(f"expire:{use.id}", settle_timeout, deps, approval.id)
    else:
        decision = Decision(
            status=event.payload.get("decision", "denied"),
            by=event.payload.get("by"),
            reason=event.payload.get("reason"),
        )
    await step.do(f"show:{use.id}", show_outcome, deps, approval, message_id, decision)
    return decision


def _refusal(tool: Route, decision: Decision, timeout: float) -> ToolOutcome:
    if decision.status == "timed_out":
        text = (
            f"The owner did not approve {tool.name} within {timeout:g} seconds, so it was NOT "
            "run (timed out, not denied). Tell the user it was not done."
        )
        return ToolOutcome(ok=False, content=text, error_kind="tool_error")
    reason = f" Reason: {decision.reason}" if decision.reason else ""
    text = f"The owner denied running {tool.name}; it was NOT run.{reason} Tell the user."
    return ToolOutcome(ok=False, content=text, error_kind="tool_error")


async def handle_tool_use(
    step: Step, deps: TurnDeps, inp: TurnInput, use: ToolUseBlock
) -> tuple[ToolOutcome, Route]:
    """One tool_use block → its outcome, through validation, the risk policy and the journal."""
    iid = step.instance_id
    route = await step.do(f"route:{use.id}", route_tool, deps, use, delivery="idempotent")
    if route.problem is not None:
        return route.problem, route  # unknown tool or invalid arguments: no approval asked
    decision, by = "auto", None
    if route.risk == "high":
        verdict = await _approval(step, deps, route, inp, use)
        decision, by = verdict.status, verdict.by
        if verdict.status != "approved":
            outcome = _refusal(route, verdict, deps.config.tools.approval_timeout)
            await step.local(f"audit:{use.id}", write_tool_audit, inp, iid, route, use,
                             outcome, decision, by)  # fmt: skip
            return outcome, route
        try:
            outcome = await step.do(f"tool:{use.id}", run_tool, deps, route.name, inp, iid, use,
                                    delivery="at_most_once")  # fmt: skip
        except OutcomeUnknown:
            outcome = ToolOutcome(ok=False, content=UNKNOWN_OUTCOME, error_kind="exception")
    else:
        outcome = await step.do(f"tool:{use.id}", run_tool, deps, route.name, inp, iid, use)
    await step.local(f"audit:{use.id}", write_tool_audit, inp, iid, route, use, outcome,
                     decision, by)  # fmt: skip
    return outcome, route


class StablePrefix(BaseModel):
    """A turn's request without messages (the system prompt and tools: the cached prefix), and
    its length in characters, which the history window's token estimate needs."""

    request: LLMRequest
    chars: int


def stable_prefix(deps: TurnDeps) -> StablePrefix:
    tools = deps.registry.tools()
    return deps.stable.get(tools, lambda: _build_stable(deps, tools))  # type: ignore[no-any-return]


def stable_request(deps: TurnDeps) -> LLMRequest:
    return stable_prefix(deps).request


def _build_stable(deps: TurnDeps, tools: list[Any]) -> StablePrefix:
    infos = [ToolInfo(name=t.name, description=t.description, risk=t.risk) for t in tools]
    server_tools = []
    if deps.config.web.provider == "anthropic":  # the provider searches; results come back cited
        server_tools = [SERVER_WEB_SEARCH | {"max_uses": deps.config.web.max_results}]
        infos.append(ToolInfo(name="web_search", risk="low",
                              description="Search the web; cite the pages you use."))  # fmt: skip
    request = LLMRequest(
        purpose="turn",
        system=build_system(
            persona=deps.config.agent.persona, name=deps.config.agent.name, tools=infos
        ),
        messages=[],
        tools=[ToolSpec.model_validate(t.llm_spec()) for t in tools],
        server_tools=server_tools,
    )
    tools_json = json.dumps([t.model_dump() for t in request.tools] + server_tools)
    return StablePrefix(
        request=request, chars=sum(len(b.text) for b in request.system) + len(tools_json)
    )


async def call_llm(
    deps: TurnDeps,
    inp: TurnInput,
    messages: list[Message],
    instance_id: str,
    step_name: str,
    recall: Recall,
    turn_start: int,
    held: Pending | None = None,
) -> LLMResponse:
    """One model call with a fresh prompt; its tokens are recorded (R-LLM-4).

    messages[turn_start] is this turn's user message: what comes before it is stored history.
    """
    zone = ZoneInfo(deps.config.agent.timezone)
    req = stable_request(deps).model_copy(update={
        "messages": with_breakpoints(messages, turn_start),
        "context": build_context(now=datetime.fromtimestamp(deps.clock.now(), zone),
                                 facts=recall.facts, memories=recall.memories),
    })  # fmt: skip
    on_text = None
    if deps.config.telegram.streaming and inp.chat_id > 0:  # drafts exist in private chats only
        on_text = DraftStreamer(deps.outbox, inp.chat_id, draft_id(instance_id, step_name),
                                deps.config.telegram.stream_interval,
                                delay=deps.config.telegram.progress_delay)  # fmt: skip
    async with deps.outbox.typing(inp.chat_id):  # only while the model works, not approvals
        response = await deps.llm.complete(req, on_text=on_text)
    record = partial(
        usage.record, tokens=response.usage, model=response.model, purpose="turn",
        chat_id=inp.chat_id, instance_id=instance_id, step=step_name, attempt=response.attempt,
    )  # fmt: skip
    if held is not None:
        # In the transaction that journals the step's result, next: the tokens are on disk
        # exactly when the answer is, with no commit of their own.
        held.add(record)
    else:
        await deps.db.write_unsynced(record)
    return response


async def agent_loop(
    step: Step, deps: TurnDeps, inp: TurnInput, messages: list[Message], recall: Recall
) -> AgentResult:
    """Ask the model, run the tools it asks for, and repeat until it answers in text."""
    max_steps = deps.config.llm.max_steps
    conversation = list(messages)
    turn_start = len(messages) - 1
    reported: list[str] = []
    files: list[SpooledFile] = []
    last_text = ""
    response: LLMResponse | None = None
    for n in range(1, max_steps + 1):
        name = f"llm#{n}"
        response = await step.do(
            name,
            call_llm,
            deps,
            inp,
            conversation,
            step.instance_id,
            name,
            recall,
            turn_start,
            step.pending,
        )
        last_text = response.text or last_text
        if not response.tool_uses:
            if response.stop_reason == "pause_turn" and n < max_steps:
                # A long server-side tool run paused: send the turn back so the model goes on.
                conversation.append(Message(role="assistant", content=response.content))
                continue
            text = with_sources(response.text or last_text or EMPTY_ANSWER, response.sources)
            return AgentResult(text=text, calls=n, reported_actions=reported, files=files)
        if n == max_steps:
            break  # no model call is left to read tool results: don't run them
        conversation.append(Message(role="assistant", content=response.content))
        results = []
        for use in response.tool_uses:
            outcome, route = await handle_tool_use(step, deps, inp, use)
            if route.risk == "medium" and outcome.ok:
                reported.append(f"{route.name} ({_brief(use)})")
            files.extend(outcome.files)
            results.append(ToolResultBlock(tool_use_id=use.id, content=outcome.content or "(empty)",
                                           is_error=not outcome.ok))  # fmt: skip
        conversation.append(Message(role="user", content=results))
    note = step_limit_note(max_steps)
    text = f"{last_text}\n\n{note}" if last_text else note
    return AgentResult(text=text, calls=max_steps, outcome="step_limit", reported_actions=reported,
                       files=files)  # fmt: skip


def _brief(use: ToolUseBlock) -> str:
    rendered = render_args(use.input, limit=80, value_limit=40).replace("\n", ", ")
    return rendered if len(rendered) <= 80 else rendered[:79] + "…"
