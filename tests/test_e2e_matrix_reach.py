"""One owner's notices on Matrix, through `agentd run` against a real Synapse: a Matrix account
linked with `agentd pair --link` and `/start CODE` speaks as the owner, and a reminder reaches
the owner on Matrix when they last wrote there, or when `[access] notices = "matrix"` says so,
exactly once, whichever channel it was set on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_process import OWNER, poll
from tests.matrix_rig import MatrixRig, matrix_rig
from tests.matrixserver import Cast, MatrixUser, cast_running, http, wait_for

pytestmark = pytest.mark.timeout(300)
SCHEDULE = "\n[schedule]\nmin_interval = 1\n"


@pytest.fixture(scope="module")
def cast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cast]:
    with cast_running(Path(tmp_path_factory.mktemp("synapse"))) as running:
        yield running


def _wait_text(rig: MatrixRig, room: str, user: MatrixUser, part: str) -> list[str]:
    def seen() -> list[str]:
        return [t for t in rig.bot_texts(room, user) if part in t]

    return wait_for(seen, 60, f"{part!r} in {room}")


def _owner_writes_on_telegram(rig: MatrixRig) -> None:
    """The owner's Telegram chat is known, and where they last wrote."""
    rig.tg.add_message(OWNER, OWNER, "hello from telegram")
    rig.tg.wait_until(
        lambda: any(m["plain_text"] == "echo: hello from telegram" for m in rig.tg.sent),
        60,
        "the echo on Telegram",
    )


def _sent_once(rig: MatrixRig, schedule_id: str) -> None:
    poll(
        lambda: rig.query(
            "SELECT 1 FROM schedule_runs WHERE schedule_id = ? AND outcome = 'sent'",
            (schedule_id,),
        ),
        60,
        "the run recorded",
    )


def test_a_linked_matrix_account_gets_the_owners_reminder_where_they_wrote(
    tmp_path: Path, cast: Cast
) -> None:
    cast.server.register("phone", "phone-password")
    phone = cast.server.login("phone", "phone-password")  # not in [matrix]: linked by a code
    with matrix_rig(tmp_path, cast, extra=SCHEDULE) as rig:
        code = rig.daemon.cli_json("pair", "--no-wait", "--link", str(OWNER))["code"]
        room = rig.dm(phone)  # joined while the code waits
        phone.say(room, "hello before the code")
        phone.say(room, f"/start {code}")
        _wait_text(rig, room, phone, "You're paired")
        assert not any("hello before" in t for t in rig.bot_texts(room, phone))
        listed = {u["user_id"]: u for u in rig.daemon.cli_json("users", "ls")}
        assert [a for a in listed[OWNER]["accounts"] if a.startswith("matrix:")]

        # The owner's turn: the owner's id on it, and the chat noted as where they are.
        phone.say(room, "hi from my phone")
        _wait_text(rig, room, phone, "echo: hi from my phone")
        users = rig.query("SELECT DISTINCT user_id FROM messages WHERE role = 'user'")
        assert [u for (u,) in users] == [OWNER]

        added = rig.daemon.cli_json(
            "schedule",
            "add",
            "--user",
            str(OWNER),
            "--message",
            "Water the plants",
            "--after",
            "1s",
        )
        _wait_text(rig, room, phone, "Water the plants")
        _sent_once(rig, added["id"])
        assert len(_wait_text(rig, room, phone, "Water the plants")) == 1
        assert not [m for m in rig.tg.sent if "Water the plants" in m["plain_text"]]


