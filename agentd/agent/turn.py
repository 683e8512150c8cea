"""The turn workflow (SPEC §2): one durable instance per accepted message.

save-user → load-history → llm#1… → send#1… → save-reply → audit. Every effect outside the
process is a journaled step, so a restart replays finished steps and re-runs only the one that
was interrupted.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentd import audit, ratelimit
from agentd.agent.inputs import TurnInput, TurnOutput
from agentd.agent.prompt import as_data
from agentd.agent.toolloop import EMPTY_ANSWER, Recall, agent_loop
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock, NonRetryable, Step, StepFailed, Workflow, workflow
from agentd.llm import LLM
from agentd.llm.types import Message
from agentd.memory import history
from agentd.memory.embedders import Embedder
from agentd.memory.facts import facts_for_prompt
from agentd.memory.history import StoredMessage
from agentd.memory.search import format_recall, fusion_from_config, search_memories
from agentd.memory.summarise import (
    SUMMARY_WORKFLOW,
    SummaryInput,
    summary_due,
    summary_instance_id,
    summary_key,
    summary_running,
)
from agentd.outbox import Outbox
from agentd.telegram.format import split_markdown
from agentd.tools import ToolRegistry
from agentd.vision import SeenImage, VisionDeps, describe, see_image
from agentd.vision import meta as vision_meta

RECALL_KINDS = ("summary", "note", "turn")  # facts are listed in full, not recalled
LLM_ERROR_REPLY = (
    "Sorry — I couldn't get an answer from the language model just now. Your message is saved; "
    "please try again in a minute."
)
STEP_ERROR_REPLY = (
    "Sorry — something went wrong while working on that. Your message is saved; the owner can "
    "see what failed with `agentd workflows ls --status errored`."
)


def unsupported_reply(kind: str) -> str:
    return f"Sorry, I can't handle {kind.replace('_', ' ')} messages yet. Please send text."


class TurnFailed(Exception):
    """The turn could not be completed; the user was told and the error is in the audit log."""


def _identity(text: str) -> str:
    return text


@dataclass(frozen=True)
class TurnDeps:
    config: Config
    db: Database
    llm: LLM
    outbox: Outbox
    clock: Clock
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    redact: Callable[[str], str] = _identity  # secrets out of tool results and approvals
    embedder: Embedder | None = None  # None: long-term memory is off
    # Starts a workflow idempotently: (name, input, instance_id=, key=) — for summaries.
    start_workflow: Callable[..., Awaitable[Any]] | None = None
    vision: VisionDeps | None = None  # None: photos get a polite "can't look at photos" reply


def _user_content(inp: TurnInput) -> str:
    text = inp.text
    if inp.kind == "unsupported":
        text = f"[{inp.unsupported_kind or 'message'}] {text}".strip()
    elif inp.kind == "photo":
        text = f"[photo] {text}".strip()
    if inp.edited:
        text = f"(edited message) {text}"
    if inp.schedule_id:
        text = (f"[Scheduled task {inp.schedule_id}, set up earlier by the owner and run now "
                f"on their behalf; carry it out and report the result] {text}")  # fmt: skip
    return text


def to_llm_messages(past: list[StoredMessage], current: str) -> list[Message]:
    """History plus the new message, starting with the user and alternating roles."""
    merged: list[Message] = []
    for role, content in [(m.role, m.content) for m in past] + [("user", current)]:
        if not content.strip() or (not merged and role != "user"):
            continue
        if merged and merged[-1].role == role:
            merged[-1] = Message(role=role, content=f"{merged[-1].content}\n\n{content}")
        else:
            merged.append(Message(role=role, content=content))
    return merged


# -- step functions: each does one external thing and returns JSON-able data ---------------


async def save_user_message(
    deps: TurnDeps, inp: TurnInput, instance_id: str, images: list[SeenImage], notes: list[str]
) -> int:
    meta: dict[str, Any] = {"telegram_message_id": inp.message_id, "kind": inp.kind}
    if inp.reply_to:
        meta["reply_to"] = inp.reply_to.message_id
    if images:
        meta["images"] = vision_meta(images)  # the file id and hash are kept, never the bytes
    content = "\n".join([_user_content(inp), *notes]).strip()
    return await deps.db.write(
        lambda conn: history.save_message(
            conn, chat_id=inp.chat_id, user_id=inp.user_id, role="user", content=content,
            source_key=f"{instance_id}:user", instance_id=instance_id,
            telegram_message_ids=[inp.message_id] if inp.message_id else [], meta=meta,
            created_at=inp.date or None,
        )
    )  # fmt: skip


def _images_to_see(inp: TurnInput) -> list[tuple[str, str]]:
    """(label, file_id) of every image in this turn: the message's own and the replied-to one."""
    images = []
    if inp.kind == "photo" and inp.photo_file_id:
        images.append(("Image sent with this message", inp.photo_file_id))
    if inp.reply_to and inp.reply_to.photo_file_id:
        images.append(("Image in the message being replied to", inp.reply_to.photo_file_id))
    return images


