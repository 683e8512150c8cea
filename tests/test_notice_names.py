"""Names in owner notices are shown as written: an automation called `a__b__c` is not bold,
`*x*` is not italic, in the Markdown every channel renders (Telegram's markup here; Matrix's
renders the same spans)."""

from __future__ import annotations

from agentd.chat.format import to_html
from agentd.chat.markup import literal
from agentd.config import MailAccountConfig
from agentd.daemon.startup import parked_notice
from agentd.durable import store
from agentd.mail.imap import Summary
from agentd.mail.watch import notice_text
from agentd.telegram.format import TELEGRAM


def test_a_name_markdown_would_read_is_a_code_span_and_a_plain_one_stays() -> None:
    assert literal("daily") == "daily"
    assert literal("a__b__c") == "`a__b__c`"
    assert literal("x`y*") == "`x'y*`"
    for name in ("a__b__c", "*x*", "~~s~~", "a_b_c"):
        shown = to_html(f"before {literal(name)} after", TELEGRAM)
        assert "<b>" not in shown and "<i>" not in shown and "<s>" not in shown, shown
        assert name in shown


def test_a_parked_instance_notice_shows_its_workflow_as_written(conn: object) -> None:
    store.insert_instance(
        conn, instance_id="i1", workflow="a__b__c", key="chat-1", input_json="{}", now=1.0
    )
    store.set_status(conn, "i1", "errored", 2.0, error="stopped after 3 crashes")
    shown = to_html(parked_notice(store.get_instance(conn, "i1")), TELEGRAM)
    assert "<code>a__b__c</code>" in shown and "<b>" not in shown


def test_a_mail_notice_shows_the_account_name_as_written() -> None:
    account = MailAccountConfig(
        name="me__work__",
        address="me@example.org",
        imap_host="h",
        smtp_host="h",
        password_env="P",
    )
    summary = Summary.model_construct(sender="a@b", subject="hi", uid=1, folder="INBOX")
    shown = to_html(notice_text(account, summary), TELEGRAM)
    assert "<code>me__work__</code>" in shown and "<b>" not in shown


def test_an_error_in_a_notice_is_shown_as_written(conn: object) -> None:
    """An error's text is a library's or a sender's, not agentd's: Markdown in it neither
    restyles the notice nor makes a link, and a fence in it does not end the block early."""
    from agentd.automations.runtime import failure_text

    error = "ValueError: **urgent** see [the fix](https://evil.example/x) ```\n_x_ ```"
    store.insert_instance(
        conn, instance_id="i2", workflow="nightly", key="auto-1", input_json="{}", now=1.0
    )
    store.set_status(conn, "i2", "errored", 2.0, error=error)
    inst = store.get_instance(conn, "i2")
    for notice in (failure_text(inst), parked_notice(inst)):
        shown = to_html(notice, TELEGRAM)
        assert "<b>" not in shown and "<i>" not in shown and "<a " not in shown, shown
        assert "**urgent**" in shown and "evil.example" in shown


def test_a_mail_notice_shows_a_senders_controls_and_bidi_overrides_escaped() -> None:
    """An encoded word can carry U+202E (the rest of the line shown backwards) and terminal
    escapes: the owner sees them as codes, never obeyed."""
    account = MailAccountConfig(
        name="home", address="me@example.org", imap_host="h", smtp_host="h", password_env="P"
    )
    summary = Summary.model_construct(
        sender="Bank \u202egro.knab@ <evil@example.net>",
        subject="Pay\x1b[31m now\x07",
        uid=1,
        folder="INBOX",
    )
    text = notice_text(account, summary)
    assert "\u202e" not in text and "\x1b" not in text and "\x07" not in text
    assert "Bank \\u202egro.knab@ evil@example.net" in text and "Pay\\u001b 31m now\\u0007" in text
