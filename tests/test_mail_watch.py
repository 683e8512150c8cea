"""The folder watcher on a real Dovecot: IDLE and polling both see new mail, rules decide."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.config import MailAccountConfig, MailRule
from agentd.db import Database
from agentd.mail.errors import LOGIN_STAGE, MailError
from agentd.mail.imap import Summary
from agentd.mail.mailbox import Mailbox
from agentd.mail.watch import (
    LOGIN_RETRY,
    FolderWatch,
    matching_rule,
    refused_instance_id,
    refused_text,
)
from tests.mailservers import HAVE_DOVECOT, SKIP_NO_DOVECOT, Dovecot, dovecot_server

pytestmark = pytest.mark.skipif(not HAVE_DOVECOT, reason=SKIP_NO_DOVECOT)
USERS = {"idle": "pw-idle", "poll": "pw-poll"}


@pytest.fixture(scope="module")
def dovecot() -> Iterator[Dovecot]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        with dovecot_server(root, USERS) as server:
            yield server


def account(dovecot: Dovecot, user: str) -> MailAccountConfig:
    return MailAccountConfig(
        name=user,
        address=f"{user}@example.org",
        username=user,
        password_env="PW",
        imap_host="127.0.0.1",
        imap_port=dovecot.port,
        imap_security="plain",
        timeout=10,
        poll_interval=5,
        watch=["INBOX"],
        rules=[MailRule(subject="skip", action="ignore"), MailRule(sender="", action="notify")],
    )


async def wait_for(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("mode", ["idle", "poll"])
async def test_watch_sees_new_mail_only(dovecot: Dovecot, db: Database, mode: str) -> None:
    user = mode
    dovecot.deliver(user, b"From: a@b.c\r\nSubject: before\r\n\r\nx\r\n")
    seen: list[str] = []

    async def on_mail(acc: MailAccountConfig, s: Summary, rule: MailRule) -> None:
        seen.append(f"{rule.action}:{s.subject}")

    watch = FolderWatch(Mailbox(account(dovecot, user), {"PW": USERS[user]}), "INBOX", db, on_mail)
    watch.force_poll = mode == "poll"
    task = asyncio.create_task(watch.run())
    try:
        # The first catch-up takes the folder as it is: the mail already there is not news.
        sql = "SELECT last_uid FROM mail_watch"
        deadline = asyncio.get_running_loop().time() + 20
        while not (rows := await db.read(lambda c: c.execute(sql).fetchall())):
            assert asyncio.get_running_loop().time() < deadline, "no position recorded"
            await asyncio.sleep(0.05)
        assert rows[0][0] == 1
        dovecot.deliver(user, b"From: a@b.c\r\nSubject: skip me\r\n\r\nx\r\n")
        dovecot.deliver(user, b"From: a@b.c\r\nSubject: hello\r\n\r\nx\r\n")
        await wait_for(lambda: seen == ["notify:hello"], 30)
        assert watch.mode == mode
    finally:
        watch.stop()
        await asyncio.wait_for(task, 15)


def test_rules_first_match_decides() -> None:
    s = Summary(
        folder="INBOX",
        uid=1,
        sender="Boss <boss@corp.com>",
        to="",
        subject="Q3 plan",
        date="",
        message_id="",
        unread=True,
        flagged=False,
        size=1,
    )
    rules = [
        MailRule(sender="boss@", subject="newsletter", action="ignore"),
        MailRule(sender="BOSS@corp", action="summary"),
        MailRule(action="notify"),
    ]
    assert matching_rule(rules, s) == rules[1]
    assert matching_rule([MailRule(folder="Work")], s) is None


async def test_mail_that_came_while_down_is_announced_once_after_a_restart(
    dovecot: Dovecot, db: Database
) -> None:
    seen: list[str] = []

    async def on_mail(acc: MailAccountConfig, s: Summary, rule: MailRule) -> None:
        seen.append(s.subject)

    async def positioned() -> bool:
        sql = "SELECT last_uid FROM mail_watch WHERE account = 'idle'"
        return bool(await db.read(lambda c: c.execute(sql).fetchall()))

    async def run_until(done) -> None:  # type: ignore[no-untyped-def]
        """One watcher's life: start, wait until `done()`, stop (a daemon run)."""
        watch = FolderWatch(
            Mailbox(account(dovecot, "idle"), {"PW": USERS["idle"]}), "INBOX", db, on_mail
        )
        task = asyncio.create_task(watch.run())
        deadline = asyncio.get_running_loop().time() + 30
        try:
            while not await done():
                assert asyncio.get_running_loop().time() < deadline, seen
                await asyncio.sleep(0.05)
        finally:
            watch.stop()
            await asyncio.wait_for(task, 15)

    async def saw(*subjects: str) -> bool:
        return seen == list(subjects)

    await run_until(positioned)  # the first run takes the folder as it is
    dovecot.deliver("idle", b"From: a@b.c\r\nSubject: while down\r\n\r\nx\r\n")
    dovecot.deliver("idle", b"From: a@b.c\r\nSubject: skip this\r\n\r\nx\r\n")
    await run_until(lambda: saw("while down"))  # caught up at start, the ignored one skipped
    dovecot.deliver("idle", b"From: a@b.c\r\nSubject: after\r\n\r\nx\r\n")
    await run_until(lambda: saw("while down", "after"))  # nothing announced twice