async def look_at_images(
    step: Step, deps: TurnDeps, inp: TurnInput
) -> tuple[list[SeenImage], list[str]]:
    """Each image is its own step; one that cannot be seen is noted, not fatal."""
    seen: list[SeenImage] = []
    notes: list[str] = []
    if deps.vision is None:
        return seen, notes
    for n, (label, file_id) in enumerate(_images_to_see(inp), start=1):
        try:
            image = await step.do(f"vision#{n}", see_image, deps.vision, file_id, inp.chat_id,
                                  step.instance_id)  # fmt: skip
        except StepFailed as exc:
            notes.append(f"[{label}: could not be analysed ({exc.message[:200]})]")
            continue
        seen.append(image)
        notes.append(f"[{describe(image, label)}]")
    return seen, notes


async def rate_check(deps: TurnDeps, inp: TurnInput) -> ratelimit.Verdict:
    return await deps.db.read(
        ratelimit.check, deps.config.limits, user_id=inp.user_id, chat_id=inp.chat_id,
        now=deps.clock.now(),
    )  # fmt: skip


async def load_history(deps: TurnDeps, chat_id: int, before_id: int) -> list[StoredMessage]:
    limit = deps.config.memory.history_limit
    return await deps.db.read(history.recent, chat_id, limit, before_id=before_id)


def _current_message(inp: TurnInput, notes: list[str]) -> str:
    text = _user_content(inp)
    if notes:
        text = f"{text}\n\n<data>\n" + as_data("\n".join(notes)) + "\n</data>"
    if inp.reply_to and (inp.reply_to.text or inp.reply_to.photo_file_id):
        who = "your" if inp.reply_to.from_bot else "an"
        quoted = as_data(inp.reply_to.text[:2000]) or "[photo]"
        text = (
            f"(The user is replying to {who} earlier message:\n<data>\n{quoted}\n</data>)\n\n{text}"
        )
    return text


async def send_chunk(deps: TurnDeps, chat_id: int, chunk: str, reply_to: int | None) -> int:
    from agentd.telegram.output import SendFailed  # the outbox is Telegram's; keep import local

    try:
        return await deps.outbox.send_text(chat_id, chunk, reply_to=reply_to)
    except SendFailed as exc:
        raise NonRetryable(str(exc)) from None


async def save_reply(
    deps: TurnDeps, inp: TurnInput, instance_id: str, text: str, ids: list[int], outcome: str
) -> int:
    return await deps.db.write(
        lambda conn: history.save_message(
            conn,
            chat_id=inp.chat_id,
            user_id=None,
            role="assistant",
            content=text,
            # Per outcome: after `workflows retry`, the real answer is stored beside the apology.
            source_key=f"{instance_id}:assistant:{outcome}",
            instance_id=instance_id,
            telegram_message_ids=ids,
            meta={"outcome": outcome},
        )
    )


async def write_audit(
    deps: TurnDeps, inp: TurnInput, instance_id: str, kind: str, detail: dict[str, object]
) -> None:
    await deps.db.write(
        lambda conn: audit.record(
            conn,
            kind,
            chat_id=inp.chat_id,
            user_id=inp.user_id,
            instance_id=instance_id,
            detail=detail,
            source_key=f"{instance_id}:{kind}",
        )
    )


# -- the workflow ----------------------------------------------------------------------


async def send_reply(
    step: Step, deps: TurnDeps, inp: TurnInput, text: str, prefix: str
) -> list[int]:
    """Each chunk is its own step, so a crash between chunks never re-sends the earlier ones."""
    limit = deps.config.telegram.max_message_chars
    ids = []
    for n, chunk in enumerate(split_markdown(text, limit) or [EMPTY_ANSWER], start=1):
        reply_to = inp.message_id if n == 1 and inp.message_id else None
        ids.append(await step.do(f"{prefix}#{n}", send_chunk, deps, inp.chat_id, chunk, reply_to))
    return ids


async def recall_memories(deps: TurnDeps, inp: TurnInput) -> Recall:
    """The user's facts and the memories closest to this message: only this user's (R-LTM-3)."""
    if deps.embedder is None:
        return Recall()
    cfg = deps.config.memory
    hits = await search_memories(
        deps.db, deps.embedder, inp.user_id, inp.text, k=cfg.recall_top_k,
        kinds=RECALL_KINDS, fusion=fusion_from_config(cfg),
    )  # fmt: skip
    facts = await deps.db.read(facts_for_prompt, inp.user_id, cfg.facts_prompt_chars)
    return Recall(facts=facts, memories=format_recall(hits, cfg.recall_prompt_chars))


