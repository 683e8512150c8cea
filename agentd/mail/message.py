"""MIME through the standard library (`email`, policy=default): reading a message as text,
listing and saving its attachments, and composing new mail and threaded replies."""

from __future__ import annotations

import base64
import contextlib
import os
import re
from datetime import UTC, datetime
from email import policy as email_policy
from email.message import EmailMessage
from email.policy import EmailPolicy
from email.utils import format_datetime, formataddr, getaddresses, parseaddr
from pathlib import Path

from pydantic import BaseModel

from agentd.parsing.html_text import html_to_text

MAX_BODY_CHARS = 20_000
# The standard library parses an address list in time that grows with the square of its
# length: a stranger's To of 100,000 addresses (2 MB) held a read or a watcher for minutes.
# No header a person reads needs more than this.
MAX_HEADER_CHARS = 8_000
_UNSAFE_NAME = re.compile(r"[^\w.\- ]+")


class _CappedPolicy(EmailPolicy):
    """policy.default, with each header cut to MAX_HEADER_CHARS before it is parsed."""

    def header_fetch_parse(self, name: str, value: str) -> object:
        if not hasattr(value, "name") and len(value) > MAX_HEADER_CHARS:
            value = value[:MAX_HEADER_CHARS]
        return super().header_fetch_parse(name, value)


# How mail from outside is parsed: bounded headers, otherwise policy.default.
READ_POLICY = _CappedPolicy()


class Attachment(BaseModel):
    index: int
    filename: str
    content_type: str
    size: int


class Readable(BaseModel):
    """A message as the model reads it."""

    sender: str
    to: str
    cc: str
    subject: str
    date: str
    message_id: str
    body: str
    body_from: str  # text/plain, text/html (turned into text), or none
    attachments: list[Attachment]


def _attachments(msg: EmailMessage) -> list[EmailMessage]:
    return list(msg.iter_attachments())  # type: ignore[arg-type]


def readable(msg: EmailMessage) -> Readable:
    """Headers decoded, the text part (else the HTML part as text), attachments listed.

    A stranger's MIME can cost minutes and gigabytes: the daemon calls it through
    readable_job, in the bounded child."""
    part = msg.get_body(preferencelist=("plain", "html"))
    body, body_from = "", "none"
    if part is not None:
        try:
            content = part.get_content()
        except (LookupError, UnicodeError, ValueError):
            # An unknown or lying charset: the bytes as UTF-8, damaged ones replaced.
            content = (part.get_payload(decode=True) or b"").decode("utf-8", "replace")
        if part.get_content_subtype() == "html":
            body, body_from = html_to_text(content).text, "text/html"
        else:
            body, body_from = content, "text/plain"
    if len(body) > MAX_BODY_CHARS:
        body = body[:MAX_BODY_CHARS] + f"\n… ({len(body) - MAX_BODY_CHARS} more characters)"
    items = [
        Attachment(
            index=i,
            filename=a.get_filename() or f"attachment-{i}",
            content_type=a.get_content_type(),
            size=len(a.get_payload(decode=True) or b""),
        )
        for i, a in enumerate(_attachments(msg), start=1)
    ]
    return Readable(
        sender=str(msg.get("From", "")),
        to=str(msg.get("To", "")),
        cc=str(msg.get("Cc", "")),
        subject=str(msg.get("Subject", "")),
        date=str(msg.get("Date", "")),
        message_id=str(msg.get("Message-ID", "")).strip(),
        body=body.strip(),
        body_from=body_from,
        attachments=items,
    )


def readable_job(data: bytes) -> dict[str, object]:
    """The bounded child's side of reading a mail: its raw bytes in, a Readable (JSON) out."""
    from email.parser import BytesParser

    msg = BytesParser(policy=READ_POLICY).parsebytes(data)
    return readable(msg).model_dump()  # type: ignore[arg-type]


def save_attachment(
    msg: EmailMessage, index: int, folder: Path, within: Path | None = None
) -> Path:
    """Write attachment `index` (1-based) under `folder` (`write_attachment`)."""
    name, data = _attachment(msg, index)
    return write_attachment(name, data, folder, within)


def _attachment(msg: EmailMessage, index: int) -> tuple[str, bytes]:
    """Attachment `index` (1-based): a safe file name and its decoded bytes."""
    parts = _attachments(msg)
    if not 1 <= index <= len(parts):
        raise ValueError(f"the message has {len(parts)} attachment(s); there is no #{index}")
    part = parts[index - 1]
    name = _UNSAFE_NAME.sub("_", Path(part.get_filename() or f"attachment-{index}").name)
    return name.strip(" .") or f"attachment-{index}", part.get_payload(decode=True) or b""


