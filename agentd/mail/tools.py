"""The mail tools the model sees: search, read, save an attachment, draft, send, move, flag.

Reading tools taint the turn (mail is outside content) and wrap what they return as untrusted
data; sending is high risk and egress, and its approval card shows the mail as it will go.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentd.access.approvals import one_line, quote
from agentd.config import Config
from agentd.db import Database
from agentd.mail import imap, send
from agentd.mail.errors import MailError, MailTooLarge
from agentd.mail.mailbox import Mailbox, parse_day
from agentd.mail.message import Outgoing, compose, quoted, reply_headers, reply_recipients
from agentd.tools import (
    ApprovalCard,
    OwnerOnly,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    Toolset,
    mark_untrusted,
)

MAX_SEND_BODY = 3000  # the approval card shows the whole body; Telegram caps a message at 4096


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str = Field(default="", description="Mail account name; empty: the first one.")


def _address(value: str) -> str:
    """One address as a person writes it ('Ana <ana@example.org>'); no header smuggling."""
    from email.utils import parseaddr

    if "\r" in value or "\n" in value or "@" not in parseaddr(value)[1]:
        raise ValueError(f"{value!r} is not an e-mail address")
    return value.strip()


class _Recipients(BaseModel):
    @field_validator("to", "cc", check_fields=False)
    @classmethod
    def _addresses(cls, values: list[str]) -> list[str]:
        return [_address(v) for v in values]

    @field_validator("subject", check_fields=False)
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\r" in value or "\n" in value:
            raise ValueError("the subject must be one line")
        return value


class SearchArgs(_Args):
    folder: str = "INBOX"
    sender: str = Field(default="", description="Part of the From address or name.")
    subject: str = Field(default="", description="Part of the subject.")
    text: str = Field(default="", description="Words anywhere in the message.")
    since: str = Field(default="", description="On or after this date (YYYY-MM-DD).")
    before: str = Field(default="", description="Before this date (YYYY-MM-DD).")
    unread: bool | None = Field(default=None, description="true: unread only; false: read only.")
    flagged: bool | None = None
    limit: int = Field(default=20, ge=1, le=50)


class ReadArgs(_Args):
    folder: str = "INBOX"
    uid: int = Field(ge=1, description="The message's uid from mail_search.")
    mark_read: bool = False


class SaveArgs(_Args):
    folder: str = "INBOX"
    uid: int = Field(ge=1)
    attachment: int = Field(ge=1, description="The attachment's number from mail_read.")


class DraftArgs(_Recipients, _Args):
    to: list[str] = Field(
        default_factory=list,
        description="Recipients; for a reply, empty means the original sender.",
    )
    cc: list[str] = Field(default_factory=list)
    subject: str = Field(default="", description="Empty for a reply: 'Re: <original>'.")
    body: str = Field(max_length=MAX_SEND_BODY)
    reply_to_uid: int | None = Field(default=None, description="Reply to this message (uid).")
    reply_folder: str = "INBOX"
    reply_all: bool = False


class SendArgs(_Recipients, _Args):
    to: list[str] = Field(min_length=1, max_length=20)
    cc: list[str] = Field(default_factory=list, max_length=20)
    subject: str = Field(max_length=300)
    body: str = Field(
        max_length=MAX_SEND_BODY,
        description="The exact text sent (include "
        "the quote for a reply, as mail_draft returned it).",
    )
    reply_to_uid: int | None = Field(default=None, description="Thread it under this message.")
    reply_folder: str = "INBOX"


class MoveArgs(_Args):
    folder: str = "INBOX"
    uids: list[int] = Field(min_length=1, max_length=100)
    to_folder: str


class FlagArgs(_Args):
    folder: str = "INBOX"
    uids: list[int] = Field(min_length=1, max_length=100)
    flag: Literal["read", "flagged", "answered"]
    on: bool = True


@dataclass
class MailDeps:
    config: Config
    db: Database
    boxes: dict[str, Mailbox]

    def box(self, name: str) -> Mailbox:
        if not name:
            return next(iter(self.boxes.values()))
        if name not in self.boxes:
            raise ToolError(f"no mail account {name!r}; the accounts are: {', '.join(self.boxes)}")
        return self.boxes[name]

    def attachments_dir(self, box: Mailbox) -> Path:
        if box.account.attachments_dir:
            return Path(box.account.attachments_dir).expanduser()
        return self.config.db_path.parent / "attachments"


def _line(s: imap.Summary) -> str:
    """One line per message: a line break in a sender's header (an encoded word can hold one)
    would draw a line that looks like another message."""
    marks = ("unread " if s.unread else "") + ("flagged " if s.flagged else "")
    date, sender, subject = (" ".join(v.split()) for v in (s.date, s.sender, s.subject))
    return f"uid {s.uid} | {date} | {sender} | {subject} | {marks.strip() or 'read'}"


async def _search(deps: MailDeps, ctx: ToolContext, a: SearchArgs) -> str:
    box = deps.box(a.account)
    try:
        keys = imap.criteria(
            sender=a.sender,
            subject=a.subject,
            text=a.text,
            since=parse_day(a.since, "since"),
            before=parse_day(a.before, "before"),
            unread=a.unread,
            flagged=a.flagged,
        )
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    total, found = await box.search(a.folder, keys, a.limit)
    head = f"{total} message(s) in {box.account.name}/{a.folder} match; newest {len(found)}:"
    body = "\n".join(_line(s) for s in found) or "(none)"
    return mark_untrusted(f"{head}\n{body}", f"mail:{box.account.name}/{a.folder}")


async def _read(deps: MailDeps, ctx: ToolContext, a: ReadArgs) -> str:
    box = deps.box(a.account)
    r = await box.read(a.folder, a.uid, a.mark_read)
    files = (
        "\n".join(
            f"  #{x.index} {x.filename} ({x.content_type}, {x.size} bytes)" for x in r.attachments
        )
        or "  (none)"
    )
    text = (
        f"From: {r.sender}\nTo: {r.to}\nCc: {r.cc}\nSubject: {r.subject}\nDate: {r.date}\n"
        f"Message-ID: {r.message_id}\nAttachments:\n{files}\n\n{r.body}"
    )
    return mark_untrusted(text, f"mail:{box.account.name}/{a.folder}/{a.uid}")


async def _save(deps: MailDeps, ctx: ToolContext, a: SaveArgs) -> str:
    box = deps.box(a.account)
    try:
        path = await box.save_attachment(
            a.folder,
            a.uid,
            a.attachment,
            deps.attachments_dir(box),
            within=deps.config.workspace_dir,
        )
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    return f"Saved attachment #{a.attachment} as {path}"


async def _outgoing(deps: MailDeps, box: Mailbox, a: DraftArgs | SendArgs, mid: str) -> Outgoing:
    """The mail to compose; a reply takes its threading headers from the original."""
    acc = box.account
    sender = f"{acc.display_name} <{acc.address}>" if acc.display_name else acc.address
    out = Outgoing(
        from_addr=sender,
        to=list(a.to),
        cc=list(a.cc),
        subject=a.subject,
        body=a.body,
        message_id=mid,
    )
    if a.reply_to_uid is None:
        return out
    original = await box.headers(a.reply_folder, a.reply_to_uid)
    parent, refs, subject = reply_headers(original)
    out.in_reply_to, out.references = parent, refs
    if isinstance(a, DraftArgs):
        out.subject = a.subject or subject
        if not a.to:
            out.to, cc = reply_recipients(original, acc.address, a.reply_all)
            out.cc = out.cc or cc
        try:
            out.body = quoted(await box.read(a.reply_folder, a.reply_to_uid), a.body)
        except MailTooLarge:  # too large to fetch: the reply goes without the quote
            out.body = a.body
    return out


def _card(out: Outgoing) -> str:
    lines = [f"From: {out.from_addr}", f"To: {', '.join(out.to)}"]
    if out.cc:
        lines.append(f"Cc: {', '.join(out.cc)}")
    lines.append(f"Subject: {out.subject}")
    if out.in_reply_to:
        lines.append(f"In-Reply-To: {out.in_reply_to}")
    return "\n".join(lines) + "\n\n" + out.body


async def _draft(deps: MailDeps, ctx: ToolContext, a: DraftArgs) -> str:
    box = deps.box(a.account)
    mid = send.message_id_for(ctx.instance_id, f"draft-{ctx.tool_use_id}", box.account.address)
    out = await _outgoing(deps, box, a, mid)
    if not out.to:
        raise ToolError("a new mail needs at least one recipient in `to`")
    raw = compose(out, ctx.now()).as_bytes()
    await box.append(box.account.drafts_folder, raw, [b"\\Draft", b"\\Seen"])
    head = f"Saved in {box.account.drafts_folder}. To send it, call mail_send with exactly "
    if a.reply_to_uid is None:
        return f"{head}these fields:\n\n{_card(out)}"
    # A reply quotes the original and takes its subject and addresses: a stranger's words.
    source = f"mail:{box.account.name}/{a.reply_folder}/{a.reply_to_uid}"
    return f"{head}these fields and reply_to_uid:\n\n{mark_untrusted(_card(out), source)}"


def _send_preview(deps: MailDeps, a: SendArgs) -> str:
    try:
        acc = deps.box(a.account).account
    except ToolError as exc:
        return str(exc)
    sender = f"{acc.display_name} <{acc.address}>" if acc.display_name else acc.address
    # The card shows one line per header and the body as one quoted line: each value
    # escaped, so neither a subject nor the body can draw a line that looks like a header.
    thread = (
        f"\n(a reply to message {a.reply_to_uid} in {one_line(a.reply_folder)})"
        if a.reply_to_uid
        else ""
    )
    cc = f"\nCc: {one_line(', '.join(a.cc))}" if a.cc else ""
    return (
        f"From: {one_line(sender)}\nTo: {one_line(', '.join(a.to))}{cc}\n"
        f"Subject: {one_line(a.subject)}{thread}\n\n{quote(a.body, limit=len(a.body))}"
    )


async def _send(deps: MailDeps, ctx: ToolContext, a: SendArgs) -> str:
    box = deps.box(a.account)
    mid = send.message_id_for(ctx.instance_id, ctx.tool_use_id, box.account.address)
    out = await _outgoing(deps, box, a, mid)
    result = await send.send(
        box, deps.db, out, instance_id=ctx.instance_id, tool_use_id=ctx.tool_use_id, now=ctx.now()
    )
    if a.reply_to_uid is not None:
        try:
            await box.set_flag(a.reply_folder, [a.reply_to_uid], "answered", True)
        except MailError:
            pass  # the reply went; the \Answered mark is a nicety
    return result


async def _settle_send(deps: MailDeps, ctx: ToolContext, a: SendArgs) -> ToolResult:
    box = deps.box(a.account)
    mid = send.message_id_for(ctx.instance_id, ctx.tool_use_id, box.account.address)
    went, text = await send.settle(box, deps.db, mid)
    return ToolResult(content=text, is_error=not went)


async def _move(deps: MailDeps, ctx: ToolContext, a: MoveArgs) -> str:
    box = deps.box(a.account)
    await box.move(a.folder, a.uids, a.to_folder)
    return f"Moved {len(a.uids)} message(s) from {a.folder} to {a.to_folder}."


async def _flag(deps: MailDeps, ctx: ToolContext, a: FlagArgs) -> str:
    box = deps.box(a.account)
    flag = {"read": "seen", "flagged": "flagged", "answered": "answered"}[a.flag]
    await box.set_flag(a.folder, a.uids, flag, a.on)
    return f"{'Marked' if a.on else 'Unmarked'} {len(a.uids)} message(s) as {a.flag}."


NOT_THE_OWNERS = (
    "The mailboxes are the owner's: mail tools work only for the owner, in their private chat "
    "(anyone else, or a group, would read or act on the owner's mail). Nothing was done."
)


def _reading_tools(mail: Toolset, deps: MailDeps) -> None:
    # What a mailbox holds is outside content: reading it taints the turn.
    @mail.tool(
        risk="low",
        taints=True,
        description="Search or list mail in a folder by sender, subject, text, date, unread or "
        "flagged; returns uids, newest first.",
    )
    async def mail_search(ctx: ToolContext, args: SearchArgs) -> str:
        return await _search(deps, ctx, args)

    @mail.tool(
        risk="low",
        taints=True,
        description="Read one message: headers, its text (HTML turned into text) and a list of "
        "its attachments.",
    )
    async def mail_read(ctx: ToolContext, args: ReadArgs) -> str:
        return await _read(deps, ctx, args)

    # Writes a stranger's file into the owner's folders: it changes the owner's data, so it
    # asks while outside content is in view (egress).
    @mail.tool(risk="medium", egress=True)
    async def mail_save_attachment(ctx: ToolContext, args: SaveArgs) -> str:
        """Save one attachment of a message to the agent's attachments folder."""
        return await _save(deps, ctx, args)


