"""The daemon side of automations: each one registered with the engine (on the version its
instance started with), the steps that need services (ask_owner, llm, send, tool), starting
them from chat (`/run`), from the model (a tool, where declared) and from the listener."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from pydantic import BaseModel, RootModel, ValidationError

from agentd.access import approvals, owners, ratelimit
from agentd.agent.approval_flow import Caller
from agentd.agent.calls import CallServices, make_call
from agentd.agent.taint import TurnTaint
from agentd.automations import runs
from agentd.automations.api import Automation, AutoStep, RunState, ToolRun, field_errors
from agentd.automations.catalog import RELOAD_WORKFLOW, Catalog
from agentd.automations.owner import owner
from agentd.chat import addresses, reach
from agentd.chat.delivery import WAITED_OUT, deliver, deliver_text
from agentd.chat.inputs import CallbackPress
from agentd.chat.markup import block
from agentd.chat.names import chat_actor
from agentd.chat.notice import post_notice
from agentd.chat.outbox import Button, Outbox
from agentd.commands.router import CommandInput, CommandReply
from agentd.config import Config, read_secret
from agentd.db import Database
from agentd.durable import (
    Clock,
    DivergenceError,
    InstanceNotFound,
    InvalidInput,
    NonRetryable,
    Retry,
    Step,
    Workflow,
    WorkflowNotFound,
    store,
)
from agentd.ledger import audit, usage
from agentd.llm import LLM
from agentd.llm.billing import Billed
from agentd.llm.structured import StructuredOutputError, complete_structured
from agentd.llm.types import (
    LLMRequest,
    Message,
    SystemBlock,
    ToolUseBlock,
)
from agentd.tools import Tool, ToolRegistry

log = logging.getLogger("agentd.automations")
CALLBACK_PREFIX = "aq"  # button data aq:<question id>:<choice index>


def failure_text(inst: store.InstanceRecord) -> str:
    """The owner's notice of a failed run: the error is the automation's or a library's text,
    not agentd's words, so it is shown as a block Markdown cannot restyle or turn into links."""
    return (
        f"⚠️ Automation `{inst.workflow}` failed (`{inst.id}`):\n"
        f"{block((inst.error or '')[:600])}\n\nDetails: `agentd workflows show {inst.id}`; "
        f"run it again: `agentd workflows retry {inst.id}`"
    )


class RawInput(RootModel[dict[str, Any]]):
    """The engine's view of an automation's input: each version validates its own model."""


class RawOutput(RootModel[Any]):
    pass


class ReloadInput(BaseModel):
    pass


class Reloaded(BaseModel):
    """What a reload loaded (name: versions) and what failed to load."""

    automations: dict[str, list[str]]
    problems: list[str]


class InvalidOutput(NonRetryable):
    """The workflow returned something its output model refuses; the message names the field."""


