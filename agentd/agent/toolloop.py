"""The agent loop (R-TOOL-2…5): model → tools under the risk policy → model, at most max_steps.

Every model call is step `llm#n` and every tool run step `tool:<tool_use_id>`, so a crash never
repeats a finished call or tool. A high-risk call first waits for the owner's approval
(approval_flow.py).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from agentd.agent.approval_flow import Route, refusal, seek_approval
from agentd.agent.deps import Recall, TurnDeps
from agentd.agent.prompt import ToolInfo, build_context, build_system, with_breakpoints
from agentd.agent.streaming import DraftStreamer, draft_id
from agentd.agent.taint import TurnTaint
from agentd.chat.outfiles import SpooledFile
from agentd.durable import OutcomeUnknown, Step
from agentd.durable.pending import Pending
from agentd.ledger import audit, usage
from agentd.llm.types import (
    LLMRequest,
    LLMResponse,
    Message,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from agentd.tools import (
    CallState,
    ToolContext,
    ToolOutcome,
    args_digest,
    call_risk,
    check_args,
    execute,
    render_args,
)
from agentd.tools.fingerprint import fingerprint
from agentd.tools.urls import normal_url, urls_in

if TYPE_CHECKING:
    from agentd.chat.inputs import TurnInput

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
    skills_used: list[str] = Field(default_factory=list)  # loaded with use_skill, in order
    files: list[SpooledFile] = Field(default_factory=list)  # from tools, sent after the text


def _context(
    deps: TurnDeps,
    inp: TurnInput,
    instance_id: str,
    use: ToolUseBlock,
    tainted_by: tuple[str, ...] = (),
) -> ToolContext:
    return ToolContext(
        chat_id=inp.chat_id,
        user_id=inp.user_id,
        instance_id=instance_id,
        timezone=deps.config.agent.timezone,
        tool_use_id=use.id,
        now=deps.clock.now,
        redact=deps.redact,
        outgoing_dir=str(deps.config.outgoing_dir),
        tainted_by=tainted_by,
    )


# -- step functions ------------------------------------------------------------------------


async def route_tool(deps: TurnDeps, use: ToolUseBlock, state: CallState | None = None) -> Route:
    tool = deps.registry.get(use.name)
    if tool is None:
        return Route(name=use.name, problem=deps.registry.unknown(use.name))
    checked = check_args(tool, use.input)
    if isinstance(checked, ToolOutcome):
        return Route(name=tool.name, risk=tool.risk, source=tool.source, problem=checked)
    verdict = call_risk(tool, checked, state or CallState())
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
    )


def changed_since_approval(name: str) -> ToolOutcome:
    text = (
        f"The tool {name} changed after the owner approved this call (its code, schema or "
        "source is different now), so it was NOT run. Tell the user to ask again."
    )
    return ToolOutcome(ok=False, content=text, error_kind="tool_error")


async def run_tool(
    deps: TurnDeps,
    name: str,
    inp: TurnInput,
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
    ctx = _context(deps, inp, instance_id, use, tainted_by)
    async with deps.outbox.typing(inp.chat_id):
        return await execute(tool, ctx, use.input)


async def settle_tool(
    deps: TurnDeps, name: str, inp: TurnInput, instance_id: str, use: ToolUseBlock
) -> ToolOutcome | None:
    """A call cut short by a crash: let the tool find out what happened, never run it again.
    None: it cannot say (no settle, arguments no longer valid, settling failed)."""
    tool = deps.registry.get(name)
    checked = check_args(tool, use.input) if tool is not None else None
    if tool is None or tool.settle is None or isinstance(checked, ToolOutcome):
        return None
    try:
        found = await tool.settle(_context(deps, inp, instance_id, use), checked)
    except Exception as exc:
        log.warning(
            "could not settle an interrupted call",
            extra={"tool": name, "error": type(exc).__name__},
        )
        return None
    kind = "tool_error" if found.is_error else None
    return ToolOutcome(ok=not found.is_error, content=deps.redact(found.content), error_kind=kind)


async def report_unknown(
    deps: TurnDeps, inp: TurnInput, route: Route, use: ToolUseBlock
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
        await deps.outbox.send_text(inp.chat_id, text)
    except Exception as exc:  # the model's answer still says it
        log.warning(
            "could not send the outcome-unknown notice", extra={"error": type(exc).__name__}
        )
    content = f"{UNKNOWN_OUTCOME} The call was: {route.name} {shown}"
    return ToolOutcome(ok=False, content=content, error_kind="exception")


async def settle_or_report(
    step: Step, deps: TurnDeps, inp: TurnInput, route: Route, use: ToolUseBlock
) -> ToolOutcome:
    """After a crash during an at-most-once call: the tool's own account of what happened
    (a mail found in Sent) where it has one, else the plain "outcome unknown" notice."""
    if route.settles:  # journaled in the route, so a replay takes the same steps
        found = await step.do(
            f"settle:{use.id}", settle_tool, deps, route.name, inp, step.instance_id, use
        )
        if found is not None:
            return found
    return await step.do(f"unknown:{use.id}", report_unknown, deps, inp, route, use)


def write_tool_audit(
    conn: Any,
    inp: TurnInput,
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
        chat_id=inp.chat_id,
        user_id=inp.user_id,
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


# -- the loop --------------------------------------------------------------------------------


async def handle_tool_use(
    step: Step, deps: TurnDeps, inp: TurnInput, use: ToolUseBlock, taint: TurnTaint | None = None
) -> tuple[ToolOutcome, Route]:
    """One tool_use block → its outcome, through validation, the risk policy and the journal."""
    iid = step.instance_id
    taint = taint or TurnTaint()
    state = CallState(tainted_by=taint.tainted_by, known_urls=frozenset(taint.urls))
    route = await step.do(f"route:{use.id}", route_tool, deps, use, state, delivery="idempotent")
    if route.problem is not None:
        return route.problem, route  # unknown tool or invalid arguments: no approval asked
    decision, by = "auto", None
    if route.risk == "high":
        verdict = await seek_approval(step, deps, route, inp, use)
        decision, by = verdict.status, verdict.by
        if verdict.status != "approved":
            outcome = refusal(route, verdict, deps.config.tools.approval_timeout)
            await step.local(
                f"audit:{use.id}", write_tool_audit, inp, iid, route, use, outcome, decision, by
            )
            return outcome, route
    if route.risk == "high" or route.at_most_once:
        try:
            outcome = await step.do(
                f"tool:{use.id}",
                run_tool,
                deps,
                route.name,
                inp,
                iid,
                use,
                route.fingerprint,
                state.tainted_by,
                delivery="at_most_once",
            )
        except OutcomeUnknown:
            outcome = await settle_or_report(step, deps, inp, route, use)
    else:
        outcome = await step.do(
            f"tool:{use.id}", run_tool, deps, route.name, inp, iid, use, "", state.tainted_by
        )
    note_result(taint, route, use, outcome)  # whichever way it ran (or was settled / reported)
    await step.local(
        f"audit:{use.id}", write_tool_audit, inp, iid, route, use, outcome, decision, by
    )
    return outcome, route


class StablePrefix(BaseModel):
    """A turn's request without messages (the system prompt and tools: the cached prefix), and
    its length in characters, which the history window's token estimate needs."""

    request: LLMRequest
    chars: int


