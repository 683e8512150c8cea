"""IMAP through imapclient, synchronous: callers run these in a thread (asyncio.to_thread).

One short session per call: log in, do one thing, log out. A personal mailbox sees a handful
of calls per turn, and a fresh session never serves a stale folder state or a dead socket.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator
from datetime import date
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

from pydantic import BaseModel

from agentd.config import MailAccountConfig
from agentd.mail.errors import LOGIN_STAGE, MailError, classify_mail_error
from agentd.mail.message import READ_POLICY

HEADER_FIELDS = "FROM TO CC SUBJECT DATE MESSAGE-ID"
_PARSER = BytesParser(policy=READ_POLICY)


class Summary(BaseModel):
    """One message in a list: enough to pick it, not its body."""

    folder: str
    uid: int
    sender: str
    to: str
    subject: str
    date: str
    message_id: str
    unread: bool
    flagged: bool
    size: int


def tls_context(account: MailAccountConfig) -> ssl.SSLContext:
    """Certificate and host name checked, always; `ca_file` adds one CA to trust."""
    context = ssl.create_default_context()
    if account.ca_file:
        try:
            context.load_verify_locations(cafile=account.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise MailError(
                account.name, "TLS", f"cannot load ca_file {account.ca_file!r} ({exc})"
            ) from None
    return context


@contextlib.contextmanager
def session(account: MailAccountConfig, password: str) -> Iterator[Any]:
    """A logged-in IMAPClient; failures come out as MailError naming DNS/TLS/login."""
    from imapclient import IMAPClient
    from imapclient.exceptions import LoginError

    host, port = account.imap_host, account.imap_port
    try:
        client = IMAPClient(
            host,
            port=port,
            ssl=account.imap_security == "tls",
            ssl_context=tls_context(account),
            timeout=account.timeout,
        )
        if account.imap_security == "starttls":
            client.starttls(tls_context(account))
    except Exception as exc:
        raise classify_mail_error(account.name, host, port, exc) from None
    try:
        try:
            client.login(account.login, password)
        except LoginError:
            raise MailError(
                account.name,
                LOGIN_STAGE,
                f"{host} rejected the user "
                f"{account.login!r} or its password ({account.password_env})",
            ) from None
        except Exception as exc:
            raise classify_mail_error(account.name, host, port, exc) from None
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.logout()


def select(client: Any, account: MailAccountConfig, folder: str, *, readonly: bool) -> None:
    try:
        client.select_folder(folder, readonly=readonly)
    except Exception as exc:
        names = ", ".join(sorted(f[2] for f in client.list_folders()))
        raise MailError(
            account.name, "folder", f"no folder {folder!r} ({exc}); the folders are: {names}"
        ) from None


def criteria(
    *,
    sender: str = "",
    subject: str = "",
    text: str = "",
    since: date | None = None,
    before: date | None = None,
    unread: bool | None = None,
    flagged: bool | None = None,
) -> list[Any]:
    """IMAP SEARCH keys (RFC 3501 §6.4.4); strings go as literals in UTF-8, never spliced."""
    keys: list[Any] = []
    for key, value in (("FROM", sender), ("SUBJECT", subject), ("TEXT", text)):
        if value:
            keys += [key, value]
    if since:
        keys += ["SINCE", since]
    if before:
        keys += ["BEFORE", before]
    if unread is not None:
        keys.append("UNSEEN" if unread else "SEEN")
    if flagged is not None:
        keys.append("FLAGGED" if flagged else "UNFLAGGED")
    return keys or ["ALL"]


def _charset(keys: list[Any]) -> str | None:
    return "UTF-8" if any(isinstance(k, str) and not k.isascii() for k in keys) else None


def search(client: Any, keys: list[Any]) -> list[int]:
    return sorted(client.search(keys, charset=_charset(keys)))


def headers_of(raw: bytes) -> EmailMessage:
    return _PARSER.parsebytes(raw, headersonly=True)  # type: ignore[return-value]


def summaries(client: Any, folder: str, uids: list[int]) -> list[Summary]:
    """Headers, flags and size of these messages, newest (highest UID) first."""
    if not uids:
        return []
    fields = f"BODY.PEEK[HEADER.FIELDS ({HEADER_FIELDS})]"
    fetched = client.fetch(uids, [fields, "FLAGS", "RFC822.SIZE"])
    out = []
    for uid in sorted(fetched, reverse=True):
        data = fetched[uid]
        head = headers_of(data[f"BODY[HEADER.FIELDS ({HEADER_FIELDS})]".encode()])
        flags = set(data.get(b"FLAGS", ()))
        out.append(
            Summary(
                folder=folder,
                uid=uid,
                sender=str(head.get("From", "")),
                to=str(head.get("To", "")),
                subject=str(head.get("Subject", "")),
                date=str(head.get("Date", "")),
                message_id=str(head.get("Message-ID", "")).strip(),
                unread=b"\\Seen" not in flags,
                flagged=b"\\Flagged" in flags,
                size=int(data.get(b"RFC822.SIZE", 0)),
            )
        )
    return out


class TooLarge(Exception):
    """A message past the size agentd reads; `size` is its size in bytes."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def fetch_raw(client: Any, uid: int, max_bytes: int) -> bytes | None:
    """The whole message as sent, if it is at most `max_bytes` (the server says its size
    first); PEEK so reading does not mark it read by itself."""
    sized = client.fetch([uid], ["RFC822.SIZE"])
    if uid not in sized:
        return None
    size = int(sized[uid].get(b"RFC822.SIZE", 0))
    if size > max_bytes:
        raise TooLarge(size)
    fetched = client.fetch([uid], ["BODY.PEEK[]"])
    return bytes(fetched[uid][b"BODY[]"]) if uid in fetched else None


def fetch_header(client: Any, uid: int) -> bytes | None:
    """Only the message's header, whatever the size of its body."""
    fetched = client.fetch([uid], ["BODY.PEEK[HEADER]"])
    return bytes(fetched[uid][b"BODY[HEADER]"]) if uid in fetched else None


def find_message_id(client: Any, message_id: str) -> list[int]:
    """UIDs in the selected folder whose Message-ID header is this one."""
    return sorted(client.search(["HEADER", "Message-ID", message_id]))


def append(client: Any, folder: str, raw: bytes, flags: list[bytes]) -> None:
    client.append(folder, raw, flags=flags)
