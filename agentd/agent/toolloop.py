"""The agent loop (R-TOOL-2…5): model → tools under the risk policy → model, at most max_steps.

Every model call is step `llm#n`; every tool call takes the one path all tool calls take
(calls.py: `route:<tool_use_id>`, `tool:<tool_use_id>`, …), so a crash never repeats a finished
call or tool, and a high-risk call first waits for the owner's approval (approval_flow.py).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from agentd.agent import budget
from agentd.agent.approval_flow import Caller, Route
from agentd.agent.calls import make_call
from agentd.agent.deps import Recall, TurnDeps
from agentd.agent.prompt import ToolInfo, build_context, build_system, with_breakpoints
from agentd.agent.routing import RoutingDecision
from agentd.agent.steer import take_added, with_added
from agentd.agent.streaming import DraftStreamer, answer_draft
from agentd.agent.taint import TurnTaint
from agentd.agent.together import run_calls
from agentd.chat.model_choice import for_turn
from agentd.chat.names import turn_purpose
from agentd.chat.outfiles import SpooledFile
from agentd.durable import Step
from agentd.ledger import audit, usage
from agentd.llm.billing import Row, answer_row, bill, complete_billed, cut_rows
from agentd.llm.types import (
    CutAttempt,
    LLMRequest,
    LLMResponse,
    Message,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from agentd.tools import (
    ToolContext,
    ToolOutcome,
    render_args,
)
from agentd.tools.citations import CitedSource, found_in

if TYPE_CHECKING:
    from agentd.chat.inputs import ChatKind, TurnInput

log = logging.getLogger("agentd.agent")
EMPTY_ANSWER = "(The model returned an empty answer.)"


SERVER_WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}


def with_sources(text: str, sources: list[tuple[str, str]]) -> str:
    """Web pages the answer cites, as links (R-WEB-1)."""
    if not sources:
        return text
    links = "\n".join(f"- [{title.replace(']', ')')}]({url})" for title, url in sources)
    return f"{text}\n\nSources:\n{links}"


def with_notes(text: str, notes: list[str]) -> str:
    """What the answering model could not do of the request, said rather than dropped."""
    return "\n\n".join([text, *(f"({note})" for note in notes)])


def _allowance(deps: TurnDeps, uses: list[ToolUseBlock]) -> int:
    """The most model calls a tool the model asks for allows its turn (0: none beyond the
    config's). From the journaled answers on a replay, so a resumed turn has the same limit."""
    tools = [deps.registry.get(use.name) for use in uses]
    return max((tool.steps for tool in tools if tool is not None), default=0)


def step_limit_note(max_steps: int) -> str:
    return f"(I stopped after {max_steps} model calls — my step limit — before finishing.)"


class AgentResult(BaseModel):
    text: str
    calls: int
    # rate_limited: a [limits] daily budget was spent before a later call (agent/budget.py).
    outcome: Literal["answered", "step_limit", "rate_limited"] = "answered"
    reported_actions: list[str] = Field(default_factory=list)
    skills_used: list[str] = Field(default_factory=list)  # loaded with use_skill, in order
    files: list[SpooledFile] = Field(default_factory=list)  # from tools, sent after the text
    # The outside content the model had in view by the end (agent/taint.py), in words.
    tainted_by: list[str] = Field(default_factory=list)
    # Of those, what sat only in its history window (agent/turn.py): labelled on its own rows,
    # and said on the answer, so a summary of the answer without them is not the model's own.
    in_view: list[str] = Field(default_factory=list)
    route: RoutingDecision | None = None  # why the turn was given what it was (agent/routing.py)
    retrieved: dict[str, CitedSource] = Field(default_factory=dict)  # what it may cite, by id


async def handle_tool_use(
    step: Step, deps: TurnDeps, inp: TurnInput, use: ToolUseBlock, taint: TurnTaint | None = None
) -> tuple[ToolOutcome, Route]:
    """One tool_use block → its outcome, by the one path every tool call takes (calls.py)."""
    caller = Caller(
        chat_id=inp.chat_id, chat_kind=inp.chat_kind, user_id=inp.user_id, text=inp.text
    )
    result = await make_call(step, deps, caller, use, taint or TurnTaint())
    return result.outcome, result.route


class StablePrefix(BaseModel):
    """A turn's request without messages (the system prompt and tools: the cached prefix), and
    its length in characters, which the history window's token estimate needs."""

    request: LLMRequest
    chars: int


Listing = tuple[tuple[str, str], ...]


def stable_prefix(
    deps: TurnDeps, skills: Listing = (), withheld: frozenset[str] = frozenset()
) -> StablePrefix:
    tools = deps.registry.tools()
    return deps.stable.get(  # type: ignore[no-any-return]
        tools, lambda: _build_stable(deps, tools, skills, withheld), key=(skills, withheld)
    )


class Where(Protocol):
    """Whom a model call serves: its chat, the chat's kind and the user (a turn's or a
    task's input)."""

    chat_id: int
    user_id: int
    chat_kind: ChatKind


async def current_prefix(deps: TurnDeps, where: Where) -> StablePrefix:
    """The prefix for a call in this chat as of now: the enabled skills and the tools the chat
    is offered are read from the database (small reads)."""
    skills = await deps.skill_listing() if deps.skill_listing is not None else ()
    return stable_prefix(deps, skills, refused_here(deps, where) | await _withheld(deps, where))


def refused_here(deps: TurnDeps, where: Where) -> frozenset[str]:
    """The tools whose guard refuses whoever this call serves (the owner's mail in a group or
    in someone else's chat): offering them would spend their schemas' tokens on a refusal."""
    probe = ToolContext(
        chat_id=where.chat_id, user_id=where.user_id, instance_id="", chat_kind=where.chat_kind
    )
    return frozenset(
        t.name for t in deps.registry.tools() if t.guard is not None and t.guard(probe) is not None
    )


async def _withheld(deps: TurnDeps, where: Where) -> frozenset[str]:
    """The tools whose `offered` read does not hold in this chat (indexed lookups, so they run
    on the loop's own reader). A read that fails offers its tool: the call is checked anyway."""
    asking = [t for t in deps.registry.tools() if t.offered is not None]
    if not asking:
        return frozenset()
    chat_id = where.chat_id

    def holds(conn: Any, tool: Any) -> bool:
        try:
            return bool(tool.offered(conn, chat_id))
        except Exception as exc:
            log.warning(
                "a tool's offered read failed; it is offered",
                extra={"tool": tool.name, "error": type(exc).__name__},
            )
            return True

    def read(conn: Any) -> frozenset[str]:
        return frozenset(t.name for t in asking if not holds(conn, t))

    return await deps.db.read_inline(read)


def _build_stable(
    deps: TurnDeps, tools: list[Any], skills: Listing, withheld: frozenset[str]
) -> StablePrefix:
    tools = [t for t in tools if t.name not in withheld]
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
    draft: int,
    pin: str | None = None,
) -> LLMResponse:
    """One model call with a fresh prompt; its tokens are recorded (R-LLM-4).

    messages[turn_start] is this turn's user message: what comes before it is stored history.
    `draft`: the answer's drafts it streams to (agent/streaming.py `answer_draft`).
    `pin`: the model that answered the turn's first call, asked first again so a turn (and a
    resumed one) stays on one model; the first call asks the chat's `/model` choice first.
    """
    zone = ZoneInfo(deps.config.agent.timezone)
    prefix = await current_prefix(deps, inp)
    purpose = turn_purpose(inp.schedule_id)
    if pin is None and purpose == "turn":  # a briefing keeps its own [llm.models] model
        pin = await for_turn(deps.db, deps.llm, inp.chat_id)
    req = prefix.request.model_copy(
        update={
            "purpose": purpose,
            "model": pin,
            "messages": with_breakpoints(messages, turn_start),
            "context": build_context(
                now=datetime.fromtimestamp(deps.clock.now(), zone),
                facts=recall.facts,
                memories=recall.memories,
                language=recall.language,
                pending=recall.pending,
            ),
        }
    )
    row = partial(
        usage.record,
        purpose=purpose,
        chat_id=inp.chat_id,
        instance_id=instance_id,
        step=step_name,
        user_id=inp.user_id,
        now=deps.clock.now,  # the day the budgets count
    )
    cut: list[CutAttempt] = []  # attempts cut short, as they end
    response = await _complete(deps, inp, req, _streamer(deps, inp, draft), row, cut)
    rows = [*cut_rows(row, cut), answer_row(row, response)]
    if response.fallback_reason:
        rows.append(fallback_row(response, inp, instance_id, step_name))
    await bill(deps.db, rows)
    return response


