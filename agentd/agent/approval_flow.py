"""How a high-risk tool call waits for the owner, in a turn or an automation (calls.py): the
approval is stored, the card with Approve / Deny is sent, the workflow waits durably for the
decision event (or the timeout, recorded as timed out, never as denied), and the card is edited
to say what happened.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel

from agentd.access import approvals, owners
from agentd.access.approvals import Approval
from agentd.agent.deps import CallDeps
from agentd.chat import reach
from agentd.chat.delivery import WAITED_OUT, deliver
from agentd.chat.inputs import ChatKind
from agentd.chat.outbox import Button, Outbox
from agentd.db import Database
from agentd.durable import Step, StepFailed
from agentd.hands import rules as shell_rules
from agentd.ledger import audit
from agentd.llm.types import ToolUseBlock
from agentd.tools import (
    ApprovalCard,
    ToolOutcome,
    args_digest,
    check_args,
    hostrules,
    render_args,
)

log = logging.getLogger("agentd.agent")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.=+/:-]{1,100}")  # what a Telegram or Matrix name holds


class Route(BaseModel):
    """How a tool call is handled, journaled so a replay takes the same path even if the
    registry changed meanwhile (an MCP server not yet back, a new risk override)."""

    name: str
    risk: Literal["low", "medium", "high"] | None = None  # None: no such tool
    source: str = ""
    problem: ToolOutcome | None = None  # unknown tool or invalid arguments: not run
    reason: str = ""  # why this call's risk differs from the tool's own (shown on the card)
    fingerprint: str = ""  # the tool's schema and code when routed (tools/fingerprint.py)
    at_most_once: bool = False  # the tool asks never to be run twice (Tool.at_most_once)
    settles: bool = False  # after a crash mid-call the tool can find out what happened
    taints: bool = False  # its result is outside content: the turn is tainted after it runs
    allow_host: str = ""  # the card offers "Always allow this host" (tools/hostrules.py)
    previews: bool = False  # its card is built from live state (Tool.preview), as a step


class Caller(BaseModel):
    """Who a tool call is made for: its user, the chat its messages go to, and the words that
    asked for it (quoted on the approval card). An automation's calls are the owner's."""

    chat_id: int
    chat_kind: ChatKind
    user_id: int
    text: str = ""
    waiting: bool = True  # someone waits in the chat for the answer: show "typing…"


class ApprovalDecision(BaseModel):
    status: Literal["approved", "denied", "timed_out"]
    by: str | None = None
    reason: str | None = None


CARD_CALL_CHARS = 2500  # the call shown on a card; longer ones are attached whole
CARD_TEXT_CHARS = 600  # a tool's own card text (hands' shell), shown as a code block


def tool_card(deps: CallDeps, tool: Route, use: ToolUseBlock) -> ApprovalCard | None:
    """The tool's own card content for this call (a shell command's line, folder, network,
    limits and its "Always allow this" offer); None: the arguments are rendered."""
    found = deps.registry.get(tool.name)
    if found is None or found.card is None:
        return None
    checked = check_args(found, use.input)
    if isinstance(checked, ToolOutcome):
        return None
    return found.card(checked)


def _preview(deps: CallDeps, use: ToolUseBlock, card: ApprovalCard | None) -> str:
    # Why it asks is the approval's own `why` (the card's **Why:** line), not repeated here.
    return deps.redact(card.text if card is not None else render_args(use.input))


def _card_chat(conn: Any, deps: CallDeps, inp: Caller, approver: int | None) -> int | None:
    """An approver asking in a private chat gets the card right there, on whichever channel
    that chat is; anyone else's card goes to their approver's private chat, on the channel
    [access] notices names, else where they last wrote (chat/reach.py)."""
    if approver is None:
        return None
    if inp.chat_kind == "private" and approver == inp.user_id:
        return inp.chat_id
    return reach.private_chat(conn, approver, deps.config.access.notices)


def create_approval(
    conn: Any,
    deps: CallDeps,
    tool: Route,
    inp: Caller,
    instance_id: str,
    use: ToolUseBlock,
    previewed: ApprovalCard | None = None,
) -> Approval:
    now = deps.clock.now()
    approver = owners.resolve(deps.config.access).approver_for(inp.user_id)
    card = previewed or tool_card(deps, tool, use)
    preview = _preview(deps, use, card)
    approval = Approval(
        id=approvals.new_id(),
        instance_id=instance_id,
        tool_use_id=use.id,
        chat_id=inp.chat_id,
        chat_kind=inp.chat_kind,
        user_id=inp.user_id,
        tool=tool.name,
        risk=tool.risk or "high",
        args_digest=args_digest(use.input),
        args_preview=preview,
        status="pending",
        created_at=now,
        expires_at=now + deps.config.tools.approval_timeout,
        # Never a group: the approver's own private chat (the owner's, for everyone else).
        card_chat_id=_card_chat(conn, deps, inp, approver),
        approver_id=approver,
        call_json=deps.redact(approvals.canonical_call(tool.name, use.input)),
        tool_source=tool.source,
        tool_fingerprint=tool.fingerprint or None,
        why=deps.redact(tool.reason),
        request=approvals.quote(inp.text) if inp.text else None,
    )

    stored = approvals.create(conn, approval)
    if card is not None and card.always_allow:
        shell_rules.offer(conn, stored.id, card.always_allow)
    if tool.allow_host:
        hostrules.offer(conn, stored.id, tool.allow_host)
    if card is not None:
        stored = stored.model_copy(update={"card_text": preview, "card_whole": card.whole})
    audit.record(
        conn,
        "approval_requested",
        chat_id=inp.chat_id,
        user_id=inp.user_id,
        instance_id=instance_id,
        at=now,
        source_key=f"approval-requested:{stored.id}",
        detail={
            "approval": stored.id,
            "tool": tool.name,
            "risk": tool.risk,
            "args_digest": stored.args_digest,
            "card_chat": stored.card_chat_id,
            "tool_fingerprint": stored.tool_fingerprint,
        },
    )
    return stored


def _shown_call(approval: Approval) -> tuple[str, bool]:
    """The call for the card, and whether it had to be cut (then it is attached whole)."""
    # call_json escapes every backtick (canonical_call), so it cannot close the code block;
    # an approval stored without call_json has only its preview.
    call = approval.call_json or approval.args_preview.replace("```", "'''")
    if len(call) <= CARD_CALL_CHARS:
        return call, False
    return call[:CARD_CALL_CHARS], True


def _asker_line(approval: Approval, asker_name: str) -> str:
    if approval.user_id is None or approval.self_approved:
        return ""
    who = f"{asker_name} (user {approval.user_id})" if asker_name else f"user {approval.user_id}"
    where = "in their private chat" if approval.private else f"in group {approval.chat_id}"
    said = f"**Their message:** `{approval.request}`\n" if approval.request else ""
    return f"**Asked by** {who}, {where}.\n{said}"


def _approval_text(approval: Approval, timeout: float, asker: str = "") -> str:
    call, cut = _shown_call(approval)
    minutes = max(1, round(timeout / 60))
    # The reason may quote outside content (a URL) or a command's newline: one escaped line,
    # shown as code, never as formatting.
    why = f"**Why:** `{approvals.one_line(approval.why)}`\n" if approval.why else ""
    # A tool's own card (hands' shell: the command line, folder, network, limits), one line
    # per field: the tool's card builder escapes each field's own newlines, so a command
    # cannot draw a fake "network: off" under it, and a backtick cannot close the block.
    shown = approvals.card_block(approval.card_text, CARD_TEXT_CHARS) if approval.card_text else ""
    details = f"**Shown by the tool:**\n```\n{shown}\n```\n" if shown else ""
    source = f" from {approval.tool_source}" if approval.tool_source else ""
    if shown and approval.card_whole:  # the tool's card says it all: no raw JSON under it
        return (
            f"🔐 **Approval needed** — `{approval.tool}`{source} ({approval.risk} risk)\n"
            f"{asker}{why}{details}\n"
            f"Approve or deny within {minutes} min, or: `agentd approve {approval.id}` "
            f"(the exact call: `agentd pending --show {approval.id}`)"
        )
    note = ""
    if cut:
        total = len(approval.call_json or "")
        note = (
            f"\n⚠️ Cut at {CARD_CALL_CHARS} of {total} characters: the whole call is in the "
            f"file below and in `agentd pending --show {approval.id}`.\n"
        )
    return (
        f"🔐 **Approval needed** — `{approval.tool}`{source} ({approval.risk} risk)\n"
        f"{asker}{why}{details}\n"
        f"```\n{call}\n```\n{note}\n"
        f"Approve or deny within {minutes} min, or: `agentd approve {approval.id}`"
    )


def outcome_text(approval: Approval, status: str, by: str | None) -> str:
    label = {
        "approved": f"✅ Approved{f' by {by}' if by else ''} — running.",
        "denied": f"❌ Denied{f' by {by}' if by else ''} — not run.",
        "timed_out": "⌛ No answer in time — not run.",
        "cancelled": "🚫 The request was cancelled — not run.",
    }[status]
    if approval.card_text and approval.card_whole:
        shown = approvals.card_block(approval.card_text, CARD_TEXT_CHARS)
        return f"`{approval.tool}`: {label}\n\n```\n{shown}\n```"
    call, cut = _shown_call(approval)
    more = f"\n(cut; whole call: `agentd pending --show {approval.id}`)" if cut else ""
    return f"`{approval.tool}`: {label}\n\n```\n{call}\n```{more}"


def _asker_name(conn: Any, user_id: int | None) -> str:
    """The asker's name as the card shows it: a name of more than an address's characters (a
    Matrix id a homeserver made up) goes in a code span, so it can draw no link or bold text."""
    row = conn.execute("SELECT username FROM paired_users WHERE user_id = ?", (user_id,)).fetchone()
    if not row or not row[0]:
        return ""
    name = approvals.one_line(str(row[0]).removeprefix("@"), 100)
    return f"@{name}" if _PLAIN_NAME.fullmatch(name) else f"`@{name}`"


async def _attach_call(deps: CallDeps, approval: Approval, chat_id: int, reply_to: int) -> int:
    """The whole call as a file under the card, when the card had to cut it. Run through the
    one send path as the step `attach:<id>`; writing the file again on a re-send is harmless."""
    folder = deps.config.outgoing_dir
    folder.mkdir(parents=True, exist_ok=True)
    name = f"approval-{approval.id}.json"
    path = folder / name
    path.write_text(approval.call_json or "", encoding="utf-8")
    try:
        return await deps.outbox.send_document(
            chat_id, str(path), name, caption="The whole call", reply_to=reply_to
        )
    finally:
        path.unlink(missing_ok=True)


def _asker_notice(approval: Approval) -> str:
    """What the asker is told when the card is not in their chat ("" when it is)."""
    if approval.card_chat_id == approval.chat_id:
        return ""
    if approval.self_approved:
        return f"`{approval.tool}` needs your approval: I sent the request to our private chat."
    if approval.card_chat_id is None:
        return f"`{approval.tool}` needs the owner's approval (`agentd approve {approval.id}`)."
    return (
        f"`{approval.tool}` needs the owner's approval: I've asked them and will go on "
        "when they answer."
    )


async def tell_asker(deps: CallDeps, approval: Approval, text: str) -> int | None:
    """The asker learns their request waits for someone else (or for their private chat). Run
    through the one send path as the step `tell:<id>`; best effort, the card is what counts."""
    try:
        return await deps.outbox.send_text(approval.chat_id, text)
    except WAITED_OUT:
        raise
    except Exception as exc:
        log.info("could not tell the asker", extra={"error": type(exc).__name__})
        return None


async def always_allow_buttons(deps: CallDeps, approval: Approval) -> list[list[Button]]:
    """The third button, "Always allow this", where the tool offered a rule (hands/rules.py),
    or "Always allow <host>" for a fetch (tools/hostrules.py)."""
    host = await deps.db.read(hostrules.offered, approval.id)
    if host is not None:
        data = hostrules.callback_data(approval.id)
        return [[Button(text=f"♾ Always allow {host[:60]}", data=data)]]
    if await deps.db.read(shell_rules.offered, approval.id) is None:
        return []
    data = shell_rules.always_callback_data(approval.id)
    return [[Button(text="♾ Always allow this", data=data)]]


async def ask_owner(deps: CallDeps, approval: Approval) -> int | None:
    """Send the Approve / Deny card to the approver's private chat; if Telegram is down the CLI
    can still decide. Run by `seek_approval` through the one send path (chat/delivery.py), as
    the step `ask:<id>`."""
    buttons = [
        [
            Button(text="✅ Approve", data=approvals.callback_data(approval.id, True)),
            Button(text="❌ Deny", data=approvals.callback_data(approval.id, False)),
        ],
        *await always_allow_buttons(deps, approval),
    ]
    name = await deps.db.read(_asker_name, approval.user_id)
    asker = _asker_line(approval, name)
    text = _approval_text(approval, approval.expires_at - approval.created_at, asker)
    try:
        message_id = await deps.outbox.send_text(approval.card_chat, text, buttons=buttons)
    except WAITED_OUT:
        raise  # the card goes once the channel is back, as a reply would
    except Exception as exc:
        log.warning(
            "could not send the approval request; `agentd approve` still works",
            extra={"approval": approval.id, "error": type(exc).__name__},
        )
        return None
    await deps.db.write(approvals.set_message_id, approval.id, message_id)
    return message_id


async def _attach_image(
    deps: CallDeps, approval: Approval, image: str, chat_id: int, reply_to: int
) -> int:
    """The picture a tool's preview took (the page as it is), under the card; removed once
    sent (a re-send after a crash finds it gone, and the card's text stands alone)."""
    sent = await deps.outbox.send_document(
        chat_id, image, "page.png", caption="The page now", reply_to=reply_to
    )
    with contextlib.suppress(OSError):
        os.unlink(image)
    return sent


async def send_card(
    step: Step, deps: CallDeps, approval: Approval, use_id: str, image: str = ""
) -> int | None:
    """Every message of an approval through the one send path: the asker's notice, the card
    in the approver's private chat, the whole call attached under a card that cut it, and
    the picture a tool's preview took."""
    notice = _asker_notice(approval)
    if notice:
        tell = partial(tell_asker, deps, approval, notice)
        await deliver(
            step, deps.db, f"tell:{use_id}", approval.chat_id, tell, result_type=int | None
        )
    if approval.card_chat_id is None and approval.call_json is not None:
        # No owner configured (an approval from before owners existed has no call_json and
        # keeps its card in the call's own chat): `agentd approve` only.
        return None
    ask = partial(ask_owner, deps, approval)
    message_id = await deliver(
        step, deps.db, f"ask:{use_id}", approval.card_chat, ask, result_type=int | None
    )
    if message_id is not None and _shown_call(approval)[1]:
        attach = partial(_attach_call, deps, approval, approval.card_chat, message_id)
        try:
            await deliver(
                step, deps.db, f"attach:{use_id}", approval.card_chat, attach, method="sendDocument"
            )
        except StepFailed as exc:  # the card says where else to read it
            log.warning("could not attach the whole call", extra={"error": exc.error_type})
    if message_id is not None and image:
        shot = partial(_attach_image, deps, approval, image, approval.card_chat, message_id)
        try:
            await deliver(
                step, deps.db, f"image:{use_id}", approval.card_chat, shot, method="sendDocument"
            )
        except StepFailed as exc:  # the card's text says what will happen; the picture helps
            log.warning("could not attach the card's picture", extra={"error": exc.error_type})
    return message_id


async def settle_timeout(deps: CallDeps, approval_id: str) -> ApprovalDecision:
    """A decision that landed just before the deadline still counts; else record timed_out."""
    stored = await deps.db.write(approvals.expire, approval_id, deps.clock.now())
    if stored.status == "timed_out":
        await deps.db.write(
            lambda conn: audit.record(
                conn,
                "approval_timed_out",
                chat_id=stored.chat_id,
                instance_id=stored.instance_id,
                detail={"approval": stored.id, "tool": stored.tool},
                source_key=f"approval-timeout:{stored.id}",
            )
        )
    return ApprovalDecision(status=stored.status, by=stored.decided_by)  # type: ignore[arg-type]


async def show_outcome(
    deps: CallDeps, approval: Approval, message_id: int | None, d: ApprovalDecision
) -> None:
    """Edit the approval message to show what happened, removing the buttons (best effort:
    the decision stands whatever Telegram says)."""
    if message_id is None:
        return
    try:
        await deps.outbox.edit_text(
            approval.card_chat, message_id, outcome_text(approval, d.status, d.by)
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
            await outbox.edit_text(approval.card_chat, approval.message_id, text)
        except Exception as exc:
            log.info("could not withdraw the approval request", extra={"error": type(exc).__name__})


async def seek_approval(
    step: Step,
    deps: CallDeps,
    tool: Route,
    inp: Caller,
    use: ToolUseBlock,
    previewed: ApprovalCard | None = None,
) -> ApprovalDecision:
    iid = step.instance_id
    approval = await step.local(
        f"approval:{use.id}", create_approval, deps, tool, inp, iid, use, previewed
    )
    image = previewed.image if previewed is not None else ""
    message_id = await send_card(step, deps, approval, use.id, image)
    event = await step.wait_for_event(
        approvals.event_type(approval.id),
        # It ends when the approval does (its lifetime runs from its creation): a card an
        # outage delayed is shown as timed out on time, as a press on it would be told.
        timeout=max(0.0, approval.expires_at - step.clock.now()),
        name=f"wait:{use.id}",
        # The chat goes on while the owner decides: later messages are answered meanwhile,
        # and this turn's answer comes as a reply to its own message (docs/messages.md).
        release_key=True,
    )
    if event is None:
        decision = await step.do(f"expire:{use.id}", settle_timeout, deps, approval.id)
    else:
        decision = ApprovalDecision(
            status=event.payload.get("decision", "denied"),
            by=event.payload.get("by"),
            reason=event.payload.get("reason"),
        )
    await step.do(f"show:{use.id}", show_outcome, deps, approval, message_id, decision)
    return decision


def refusal(tool: Route, decision: ApprovalDecision, timeout: float) -> ToolOutcome:
    if decision.status == "timed_out":
        text = (
            f"The owner did not approve {tool.name} within {timeout:g} seconds, so it was NOT "
            "run (timed out, not denied). Tell the user it was not done."
        )
        return ToolOutcome(ok=False, content=text, error_kind="tool_error")
    reason = f" Reason: {decision.reason}" if decision.reason else ""
    text = f"The owner denied running {tool.name}; it was NOT run.{reason} Tell the user."
    return ToolOutcome(ok=False, content=text, error_kind="tool_error")