def test_a_reminder_set_on_telegram_reaches_matrix_when_notices_say_so(
    tmp_path: Path, cast: Cast
) -> None:
    with matrix_rig(tmp_path, cast, extra=SCHEDULE, AGENTD_ACCESS__NOTICES="matrix") as rig:
        room = rig.dm()
        rig.owner.say(room, "I am here on Matrix")  # `[matrix] owner`: linked when first met
        _wait_text(rig, room, rig.owner, "echo: I am here on Matrix")
        # Set on Telegram, which is then where the owner last wrote.
        args = {"message": "Stretch your legs", "after": "2s"}
        rig.llm.enqueue_tool_use("schedule", args, "toolu_sched")
        rig.llm.enqueue_text("I'll remind you.")
        rig.tg.add_message(OWNER, OWNER, "remind me in 2 seconds to stretch")
        rig.tg.wait_until(
            lambda: any("I'll remind you." in m["plain_text"] for m in rig.tg.sent),
            60,
            "the reminder set",
        )
        _wait_text(rig, room, rig.owner, "Stretch your legs")
        [sched] = rig.daemon.cli_json("schedule", "ls", "--all", "--user", str(OWNER))
        _sent_once(rig, sched["id"])
        assert len(_wait_text(rig, room, rig.owner, "Stretch your legs")) == 1
        # On Telegram only the answer that set it (which names it), never the reminder.
        assert not [m for m in rig.tg.sent if m["plain_text"] == "Stretch your legs"]
        accounts = rig.query("SELECT user_id, channel FROM user_accounts")
        assert [tuple(r) for r in accounts] == [(OWNER, "matrix")]


def test_a_revoked_telegram_token_is_told_on_matrix_before_agentd_stops(
    tmp_path: Path, cast: Cast
) -> None:
    """Telegram stops taking the bot's token while agentd runs: the process stops (what it
    would send to Telegram waits for the fix), and the owner reads why on Matrix first."""
    with matrix_rig(tmp_path, cast) as rig:
        room = rig.dm()
        rig.owner.say(room, "hello from matrix")
        rig.wait_answer(room, "echo: hello from matrix")  # the owner's Matrix chat is known
        rig.tg.token = "999999:revoked-elsewhere"  # every call with agentd's token: 401

        def told() -> list[str]:
            return [t for t in rig.bot_texts(room) if "agentd stopped" in t]

        [notice] = wait_for(told, 60, "the notice on Matrix")
        assert rig.daemon.proc is not None and rig.daemon.proc.wait(60) == 1
        assert "Telegram rejected the bot token; check TELEGRAM_BOT_TOKEN" in notice
        sent = rig.query(
            "SELECT status FROM workflow_instances WHERE id LIKE 'channel-stopped:telegram:%'"
        )
        assert [row[0] for row in sent] == ["complete"]
        assert not [m for m in rig.tg.sent if "agentd stopped" in m["plain_text"]]


def test_a_telegram_token_refused_at_start_is_told_on_matrix_and_nothing_else_runs(
    tmp_path: Path, cast: Cast
) -> None:
    """agentd starts with a Telegram token Telegram no longer takes: it does not run (exit 78,
    as any configuration problem), the owner reads why on Matrix, and the turn a kill -9 left
    unfinished is neither run nor ended then: it answers once the token is good again."""
    with matrix_rig(tmp_path, cast) as rig:
        room = rig.dm()
        rig.owner.say(room, "hello from matrix")
        rig.wait_answer(room, "echo: hello from matrix")  # the owner's Matrix chat is known
        rig.llm.hold()
        rig.owner.say(room, "left unfinished")
        rig.llm.wait_for_held(1, timeout=60)
        rig.daemon.kill9()
        rig.llm.release()
        token = rig.tg.token
        rig.tg.token = "999999:revoked-elsewhere"  # every call with agentd's token: 401
        rig.daemon.start(wait_ready=False)
        assert rig.daemon.proc is not None and rig.daemon.proc.wait(120) == 78

        [notice] = [t for t in rig.bot_texts(room) if "agentd stopped" in t]
        assert "Telegram rejected the bot token; check TELEGRAM_BOT_TOKEN" in notice
        statuses = dict(rig.query("SELECT workflow, status FROM workflow_instances"))
        assert statuses["notice"] == "complete"
        unfinished = rig.query(
            "SELECT status FROM workflow_instances WHERE workflow = 'turn' "
            "AND json_extract(input, '$.text') = 'left unfinished'"
        )
        assert [row[0] for row in unfinished] == ["running"]

        rig.tg.token = token
        rig.daemon.start()
        rig.wait_answer(room, "echo: left unfinished")
        assert len([t for t in rig.bot_texts(room) if "agentd stopped" in t]) == 1