def _streamer(deps: TurnDeps, inp: TurnInput, draft: int) -> DraftStreamer | None:
    """The answer's draft as it streams; drafts exist in private chats only."""
    if not (deps.config.chat.streaming and inp.private):
        return None
    return DraftStreamer(
        deps.outbox,
        inp.chat_id,
        draft,
        deps.config.chat.stream_interval,
        delay=deps.config.chat.progress_delay,
        reply_to=inp.message_id or None,
    )


async def _complete(
    deps: TurnDeps,
    inp: TurnInput,
    req: LLMRequest,
    on_text: DraftStreamer | None,
    row: Row,
    cut: list[CutAttempt],
) -> LLMResponse:
    """The call itself, with the chat's typing shown only while the model works."""
    async with deps.outbox.typing(inp.chat_id):
        return await complete_billed(deps.db, deps.llm, req, row, cut, on_text)


async def steer_in(step: Step, deps: TurnDeps, conversation: list[Message], n: int) -> None:
    """Between a tool step and model call n: what the user sent meanwhile (agent/steer.py)."""
    if conversation[-1].role != "user":
        return  # a paused server-side tool run goes on as it was
    added = await step.local(f"steer#{n}", take_added, step.instance_id, deps.clock.now())
    if added:
        conversation[-1] = with_added(conversation[-1], added)