def attachment_job(data: bytes, *, index: int) -> dict[str, str]:
    """The bounded child's side of saving an attachment: the raw mail in, the attachment's
    name and bytes (base64) out; the daemon writes the file."""
    from email.parser import BytesParser

    name, content = _attachment(BytesParser(policy=READ_POLICY).parsebytes(data), index)
    return {"name": name, "data": base64.b64encode(content).decode()}


def write_attachment(name: str, data: bytes, folder: Path, within: Path | None = None) -> Path:
    """Write an attachment's bytes under `folder` as `name`, or a free variant of it.

    The folder is the owner's choice (made if missing); the file is created inside it through
    its descriptor, never following a link and never replacing anything (O_EXCL): a link
    planted under that name, dangling or not, takes the next free name instead.
    """
    dir_fd = _open_folder(folder, within)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for n in range(1, 1000):
            target = name if n == 1 else f"{Path(name).stem}-{n}{Path(name).suffix}"
            try:
                fd = os.open(target, flags, 0o600, dir_fd=dir_fd)
            except FileExistsError:  # a file, folder or link of that name: try the next
                continue
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            return folder / target
    finally:
        os.close(dir_fd)
    raise ValueError(f"{folder} already holds 999 files named like {name!r}; clean it up")


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _open_folder(folder: Path, within: Path | None) -> int:
    """The folder's descriptor. Below `within` (the workspace, where sandboxed commands may
    leave links) each part is opened with O_NOFOLLOW and made when missing; elsewhere the
    path is the owner's choice."""
    folder = folder.absolute()
    if within is None or not folder.is_relative_to(within.absolute()):
        folder.mkdir(parents=True, exist_ok=True)
        return os.open(folder, _DIR)
    within.mkdir(parents=True, exist_ok=True)
    fd = os.open(within, _DIR)
    try:
        for part in folder.relative_to(within.absolute()).parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            try:
                nxt = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise ValueError(
                    f"{part!r} in the attachments folder is a link or not a folder; agentd "
                    "does not follow links in the workspace. Remove it, or set "
                    "attachments_dir elsewhere"
                ) from exc
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


class Outgoing(BaseModel):
    """A mail to compose: what the owner approves is exactly what is sent."""

    from_addr: str
    to: list[str]
    cc: list[str] = []
    subject: str
    body: str
    message_id: str
    in_reply_to: str = ""
    references: str = ""


def compose(out: Outgoing, when: float) -> EmailMessage:
    msg = EmailMessage(policy=email_policy.SMTP)
    msg["From"] = out.from_addr
    msg["To"] = ", ".join(out.to)
    if out.cc:
        msg["Cc"] = ", ".join(out.cc)
    msg["Subject"] = out.subject
    msg["Date"] = format_datetime(datetime.fromtimestamp(when, UTC))
    msg["Message-ID"] = out.message_id
    if out.in_reply_to:
        msg["In-Reply-To"] = out.in_reply_to
        msg["References"] = out.references or out.in_reply_to
    msg.set_content(out.body)
    return msg


def reply_headers(original: EmailMessage) -> tuple[str, str, str]:
    """(In-Reply-To, References, subject) that thread a reply under `original` (RFC 5322 §3.6.4)."""
    parent = str(original.get("Message-ID", "")).strip()
    refs = " ".join(str(original.get("References", "")).split())
    references = f"{refs} {parent}".strip() if parent else refs
    # One line: an encoded word can carry line breaks, which no header may hold.
    subject = " ".join(str(original.get("Subject", "")).split())
    if not subject.lower().startswith("re:"):
        subject = f"Re: {subject}"
    return parent, references, subject


def reply_recipients(
    original: EmailMessage, own: str, reply_all: bool
) -> tuple[list[str], list[str]]:
    """Reply-To (else From) as To; with reply_all the other To/Cc, never our own address."""
    first = str(original.get("Reply-To") or original.get("From") or "")
    to = [formataddr(a) for a in getaddresses([first]) if a[1]]
    cc: list[str] = []
    if reply_all:
        seen = {parseaddr(t)[1].lower() for t in to} | {own.lower()}
        for name, addr in getaddresses([str(original.get("To", "")), str(original.get("Cc", ""))]):
            if addr and addr.lower() not in seen:
                seen.add(addr.lower())
                cc.append(formataddr((name, addr)))
    return to, cc


def quoted(original: Readable, text: str) -> str:
    """`text`, then the original's text quoted with '> ' under an attribution line."""
    lines = "\n".join(f"> {line}" if line else ">" for line in original.body.splitlines())
    who = original.sender or "someone"
    return f"{text.rstrip()}\n\nOn {original.date}, {who} wrote:\n{lines}\n"