@dataclass
class Runtime:
    config: Config
    db: Database
    clock: Clock
    catalog: Catalog
    outbox: Outbox
    llm: LLM | None
    kick: Callable[[str], None]
    registry: ToolRegistry | None = None
    redact: Callable[[str], str] = lambda text: text
    register: Callable[[Workflow[Any, Any]], None] = lambda wf: None

    # -- registration ---------------------------------------------------------------------

    def workflows(self) -> list[Workflow[Any, Any]]:
        own = [self._durable(name) for name in self.catalog.names()]
        reload = Workflow(
            name=RELOAD_WORKFLOW,
            fn=self._reload_run,
            input_model=ReloadInput,
            output_model=Reloaded,
        )
        return [*own, reload]

    async def record_loaded(self) -> None:
        """Say what this daemon runs, so `agentd workflows start` refuses a name it does not."""
        await self.db.write(runs.record_loaded, self.catalog, os.getpid(), self.clock.now())

    async def _reload_run(self, step: Step, _: ReloadInput) -> Reloaded:
        return await step.do("reload", self.reload, result_type=Reloaded)

    async def reload(self) -> Reloaded:
        """Load the folder and modules again, as a restart would, without one. New instances
        start on the newest code; an instance resumes on the version it started on while that
        is loaded, else on the newest (docs/workflows.md "Reloading"); a run under way keeps
        the code it holds until its next wait or sleep. Model tools change at the next start."""
        from agentd.automations.catalog import builtin_names, load_catalog

        catalog = await asyncio.to_thread(load_catalog, self.config, builtin_names())
        for name in catalog.names():
            if name not in self.catalog.versions:
                self.register(self._durable(name))
        self.catalog = catalog
        await self.record_loaded()
        loaded = {name: sorted(versions) for name, versions in catalog.versions.items()}
        log.info("automations reloaded", extra={"automations": loaded})
        return Reloaded(automations=loaded, problems=catalog.problems)

    def _durable(self, name: str) -> Workflow[Any, Any]:
        async def run(step: Step, raw: RawInput) -> RawOutput:
            # A primary-key lookup: on the loop's own connection, no hop to the writer thread.
            started_on = await self.db.read_inline(runs.version_of, step.instance_id)
            auto = self.catalog.get(name, started_on)
            if auto is None:
                auto = self.catalog.current(name)
                log.warning(
                    "automation version not loaded; running the current code",
                    extra={
                        "instance_id": step.instance_id,
                        "started_on": started_on,
                        "current": auto.version,
                    },
                )
            return await self._run(step, auto, raw, started_on)

        return Workflow(name=name, fn=run, input_model=RawInput, output_model=RawOutput)

    async def _run(self, step: Step, auto: Automation, raw: RawInput, started_on: str) -> RawOutput:
        try:
            inp = auto.input_model.model_validate(raw.root)
        except ValidationError as exc:
            raise InvalidInput(f"input of {auto.name} is invalid: {field_errors(exc)}") from None
        # A run a webhook started acts on its sender's body: outside content from the start.
        source = await self.db.read(_run_source, step.instance_id)
        auto_step = AutoStep(step, self)
        if source.startswith("hook:"):
            auto_step.taint_with(f"a webhook delivery ({source[5:]})")
        try:
            result = await auto.fn(auto_step, inp)
            left = step.unreplayed()
            if left:
                raise DivergenceError(
                    f"replay of {step.instance_id} diverged: the code finished without the "
                    f"journaled step(s) {left}"
                )
        except DivergenceError as exc:
            if started_on and started_on != auto.version:
                why = (
                    f" The instance started on version {started_on}, which is not loaded; "
                    f"this code is version {auto.version}. Load the old version beside the "
                    "new one, or re-run it on this code:"
                )
            else:
                why = " The code changed under the same version. Re-run it on this code:"
            hint = f" agentd workflows retry {step.instance_id} --from STEP"
            raise DivergenceError(f"{exc}.{why}{hint}") from None
        try:
            data = result.model_dump() if isinstance(result, BaseModel) else result
            output = auto.output_model.model_validate(data)
        except ValidationError as exc:
            raise InvalidOutput(f"output of {auto.name} is invalid: {field_errors(exc)}") from None
        return RawOutput(output.model_dump(mode="json"))

    # -- starting ---------------------------------------------------------------------------

    async def start(
        self, name: str, payload: object, *, instance_id: str, source: str
    ) -> runs.Started:
        """Validate, commit (fsync'd), then wake the engine: the id is durable once returned."""
        started = await self.db.write(
            runs.start,
            self.catalog,
            name,
            payload,
            instance_id=instance_id,
            source=source,
            now=self.clock.now(),
        )
        self.kick(instance_id)
        return started

    async def start_from(
        self, step: Step, name: str, workflow: str, inp: BaseModel | dict[str, Any]
    ) -> str:
        payload = inp.model_dump(mode="json") if isinstance(inp, BaseModel) else inp
        # The id follows from this instance and step: a re-run of the step starts nothing new.
        iid = runs.instance_id_for(workflow, f"{step.instance_id}:{name}", scope="s")

        async def start_it() -> str:
            try:
                started = await self.start(workflow, payload, instance_id=iid, source="workflow")
            except (InvalidInput, WorkflowNotFound) as exc:
                raise NonRetryable(str(exc)) from None
            return started.instance_id

        return await step.do(name, start_it)

    async def run_command(self, inp: CommandInput) -> CommandReply:
        """/run NAME {json}: start an automation (the owner only)."""
        if inp.user_id != owner(self.config):
            return CommandReply(text="Only the owner can run automations.")
        name, _, rest = inp.args.strip().partition(" ")
        if not name:
            listed = "\n".join(f"• `{n}`" for n in self.catalog.names()) or "none are loaded"
            return CommandReply(text=f"Usage: /run NAME {{json input}}\nAutomations:\n{listed}")
        try:
            payload = json.loads(rest) if rest.strip() else {}
            key = f"{inp.chat_id}:{inp.message_id}"  # the same message never starts two runs
            iid = runs.instance_id_for(name, key, scope="c")
            started = await self.start(name, payload, instance_id=iid, source="chat")
        except json.JSONDecodeError as exc:
            return CommandReply(text=f"The input is not JSON: {exc.msg} at character {exc.pos}.")
        except RecursionError:  # json's decoder recurses per nesting level
            return CommandReply(text="The input is not usable JSON: it nests too deeply.")
        except WorkflowNotFound as exc:
            hint = "A file added or changed since agentd started: `agentd automations reload`."
            return CommandReply(text=f"{exc}\n{hint}")
        except (InvalidInput, ValueError) as exc:
            return CommandReply(text=str(exc))
        return CommandReply(text=f"Started `{name}`: `{started.instance_id}`")

    def model_tools(self) -> list[Tool]:
        """`run_<name>` for each automation offered to the model, and the tools that work
        them (automations/model_tools.py)."""
        from agentd.automations.model_tools import model_tools

        return model_tools(self)

    async def notify_failure(
        self, start: Callable[..., Awaitable[Any]], inst: store.InstanceRecord
    ) -> None:
        """Tell the owner an automation errored, as a notice of its own (chat/notice.py), once
        per failed run (the journal and the audit log have it whatever the chat says)."""
        if (chat := owner(self.config)) is None:
            return
        if inst.workflow in self.catalog.versions:
            text = failure_text(inst)
        elif await self.db.read(runs.version_of, inst.id):  # an automation this daemon lacks
            log.warning(
                "an automation was started that this daemon has not loaded",
                extra={"instance_id": inst.id, "workflow": inst.workflow},
            )
            text = (
                f"⚠️ Automation `{inst.workflow}` was started (`{inst.id}`), but this daemon has "
                "not loaded it, so it did not run. Check it loads: `agentd workflows "
                "automations`; load it: `agentd automations reload`; then run it: "
                f"`agentd workflows retry {inst.id}`"
            )
        else:
            return
        instance = f"notice-failed-{inst.id}-{inst.runs}"
        await post_notice(start, instance, None, text, user_id=chat)

    # -- ask_owner ------------------------------------------------------------------------

    def on_answer(self, conn: Any, press: CallbackPress) -> str:
        """A press on an ask_owner button, inside the intake transaction."""
        _, question_id, index = [*press.data.split(":"), "", ""][:3]
        question = runs.get_question(conn, question_id)
        refused = self._press_refusal(question, press)
        if refused is not None:
            detail = {
                "question": question.id if question else None,
                "why": refused,
                "step": question.step if question else None,
            }
            audit.record(
                conn,
                "question_press_refused",
                chat_id=press.chat_id,
                user_id=press.user_id,
                detail=detail,
            )
            return refused
        if not index.isdecimal():
            return "This button is not recognised."
        by = chat_actor(press.user_id)
        return runs.answer(conn, question_id, int(index), by, time.time())

    def _press_refusal(self, question: runs.Question | None, press: CallbackPress) -> str | None:
        """Why this press may not answer, or None. A question is the owner's (a step.tool
        approval is an ordinary approval card, with the approvers' rules), and a press counts
        only on the question itself: its chat and its message."""
        trust = owners.resolve(self.config.access)
        if press.user_id is None or press.user_id != trust.owner_id:
            return "Only the owner can answer this."
        if question is not None and (
            press.chat_id != question.chat_id
            or (question.message_id is not None and press.message_id != question.message_id)
        ):
            return approvals.NOT_THIS_CARD
        return None

    async def ask_owner(
        self,
        step: Step,
        name: str,
        text: str,
        choices: list[str],
        timeout: float | timedelta | None,
        default: str | None,
    ) -> str | None:
        if not 1 <= len(choices) <= 8 or any(not 1 <= len(c) <= 40 for c in choices):
            raise ValueError("ask_owner: give 1 to 8 choices of 1-40 characters")
        if default is not None and default not in choices:
            raise ValueError(f"ask_owner: default {default!r} is not one of {choices}")
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        seconds = seconds if seconds is not None else self.config.automations.ask_timeout
        text = self.redact(text)  # as for send: the question is stored and sent
        chat = await self._owner_reached(step, name, name + runs.QUESTION_SUFFIX)
        question = await step.local(
            name + runs.QUESTION_SUFFIX,
            runs.create_question,
            step.instance_id,
            name,
            chat,
            text,
            choices,
            default,
            self.clock.now(),
            seconds,
            result_type=runs.Question,
        )
        send = partial(self._send_question, question)
        message_id = await deliver(
            step, self.db, f"{name}:send", question.chat_id, send, result_type=int | None
        )
        event = await step.wait_for_event(
            runs.ANSWER_PREFIX + name,
            max(0.0, question.expires_at - self.clock.now()),
            name=f"{name}:wait",
        )
        if event is not None:
            choice: str | None = str(event.payload.get("choice"))
        else:
            settled = await step.local(
                f"{name}:expire",
                runs.expire_question,
                question.id,
                self.clock.now(),
                result_type=runs.Question,
            )
            choice = settled.answer if settled.status == "answered" else default
        if message_id is not None:
            await step.do(
                f"{name}:show", self._show_answer, question, message_id, choice, event is None
            )
        return choice

    async def _send_question(self, question: runs.Question) -> int | None:
        """The question with its buttons; if the chat is unreachable the CLI still answers."""
        buttons = [
            [Button(text=c, data=f"{CALLBACK_PREFIX}:{question.id}:{i}")]
            for i, c in enumerate(question.choices)
        ]
        data = shlex.quote(json.dumps({"choice": question.choices[0]}, ensure_ascii=False))
        hint = (
            f"\n\nOr from the shell: `agentd workflows signal {question.instance_id} "
            f"answer:{question.step} --data {data}`"
        )
        try:
            message_id = await self.outbox.send_text(
                question.chat_id, question.text + hint, buttons=buttons
            )
        except WAITED_OUT:
            raise  # asked once the channel is back
        except Exception as exc:
            log.warning(
                "could not send the question; `agentd workflows signal` still answers",
                extra={"question": question.id, "error": type(exc).__name__},
            )
            return None
        await self.db.write(runs.set_question_message, question.id, message_id)
        return message_id

    async def _show_answer(
        self, question: runs.Question, message_id: int, choice: str | None, timed_out: bool
    ) -> None:
        what = f"no answer in time, so: {choice}" if timed_out else f"answered: {choice}"
        try:
            await self.outbox.edit_text(
                question.chat_id, message_id, f"{question.text}\n\n— {what}"
            )
        except Exception as exc:  # the answer stands whatever the chat says
            log.info("could not edit the question", extra={"error": type(exc).__name__})

    # -- offers, secrets, other instances ---------------------------------------------------

    def record_offer(
        self, conn: Any, instance_id: str, event: str, field: str, options: list[str]
    ) -> None:
        runs.record_offer(conn, instance_id, event, field, options, self.clock.now())

    def secret(self, name: str) -> str:
        """Only names the owner listed: the config says what an automation may read (and the
        redactor hides), not the code."""
        if name not in self.config.automations.secrets:
            raise NonRetryable(
                f"{name} is not in [automations] secrets: add it there (the list of settings "
                "and secrets automations read), restart agentd (the config is read at start), "
                "then `agentd workflows retry ID`"
            )
        return read_secret(name, self.config.secret_source())

    async def outcome(self, instance_id: str) -> RunState:
        try:
            return await self.db.read(runs.state, instance_id)
        except InstanceNotFound:
            return RunState(instance_id=instance_id, workflow="", status="unknown")

    # -- llm, send, tool --------------------------------------------------------------------

    def _owner(self) -> int:
        user = owner(self.config)
        if user is None:
            raise NonRetryable("no owner: set [access] allowed_user_ids")
        return user

    async def _owner_reached(self, step: Step, name: str, old_first_step: str) -> int:
        """The owner's private chat for step `name`, where notices find them (chat/reach.py:
        the channel `[access] notices` names, else where they last wrote), chosen once in the
        step `name:to`. An instance journaled before that step existed went to the owner's
        user id as a chat (Telegram's private-chat rule); its journal goes on that way."""
        user = self._owner()
        if step.journaled_next() == old_first_step:
            return user
        prefer = self.config.access.notices
        chat = await step.local(
            f"{name}:to", reach.private_chat, user, prefer, result_type=int | None
        )
        if chat is None:
            raise NonRetryable(
                "the owner has no private chat with the agent on any channel yet: write to "
                "it once, then `agentd workflows retry ID`"
            )
        return int(chat)

    async def llm_call(
        self,
        step: Step,
        name: str,
        prompt: str,
        output: type[BaseModel],
        system: str,
        max_tokens: int | None,
        retry: Retry,
    ) -> Any:
        if self.llm is None:
            raise NonRetryable("no model is configured")
        llm, instance_id = self.llm, step.instance_id
        # The model is never sent a secret, whatever the code put in its prompt.
        prompt, system = self.redact(prompt), self.redact(system)
        row = partial(
            usage.record,
            purpose=ratelimit.AUTOMATION,
            chat_id=owner(self.config),
            instance_id=instance_id,
            step=name,
            user_id=owner(self.config),
        )

        async def call() -> BaseModel:
            self._within_max_tokens(name, max_tokens)
            await self._within_budget()
            req = LLMRequest(
                purpose=ratelimit.AUTOMATION,
                system=[SystemBlock(text=system)] if system else [],
                messages=[Message(role="user", content=prompt)],
                max_tokens=max_tokens,
            )
            held: NonRetryable | None = None

            async def ask_again() -> bool:
                # The answer that did not fit may have spent a budget on its own (it is in the
                # ledger as it came): the second ask is held as the first was.
                nonlocal held
                try:
                    await self._within_budget(again=True)
                except NonRetryable as exc:
                    held = exc
                    return False
                return True

            # Each answer is the owner's usage as it arrives, one that did not fit too.
            try:
                result, _ = await complete_structured(
                    Billed(llm, self.db, row),
                    req,
                    output,
                    name="answer",
                    description="Give the answer in this shape.",
                    ask_again=ask_again,
                )
            except StructuredOutputError as exc:
                if exc.stopped and held is not None:
                    raise held from None  # a retry would only find the budget spent again
                raise
            return result

        return await step.do(name, call, retry=retry, result_type=output)

    def _within_max_tokens(self, name: str, max_tokens: int | None) -> None:
        """The owner's `[llm] max_tokens` caps every call's answer, an automation's too: one
        that asks for more fails before the model is asked, saying what to change (a quiet cap
        would cut its answer short and pay for retries that cannot fit)."""
        cap = self.config.llm.max_tokens
        if max_tokens is not None and not 1 <= max_tokens <= cap:
            raise NonRetryable(
                f"step.llm({name!r}) asks for max_tokens={max_tokens}, outside 1 to [llm] "
                f"max_tokens ({cap}), so the model was not asked; lower it in the automation "
                "(or leave it out for the configured cap), or raise [llm] max_tokens, then "
                "`agentd workflows retry ID`"
            )

    async def _within_budget(self, again: bool = False) -> None:
        """An automation's model calls are the owner's tokens: past the owner's or everyone's
        daily budget ([limits]) the call is not made, as a turn's would not be. With no owner
        configured, the per-user budget holds the automations' own tokens. `again`: the call
        would ask again, its answer having not fit."""
        spent = await self.db.read(
            ratelimit.over_tokens,
            self.config.limits,
            user_id=owner(self.config),
            now=time.time(),
        )
        if spent:
            asked = "asked again (its answer did not fit)" if again else "asked"
            raise NonRetryable(
                f"the daily token budget ([limits] {spent}) is spent, so the model was not "
                f"{asked}; after 00:00 UTC, `agentd workflows retry ID` runs it on (or raise "
                "the limit)"
            )

    async def send(self, step: Step, name: str, text: str, to: str | None = None) -> int:
        chat = await self.chat_named(to)
        if chat is None:
            chat = await self._owner_reached(step, name, name)
        # The code holds its secrets (step.secret) and may quote one in what it says (an API's
        # error naming the URL it called): the chat, its network and the database never get it.
        said = self.redact(text)
        return await deliver_text(step, self.db, name, self.outbox, chat, said, notice=True)

    async def chat_named(self, to: str | None) -> int | None:
        """The chat `to` names in `[automations] chats`; None (the owner's private chat) when
        unnamed or unset, or when it names a room no channel has met yet (said in the log)."""
        named = self.config.automations.chats.get(to) if to else None
        if isinstance(named, str):
            address, named = named, await self.db.read(addresses.chat_of, named)
            if named is None:
                log.warning(
                    "automations.chats names a room agentd is not in; told the owner instead",
                    extra={"chat_name": to, "address": address},
                )
        return named

    async def tool(
        self, step: Step, taint: TurnTaint, name: str, tool_name: str, args: dict[str, Any]
    ) -> ToolRun:
        """A tool call by the path every call takes (agent/calls.py), as the owner's: the
        step's name is the call's id, so two calls are two (each mail its own Message-ID)."""
        if self.registry is None:
            raise NonRetryable(f"no tool named {tool_name!r}: no tools are loaded")
        chat = self._owner()
        services = CallServices(
            self.config, self.db, self.outbox, self.clock, self.registry, self.redact
        )
        caller = Caller(chat_id=chat, chat_kind="private", user_id=chat, waiting=False)
        use = ToolUseBlock(id=name, name=tool_name, input=args)
        result = await make_call(step, services, caller, use, taint)
        if result.route.problem is not None:  # the author's mistake: retrying cannot help
            raise NonRetryable(f"{tool_name}: {result.outcome.content}")
        return ToolRun(ok=result.outcome.ok, content=result.outcome.content, ran=result.ran)


def _run_source(conn: Any, instance_id: str) -> str:
    """What started a run (chat, tool, workflow, hook:<name>); written once, at its start."""
    row = conn.execute(
        "SELECT source FROM automation_runs WHERE instance_id = ?", (instance_id,)
    ).fetchone()
    return str(row[0]) if row else ""
