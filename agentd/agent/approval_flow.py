"""How a high-risk tool call waits for the owner inside a turn: the approval is stored, the
card with Approve / Deny is sent, the turn waits durably for the decision event (or the
timeout, recorded as timed out, never as denied), and the card is edited to say what happened.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from agentd.access import approvals
from agentd.access.approvals import Approval
from agentd.agent.deps import TurnDeps
from agentd.chat.delivery import deliver
from agentd.chat.outbox import Button, Outbox
from agentd.db import Database
from agentd.durable import Step
from agentd.hands import rules as shell_rules
from agentd.ledger import audit
from agentd.llm.types import (
    ToolUseBlock,
)
from agentd.tools import (
    ApprovalCard,
    ToolOutcome,
    args_digest,
    check_args,
    render_args,
)

if TYPE_CHECKING:
    from agentd.chat.inputs import TurnInput

log = logging.getLogger("agentd.agent")


class Route(BaseModel):
    """How a tool call is handled, journaled so a replay takes the same path even if the
    registry changed meanwhile (an MCP server not yet back, a new risk override)."""

    name: str
    risk: Literal["low", "medium", "high"] | None = None  # None: no such tool
    source: str = ""
    problem: ToolOutcome | None = None  # unknown tool or invalid arguments: not run
    reason: str = ""  # why this call's risk differs from the tool's own (shown on the card)
    at_most_once: bool = False  # the tool asks never to be run twice (Tool.at_most_once)
    settles: bool = False  # after a crash mid-call the tool can find out what happened
    taints: bool = False  # its result is outside content: the turn is tainted after it runs


class Decision(BaseModel):
    status: Literal["approved", "denied", "timed_out"]
    by: str | None = None
    reason: str | None = None


def tool_card(deps: TurnDeps, tool: Route, use: ToolUseBlock) -> ApprovalCard | None:
    """The tool's own card content for this call (a shell command's line, folder, network,
    limits and its "Always allow this" offer); None: the arguments are rendered."""
    found = deps.registry.get(tool.name)
    if found is None or found.card is None:
        return None
    checked = check_args(found, use.input)
    if isinstance(checked, ToolOutcome):
        return None
    return found.card(checked)


def _preview(deps: TurnDeps, use: ToolUseBlock, card: ApprovalCard | None) -> str:
    # Why the call asks is not part of the preview: the card shows it as its "Why:" line
    # (ask_owner) and the approval_requested audit row keeps it.
    shown = card.text if card is not None else render_args(use.input)
    return deps.redact(shown)


def create_approval(
    conn: Any, deps: TurnDeps, tool: Route, inp: TurnInput, instance_id: str, use: ToolUseBlock
) -> Approval:
    now = deps.clock.now()
    card = tool_card(deps, tool, use)
    approval = Approval(
        id=approvals.new_id(),
        instance_id=instance_id,
        tool_use_id=use.id,
        chat_id=inp.chat_id,
        user_id=inp.user_id,
        tool=tool.name,
        risk=tool.risk or "high",
        args_digest=args_digest(use.input),
        args_preview=_preview(deps, use, card),
        status="pending",
        created_at=now,
        expires_at=now + deps.config.tools.approval_timeout,
    )

    stored = approvals.create(conn, approval)
    if card is not None and card.always_allow:
        shell_rules.offer(conn, stored.id, card.always_allow)
    audit.record(conn, "approval_requested", chat_id=inp.chat_id, user_id=inp.user_id,
                 instance_id=instance_id, at=now, source_key=f"approval-requested:{stored.id}",
                 detail={"approval": stored.id, "tool": tool.name, "risk": tool.risk,
                         "args_digest": stored.args_digest,
                         "reason": deps.redact(tool.reason)})  # fmt: skip
    return stored


def _approval_text(approval: Approval, timeout: float, reason: str = "") -> str:
    preview = approval.args_preview.replace("```", "'''")
    minutes = max(1, round(timeout / 60))
    # Why a call that is not high risk by itself asks (a tainted turn): one line, no markup.
    why = " ".join(reason.replace("`", "'").replace("*", "").split())
    why = f"Why: {why[:500]}\n\n" if why else ""
    return (
        f"🔐 **Approval needed** — `{approval.tool}` ({approval.risk} risk)\n\n"
        f"{why}"
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


async def always_allow_buttons(deps: TurnDeps, approval: Approval) -> list[list[Button]]:
    """The third button, "Always allow this", where the tool offered a rule (hands/rules.py)."""
    if await deps.db.read(shell_rules.offered, approval.id) is None:
        return []
    data = shell_rules.always_callback_data(approval.id)
    return [[Button(text="♾ Always allow this", data=data)]]


async def ask_owner(deps: TurnDeps, approval: Approval, reason: str = "") -> int | None:
    """Send the Approve / Deny buttons; if Telegram is down the CLI can still decide. Run by
    `seek_approval` through the one send path (chat/delivery.py), as the step `ask:<id>`.
    `reason`: why this call asks (Route.reason), shown as the card's "Why:" line."""
    buttons = [
        [
            Button(text="✅ Approve", data=approvals.callback_data(approval.id, True)),
            Button(text="❌ Deny", data=approvals.callback_data(approval.id, False)),
        ],
        *await always_allow_buttons(deps, approval),
    ]
    timeout = approval.expires_at - approval.created_at
    text = _approval_text(approval, timeout, deps.redact(reason))
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


async def seek_approval(step: Step, deps: TurnDeps, tool: Route, inp: TurnInput,
                    use: ToolUseBlock) -> Decision:  # fmt: skip
    iid = step.instance_id
    approval = await step.local(f"approval:{use.id}", create_approval, deps, tool, inp, iid, use)
    ask = partial(ask_owner, deps, approval, tool.reason)
    message_id = await deliver(
        step, deps.db, f"ask:{use.id}", approval.chat_id, ask, result_type=int | None
    )
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


def refusal(tool: Route, decision: Decision, timeout: float) -> ToolOutcome:
    if decision.status == "timed_out":
        text = (
            f"The owner did not approve {tool.name} within {timeout:g} seconds, so it was NOT "
            "run (timed out, not denied). Tell the user it was not done."
        )
        return ToolOutcome(ok=False, content=text, error_kind="tool_error")
    reason = f" Reason: {decision.reason}" if decision.reason else ""
    text = f"The owner denied running {tool.name}; it was NOT run.{reason} Tell the user."
    return ToolOutcome(ok=False, content=text, error_kind="tool_error")
