"""End to end: `agentd run` with a [[mail]] account on a real Dovecot and SMTP server.

A mail goes out only after the owner approves the card that shows it; a denied one never
goes; a crash during the send is answered from the Sent folder, and nothing is sent twice.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import Daemon, daemon_env, poll, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.mailservers import (
    HAVE_DOVECOT,
    SKIP_NO_DOVECOT,
    Dovecot,
    LmtpRelay,
    Radicale,
    dovecot_server,
    smtp_server,
)

pytestmark = [
    pytest.mark.skipif(not HAVE_DOVECOT, reason=SKIP_NO_DOVECOT),
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
]
USERS = {
    "owner": "owner-app-pw-1",
    "crash": "crash-app-pw-2",
    "watch": "watch-pw-3",
    "brief": "brief-pw-4",
    "ana": "a",
    "bob": "b",
    "eve": "e",
}


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
    tmp: Path,
    tg: FakeTelegram,
    llm: FakeAnthropic,
    dovecot: Dovecot,
    port: int,
    user: str,
    extra: str = "",
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
{extra}
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
                # The tool's card is one escaped line: the body's newlines show as \n,
                # so a body cannot draw lines that look like the card's own.
                "Hi Ana,\\n\\nThursday 12:30 at Luigi's?\\n\\n— Owner",
            ):
                assert line in text, text
            assert "Hi Ana,\n" not in text, text
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
            # Sent answered for it: no generic "outcome unknown" notice before the answer.
            assert not any("Outcome unknown" in m["plain_text"] for m in tg.sent)
        finally:
            relay.hold = None
            daemon.stop()


WATCH = """watch = ["INBOX"]

[[mail.rules]]
subject = "newsletter"
action = "ignore"

[[mail.rules]]
sender = "boss@"
action = "notify"

