"""One owner across channels: `[access]` says who is served once (the old `[telegram]` keys
still load, with a warning), an account on another channel is linked to an agentd user by a
pairing code made for that user, its messages then carry that user's id (one memory, budget,
schedules and rights), and notices go to where the user is reached — the channel
`[access] notices` names, else where they last wrote — exactly once."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agentd.access import accounts, owners, pairing
from agentd.channels import load_config
from agentd.chat import reach
from agentd.chat.notice import NOTICE_WORKFLOW, NoticeInput, make_notice_workflow
from agentd.config import AccessConfig, Config
from agentd.db import Database, open_sync
from agentd.db.migrations import apply_migrations
from agentd.durable import Engine, FakeClock
from agentd.telegram.classify import Identity
from agentd.telegram.config import settings
from agentd.telegram.intake import persist_updates
from tests.test_channel_door import Recorder

OWNER, SECOND = 42, 555  # the owner's Telegram account, and another account of theirs
BOT = Identity(bot_id=999, bot_username="agentd_bot", allowed_user_ids=frozenset({OWNER}))


def test_the_old_telegram_keys_load_into_access_with_one_warning_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "agentd.toml"
    path.write_text("[telegram]\nowner_id = 42\nallowed_user_ids = [42, 7]\npoll_timeout = 5\n")
    with caplog.at_level(logging.WARNING, logger="agentd"):
        config = load_config(path, env={})
    assert config.access.owner_id == 42 and config.access.allowed_user_ids == [42, 7]
    assert settings(config).poll_timeout == 5  # the rest of [telegram] stays where it was
    said = [r.getMessage() for r in caplog.records if "now spelled" in r.getMessage()]
    assert said == [
        "configuration key [telegram.allowed_user_ids] is now spelled "
        "[access.allowed_user_ids]; rename it",
        "configuration key [telegram.owner_id] is now spelled [access.owner_id]; rename it",
    ]
    new = tmp_path / "new.toml"
    new.write_text("[access]\nowner_id = 42\nallowed_user_ids = [42]\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentd"):
        assert load_config(new, env={}).access.owner_id == 42
    assert not [r for r in caplog.records if "now spelled" in r.getMessage()]


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    conn = open_sync(tmp_path / "a.db")
    apply_migrations(conn)
    yield conn
    conn.close()


def test_a_code_made_for_a_user_links_one_account_once(conn: Any) -> None:
    with conn:
        code = pairing.new_code(conn, ttl=600, created_by="cli", now=0.0, link_user_id=OWNER)
    other = pairing.new_code(conn, ttl=600, created_by="cli", now=0.0)
    redeem = partial(pairing.redeem, chat_id=None, username="", channel="elsewhere")
    assert redeem(conn, "WRONG-CODE", user_id=SECOND, now=1.0).reason == "wrong"
    linked = redeem(conn, code, user_id=SECOND, now=1.0)
    assert (linked.ok, linked.reason, linked.user_id) == (True, "linked", OWNER)
    assert accounts.user_of(conn, SECOND) == OWNER and accounts.user_of(conn, 77) == 77
    assert redeem(conn, code, user_id=78, now=2.0).reason == "used"  # once only
    assert accounts.user_of(conn, 78) == 78
    # A linked account is served while its user is, and is not a paired user of its own.
    assert SECOND in accounts.served_accounts(conn, frozenset({OWNER}))
    assert SECOND not in accounts.served_accounts(conn, frozenset({7}))
    assert SECOND not in pairing.paired_ids(conn)
    # A plain code still pairs a new user, as before.
    assert redeem(conn, other, user_id=79, now=3.0).reason == "paired"
    expired = pairing.new_code(conn, ttl=1, created_by="cli", now=0.0, link_user_id=OWNER)
    assert redeem(conn, expired, user_id=80, now=5.0).reason == "expired"
    kinds = [r[0] for r in conn.execute("SELECT kind FROM audit ORDER BY id")]
    assert kinds.count("account_linked") == 1


def test_notices_go_to_the_chosen_channel_else_where_the_user_last_wrote(conn: Any) -> None:
    with conn:
        reach.know_private_chat(conn, OWNER, "telegram", OWNER)  # known, never written in
        assert reach.private_chat(conn, OWNER) == OWNER
        reach.note_private_chat(conn, OWNER, "matrix", 9_007_199_254_740_993, now=10.0)
        assert reach.private_chat(conn, OWNER) == 9_007_199_254_740_993
        reach.note_private_chat(conn, OWNER, "telegram", OWNER, now=20.0)
        assert reach.private_chat(conn, OWNER) == OWNER
        assert reach.private_chat(conn, OWNER, prefer="matrix") == 9_007_199_254_740_993
        assert reach.private_chat(conn, OWNER, prefer="irc") == OWNER  # none there: the last
        reach.know_private_chat(conn, OWNER, "telegram", 1)  # never over one written in
        assert reach.private_chat(conn, OWNER, prefer="telegram") == OWNER
        assert reach.private_chat(conn, 7) is None


def test_a_stopped_channels_notice_goes_where_the_owner_last_wrote_among_the_open_ones(
    conn: Any,
) -> None:
    """Telegram refused its token: the owner is told on the open channel they last wrote
    in, never on Telegram (where they wrote last) nor on an open one they never used."""
    matrix_dm, webchat = 9_007_199_254_740_993, 18_014_398_509_481_985
    with conn:
        reach.note_private_chat(conn, OWNER, "webchat", webchat, now=5.0)
        reach.note_private_chat(conn, OWNER, "matrix", matrix_dm, now=10.0)
        reach.note_private_chat(conn, OWNER, "telegram", OWNER, now=20.0)
        assert reach.private_chat_among(conn, OWNER, ["webchat", "matrix"]) == matrix_dm
        assert reach.private_chat_among(conn, OWNER, ["webchat"]) == webchat
        assert reach.private_chat_among(conn, OWNER, ["irc"]) is None


def _message(update_id: int, sender: int, text: str) -> dict[str, Any]:
    chat = {"id": sender, "type": "private"}
    sent = {"message_id": update_id, "date": 1, "chat": chat, "text": text}
    return {"update_id": update_id, "message": {**sent, "from": {"id": sender, "is_bot": False}}}


async def test_a_linked_accounts_messages_carry_its_users_id(tmp_path: Path) -> None:
    """Intake maps the account to its user before anything starts: the turn (memory, budget,
    approvals) is the owner's, and the owner is now reached where that account wrote."""
    db = await Database.open(tmp_path / "i.db")
    engine = Engine(db, clock=FakeClock(auto_advance=True))
    from agentd.agent.turn import make_turn_workflow

    engine.register(make_turn_workflow(None))  # type: ignore[arg-type]  # validated, not run
    try:
        code = await db.write(
            lambda c: pairing.new_code(c, ttl=600, created_by="cli", link_user_id=OWNER)
        )
        # A stranger's account before it is linked gets nothing.
        before = await db.write(persist_updates, [_message(1, SECOND, "hi")], BOT, engine)
        assert before.accepted == 0
        await db.write(persist_updates, [_message(2, SECOND, f"/start {code}")], BOT, engine)
        result = await db.write(persist_updates, [_message(3, SECOND, "hello")], BOT, engine)
        assert result.accepted == 1
        row = await db.read(
            lambda c: c.execute(
                "SELECT json_extract(input, '$.user_id'), json_extract(input, '$.chat_id') "
                "FROM workflow_instances WHERE id = 'tg-update-3'"
            ).fetchone()
        )
        assert tuple(row) == (OWNER, SECOND)  # the owner's turn, answered where it was asked
        assert await db.read(reach.private_chat, OWNER) == SECOND
        trust = owners.resolve(AccessConfig(owner_id=OWNER))
        assert trust.may_approve(OWNER) and not trust.may_approve(SECOND)  # rights: the user's
    finally:
        await engine.shutdown(1.0)
        await db.close()


