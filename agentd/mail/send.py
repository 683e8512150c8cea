"""Sending a mail at most once.

The Message-ID is derived from the tool call (instance and tool_use id, both journaled before
the call runs) and written to `mail_sends` with status 'sending' before SMTP begins. The send
runs as an at-most-once step: after a crash during it the step is never run again; `settle`
looks at that row and the Sent folder and says whether the mail went.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

from agentd.db import Database
from agentd.mail.errors import MailError, classify_mail_error
from agentd.mail.imap import tls_context
from agentd.mail.mailbox import Mailbox
from agentd.mail.message import Outgoing, compose

log = logging.getLogger("agentd.mail")


class SendUnknown(MailError):
    """The connection broke or timed out once the server was talking: it may have the mail."""


def message_id_for(instance_id: str, tool_use_id: str, from_addr: str) -> str:
    """Stable for one tool call: a re-run of the same call finds the same Message-ID."""
    digest = hashlib.sha256(f"{instance_id}/{tool_use_id}".encode()).hexdigest()[:32]
    domain = from_addr.rpartition("@")[2].strip(" >") or "agentd.invalid"
    return f"<{digest}.agentd@{domain}>"


def _journal(conn: Any, out: Outgoing, account: str, iid: str, tuid: str, now: float) -> str:
    row = conn.execute(
        "SELECT status FROM mail_sends WHERE message_id = ?", (out.message_id,)
    ).fetchone()
    if row is not None:
        return str(row[0])
    conn.execute(
        "INSERT INTO mail_sends (message_id, account, instance_id, tool_use_id, recipients, "
        "subject, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'sending', ?, ?)",
        (out.message_id, account, iid, tuid, json.dumps(out.to + out.cc), out.subject, now, now),
    )
    return "new"


def _mark(conn: Any, message_id: str, status: str, detail: str, now: float) -> None:
    conn.execute(
        "UPDATE mail_sends SET status = ?, detail = ?, updated_at = ? WHERE message_id = ?",
        (status, detail, now, message_id),
    )


def status_of(conn: Any, message_id: str) -> str | None:
    row = conn.execute(
        "SELECT status FROM mail_sends WHERE message_id = ?", (message_id,)
    ).fetchone()
    return None if row is None else str(row[0])


async def _smtp(mailbox: Mailbox, raw: Any, recipients: list[str]) -> None:
    import aiosmtplib

    acc = mailbox.account
    host, port = acc.smtp_server, acc.smtp_port
    try:
        await aiosmtplib.send(
            raw,
            recipients=recipients,
            sender=acc.address,
            hostname=host,
            port=port,
            username=acc.login,
            password=mailbox.password,
            use_tls=acc.smtp_security == "tls",
            start_tls=acc.smtp_security == "starttls",
            tls_context=tls_context(acc),
            timeout=acc.timeout,
        )
    except aiosmtplib.SMTPAuthenticationError:
        raise MailError(
            acc.name,
            "SMTP login",
            f"{host} rejected the user {acc.login!r} or its password ({acc.password_env})",
        ) from None
    except aiosmtplib.SMTPRecipientsRefused as exc:
        refused = ", ".join(r.recipient for r in exc.recipients)
        raise MailError(acc.name, "SMTP", f"{host} refused the recipients {refused}") from None
    except aiosmtplib.SMTPResponseException as exc:
        raise MailError(acc.name, "SMTP", f"{host} answered {exc.code} {exc.message}") from None
    except aiosmtplib.SMTPConnectError as exc:  # nothing was sent yet
        raise classify_mail_error(acc.name, host, port, exc.__cause__ or exc) from None
    except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPTimeoutError) as exc:
        raise SendUnknown(
            acc.name, "SMTP", f"{host} went away mid-send ({type(exc).__name__})"
        ) from None
    except OSError as exc:
        raise classify_mail_error(acc.name, host, port, exc) from None


async def send(
    mailbox: Mailbox,
    db: Database,
    out: Outgoing,
    *,
    instance_id: str,
    tool_use_id: str,
    now: float,
) -> str:
    """Journal, send over SMTP, file in Sent; what happened, for the model."""
    acc = mailbox.account
    state = await db.write(_journal, out, acc.name, instance_id, tool_use_id, now)
    if state == "sent":
        return f"This mail ({out.message_id}) was already sent; it was not sent again."
    if state != "new":
        # An earlier attempt of this very call began and never finished (the step was run
        # again: a risk override made it an ordinary step): never a second SMTP session.
        went, text = await settle(mailbox, db, out.message_id)
        if not went:
            raise MailError(acc.name, "send", text)
        return text
    msg = compose(out, now)
    try:
        await _smtp(mailbox, msg, out.to + out.cc)
    except SendUnknown as exc:
        # Whether the server kept it is unknown: never send again; say what Sent shows.
        log.warning("mail send interrupted", extra={"account": acc.name, "error": str(exc)})
        went, text = await settle(mailbox, db, out.message_id)
        if not went:
            raise MailError(acc.name, "send", text) from None
        return text
    except MailError as exc:
        # The server said no (or never answered before DATA): nothing went out.
        await db.write(_mark, out.message_id, "failed", str(exc), now)
        raise
    await db.write(_mark, out.message_id, "sent", "", now)
    log.info("mail sent", extra={"account": acc.name, "message_id": out.message_id})
    filed = ""
    if acc.save_sent:
        try:
            await mailbox.append(acc.sent_folder, msg.as_bytes(), [b"\\Seen"])
        except MailError as exc:
            filed = f" (but it could not be filed in {acc.sent_folder}: {exc})"
    return f"Sent to {', '.join(out.to + out.cc)} as {out.message_id}{filed}."


async def settle(mailbox: Mailbox, db: Database, message_id: str) -> tuple[bool, str]:
    """After a crash during `send`: (went, what to tell the owner). Never sends."""
    acc = mailbox.account
    status = await db.read(status_of, message_id)
    if status is None:
        return False, "The send was interrupted before it started: the mail was NOT sent."
    if status == "sent":
        return True, f"The mail {message_id} was sent before the interruption; not sent again."
    if status == "failed":
        return False, f"The mail {message_id} was not sent (the server refused it)."
    try:
        found = await mailbox.has_message_id(acc.sent_folder, message_id)
    except MailError as exc:
        return False, (
            f"The send of {message_id} was interrupted and the {acc.sent_folder} "
            f"folder cannot be checked ({exc}); it was NOT sent again. Ask the owner "
            "to check before sending it again."
        )
    if found:
        await db.write(
            _mark, message_id, "sent", "found in the Sent folder after a crash", time.time()
        )
        return True, (
            f"The send was interrupted, but the mail {message_id} is in "
            f"{acc.sent_folder}: it went. It was not sent again."
        )
    return False, (
        f"The send of {message_id} was interrupted and the mail is not in "
        f"{acc.sent_folder}: it may not have gone. It was NOT sent again; ask the "
        "owner whether to send it again."
    )
