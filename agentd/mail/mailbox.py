"""One account's mailbox for the daemon: every IMAP call runs in a thread, off the event loop."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Mapping
from datetime import date
from email.message import EmailMessage
from pathlib import Path
from typing import Any, TypeVar

from agentd.config import MailAccountConfig, read_secret
from agentd.mail import imap
from agentd.mail.errors import LOGIN_STAGE, MailError, MailTooLarge
from agentd.mail.imap import Summary
from agentd.mail.message import Readable, write_attachment
from agentd.parsing.bounded import run_bounded
from agentd.parsing.budget import Budget, ParseFailed

T = TypeVar("T")
MAX_LIST = 50
# A mail is fetched whole into the daemon before the child takes it apart: past this it is
# refused (mail servers take 25 to 50 MB; an attachment grows by a third in base64).
MAX_MAIL_BYTES = 64 * 1024 * 1024
READ_BUDGET = Budget(seconds=30.0, cpu_seconds=20, memory_bytes=1024 * 1024 * 1024)
# An attachment comes back whole (base64 in JSON): room for one as large as mail servers take.
ATTACHMENT_BUDGET = Budget(
    seconds=60.0, cpu_seconds=30, memory_bytes=1024 * 1024 * 1024, answer_bytes=200 * 1024 * 1024
)


class Mailbox:
    """IMAP operations on one account; the password is read once and kept out of errors."""

    def __init__(self, account: MailAccountConfig, env: Mapping[str, str]) -> None:
        self.account = account
        self.password = read_secret(account.password_env, env)

    def require_password(self) -> None:
        if not self.password:
            raise MailError(
                self.account.name,
                LOGIN_STAGE,
                f"no password: set the environment "
                f"variable or systemd credential {self.account.password_env}",
            )

    async def run(self, fn: Callable[[Any], T]) -> T:
        """fn(client) in a thread inside one logged-in session."""
        self.require_password()

        def work() -> T:
            with imap.session(self.account, self.password) as client:
                return fn(client)

        return await asyncio.to_thread(work)

    async def search(
        self, folder: str, keys: list[Any], limit: int = 20
    ) -> tuple[int, list[Summary]]:
        """(how many match, the newest `limit` of them)."""

        def work(client: Any) -> tuple[int, list[Summary]]:
            imap.select(client, self.account, folder, readonly=True)
            uids = imap.search(client, keys)
            return len(uids), imap.summaries(client, folder, uids[-min(limit, MAX_LIST) :])

        return await self.run(work)

    async def raw(self, folder: str, uid: int) -> bytes:
        def work(client: Any) -> bytes | None:
            imap.select(client, self.account, folder, readonly=True)
            return imap.fetch_raw(client, uid, MAX_MAIL_BYTES)

        try:
            data = await self.run(work)
        except imap.TooLarge as exc:
            raise MailTooLarge(
                self.account.name,
                "read",
                f"message {uid} in {folder} is {exc.size / 2**20:.1f} MB; agentd reads a mail "
                f"of up to {MAX_MAIL_BYTES / 2**20:.1f} MB: open this one in your mail program",
            ) from None
        if data is None:
            raise MailError(self.account.name, "read", f"no message {uid} in {folder}")
        return data

    async def headers(self, folder: str, uid: int) -> EmailMessage:
        """Only the header of a message (its body never fetched): enough to reply to it."""

        def work(client: Any) -> bytes | None:
            imap.select(client, self.account, folder, readonly=True)
            return imap.fetch_header(client, uid)

        data = await self.run(work)
        if data is None:
            raise MailError(self.account.name, "read", f"no message {uid} in {folder}")
        return await asyncio.to_thread(imap.headers_of, data)

    async def read(self, folder: str, uid: int, mark_read: bool = False) -> Readable:
        data = await self.raw(folder, uid)
        # A stranger's MIME (thousands of parts, deep nesting, megabytes of HTML) is taken
        # apart in the bounded child: it costs a child its budget, never the daemon.
        try:
            shown = await run_bounded("agentd.mail.message:readable_job", data, READ_BUDGET)
        except ParseFailed as exc:
            raise MailError(
                self.account.name, "read", f"message {uid} in {folder} is unreadable: {exc}"
            ) from None
        if mark_read:
            await self.set_flag(folder, [uid], "seen", True)
        return Readable.model_validate(shown)

    async def save_attachment(
        self, folder: str, uid: int, index: int, target: Path, within: Path | None = None
    ) -> Path:
        """Taken out of the mail in the bounded child, as a read is; written here."""
        data = await self.raw(folder, uid)
        try:
            found = await run_bounded(
                "agentd.mail.message:attachment_job", data, ATTACHMENT_BUDGET, index=index
            )
        except ParseFailed as exc:
            if exc.error_type == "ValueError":  # no such attachment: the child says which
                raise ValueError(str(exc)) from None
            raise MailError(
                self.account.name, "save", f"message {uid} in {folder} is unreadable: {exc}"
            ) from None
        content = base64.b64decode(found["data"])
        return await asyncio.to_thread(write_attachment, found["name"], content, target, within)

    async def set_flag(self, folder: str, uids: list[int], flag: str, on: bool) -> None:
        name = {"seen": b"\\Seen", "flagged": b"\\Flagged", "answered": b"\\Answered"}[flag]

        def work(client: Any) -> None:
            imap.select(client, self.account, folder, readonly=False)
            (client.add_flags if on else client.remove_flags)(uids, [name])

        await self.run(work)

    async def move(self, folder: str, uids: list[int], target: str) -> None:
        def work(client: Any) -> None:
            names = {f[2] for f in client.list_folders()}
            if target not in names:
                raise MailError(
                    self.account.name,
                    "folder",
                    f"no folder {target!r}; the folders are: {', '.join(sorted(names))}",
                )
            imap.select(client, self.account, folder, readonly=False)
            if client.has_capability("MOVE"):
                client.move(uids, target)
            else:  # RFC 6851 missing: copy, mark deleted, expunge just these
                client.copy(uids, target)
                client.delete_messages(uids)
                client.uid_expunge(uids) if client.has_capability("UIDPLUS") else client.expunge()

        await self.run(work)

    async def append(self, folder: str, raw: bytes, flags: list[bytes]) -> None:
        await self.run(lambda client: imap.append(client, folder, raw, flags))

    async def has_message_id(self, folder: str, message_id: str) -> bool:
        def work(client: Any) -> bool:
            imap.select(client, self.account, folder, readonly=True)
            return bool(imap.find_message_id(client, message_id))

        return await self.run(work)

    async def folders(self) -> list[str]:
        return await self.run(lambda client: sorted(f[2] for f in client.list_folders()))


def parse_day(value: str, what: str) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        raise ValueError(f"{what} must be a date like 2026-11-24, not {value!r}") from None
