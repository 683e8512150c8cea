"""What a plugin file writes: `@workflow(...)` and the steps its function gets (`AutoStep`).

    from pydantic import BaseModel
    from agentd.automations import AutoStep, Retry, workflow

    class In(BaseModel):
        repo: str

    class Out(BaseModel):
        rerun: bool

    @workflow("ci_failed", input=In, output=Out, version="1")
    async def ci_failed(step: AutoStep, inp: In) -> Out:
        choice = await step.ask_owner("CI failed; re-run?", ["Re-run", "Ignore"], default="Ignore")
        return Out(rerun=choice == "Re-run")

Every effect is a journaled step with a unique name; code between steps re-runs on every
resume, so it must be cheap and deterministic (no clock, no randomness, no I/O outside steps).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from agentd.agent.taint import TurnTaint
from agentd.durable import Event, NonRetryable, OutcomeUnknown, Retry, Step, StepFailed

if TYPE_CHECKING:
    from agentd.automations.runtime import Runtime

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Risk = Literal["low", "medium", "high"]
Delivery = Literal["at_least_once", "at_most_once", "idempotent"]
NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
LLM_RETRY = Retry(limit=3, delay=2.0)


class AsTool(BaseModel):
    """Offer the workflow to the model as a tool `run_<name>` that starts it (not waits)."""

    description: str = Field(min_length=1, max_length=1024)
    risk: Risk = "medium"


@dataclass(frozen=True)
class Automation:
    """One version of an owner's workflow, as `@workflow` declares it."""

    name: str
    fn: Callable[[AutoStep, Any], Awaitable[Any]]
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    version: str
    description: str = ""
    tool: AsTool | None = None
    source: str = ""  # the file or module it came from, for problems and `workflows show`
    # The events it waits for and the model each one's data must fit, checked at the door
    # (CLI, webhook, model tool) before it is accepted. Empty: any event is taken as it is.
    events: Mapping[str, type[BaseModel]] = dataclasses.field(default_factory=dict)


def _source_version(fn: Callable[..., Any]) -> str:
    """The code's own fingerprint, when the author names no version: an edit changes it."""
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        text = fn.__qualname__
    return "src-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def workflow(
    name: str,
    *,
    input: type[BaseModel],
    output: type[BaseModel],
    version: str | int | None = None,
    tool: AsTool | None = None,
    events: Mapping[str, type[BaseModel]] | None = None,
) -> Callable[[Callable[[AutoStep, Any], Awaitable[Any]]], Automation]:
    """Declare an automation. `version` is recorded per instance: keep an old version's code
    loaded beside the new one until its instances finish (see docs/workflows.md). `events`:
    the events it waits for, each with the model its data must fit (refused at the door)."""
    if not NAME.fullmatch(name):
        raise TypeError(f"workflow name {name!r}: use 1-48 of a-z, 0-9 and _, starting a-z")
    models = [("input", input), ("output", output)]
    models += [(f"events[{e!r}]", m) for e, m in (events or {}).items()]
    for what, model in models:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"workflow {name}: {what}= must be a pydantic model class")

    def wrap(fn: Callable[[AutoStep, Any], Awaitable[Any]]) -> Automation:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {name}: expected `async def {fn.__name__}(step, inp)`")
        doc = (inspect.getdoc(fn) or "").strip().splitlines()
        return Automation(
            name=name,
            fn=fn,
            input_model=input,
            output_model=output,
            version=str(version) if version is not None else _source_version(fn),
            description=doc[0] if doc else "",
            tool=tool,
            events=dict(events or {}),
        )

    return wrap


def field_errors(exc: ValidationError) -> str:
    """`repo: Field required; count: Input should be a valid integer`: each field by name."""
    parts = []
    for err in exc.errors()[:10]:
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


class RunState(BaseModel):
    """Where an instance is: what `step.outcome` returns and the status endpoint answers."""

    instance_id: str
    workflow: str
    status: str  # queued, running, waiting, sleeping, complete, errored, cancelled; "unknown"
    input: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    error: str | None = None
    waiting_for: str | None = None  # the event an offer is open for, when waiting on one
    offered: list[str] = Field(default_factory=list)


class ToolRun(BaseModel):
    """What `step.tool` returns: the tool's text, or why it did not run."""

    ok: bool
    content: str
    ran: bool = True  # False: the owner denied (or did not answer) a high-risk call