def test_a_matrix_login_logged_out_elsewhere_is_told_on_telegram(
    tmp_path: Path, cast: Cast
) -> None:
    """The bot's account is logged out everywhere while agentd runs: the owner reads why on
    Telegram, and agentd stops."""
    with matrix_rig(tmp_path, cast) as rig:
        _owner_writes_on_telegram(rig)
        room = rig.dm()
        rig.owner.say(room, "still here")
        rig.wait_answer(room, "echo: still here")  # Matrix syncing, and where the owner wrote
        bot = cast.server.login("bot", cast.bot_password)
        status, _ = http(
            "POST", f"{cast.server.url}/_matrix/client/v3/logout/all", body={}, headers=bot.auth
        )
        assert status == 200

        def told() -> list[str]:
            return [m["plain_text"] for m in rig.tg.sent if "agentd stopped" in m["plain_text"]]

        [notice] = wait_for(told, 60, "the notice on Telegram")
        assert rig.daemon.proc is not None and rig.daemon.proc.wait(60) == 1
        assert "the Matrix homeserver no longer accepts agentd's login" in notice
        assert "MATRIX_PASSWORD" in notice and cast.bot_password not in notice


def test_a_reply_met_by_a_logged_out_matrix_login_is_sent_after_the_restart(
    tmp_path: Path, cast: Cast
) -> None:
    """The bot's account is logged out while a turn works, and the turn's reply is the first
    to meet it (the sync is held for 30 s): the reply is not errored; agentd tells the owner on
    Telegram and stops, and the next start (a new login with the password) sends it, once."""
    with matrix_rig(tmp_path, cast, AGENTD_MATRIX__SYNC_TIMEOUT="30") as rig:
        _owner_writes_on_telegram(rig)
        room = rig.dm()
        rig.owner.say(room, "hello from matrix")
        rig.wait_answer(room, "echo: hello from matrix")
        rig.llm.hold()
        rig.owner.say(room, "answer me later")
        rig.llm.wait_for_held(1, timeout=60)
        bot = cast.server.login("bot", cast.bot_password)
        status, _ = http(
            "POST", f"{cast.server.url}/_matrix/client/v3/logout/all", body={}, headers=bot.auth
        )
        assert status == 200
        rig.llm.release()

        assert rig.daemon.proc is not None and rig.daemon.proc.wait(60) == 1
        told = [m["plain_text"] for m in rig.tg.sent if "agentd stopped" in m["plain_text"]]
        assert len(told) == 1 and "no longer accepts agentd's login" in told[0]
        refused = rig.query(
            "SELECT a.outcome FROM workflow_attempts a JOIN workflow_steps s "
            "USING (instance_id, ordinal) JOIN workflow_instances i ON i.id = a.instance_id "
            "WHERE s.name LIKE 'send%' AND i.status IN ('running', 'waiting')"
        )
        assert [row[0] for row in refused] == ["failed"]
        assert "echo: answer me later" not in rig.bot_texts(room)

        rig.daemon.start()
        rig.wait_answer(room, "echo: answer me later")
        assert rig.bot_texts(room).count("echo: answer me later") == 1
        assert not rig.query("SELECT 1 FROM workflow_instances WHERE status = 'errored'")


def test_a_matrix_password_refused_at_start_is_told_on_telegram(tmp_path: Path, cast: Cast) -> None:
    """The bot's Matrix password changed while agentd was down: the login at start is refused
    (403 M_FORBIDDEN, the spec's answer to wrong credentials), so agentd does not run, and
    the owner reads why on Telegram, without the password."""
    with matrix_rig(tmp_path, cast) as rig:
        _owner_writes_on_telegram(rig)
        assert rig.daemon.stop() == 0
        rig.daemon.env["MATRIX_PASSWORD"] = "not-the-password-any-more"
        rig.daemon.start(wait_ready=False)
        assert rig.daemon.proc is not None and rig.daemon.proc.wait(120) == 78

        [notice] = [m["plain_text"] for m in rig.tg.sent if "agentd stopped" in m["plain_text"]]
        assert "the Matrix homeserver refused agentd's login" in notice
        assert "MATRIX_PASSWORD" in notice and "not-the-password-any-more" not in notice
