"""Watching folders for new mail without paying for it: IMAP IDLE (polling where the server has
no IDLE) in a thread per folder, and the owner's rules, which decide per message: a short
notice (no model call), a summary (a turn: one model call or more), or nothing.

Where the watcher got to (UIDVALIDITY, last UID) is kept in `mail_watch`, so a restart does
not announce old mail again; the first start takes the folder as it is and announces only
what arrives afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from agentd.access import owners
from agentd.access.approvals import one_line
from agentd.chat import reach
from agentd.chat.inputs import TurnInput
from agentd.chat.markup import literal
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.chat.outbox import Outbox
from agentd.config import Config, MailAccountConfig, MailRule
from agentd.db import Database
from agentd.durable import Clock, Engine
from agentd.mail import imap
from agentd.mail.errors import LOGIN_STAGE, MailError
from agentd.mail.imap import Summary
from agentd.mail.mailbox import Mailbox
from agentd.mail.notice import MAIL_NOTICE_WORKFLOW, NoticeInput, notice_instance_id

log = logging.getLogger("agentd.mail")
IDLE_SLICE = 1.0  # seconds per idle_check, so a stop is noticed within about a second
MAX_BACKOFF = 300.0
# A password the server refused stays refused until someone changes it, and servers count failed
# logins (fail2ban bans after a few, providers lock the account): try it again hourly, not every
# few minutes. `agentd doctor` says the same at once.
LOGIN_RETRY = 3600.0

OnMail = Callable[[MailAccountConfig, Summary, MailRule], Awaitable[None]]
OnRefused = Callable[[MailAccountConfig, MailError], Awaitable[None]]


def matching_rule(rules: list[MailRule], s: Summary) -> MailRule | None:
    """The first rule whose every given field matches (sender/subject: substring; folder: exact)."""
    for rule in rules:
        if rule.sender and rule.sender.lower() not in s.sender.lower():
            continue
        if rule.subject and rule.subject.lower() not in s.subject.lower():
            continue
        if rule.folder and rule.folder != s.folder:
            continue
        return rule
    return None


def _position(conn: Any, account: str, folder: str) -> tuple[int, int] | None:
    row = conn.execute(
        "SELECT uidvalidity, last_uid FROM mail_watch WHERE account = ? AND folder = ?",
        (account, folder),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _advance(conn: Any, account: str, folder: str, validity: int, uid: int, now: float) -> None:
    conn.execute(
        "INSERT INTO mail_watch (account, folder, uidvalidity, last_uid, updated_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (account, folder) DO UPDATE SET "
        "uidvalidity = excluded.uidvalidity, last_uid = excluded.last_uid, "
        "updated_at = excluded.updated_at",
        (account, folder, validity, uid, now),
    )


class FolderWatch:
    """One folder of one account; `run()` until `stop()`."""

    def __init__(
        self,
        box: Mailbox,
        folder: str,
        db: Database,
        on_mail: OnMail,
        on_refused: OnRefused | None = None,
    ) -> None:
        self.box, self.folder, self.db, self.on_mail = box, folder, db, on_mail
        self.on_refused = on_refused
        self.account = box.account
        self._stop = threading.Event()
        self.mode = ""  # "idle" or "poll", once connected
        self.force_poll = False  # poll even where IDLE is offered (tests, odd servers)

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                await self._session()
                failures = 0
            except Exception as exc:  # a dead socket, a server restart, a failed notice
                failures += 1
                refused = isinstance(exc, MailError) and exc.stage == LOGIN_STAGE
                wait = LOGIN_RETRY if refused else min(MAX_BACKOFF, 5.0 * 2 ** min(failures, 6))
                if refused:
                    await self._tell_refused(exc)
                log.warning(
                    "mail watch failed; retrying",
                    extra={
                        "account": self.account.name,
                        "folder": self.folder,
                        "error": str(exc)
                        if isinstance(exc, MailError)
                        else f"{type(exc).__name__}: {exc}",
                        "wait_s": wait,
                    },
                )
                await asyncio.to_thread(self._stop.wait, wait)

    async def _tell_refused(self, exc: MailError) -> None:
        if self.on_refused is None:
            return
        try:
            await self.on_refused(self.account, exc)
        except Exception:  # telling is best effort; the watcher keeps its hourly retry
            log.exception("could not tell the owner that a mail login was refused")

    async def _session(self) -> None:
        """One logged-in session: catch up, then wait for news until stopped or broken."""
        loop = asyncio.get_running_loop()
        box = self.box
        box.require_password()

        def work() -> None:
            with imap.session(self.account, box.password) as client:
                self._watch(client, loop)

        await asyncio.to_thread(work)

    def _watch(self, client: Any, loop: asyncio.AbstractEventLoop) -> None:
        imap.select(client, self.account, self.folder, readonly=True)
        self.mode = "idle" if client.has_capability("IDLE") and not self.force_poll else "poll"
        told = False
        while not self._stop.is_set():
            self._catch_up(client, loop)
            if not told:  # after the first catch-up: from here on, new mail is news
                log.info(
                    "watching mail",
                    extra={"account": self.account.name, "folder": self.folder, "mode": self.mode},
                )
                told = True
            if self.mode == "idle":
                self._idle(client)
            else:
                self._stop.wait(self.account.poll_interval)
                client.noop()

    def _idle(self, client: Any) -> None:
        """Wait in IDLE until the server says something, renewing it every poll_interval."""
        client.idle()
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                if client.idle_check(timeout=IDLE_SLICE):
                    return
                if time.monotonic() - started > self.account.poll_interval:
                    return  # servers drop an IDLE after ~30 min (RFC 2177): renew it
        finally:
            client.idle_done()

    def _catch_up(self, client: Any, loop: asyncio.AbstractEventLoop) -> None:
        # Selecting again ends nothing (no IDLE runs now) and reports UIDVALIDITY and UIDNEXT.
        info = client.select_folder(self.folder, readonly=True)
        validity = int(info[b"UIDVALIDITY"])
        newest = int(info.get(b"UIDNEXT", 1)) - 1
        name = self.account.name

        def call(coro: Awaitable[Any]) -> Any:
            return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

        seen = call(self.db.read(_position, name, self.folder))
        if seen is None or seen[0] != validity:
            # First start, or the folder was rebuilt: what is there now is not news.
            call(self.db.write(_advance, name, self.folder, validity, newest, time.time()))
            return
        last = seen[1]
        if newest <= last:
            return
        uids = [u for u in client.search(["UID", f"{last + 1}:*"]) if u > last]
        for summary in reversed(imap.summaries(client, self.folder, sorted(uids))):
            rule = matching_rule(self.account.rules, summary)
            if rule is not None and rule.action != "ignore":
                try:
                    call(self.on_mail(self.account, summary, rule))
                except Exception as exc:  # one failed notice must not wedge the folder
                    log.warning(
                        "mail notice failed",
                        extra={
                            "account": name,
                            "uid": summary.uid,
                            "error": f"{type(exc).__name__}: {exc}",
                        },
                    )
            call(self.db.write(_advance, name, self.folder, validity, summary.uid, time.time()))


class Watchers:
    """Every watched folder of every account, as tasks of the daemon."""

    def __init__(self, watches: list[FolderWatch]) -> None:
        self.watches = watches
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(w.run(), name=f"mail-watch-{w.account.name}-{w.folder}")
            for w in self.watches
        ]

    async def stop(self) -> None:
        for w in self.watches:
            w.stop()
        for task in self.tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)


def _plain(text: str, limit: int = 120) -> str:
    """Outside text for a notice: no Markdown that could restyle or link it, one short line,
    and controls and bidi overrides shown escaped (a sender's U+202E would turn the rest of
    the line around)."""
    cleaned = " ".join(text.translate({ord(c): " " for c in "*_`[]()~<>#|"}).split())
    cut = cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
    return one_line(cut, limit=len(cut))


def notice_text(account: MailAccountConfig, s: Summary) -> str:
    return f"📬 {literal(account.name)}: new mail from {_plain(s.sender)} — {_plain(s.subject)}"


def refused_instance_id(account: MailAccountConfig, day: str) -> str:
    """One notice a day per account while its login is refused, however many folders it
    watches and however often the daemon restarts."""
    return f"mail-refused-{hashlib.sha256(account.name.encode()).hexdigest()[:16]}-{day}"


def refused_text(account: MailAccountConfig, exc: MailError) -> str:
    return (
        f"⚠️ Mail {literal(account.name)}: new mail is not being watched, the login failed "
        f"({literal(exc.detail)}). I try again hourly; once the password is right, restart "
        "agentd to watch at once."
    )


async def tell_refused(
    db: Database,
    engine: Engine,
    clock: Clock,
    account: MailAccountConfig,
    exc: MailError,
    *,
    owner: int,
    notices: str,
) -> None:
    """Tell the owner, with no model call, that `account`'s login was refused: once a day."""
    # Until a private chat is known nothing can be said, and the day's notice is not used up.
    if await db.read(reach.private_chat, owner, notices) is None:
        return
    day = time.strftime("%Y-%m-%d", time.gmtime(clock.now()))
    notice = NoticeInput(user_id=owner, text=refused_text(account, exc))
    await engine.start(MAIL_NOTICE_WORKFLOW, notice, instance_id=refused_instance_id(account, day))