class AutoStep:
    """The steps a workflow function gets. Every method takes the step's unique `name` first."""

    def __init__(self, step: Step, runtime: Runtime) -> None:
        self._step = step
        self._rt = runtime
        # What this run has read from outside (agent/taint.py): its tools' results, its own
        # steps' (an API's answer, a model's, an event's payload), rebuilt from the journaled
        # results on a resume: a later egress call asks the owner, as in a turn.
        self._taint = TurnTaint()

    def taint_with(self, source: str) -> None:
        """Outside content this run acts on from its start (a webhook body as its input)."""
        self._taint.add_source(source)

    @property
    def instance_id(self) -> str:
        return self._step.instance_id

    async def do(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        retry: Retry | None = None,
        timeout: float | None = None,
        delivery: Delivery = "at_least_once",
        result_type: Any = None,
    ) -> T:
        """Run `await fn(*args)` once for this instance; its JSON result is journaled and a
        resume returns it. `retry`: attempts and backoff (long backoffs are durable sleeps).
        Its result counts as outside content: a later `step.tool` with egress asks."""
        result = await self._step.do(
            name,
            fn,
            *args,
            retry=retry,
            timeout=timeout,
            delivery=delivery,
            result_type=result_type,
        )
        self._taint.add_source(f"automation step {name}")
        return result

    async def sleep(self, name: str, duration: float | timedelta) -> None:
        """Sleep durably: a restart neither shortens nor restarts it."""
        await self._step.sleep(name, duration)

    async def sleep_until(self, name: str, when: float | datetime) -> None:
        await self._step.sleep_until(name, when)

    async def wait_for_event(
        self, event: str, timeout: float | timedelta, *, name: str | None = None
    ) -> Event | None:
        """Wait for `agentd workflows signal ID EVENT` (or `POST /hooks/H/events/EVENT`);
        None once `timeout` passes. The step is named `wait:EVENT` unless `name` says. An
        event's payload is its sender's: outside content."""
        got = await self._step.wait_for_event(event, timeout, name=name)
        if got is not None:
            self._taint.add_source(f"an event ({event})")
        return got

    async def wait_for_choice(
        self,
        event: str,
        field: str,
        options: Sequence[str],
        timeout: float | timedelta,
        *,
        name: str | None = None,
        tries: int = 2,
    ) -> str | None:
        """Offer `options` and wait for an `event` whose `field` is one of them. The offer is
        recorded, so a value that was not offered is refused at the door (the CLI exits 1, a
        webhook gets 422) and the caller can send another; one that got in anyway (signalled
        before the offer) costs one of `tries`. None: no valid choice in time."""
        base = name or f"wait:{event}"
        offered = list(options)
        await self._step.local(
            f"{base}:offer", self._rt.record_offer, self.instance_id, event, field, offered
        )
        for attempt in range(1, tries + 1):
            got = await self.wait_for_event(
                event, timeout, name=base if attempt == 1 else f"{base}#{attempt}"
            )
            if got is None:
                return None
            chosen = got.payload.get(field)
            if isinstance(chosen, str) and chosen in offered:
                return chosen
        return None

    def secret(self, name: str) -> str:
        """A setting or secret by its NAME, one that `[automations] secrets` lists, read like
        every secret of agentd (the environment, then agentd.env beside the config, then a
        systemd credential); "" when unset. Never journaled (pass it to the step function that
        uses it, which reads it again on a resume) and redacted from logs and errors."""
        return self._rt.secret(name)

    async def outcome(self, name: str, instance_id: str) -> RunState:
        """Another instance's state as a journaled step: its automation, status, input and
        output (a flow checks that the caller was verified by an earlier one)."""
        return await self._step.do(
            name, self._rt.outcome, instance_id, delivery="idempotent", result_type=RunState
        )

    async def ask_owner(
        self,
        text: str,
        choices: Sequence[str],
        *,
        timeout: float | timedelta | None = None,
        default: str | None = None,
        name: str = "ask",
    ) -> str | None:
        """Ask the owner in their chat with one button per choice; return the choice pressed,
        or `default` when `timeout` passes first. Also answerable from the shell:
        `agentd workflows signal ID answer:NAME --data '{"choice": "..."}'`."""
        return await self._rt.ask_owner(self._step, name, text, list(choices), timeout, default)

    async def llm(
        self,
        name: str,
        prompt: str,
        *,
        output: type[M],
        system: str = "",
        max_tokens: int | None = None,
        retry: Retry | None = None,
    ) -> M:
        """One structured model call whose answer must fit `output`; its tokens are recorded
        in `agentd usage` (purpose "automation"). A resume returns the journaled answer."""
        answer = await self._rt.llm_call(
            self._step, name, prompt, output, system, max_tokens, retry or LLM_RETRY
        )
        # A model's answer about whatever the prompt carried: outside content like its input.
        self._taint.add_source(f"a model's answer ({name})")
        return answer

    async def send(self, name: str, text: str, *, to: str | None = None) -> int:
        """Send a message (Markdown) to the owner's chat, or to the chat the owner named `to`
        in `[automations] chats` (a supervisors' group); a name the owner has not set falls
        back to their own chat, so a notice is never lost to a missing setting. Returns the
        message's id."""
        return await self._rt.send(self._step, name, text, to)

    async def start(self, name: str, workflow: str, input: BaseModel | dict[str, Any]) -> str:
        """Start another automation (or this one again: "continue as new", for a loop that
        would outgrow one journal); return its instance id. Once per step, like any step."""
        return await self._rt.start_from(self._step, name, workflow, input)

    async def tool(self, name: str, tool: str, args: dict[str, Any] | None = None) -> ToolRun:
        """Run one of agentd's tools as a chat turn would: the same risk policy and taint (after
        a tool that reads outside content, an egress tool asks), the same approval card for a
        high-risk call, and never twice for an at-most-once one (a restart mid-call reports
        "outcome unknown"). Its steps are named after `name` (`tool:NAME`, …)."""
        return await self._rt.tool(self._step, self._taint, name, tool, args or {})


__all__ = [
    "AsTool",
    "AutoStep",
    "Automation",
    "Event",
    "NonRetryable",
    "OutcomeUnknown",
    "Retry",
    "RunState",
    "StepFailed",
    "ToolRun",
    "field_errors",
    "workflow",
]