[[mail.rules]]
subject = "please summarise"
action = "summary"
"""


def test_new_mail_notice_by_idle_without_a_model_call(
    servers: tuple[Dovecot, int, LmtpRelay], tmp_path: Path
) -> None:
    dovecot, port, _ = servers
    old = b"From: boss@example.org\r\nSubject: old news\r\n\r\nx\r\n"
    dovecot.deliver("watch", old)  # there before the watch began: not news
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = mail_env(tmp_path, tg, llm, dovecot, port, "watch", WATCH)
        with running_daemon(tmp_path, env) as d:
            d.wait_for_log("watching mail")
            tg.add_message(42, 42, "/status")  # the owner has talked to the bot: it may write
            tg.wait_until(lambda: tg.sent, 30, "the /status answer")
            assert '"mode": "idle"' in d.log() or "mode=idle" in d.log()
            dovecot.deliver(
                "watch",
                b"From: Boss <boss@example.org>\r\n"
                b"Subject: =?utf-8?q?Budget_f=C3=BCr_2027?=\r\n\r\nsee attached\r\n",
            )
            try:
                notice = tg.wait_until(
                    lambda: [m for m in tg.sent if "📬" in m["plain_text"]], 30, "a notice"
                )[0]
            except TimeoutError:
                raise AssertionError(d.log()[-3000:]) from None
            assert notice["chat_id"] == 42
            assert (
                "home: new mail from Boss boss@example.org — Budget für 2027"
                in notice["plain_text"]
            )
            # Ignored, then unmatched, then a later match: its notice is the marker that the
            # two before it were seen and passed over.
            dovecot.deliver(
                "watch", b"From: boss@example.org\r\nSubject: weekly newsletter\r\n\r\nx\r\n"
            )
            dovecot.deliver("watch", b"From: shop@example.com\r\nSubject: sale\r\n\r\nx\r\n")
            dovecot.deliver("watch", b"From: boss@example.org\r\nSubject: marker\r\n\r\nx\r\n")
            tg.wait_until(lambda: any("marker" in m["plain_text"] for m in tg.sent), 30, "marker")
            texts = [m["plain_text"] for m in tg.sent]
            assert len(texts) == 3 and not any(
                "newsletter" in t or "sale" in t or "old news" in t for t in texts
            )
            assert llm.requests == []  # no model call for any of it
            # Each notice is its own workflow, sent by a marked step of the one send path.
            sql = (
                "SELECT i.status, s.name FROM workflow_instances i JOIN workflow_steps s "
                "ON s.instance_id = i.id WHERE i.workflow = 'mail_notice'"
            )
            notices = poll(
                lambda: (
                    (rows := [tuple(r) for r in d.query(sql)])
                    and all(r[0] == "complete" for r in rows)
                    and rows
                ),
                10,
                "both notices' instances complete",
            )
            # Each chose where the owner is reached (its own step), then sent once.
            assert sorted(notices) == [("complete", "send")] * 2 + [("complete", "where")] * 2
            deadline = time.monotonic() + 10  # the position is written just after the notice
            while d.query("SELECT last_uid FROM mail_watch WHERE account = 'home'")[0][0] != 5:
                assert time.monotonic() < deadline
                time.sleep(0.05)

            llm.enqueue_text("Ana asks to move the review to Friday.")
            dovecot.deliver(
                "watch",
                b"From: ana@example.org\r\nSubject: please summarise\r\n\r\n"
                b"Can we move the review to Friday?\r\n",
            )
            tg.wait_until(
                lambda: any("review to Friday" in m["plain_text"] for m in tg.sent),
                60,
                "the summary",
            )
            assert len(llm.requests) == 1  # only the summary rule cost a model call
            first = str(llm.requests[0]["body"]["messages"])
            assert "uid 6" in first and "summarise" in first
            assert d.stop() == 0  # the IDLE thread notices the stop: a clean shutdown


def test_a_refused_mail_password_is_told_to_the_owner_once_a_day(
    servers: tuple[Dovecot, int, LmtpRelay], tmp_path: Path
) -> None:
    """A watcher that cannot log in tells the owner in chat (no model call), once a day
    however often the daemon restarts, and the password is nowhere in what it says."""
    dovecot, port, _ = servers
    days = {time.strftime("%Y-%m-%d", time.gmtime())}
    wrong = "not-the-watch-pw"
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = mail_env(tmp_path, tg, llm, dovecot, port, "watch", WATCH)
        warned = lambda: [m for m in tg.sent if m["plain_text"].startswith("⚠️ Mail home")]  # noqa: E731
        sql = (
            "SELECT id, status FROM workflow_instances WHERE workflow = 'mail_notice' "
            "AND id LIKE 'mail-refused-%'"
        )
        env["HOME_MAIL_PASSWORD"] = USERS["watch"]
        with running_daemon(tmp_path, env) as d:
            # First the owner talks to the bot (Telegram lets a bot write only then), while
            # the password is still right.
            d.wait_for_log("watching mail")
            tg.add_message(42, 42, "/status")
            tg.wait_until(lambda: tg.sent, 30, "the /status answer")
            assert d.stop() == 0
            d.env["HOME_MAIL_PASSWORD"] = wrong
            for _ in range(2):  # the second start, the same day, says nothing new
                d.start()
                d.wait_for_log("mail watch failed; retrying")
                # The notice is started before the watcher says it waits; a second start the
                # same day starts none (one past midnight would, and is waited for too).
                poll(lambda: (rows := d.query(sql)) and all(r[1] == "complete" for r in rows))
                assert d.stop() == 0
            days.add(time.strftime("%Y-%m-%d", time.gmtime()))
            rows = d.query(sql)
            assert len(rows) == len(days)  # one a day (two only if the test crossed midnight)
            assert len(warned()) == len(days) and all(m["chat_id"] == 42 for m in warned())
            text = warned()[0]["plain_text"]
            assert "not being watched" in text and "rejected the user 'watch'" in text
            assert "HOME_MAIL_PASSWORD" in text and "hourly" in text
            assert wrong not in d.log() and not any(wrong in m["plain_text"] for m in tg.sent)
            stored = d.query("SELECT input FROM workflow_instances WHERE id LIKE 'mail-refused-%'")
            assert all(wrong not in str(r[0]) for r in stored)
        assert llm.requests == []


def test_calendar_create_runs_but_an_invitation_waits_for_approval(
    servers: tuple[Dovecot, int, LmtpRelay], tmp_path: Path
) -> None:
    import caldav

    dovecot, port, _ = servers
    radicale = Radicale(root=tmp_path / "radicale", users={"owner": "cal-pw"}).start()
    try:
        dav = caldav.DAVClient(radicale.url, username="owner", password="cal-pw", require_tls=False)
        cal = dav.principal().make_calendar(name="Home")
        extra = (
            f'[[calendar]]\nname = "home"\nurl = "{radicale.url}"\nusername = "owner"\n'
            'password_env = "CAL_PW"\ntimezone = "Europe/Berlin"\n'
        )
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            env = mail_env(tmp_path, tg, llm, dovecot, port, "owner") | {"CAL_PW": "cal-pw"}
            (tmp_path / "agentd.toml").write_text((tmp_path / "agentd.toml").read_text() + extra)
            with running_daemon(tmp_path, env) as d:
                llm.enqueue_tool_use(
                    "calendar_create",
                    {"summary": "Focus time", "start": "2026-12-01T09:00"},
                    "toolu_cal1",
                )
                llm.enqueue_text("Blocked.")
                tg.add_message(42, 42, "block Tuesday 9-10")
                tg.wait_until(
                    lambda: any(m["plain_text"].startswith("Blocked.") for m in tg.sent),
                    30,
                    "the answer",
                )
                assert not any(m["reply_markup"] for m in tg.sent)  # medium: no card
                assert [e.icalendar_component["SUMMARY"] for e in cal.events()] == ["Focus time"]

                llm.enqueue_tool_use(
                    "calendar_create",
                    {
                        "summary": "Review",
                        "start": "2026-12-02T11:00",
                        "attendees": ["ana@example.org"],
                    },
                    "toolu_cal2",
                )
                llm.enqueue_text("Invited.")
                tg.add_message(42, 42, "invite Ana to a review Wednesday 11")
                card = approval(tg, 42)
                assert (
                    "calendar_create" in card["plain_text"]
                    and "ana@example.org" in card["plain_text"]
                )
                assert len(cal.events()) == 1  # nothing before consent
                press(tg, 42, card, approve=True)
                tg.wait_until(
                    lambda: any(m["plain_text"] == "Invited." for m in tg.sent), 30, "reply"
                )
                review = next(
                    e.icalendar_component
                    for e in cal.events()
                    if e.icalendar_component["SUMMARY"] == "Review"
                )
                assert "ana@example.org" in str(review["ATTENDEE"])
                assert "cal-pw" not in d.log()
    finally:
        radicale.stop()


def test_briefing_gathers_todays_events_and_unread_mail_in_one_turn(
    servers: tuple[Dovecot, int, LmtpRelay], tmp_path: Path
) -> None:
    import caldav

    from agentd.schedule.briefing import PROMPT

    dovecot, port, _ = servers
    dovecot.deliver(
        "brief",
        "From: Jürgen <j@example.de>\r\nSubject: Invoice due Friday\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n\r\nPlease pay.\r\n".encode(),
    )
    dovecot.deliver("brief", b"From: old@example.org\r\nSubject: already read\r\n\r\nx\r\n")
    with dovecot.client("brief") as imap:
        imap.select_folder("INBOX")
        imap.add_flags([2], [b"\\Seen"])
    radicale = Radicale(root=tmp_path / "radicale", users={"brief": "cal-pw"}).start()
    try:
        dav = caldav.DAVClient(radicale.url, username="brief", password="cal-pw", require_tls=False)
        today = time.strftime("%Y%m%d", time.gmtime())
        dav.principal().make_calendar(name="Home").save_event(
            "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//t//EN\nBEGIN:VEVENT\nUID:dentist@t\n"
            f"DTSTAMP:20260101T000000Z\nDTSTART:{today}T160000Z\nDTEND:{today}T170000Z\n"
            "SUMMARY:Dentist\nEND:VEVENT\nEND:VCALENDAR\n"
        )
        extra = (
            f'[[calendar]]\nname = "home"\nurl = "{radicale.url}"\nusername = "brief"\n'
            'password_env = "CAL_PW"\n'
        )
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            env = mail_env(tmp_path, tg, llm, dovecot, port, "brief") | {"CAL_PW": "cal-pw"}
            (tmp_path / "agentd.toml").write_text((tmp_path / "agentd.toml").read_text() + extra)
            with running_daemon(tmp_path, env) as d:
                tg.add_chat(42)
                llm.enqueue_tool_uses(
                    [
                        ("calendar_list", {}),
                        ("mail_search", {"unread": True}),
                        ("list_schedules", {}),
                    ]
                )
                llm.enqueue_text("Good morning! 16:00 Dentist. Jürgen: invoice due Friday.")
                ran = d.cli("briefing", "run", "--after", "1s", "--json")
                assert ran.returncode == 0, ran.stderr
                sched = json.loads(ran.stdout)["id"]
                tg.wait_until(
                    lambda: any("Good morning" in m["plain_text"] for m in tg.sent),
                    60,
                    "the briefing",
                )
                asked = str(llm.requests[0]["body"]["messages"])
                assert PROMPT[:40] in asked
                results = {r["tool_use_id"]: str(r["content"]) for r in tool_results(llm)}
                text = "\n".join(results.values())
                assert "16:00–17:00 UTC: Dentist" in text
                assert "Invoice due Friday" in text and "already read" not in text
                usage = json.loads(d.cli("usage", "--schedule", sched, "--json").stdout)
                assert sum(r["calls"] for r in usage) == 2  # one turn: two model calls
    finally:
        radicale.stop()