async def schedule_summary(deps: TurnDeps, inp: TurnInput) -> str | None:
    """Start the background summary once the chat passes its threshold (R-LTM-1)."""
    if deps.embedder is None or deps.start_workflow is None:
        return None
    cfg = deps.config.memory
    up_to = await deps.db.read(
        lambda c: (
            None
            if summary_running(c, inp.chat_id)
            else summary_due(c, inp.chat_id, cfg.summary_threshold, cfg.summary_keep_recent)
        )
    )
    if up_to is None:
        return None
    instance_id = summary_instance_id(inp.chat_id, up_to)
    await deps.start_workflow(
        SUMMARY_WORKFLOW,
        SummaryInput(chat_id=inp.chat_id, user_id=inp.user_id, up_to_id=up_to),
        instance_id=instance_id,
        key=summary_key(inp.chat_id),
    )
    return instance_id


def with_reported_actions(text: str, actions: list[str]) -> str:
    """Medium-risk actions are always reported (R-TOOL-2), whatever the model wrote."""
    if not actions:
        return text
    return f"{text}\n\n_Done on your behalf: {'; '.join(actions)}._"


async def record_reply(
    step: Step, deps: TurnDeps, inp: TurnInput, text: str, ids: list[int], outcome: str,
    kind: str, detail: dict[str, object],
) -> None:  # fmt: skip
    """The last two steps of every turn: the answer into history, the turn into the audit."""
    iid = step.instance_id
    await step.do("save-reply", save_reply, deps, inp, iid, text, ids, outcome)
    await step.do("audit", write_audit, deps, inp, iid, kind, {"outcome": outcome, **detail})


def make_turn_workflow(deps: TurnDeps) -> Workflow[TurnInput, TurnOutput]:
    @workflow("turn")
    async def turn(step: Step, inp: TurnInput) -> TurnOutput:
        started = time.perf_counter()
        iid = step.instance_id
        images, notes = await look_at_images(step, deps, inp)
        user_msg_id = await step.do("save-user", save_user_message, deps, inp, iid, images, notes)
        if inp.kind == "unsupported" or (inp.kind == "photo" and deps.vision is None):
            kind = inp.unsupported_kind or inp.kind
            text = unsupported_reply(kind)
            ids = await send_reply(step, deps, inp, text, "send")
            await record_reply(step, deps, inp, text, ids, "unsupported", "turn", {"kind": kind})
            return TurnOutput(reply_message_ids=ids, outcome="unsupported")
        verdict = await step.do("rate-check", rate_check, deps, inp)
        if not verdict.allowed:
            if not verdict.notify:  # told once already in this window: stay quiet
                await step.do("audit", write_audit, deps, inp, iid, "rate_limited",
                              {"limit": verdict.limit, "notified": False})  # fmt: skip
                return TurnOutput(outcome="rate_limited")
            text = ratelimit.notice(verdict.limit)
            ids = await send_reply(step, deps, inp, text, "send")
            await record_reply(step, deps, inp, text, ids, "rate_limited", "rate_limited",
                               {"limit": verdict.limit, "notified": True})  # fmt: skip
            return TurnOutput(reply_message_ids=ids, outcome="rate_limited")
        try:
            past = await step.do("load-history", load_history, deps, inp.chat_id, user_msg_id)
            messages = to_llm_messages(past, _current_message(inp, notes))
            try:
                recall = await step.do("recall", recall_memories, deps, inp)
            except StepFailed:
                recall = Recall()  # an embedder outage must not cost the user their answer
            result = await agent_loop(step, deps, inp, messages, recall)
        except StepFailed as exc:
            reply = LLM_ERROR_REPLY if exc.step.startswith("llm#") else STEP_ERROR_REPLY
            ids = await send_reply(step, deps, inp, reply, "send-error")
            await record_reply(step, deps, inp, reply, ids, "error", "turn_error",
                               {"step": exc.step, "error": exc.error_type})  # fmt: skip
            raise TurnFailed(f"step {exc.step} failed: {exc.error_type}: {exc.message}") from None
        answer = with_reported_actions(result.text, result.reported_actions)
        try:
            ids = await send_reply(step, deps, inp, answer, "send")
        except StepFailed as exc:
            await record_reply(step, deps, inp, answer, [], "undelivered", "turn_error",
                               {"step": exc.step, "error": exc.message})  # fmt: skip
            raise TurnFailed(f"the answer could not be delivered: {exc.message}") from None
        duration = round((time.perf_counter() - started) * 1000, 1)
        await record_reply(step, deps, inp, answer, ids, result.outcome, "turn",
                           {"llm_calls": result.calls, "chunks": len(ids),
                            "duration_ms": duration})  # fmt: skip
        await step.do("schedule-summary", schedule_summary, deps, inp)
        return TurnOutput(reply_message_ids=ids, llm_calls=result.calls, outcome=result.outcome)

    return turn