async def first_retry(watch: FolderWatch, caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """Run `watch` until it says it will retry, then stop it (a wait of an hour ends at stop)."""
    with caplog.at_level(logging.WARNING, logger="agentd.mail"):
        task = asyncio.create_task(watch.run())
        try:
            await wait_for(lambda: any("retrying" in r.getMessage() for r in caplog.records))
        finally:
            watch.stop()
            await asyncio.wait_for(task, 15)
    (record,) = [r for r in caplog.records if "retrying" in r.getMessage()]
    return record


async def test_a_refused_password_is_tried_again_hourly_not_every_few_minutes(
    dovecot: Dovecot, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Servers count failed logins (fail2ban bans after a few): a watcher whose password was
    refused waits an hour, where a dropped connection is retried within minutes; and it says
    so to whoever tells the owner, before it waits."""

    async def on_mail(acc: MailAccountConfig, s: Summary, rule: MailRule) -> None:
        raise AssertionError("no mail can be seen without logging in")

    told: list[MailError] = []

    async def on_refused(acc: MailAccountConfig, exc: MailError) -> None:
        assert acc.name == "poll"
        told.append(exc)

    box = Mailbox(account(dovecot, "poll"), {"PW": "wrong"})
    watch = FolderWatch(box, "INBOX", db, on_mail, on_refused)
    record = await first_retry(watch, caplog)
    assert record.wait_s == LOGIN_RETRY == 3600  # type: ignore[attr-defined]
    assert "rejected the user 'poll'" in record.error  # type: ignore[attr-defined]
    assert "wrong" not in record.error  # type: ignore[attr-defined]
    (exc,) = told
    assert exc.stage == LOGIN_STAGE and "rejected the user 'poll'" in exc.detail


async def test_a_missing_password_is_told_and_a_failing_teller_does_not_stop_the_watch(
    dovecot: Dovecot, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    async def on_mail(acc: MailAccountConfig, s: Summary, rule: MailRule) -> None:
        raise AssertionError("no mail can be seen without logging in")

    told: list[MailError] = []

    async def on_refused(acc: MailAccountConfig, exc: MailError) -> None:
        told.append(exc)
        raise RuntimeError("the database is locked")

    watch = FolderWatch(Mailbox(account(dovecot, "poll"), {}), "INBOX", db, on_mail, on_refused)
    record = await first_retry(watch, caplog)
    (exc,) = told
    assert exc.stage == LOGIN_STAGE and "no password" in exc.detail and "PW" in exc.detail
    assert any("could not tell the owner" in r.getMessage() for r in caplog.records)
    assert record.wait_s == LOGIN_RETRY  # type: ignore[attr-defined]


def test_the_refused_notice_is_one_a_day_per_account() -> None:
    acc = MailAccountConfig(
        name="work_box",
        address="me@example.org",
        username="me",
        password_env="WORK_PW",
        imap_host="imap.example.org",
    )
    exc = MailError(
        "work_box", LOGIN_STAGE, "imap.example.org rejected the user 'me' or its password (WORK_PW)"
    )
    text = refused_text(acc, exc)
    assert text.startswith("⚠️ Mail `work_box`: new mail is not being watched")
    assert "rejected the user 'me'" in text and "hourly" in text
    day1, day2 = refused_instance_id(acc, "2026-12-06"), refused_instance_id(acc, "2026-12-07")
    assert day1 != day2 and day1 == refused_instance_id(acc, "2026-12-06")
    other = acc.model_copy(update={"name": "home"})
    assert refused_instance_id(other, "2026-12-06") != day1