Listing = tuple[tuple[str, str], ...]


def stable_prefix(deps: TurnDeps, skills: Listing = ()) -> StablePrefix:
    tools = deps.registry.tools()
    return deps.stable.get(  # type: ignore[no-any-return]
        tools, lambda: _build_stable(deps, tools, skills), key=skills
    )


async def current_prefix(deps: TurnDeps) -> StablePrefix:
    """The prefix as of now: the enabled skills are read from the database (a small read)."""
    skills = await deps.skill_listing() if deps.skill_listing is not None else ()
    return stable_prefix(deps, skills)


def _build_stable(deps: TurnDeps, tools: list[Any], skills: Listing) -> StablePrefix:
    if not skills:  # nothing to load: the skill tools would only cost tokens
        tools = [t for t in tools if not deps.listed_source or t.source != deps.listed_source]
    infos = [ToolInfo(name=t.name, description=t.description, risk=t.risk) for t in tools]
    server_tools = []
    if deps.config.web.provider == "anthropic":  # the provider searches; results come back cited
        server_tools = [SERVER_WEB_SEARCH | {"max_uses": deps.config.web.max_results}]
        infos.append(
            ToolInfo(
                name="web_search", risk="low", description="Search the web; cite the pages you use."
            )
        )
    request = LLMRequest(
        purpose="turn",
        system=build_system(
            persona=deps.config.agent.persona,
            name=deps.config.agent.name,
            tools=infos,
            skills=skills,
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
    prefix = await current_prefix(deps)
    req = prefix.request.model_copy(
        update={
            "messages": with_breakpoints(messages, turn_start),
            "context": build_context(
                now=datetime.fromtimestamp(deps.clock.now(), zone),
                facts=recall.facts,
                memories=recall.memories,
            ),
        }
    )
    on_text = None
    if deps.config.telegram.streaming and inp.chat_id > 0:  # drafts exist in private chats only
        on_text = DraftStreamer(
            deps.outbox,
            inp.chat_id,
            draft_id(instance_id, step_name),
            deps.config.telegram.stream_interval,
            delay=deps.config.telegram.progress_delay,
        )
    async with deps.outbox.typing(inp.chat_id):  # only while the model works, not approvals
        response = await deps.llm.complete(req, on_text=on_text)
    record = partial(
        usage.record,
        tokens=response.usage,
        model=response.model,
        purpose="turn",
        chat_id=inp.chat_id,
        instance_id=instance_id,
        step=step_name,
        attempt=response.attempt,
        user_id=inp.user_id,
    )
    if held is not None:
        # In the transaction that journals the step's result, next: the tokens are on disk
        # exactly when the answer is, with no commit of their own.
        held.add(record)
    else:
        await deps.db.write_unsynced(record)
    return response


async def agent_loop(
    step: Step,
    deps: TurnDeps,
    inp: TurnInput,
    messages: list[Message],
    recall: Recall,
    taint: TurnTaint | None = None,
) -> AgentResult:
    """Ask the model, run the tools it asks for, and repeat until it answers in text.

    `taint` (agent/taint.py) grows as the turn reads outside content; it is rebuilt from the
    journaled results on a replay, so every call is routed as it was the first time.
    """
    taint = (taint or TurnTaint()).model_copy(deep=True)
    max_steps = deps.config.llm.max_steps
    conversation = list(messages)
    turn_start = len(messages) - 1
    reported: list[str] = []
    used: list[str] = []
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
        if response.sources:  # the provider's web search: its results are outside content
            taint.add_source("web search results")
            taint.add_urls(normal_url(url) for _, url in response.sources)
        if not response.tool_uses:
            if response.stop_reason == "pause_turn" and n < max_steps:
                # A long server-side tool run paused: send the turn back so the model goes on.
                conversation.append(Message(role="assistant", content=response.content))
                continue
            text = with_sources(response.text or last_text or EMPTY_ANSWER, response.sources)
            return AgentResult(
                text=text, calls=n, reported_actions=reported, files=files, skills_used=used
            )
        if n == max_steps:
            break  # no model call is left to read tool results: don't run them
        conversation.append(Message(role="assistant", content=response.content))
        results = []
        for use in response.tool_uses:
            outcome, route = await handle_tool_use(step, deps, inp, use, taint)
            if route.risk == "medium" and outcome.ok:
                reported.append(f"{route.name} ({_brief(use)})")
            entry = deps.listed_use(route.name, use.input) if deps.listed_use else None
            if entry and outcome.ok and entry not in used:
                used.append(entry)
            files.extend(outcome.files)
            results.append(
                ToolResultBlock(
                    tool_use_id=use.id,
                    content=outcome.content or "(empty)",
                    is_error=not outcome.ok,
                )
            )
        conversation.append(Message(role="user", content=results))
    note = step_limit_note(max_steps)
    text = f"{last_text}\n\n{note}" if last_text else note
    return AgentResult(
        text=text,
        calls=max_steps,
        outcome="step_limit",
        reported_actions=reported,
        files=files,
        skills_used=used,
    )


def note_result(taint: TurnTaint, route: Route, use: ToolUseBlock, outcome: ToolOutcome) -> None:
    """What a call that ran adds to the turn's taint: its source if the tool taints, and every
    URL it showed (a later fetch of one of them sends out nothing new)."""
    # A failed call's content is agentd's own error message, except an MCP server's errors,
    # which are its words.
    if route.taints and (outcome.ok or route.source.startswith("mcp:")):
        first = next((v for v in use.input.values() if isinstance(v, str) and v.strip()), "")
        first = " ".join(first.split())
        taint.add_source(f"{route.name} ({first[:80]})" if first else route.name)
    # The "outcome unknown" report echoes the model's own arguments: a URL it wrote there was
    # never shown to it, so it must not become one a later fetch may reach without asking.
    if not outcome.content.startswith(UNKNOWN_OUTCOME):
        taint.add_urls(urls_in(outcome.content))


def _brief(use: ToolUseBlock) -> str:
    rendered = render_args(use.input, limit=80, value_limit=40).replace("\n", ", ")
    return rendered if len(rendered) <= 80 else rendered[:79] + "…"
