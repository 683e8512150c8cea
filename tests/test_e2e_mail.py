"""End to end: `agentd run` with a [[mail]] account on a real Dovecot and SMTP server.

A mail goes out only after the owner approves the card that shows it; a denied one never
goes; a crash during the send is answered from the Sent folder, and nothing is sent twice.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.mailservers import (
    HAVE_DOVECOT,
    SKIP_NO_DOVECOT,
    Dovecot,
    LmtpRelay,
    dovecot_server,
    smtp_server,
)

pytestmark = [
    pytest.mark.skipif(not HAVE_DOVECOT, reason=SKIP_NO_DOVECOT),
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
]
USERS = {"owner": "owner-app-pw-1", "crash": "crash-app-pw-2", "ana": "a", "bob": "b", "eve": "e"}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Dovecot, int, LmtpRelay]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        with dovecot_server(root, USERS) as dovecot:
            # Files the sender's copy in Sent itself, as Gmail does (accounts: save_sent=false).
            relay = LmtpRelay(dovecot, save_sent=True)
            with smtp_server(relay, auth=dict(USERS)) as port:
                yield dovecot, port, relay


def mail_env(
    tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, dovecot: Dovecot, port: int, user: str
) -> dict[str, str]:
    (tmp / "agentd.toml").write_text(f"""
[tools]
approval_timeout = 60

[[mail]]
name = "home"
address = "{user}@example.org"
display_name = "The Owner"
username = "{user}"
password_env = "HOME_MAIL_PASSWORD"
imap_host = "127.0.0.1"
imap_port = {dovecot.port}
imap_security = "plain"
smtp_host = "127.0.0.1"
smtp_port = {port}
smtp_security = "plain"
save_sent = false
timeout = 10
""")
    return daemon_env(
        tmp,
        tg.base_url,
        llm.base_url,
        AGENTD_CONFIG=str(tmp / "agentd.toml"),
        HOME_MAIL_PASSWORD=USERS[user],
    )


def approval(tg: FakeTelegram, chat: int) -> dict[str, Any]:
    return tg.wait_until(  # type: ignore[no-any-return]
        lambda: next((m for m in tg.sent if m["chat_id"] == chat and m["reply_markup"]), None),
        30,
        "an approval request",
    )


def press(tg: FakeTelegram, chat: int, message: dict[str, Any], approve: bool) -> None:
    buttons = message["reply_markup"]["inline_keyboard"][0]
    tg.add_callback_query(
        chat, chat, message["message_id"], buttons[0 if approve else 1]["callback_data"]
    )


def tool_results(llm: FakeAnthropic) -> list[dict[str, Any]]:
    out = []
    for request in llm.requests:
        for message in request["body"]["messages"]:
            if isinstance(message["content"], list):
                out += [b for b in message["content"] if b.get("type") == "tool_result"]
    return out


SEND = {
    "to": ["ana@example.org"],
    "cc": ["bob@example.org"],
    "subject": "Lunch Thursday",
    "body": "Hi Ana,\n\nThursday 12:30 at Luigi's?\n\n— Owner",
}


def test_send_approved_then_denied(servers: tuple[Dovecot, int, LmtpRelay], tmp_path: Path) -> None:
    dovecot, port, _ = servers
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        with running_daemon(tmp_path, mail_env(tmp_path, tg, llm, dovecot, port, "owner")) as d:
            llm.enqueue_tool_use("mail_send", SEND, "toolu_send1")
            llm.enqueue_text("Sent.")
            tg.add_message(42, 42, "tell Ana lunch on Thursday")
            card = approval(tg, 42)
            text = card["plain_text"]
            assert "mail_send" in text and "high risk" in text
            for line in (
                "From: The Owner <owner@example.org>",
                "To: ana@example.org",
                "Cc: bob@example.org",
                "Subject: Lunch Thursday",
                "Hi Ana,\n\nThursday 12:30 at Luigi's?\n\n— Owner",
            ):
                assert line in text, text
            assert dovecot.message_ids("ana", "INBOX") == []  # nothing before consent
            press(tg, 42, card, approve=True)
            tg.wait_until(lambda: any(m["plain_text"] == "Sent." for m in tg.sent), 30, "Sent.")
            rows = d.query("SELECT message_id, status FROM mail_sends")
            assert [tuple(r) for r in rows] == [(rows[0][0], "sent")]
            mid = rows[0][0]
            assert dovecot.message_ids("ana", "INBOX") == [mid]
            assert dovecot.message_ids("bob", "INBOX") == [mid]
            assert dovecot.message_ids("owner", "Sent") == [mid]
            assert USERS["owner"] not in d.log()

            llm.reset()
            llm.enqueue_tool_use(
                "mail_send", SEND | {"to": ["eve@example.org"], "cc": []}, "toolu_send2"
            )
            llm.enqueue_text("Not sent.")
            tg.add_message(42, 42, "mail eve")
            cards = lambda: [m for m in tg.sent if m["reply_markup"]]  # noqa: E731
            tg.wait_until(lambda: len(cards()) == 2, 30, "the second card")
            press(tg, 42, cards()[1], approve=False)
            tg.wait_until(lambda: any(m["plain_text"] == "Not sent." for m in tg.sent), 30, "reply")
            result = tool_results(llm)[-1]
            assert result["is_error"] and "denied" in result["content"]
            assert dovecot.message_ids("eve", "INBOX") == []
            assert len(dovecot.message_ids("owner", "Sent")) == 1


def test_crash_during_send_is_settled_from_sent_and_never_repeated(
    servers: tuple[Dovecot, int, LmtpRelay], tmp_path: Path
) -> None:
    dovecot, port, relay = servers
    relay.hold = asyncio.Event()  # the server keeps the mail but never says "250"
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = mail_env(tmp_path, tg, llm, dovecot, port, "crash")
        args = SEND | {"to": ["ana@example.org"], "cc": [], "subject": "Crash test"}
        llm.enqueue_tool_use("mail_send", args, "toolu_crash")
        daemon = Daemon(tmp_path, env).start()
        try:
            tg.add_message(42, 42, "send it")
            press(tg, 42, approval(tg, 42), approve=True)
            deadline = time.monotonic() + 30
            while not relay.holding:
                assert time.monotonic() < deadline, daemon.log()
                time.sleep(0.05)
            status = daemon.query("SELECT status FROM mail_sends")
            assert [r[0] for r in status] == ["sending"]  # journaled before SMTP
            daemon.kill9()
            relay.release()
            llm.reset()
            llm.enqueue_text("It went, once.")
            daemon.start()
            tg.wait_until(
                lambda: any(m["plain_text"] == "It went, once." for m in tg.sent),
                60,
                "the answer after the restart",
            )
            result = tool_results(llm)[-1]
            assert not result["is_error"]
            assert "interrupted" in result["content"] and "it went" in result["content"]
            mid = daemon.query("SELECT message_id, status FROM mail_sends")[0]
            assert mid[1] == "sent"
            assert dovecot.message_ids("ana", "INBOX").count(mid[0]) == 1  # delivered once
            assert dovecot.message_ids("crash", "Sent") == [mid[0]]
            assert len(relay.received) == len(set(relay.received))
            steps = [r[0] for r in daemon.query("SELECT name FROM workflow_steps")]
            assert "settle:toolu_crash" in steps
        finally:
            relay.hold = None
            daemon.stop()