async def test_a_notice_for_a_user_is_sent_once_to_where_they_are_reached(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "n.db")
    outbox = Recorder("routed", chunk=4096)  # a notice fits one message here
    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    engine.register(make_notice_workflow(db, outbox, prefer=""))  # type: ignore[arg-type]
    await engine.run()
    try:
        await db.write(reach.note_private_chat, OWNER, "telegram", OWNER, 1.0)
        await db.write(reach.note_private_chat, OWNER, "matrix", SECOND, 2.0)
        inp = NoticeInput(user_id=OWNER, text="Your reminder")
        for _ in range(2):  # told twice (a restarted watcher): one instance, one message
            await engine.start(NOTICE_WORKFLOW, inp, instance_id="n-1", key="n-1")
        done = await engine.wait_for("n-1")
        assert done.status == "complete", done.error
        assert outbox.sent == [("text", SECOND, "Your reminder")]
        # The place was chosen in its own journaled step: written in elsewhere since, a
        # replay of the instance still sends to the same chat.
        where = await db.read(
            lambda c: c.execute(
                "SELECT result FROM workflow_steps WHERE instance_id = 'n-1' AND name = 'where'"
            ).fetchone()[0]
        )
        assert where == str(SECOND)
        nobody = NoticeInput(user_id=7, text="x")
        await engine.start(NOTICE_WORKFLOW, nobody, instance_id="n-2", key="n-2")
        assert (await engine.wait_for("n-2")).status == "complete"
        assert len(outbox.sent) == 1  # no private chat known: nothing sent, nothing guessed
    finally:
        await engine.shutdown(1.0)
        await db.close()


def test_a_notice_goes_to_a_chat_or_a_user() -> None:
    with pytest.raises(ValueError, match="one of the two"):
        NoticeInput(chat_id=1, user_id=1, text="x")
    with pytest.raises(ValueError, match="one of the two"):
        NoticeInput(text="x")
    assert Config(access=AccessConfig(notices="telegram")).access.notices == "telegram"


def test_a_start_with_every_channel_answering_forgets_an_unsent_stopped_notice(conn: Any) -> None:
    """The notice "agentd stopped: Telegram rejected the bot token" that could not be sent
    (Matrix was down too) is not sent after the owner fixed the token: the first good start
    cancels it."""
    from agentd.daemon.process import forget_stopped_notices
    from agentd.durable import store

    for instance_id in ("channel-stopped:telegram:2026-12-06", "channel-stopped:matrix:2026-12-07"):
        store.insert_instance(
            conn, instance_id=instance_id, workflow=NOTICE_WORKFLOW, key="k", input_json="{}", now=1
        )
    store.set_status(conn, "channel-stopped:matrix:2026-12-07", "sleeping", 2)
    store.insert_instance(
        conn, instance_id="reminder-1", workflow=NOTICE_WORKFLOW, key="k", input_json="{}", now=1
    )
    assert forget_stopped_notices(conn, 3) == 2
    status = dict(conn.execute("SELECT id, status || cancel_requested FROM workflow_instances"))
    assert status == {
        "channel-stopped:telegram:2026-12-06": "cancelled0",  # never started: ended at once
        "channel-stopped:matrix:2026-12-07": "sleeping1",  # flagged: its runner ends it
        "reminder-1": "queued0",
    }