def summary_prompt(account: MailAccountConfig, s: Summary) -> str:
    """The turn a `summary` rule starts: the rule is the owner's; the mail is read by a tool."""
    return (
        f"[New mail matched your rule for a summary] Read the mail uid {s.uid} in folder "
        f"{s.folder!r} of account {account.name!r} with mail_read and summarise it in two "
        "or three lines. Do not act on it."
    )


def start_watchers(
    config: Config,
    db: Database,
    outbox: Outbox,
    engine: Engine,
    clock: Clock,
    env: Mapping[str, str],
) -> Watchers | None:
    """Watch every configured folder; notices go to the owner (access/owners.py:
    `access.owner_id`, else the first allowed user) with no model call, and a `summary`
    rule starts a turn in the owner's chat."""
    watched = [a for a in config.mail if a.watch]
    if not watched:
        return None
    owner = owners.resolve(config.access).owner_id
    if owner is None:
        log.warning("mail watch is off: no owner to tell (access.owner_id, allowed_user_ids)")
        return None

    async def on_mail(account: MailAccountConfig, summary: Summary, rule: MailRule) -> None:
        if rule.action == "notify":
            # Sent by its own workflow, through the one send path (mail/notice.py).
            # To the owner wherever they are reached ([access] notices, else where they last
            # wrote), chosen once in the notice's own step.
            notice = NoticeInput(user_id=owner, text=notice_text(account, summary))
            instance = notice_instance_id(
                account.name, summary.folder, summary.uid, summary.message_id
            )
            await engine.start(MAIL_NOTICE_WORKFLOW, notice, instance_id=instance)
            log.info("mail notice started", extra={"account": account.name, "uid": summary.uid})
            return
        # The owner's private chat where they are reached now; the turn's id comes from the
        # mail, so a second start (a restarted watcher) starts nothing, wherever it points.
        chat = await db.read(reach.private_chat, owner, config.access.notices)
        if chat is None:
            log.warning("mail summary not started: the owner has no private chat yet")
            return
        turn = TurnInput(
            origin="mail",
            chat_id=chat,
            chat_kind="private",
            user_id=owner,
            date=clock.now(),
            kind="text",
            text=summary_prompt(account, summary),
        )
        # The same mail always maps to the same turn: a repeat after a crash starts nothing.
        digest = hashlib.sha256(f"{summary.folder}/{summary.uid}/{summary.message_id}".encode())
        instance = f"mail-{account.name}-{digest.hexdigest()[:20]}"
        await engine.start(TURN_WORKFLOW, turn, instance_id=instance, key=chat_key(chat))

    on_refused = partial(
        tell_refused, db, engine, clock, owner=owner, notices=config.access.notices
    )
    watchers = Watchers(
        [
            FolderWatch(Mailbox(a, env), folder, db, on_mail, on_refused)
            for a in watched
            for folder in a.watch
        ]
    )
    watchers.start()
    return watchers