def fallback_row(response: LLMResponse, where: Where, instance_id: str, step_name: str) -> Row:
    """The audit row saying a fallback answered this call, which model and why (a turn's
    call or a task's: the owner reads one kind for both)."""
    return partial(
        audit.record,
        kind="llm_fallback",
        chat_id=where.chat_id,
        user_id=where.user_id,
        instance_id=instance_id,
        detail={"step": step_name, "model": response.label, "reason": response.fallback_reason},
        source_key=f"llm_fallback:{instance_id}:{step_name}",
    )


async def _ask(
    step: Step,
    deps: TurnDeps,
    inp: TurnInput,
    conversation: list[Message],
    recall: Recall,
    turn_start: int,
    n: int,
    pin: str | None,
) -> LLMResponse:
    """Model call `llm#n`, journaled: a replay returns the answer (and its model) it gave."""
    name = f"llm#{n}"
    draft = answer_draft(step.instance_id, step.retries)
    args = (deps, inp, conversation, step.instance_id, name, recall, turn_start, draft)
    return await step.do(name, call_llm, *args, pin)  # type: ignore[no-any-return]


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
    max_steps = deps.config.llm.max_steps  # raised by the allowance of a tool called (steps)
    conversation = list(messages)
    turn_start = len(messages) - 1
    reported: list[str] = []
    used: list[str] = []
    files: list[SpooledFile] = []
    retrieved: dict[str, CitedSource] = {}  # rebuilt from journaled results on a replay
    # What every result carries; the lists grow as the loop goes.
    done: dict[str, Any] = dict(
        reported_actions=reported,
        files=files,
        skills_used=used,
        tainted_by=taint.sources,
        retrieved=retrieved,
    )
    last_text = ""
    response: LLMResponse | None = None
    pin: str | None = None  # the first call's model, from its journaled answer on a replay
    notes: list[str] = []
    n = 0
    while n < max_steps:
        n += 1
        if n > 1:
            await steer_in(step, deps, conversation, n)
            # The first call was asked for by the turn's rate check; the later ones each.
            if limit := await budget.refused_call(step, deps, inp, n):
                note = budget.stopped_note(limit, deps, n)
                text = with_notes(f"{last_text}\n\n{note}" if last_text else note, notes)
                return AgentResult(text=text, calls=n - 1, outcome="rate_limited", **done)
        response = await _ask(step, deps, inp, conversation, recall, turn_start, n, pin)
        pin = pin or response.label
        notes += [note for note in response.notes if note not in notes]
        last_text = response.text or last_text
        if response.sources:  # the provider's web search: its results are outside content
            taint.add_source("web search results")
        if not response.tool_uses:
            if response.stop_reason == "pause_turn" and n < max_steps:
                # A long server-side tool run paused: send the turn back so the model goes on.
                conversation.append(Message(role="assistant", content=response.content))
                continue
            text = with_sources(response.text or last_text or EMPTY_ANSWER, response.sources)
            text = with_notes(text, notes)
            return AgentResult(text=text, calls=n, **done)
        max_steps = max(max_steps, _allowance(deps, response.tool_uses))
        if n == max_steps:
            break  # no model call is left to read tool results: don't run them
        conversation.append(Message(role="assistant", content=response.content))

        async def handle(at: Step, use: ToolUseBlock, t: TurnTaint) -> tuple[ToolOutcome, Route]:
            return await handle_tool_use(at, deps, inp, use, t)

        ran = await run_calls(step, deps, response.tool_uses, taint, handle)
        for outcome, _ in ran:
            retrieved.update(found_in(outcome.content))
        results = tool_results(response.tool_uses, ran, reported, used, files, deps.listed_use)
        conversation.append(Message(role="user", content=results))
    note = step_limit_note(max_steps)
    text = f"{last_text}\n\n{note}" if last_text else note
    return AgentResult(text=text, calls=max_steps, outcome="step_limit", **done)


def tool_results(
    uses: list[ToolUseBlock],
    ran: list[tuple[ToolOutcome, Route]],
    reported: list[str],
    used: list[str],
    files: list[SpooledFile],
    listed_use: Any = None,
) -> list[ToolResultBlock]:
    """The results for the model, in the reply's order; what the answer must report (medium
    risk), the skills used and the files to send are noted on the way."""
    results = []
    for use, (outcome, route) in zip(uses, ran, strict=True):
        if route.risk == "medium" and outcome.ok:
            reported.append(f"{route.name} ({_brief(use)})")
        # Which listed entry (a skill) a call loaded: the capability that lists them says.
        entry = listed_use(route.name, use.input) if listed_use else None
        if entry and outcome.ok and entry not in used:
            used.append(entry)
        files.extend(outcome.files)
        results.append(
            ToolResultBlock(
                tool_use_id=use.id, content=outcome.content or "(empty)", is_error=not outcome.ok
            )
        )
    return results


def _brief(use: ToolUseBlock) -> str:
    rendered = render_args(use.input, limit=80, value_limit=40).replace("\n", ", ")
    return rendered if len(rendered) <= 80 else rendered[:79] + "…"