def _writing_tools(mail: Toolset, deps: MailDeps) -> None:
    # A draft quotes the original: its text is outside content too. It lands in the owner's
    # mailbox, where they may send it as it is: egress.
    @mail.tool(
        risk="low",
        taints=True,
        egress=True,
        description="Write a new mail or a reply (quoted and threaded) and save it in Drafts; "
        "nothing is sent. Returns the fields to pass to mail_send.",
    )
    async def mail_draft(ctx: ToolContext, args: DraftArgs) -> str:
        return await _draft(deps, ctx, args)

    # Sending twice is worse than asking again, whatever its risk is overridden to; after a
    # crash mid-send, Sent is searched for its Message-ID instead of guessing.
    @mail.tool(
        risk="high",
        egress=True,
        at_most_once=True,
        card=lambda args: ApprovalCard(text=_send_preview(deps, args)),
        settle=partial(_settle_send, deps),
        description="Send a mail (or a reply, threaded with reply_to_uid). The owner approves the "
        "exact mail first.",
    )
    async def mail_send(ctx: ToolContext, args: SendArgs) -> str:
        return await _send(deps, ctx, args)

    # Moving and flagging change the owner's mailbox (a hundred messages to Trash at once):
    # with outside content in view, a mail's words must not decide them unasked.
    @mail.tool(risk="medium", egress=True)
    async def mail_move(ctx: ToolContext, args: MoveArgs) -> str:
        """Move messages to another folder (e.g. Archive)."""
        return await _move(deps, ctx, args)

    @mail.tool(risk="medium", egress=True)
    async def mail_flag(ctx: ToolContext, args: FlagArgs) -> str:
        """Mark messages read or unread, flagged or answered."""
        return await _flag(deps, ctx, args)


def build_mail_tools(config: Config, db: Database, env: Mapping[str, str]) -> list[Tool]:
    """The mail tools over the configured accounts; none without a `[[mail]]` account."""
    if not config.mail:
        return []
    boxes = {a.name: Mailbox(a, env) for a in config.mail}
    deps = MailDeps(config=config, db=db, boxes=boxes)
    # Only the owner, in their private chat, reaches a mailbox; a MailError reaches the model
    # as a plain tool error (its message carries no secrets).
    mail = Toolset(
        timeout=120.0, guard=OwnerOnly.of(config.access, NOT_THE_OWNERS), errors=(MailError,)
    )
    _reading_tools(mail, deps)
    _writing_tools(mail, deps)
    return mail.tools()
