"""End to end: `agentd run` as a subprocess against the Telegram and Anthropic fakes."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.agent.turn import LLM_ERROR_REPLY
from agentd.durable.store import OPEN_STATUSES
from agentd.media.voice import no_backend_reply
from tests.daemon_process import (
    API_KEY,
    OWNER,
    TOKEN,
    Daemon,
    daemon_env,
    poll,
    running_daemon,
    send_marker,
)
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import last_user_text


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram.running() as server:
        yield server


@pytest.fixture
def llm() -> Iterator[FakeAnthropic]:
    with FakeAnthropic.running() as server:
        yield server


@pytest.fixture
def env(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic) -> dict[str, str]:
    return daemon_env(tmp_path, tg.base_url, llm.base_url)


def texts(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m["plain_text"] for m in tg.sent if m["chat_id"] == chat_id]


def answered_in_turn(daemon: Daemon, tg: FakeTelegram, asked: list[str]) -> None:
    """Send the last of `asked` as a marker: the owner saw each answered once, in order, and
    every turn is complete."""
    send_marker(tg, OWNER, asked[-1])
    assert texts(tg, OWNER) == [f"echo: {a}" for a in asked]
    daemon.wait_idle()
    statuses = daemon.query("SELECT DISTINCT status FROM workflow_instances")
    assert [r[0] for r in statuses] == ["complete"]


def test_a_text_turn(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict) -> None:
    env["AGENTD_TOOLS__DISABLED"] = (
        '["current_time", "fetch_url", "remember", "search_memory", "search_docs", '
        '"schedule", "list_schedules", "cancel_schedule", "save_chat_document", '
        '"list_files", "read_file", "write_file", "edit_file", "delete_file", "send_file", '
        '"save_sent_file", "shell", "delegate", "watch_add", "watch_list", "watch_remove"]'
    )
    llm.enqueue_delay(1.0)  # the model thinks for longer than chat.progress_delay
    llm.enqueue_text("Hello **owner**! Nice to meet you.")
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "hi there")
        sent = tg.wait_for_sent(1, timeout=20)
        assert sent[0]["text"] == "Hello <b>owner</b>! Nice to meet you."
        assert sent[0]["parse_mode"] == "HTML"
        assert sent[0]["reply_to_message_id"] is not None
        daemon.wait_for_instances(1)
        history = daemon.cli_json("history", "--chat", str(OWNER))
        assert [(m["role"], m["content"]) for m in history] == [
            ("user", "hi there"),
            ("assistant", "Hello **owner**! Nice to meet you."),
        ]
        assert history[1]["telegram_message_ids"] == [sent[0]["message_id"]]
        assert history[0]["created_at"].endswith("Z")
        # The model saw the system prompt with the time and the no-tools line, and our message.
        body = llm.requests[0]["body"]
        system = "\n".join(b["text"] for b in body["system"])
        assert "No tools are currently available." in system
        assert body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        assert "tools" not in body
        newest = body["messages"][-1]["content"]
        assert newest[0]["text"] == "hi there"
        # The time changes per call, so it comes last, after every cache breakpoint.
        assert "Current date and time: 20" in newest[-1]["text"]
        assert "Current date and time" not in system
        assert daemon.query("SELECT COUNT(*) FROM llm_usage")[0][0] == 1
        audit = daemon.query("SELECT kind, detail FROM audit")
        assert [r[0] for r in audit] == ["turn"]
        assert "hi there" not in audit[0][1]
        # A typing indicator was shown while the model thought.
        assert any(a["chat_id"] == OWNER for a in tg.actions)
        assert daemon.stop() == 0
    log = daemon.log()
    assert TOKEN not in log and API_KEY not in log
    # One line per turn at INFO (steps are DEBUG; the journal has their times).
    assert '"event": "workflow complete"' in log and '"instance_id": "tg-update-' in log
    assert '"event": "step"' not in log


def test_stranger_gets_nothing_and_costs_nothing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    with running_daemon(tmp_path, env) as daemon:
        stranger = tg.add_message(999, 999, "let me in")
        tg.add_message(OWNER, OWNER, "hello")
        tg.wait_for_sent(1, timeout=20)
        tg.wait_for_confirmed(stranger, timeout=10)
        # A later update, answered: the stranger's was handled (and anything it started ran).
        assert [m["plain_text"] for m in send_marker(tg, OWNER)] == ["echo: hello"]
        assert texts(tg, 999) == []
        assert [last_user_text(r["body"]) for r in llm.requests] == ["hello", "marker"]
        rows = daemon.query("SELECT kind, user_id, detail FROM audit WHERE kind='access_denied'")
        assert [(r[0], r[1]) for r in rows] == [("access_denied", 999)]
        assert "let me in" not in rows[0][2]
        assert daemon.query("SELECT COUNT(*) FROM messages WHERE chat_id = 999")[0][0] == 0
        assert daemon.query("SELECT COUNT(*) FROM workflow_instances")[0][0] == 2  # owner's


def test_llm_overloaded_twice_then_answers(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    llm.enqueue_error(529)
    llm.enqueue_error(429, retry_after=0.2)
    llm.enqueue_text("finally")
    with running_daemon(tmp_path, env):
        tg.add_message(OWNER, OWNER, "are you there?")
        tg.wait_for_sent(1, timeout=20)
        assert texts(tg, OWNER) == ["finally"]
        assert len(llm.requests) == 3


def test_llm_down_gives_an_error_reply_and_keeps_the_message(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    for _ in range(4):  # retries=3 → four attempts
        llm.enqueue_error(500)
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "hello?")
        tg.wait_for_sent(1, timeout=20)
        assert texts(tg, OWNER) == [LLM_ERROR_REPLY]
        daemon.wait_for_instances(1, status="errored")
        history = daemon.cli_json("history")
        assert [(m["role"], m["content"]) for m in history] == [
            ("user", "hello?"),
            ("assistant", LLM_ERROR_REPLY),
        ]
        errored = daemon.cli_json("workflows", "ls", "--status", "errored")
        assert len(errored) == 1 and "api_error (HTTP 500)" in errored[0]["error"]
        assert daemon.query("SELECT kind FROM audit")[0][0] == "turn_error"
        shown = daemon.cli_json("workflows", "show", errored[0]["id"])
        llm_step = next(s for s in shown["steps"] if s["name"] == "llm#1")
        assert llm_step["status"] == "failed"


def test_llm_bad_request_is_not_retried(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    llm.enqueue_error(400, "invalid_request_error", "messages: bad")
    with running_daemon(tmp_path, env):
        tg.add_message(OWNER, OWNER, "hello?")
        tg.wait_for_sent(1, timeout=20)
        assert texts(tg, OWNER) == [LLM_ERROR_REPLY]
        assert len(llm.requests) == 1


def test_kill_9_while_the_llm_thinks_then_restart(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    daemon = Daemon(tmp_path, env).start()
    try:
        llm.hold()
        tg.add_message(OWNER, OWNER, "what is 6 x 7?")
        llm.wait_for_requests(1, timeout=20)
        daemon.kill9()
        llm.release()
        llm.reset()
        llm.enqueue_text("42")
        daemon.start()
        tg.wait_for_sent(1, timeout=20)
        daemon.wait_for_instances(1)
        [(turn,)] = daemon.query("SELECT id FROM workflow_instances")
        # A later message's reply: the resumed turn, and any second turn the redelivered
        # update could have started, are over.
        assert [m["plain_text"] for m in send_marker(tg, OWNER)] == ["42"]
        daemon.wait_idle()  # the marker's turn saves its reply after sending it
        rows = daemon.query("SELECT role, content FROM messages ORDER BY id")
        assert [tuple(r) for r in rows] == [
            ("user", "what is 6 x 7?"),
            ("assistant", "42"),
            ("user", "marker"),
            ("assistant", "echo: marker"),
        ]
        attempts = daemon.query(
            "SELECT s.name, a.attempt, a.outcome FROM workflow_attempts a JOIN workflow_steps s "
            "USING (instance_id, ordinal) WHERE instance_id = ? ORDER BY a.ordinal, a.attempt",
            (turn,),
        )
        assert [tuple(r) for r in attempts] == [
            ("rate-check", 1, "complete"),  # first: over a limit, not even a photo is looked at
            ("save-user", 1, "complete"),
            ("load-history", 1, "complete"),
            ("recall", 1, "complete"),
            # The kill -9 interrupted attempt 1: an at-least-once step journals nothing before
            # its call (R-DUR-7 asks that only of at-most-once), so the re-run is attempt 1.
            ("llm#1", 1, "complete"),
            ("send#1", 1, "complete"),
            ("save-reply", 1, "complete"),
            ("audit", 1, "complete"),
            ("schedule-summary", 1, "complete"),
        ]
        assert daemon.query("SELECT COUNT(*) FROM updates")[0][0] == 2  # and the marker's
    finally:
        daemon.stop()


def journal_as_older_agentd(db_path: Path, turn: str) -> None:
    """The turn's journal as agentd wrote it before the rate check came first: save-user, then
    rate-check (the daemon is down: nothing else writes)."""
    conn = sqlite3.connect(db_path)
    try:
        first = conn.execute(
            "SELECT name FROM workflow_steps WHERE instance_id = ? AND ordinal <= 2 "
            "ORDER BY ordinal",
            (turn,),
        ).fetchall()
        assert [r[0] for r in first] == ["rate-check", "save-user"]
        with conn:
            for table in ("workflow_steps", "workflow_attempts"):
                for old, new in ((1, -1), (2, 1), (-1, 2)):
                    conn.execute(
                        f"UPDATE {table} SET ordinal = ? WHERE instance_id = ? AND ordinal = ?",
                        (new, turn, old),
                    )
    finally:
        conn.close()


def test_a_turn_journaled_before_the_rate_check_came_first_replays_after_an_upgrade(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    """A turn older agentd left unfinished keeps its order (turn.media_first): it is answered,
    not parked as a journal that diverged."""
    daemon = Daemon(tmp_path, env).start()
    try:
        llm.hold()
        tg.add_message(OWNER, OWNER, "what is 6 x 7?")
        llm.wait_for_requests(1, timeout=20)
        daemon.kill9()
        llm.release()
        llm.reset()
        llm.enqueue_text("42")
        [(turn,)] = daemon.query("SELECT id FROM workflow_instances")
        journal_as_older_agentd(daemon.db_path, turn)
        daemon.start()
        tg.wait_for_sent(1, timeout=20)
        assert [m["plain_text"] for m in send_marker(tg, OWNER)] == ["42"]
        daemon.wait_idle()
        steps = daemon.query(
            "SELECT name FROM workflow_steps WHERE instance_id = ? ORDER BY ordinal", (turn,)
        )
        assert [r[0] for r in steps][:3] == ["save-user", "rate-check", "load-history"]
        status = daemon.query("SELECT status FROM workflow_instances WHERE id = ?", (turn,))
        assert status[0][0] == "complete"
    finally:
        daemon.stop()


def test_redelivered_update_starts_one_turn(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    update_id = tg.add_message(OWNER, OWNER, "only once please")
    tg.add_update(tg.pending_updates[0])  # Telegram delivers the same update_id again
    with running_daemon(tmp_path, env) as daemon:
        tg.wait_for_sent(1, timeout=20)
        daemon.wait_for_instances(1)
        # A later message's reply: both deliveries of the update were taken before it.
        assert len(send_marker(tg, OWNER)) == 1
        assert [last_user_text(r["body"]) for r in llm.requests] == ["only once please", "marker"]
        rows = daemon.query("SELECT update_id FROM updates ORDER BY update_id")
        assert [r[0] for r in rows] == [update_id, update_id + 1]  # + the marker; none twice
        rows = daemon.query("SELECT content FROM messages WHERE role='user' ORDER BY id")
        assert [r[0] for r in rows] == ["only once please", "marker"]


def test_a_malformed_update_does_not_block_the_others(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    bad = tg.add_update({"message": {"message_id": "x", "chat": "garbage", "from": 5}})
    tg.add_message(OWNER, OWNER, "still there?")
    with running_daemon(tmp_path, env) as daemon:
        tg.wait_for_sent(1, timeout=20)
        assert texts(tg, OWNER) == ["echo: still there?"]
        # Updates are stored as Telegram sent them and classified from that JSON, so one that
        # makes no sense is recorded as malformed and ignored, and acknowledged with the rest.
        rows = daemon.query("SELECT update_id, kind, outcome FROM updates ORDER BY update_id")
        assert tuple(rows[0]) == (bad, "malformed", "ignore")


def test_interleaved_chats_keep_their_order(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    with running_daemon(tmp_path, env) as daemon:
        for i in range(10):
            tg.add_message(OWNER, OWNER, f"a{i}")
            tg.add_message(43, 43, f"b{i}")
        tg.wait_for_sent(20, timeout=60)
        daemon.wait_for_instances(20)
        assert texts(tg, OWNER) == [f"echo: a{i}" for i in range(10)]
        assert texts(tg, 43) == [f"echo: b{i}" for i in range(10)]
        for chat, prefix in ((OWNER, "a"), (43, "b")):
            stored = daemon.cli_json("history", "--chat", str(chat), "--limit", "100")
            users = [m["content"] for m in stored if m["role"] == "user"]
            assert users == [f"{prefix}{i}" for i in range(10)]


def test_telegram_trouble_does_not_break_a_turn(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    tg.disable_method("sendChatAction")  # an old or partial Bot API server
    tg.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    llm.enqueue_text("fine anyway")
    with running_daemon(tmp_path, env):
        tg.add_message(OWNER, OWNER, "hi")
        tg.wait_for_sent(1, timeout=20)
        assert texts(tg, OWNER) == ["fine anyway"]
        calls = tg.calls("sendMessage")
        assert len(calls) == 2  # the 429, then the retry after retry_after
        assert calls[1]["time"] - calls[0]["time"] >= 0.9


def test_rejected_formatting_falls_back_to_plain_text(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    tg.fail_next("sendMessage", 400, "Bad Request: can't parse entities: unsupported start tag")
    llm.enqueue_text("**bold** answer")
    with running_daemon(tmp_path, env):
        tg.add_message(OWNER, OWNER, "hi")
        sent = tg.wait_for_sent(1, timeout=20)
        assert sent[0]["parse_mode"] is None
        assert sent[0]["text"] == "**bold** answer"


def test_long_answers_are_split_in_order(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    paragraphs = [f"Paragraph {i}: " + "word " * 300 for i in range(6)]
    llm.enqueue_text("\n\n".join(paragraphs))
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "tell me a long story")
        daemon.wait_for_instances(1)
        parts = texts(tg, OWNER)
        assert len(parts) >= 2 and all(len(p) <= 4096 for p in parts)
        joined = "\n\n".join(parts)
        assert [p.split(":")[0] for p in joined.split("\n\n")] == [
            f"Paragraph {i}" for i in range(6)
        ]
        stored = daemon.cli_json("history")
        assert len(stored[-1]["telegram_message_ids"]) == len(parts)


def test_unsupported_kinds_get_a_polite_reply(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    with running_daemon(tmp_path, env) as daemon:
        tg.add_sticker(OWNER, OWNER)
        tg.add_voice(OWNER, OWNER)
        tg.wait_for_sent(2, timeout=20)
        assert texts(tg, OWNER) == [
            "Sorry, I can't handle sticker messages yet. Please send text.",
            no_backend_reply(),  # voice notes are understood once a backend is set up
        ]
        assert llm.requests == []
        assert daemon.query("SELECT COUNT(*) FROM messages WHERE role='user'")[0][0] == 2


def test_second_runner_is_refused(tmp_path: Path, env: dict) -> None:
    with running_daemon(tmp_path, env) as first:
        second = first.cli("run")
        assert second.returncode == 3
        assert "already running" in second.stderr and str(first.proc.pid) in second.stderr


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[llm]\nmax_steps = "many"\n', "llm.max_steps"),
        ('[access]\nallow_groups = "maybe"\n', "access.allow_groups"),
        ('[telegram]\nmax_backoff = "soon"\n', "telegram.max_backoff"),
        ('[matrix]\nhomeserver = "https://m.example"\nuser_id = "agentd"\n', "matrix.user_id"),
        ("[llm]\nmodle = 'x'\n", "llm.modle"),
        ('[telegram]\ntoken = "123:abc"\n', "telegram.token"),
        ("[agent]\ntimezone = 'Mars/Olympus'\n", "agent.timezone"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_invalid_config_exits_78_naming_the_key(tmp_path: Path, toml: str, key: str) -> None:
    config = tmp_path / "agentd.toml"
    config.write_text(toml)
    daemon = Daemon(tmp_path, daemon_env(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9"))
    result = daemon.cli("run", "--config", str(config))
    assert result.returncode == 78
    assert key in result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_env_override_exits_78_naming_the_variable(tmp_path: Path) -> None:
    env = daemon_env(
        tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9", AGENTD_ENGINE__CONCURRENCY="0"
    )
    result = Daemon(tmp_path, env).cli("history")
    assert result.returncode == 78 and "engine.concurrency" in result.stderr
    assert "AGENTD_ENGINE__CONCURRENCY" in result.stderr


def test_sigterm_leaves_a_waiting_turn_resumable(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    daemon = Daemon(tmp_path, env).start()
    try:
        llm.hold()
        tg.add_message(OWNER, OWNER, "slow question")
        llm.wait_for_requests(1, timeout=20)
        assert daemon.stop() == 0  # grace 2 s, the model still holds: the step is abandoned
        status = daemon.query("SELECT status FROM workflow_instances")[0][0]
        assert status == "running"
        llm.release()
        llm.reset()
        llm.enqueue_text("slow answer")
        daemon.start()
        tg.wait_for_sent(1, timeout=20)
        assert texts(tg, OWNER) == ["slow answer"]
        assert json.loads(daemon.cli("history", "--json").stdout)[-1]["content"] == "slow answer"
    finally:
        daemon.stop()


def test_a_rejected_token_exits_78_with_a_clear_message(tmp_path: Path, llm: FakeAnthropic) -> None:
    with FakeTelegram.running(token="999:the-real-token") as strict:
        env = daemon_env(tmp_path, strict.base_url, llm.base_url)
        result = Daemon(tmp_path, env).cli("run")
    assert result.returncode == 78
    assert "rejected the bot token" in result.stderr and "Traceback" not in result.stderr
    assert TOKEN not in result.stderr


def test_a_token_under_its_own_name_serves_and_a_revoked_one_is_named(
    tmp_path: Path, llm: FakeAnthropic
) -> None:
    """`[telegram] token_env` names the variable the token is read from: the daemon answers
    with it; when Telegram later rejects the token, the log and the next start name that
    variable, not the default one, so the owner fixes the right secret."""
    with FakeTelegram.running(token=TOKEN) as strict:
        env = daemon_env(tmp_path, strict.base_url, llm.base_url)
        env["HOME_BOT_TOKEN"] = env.pop("TELEGRAM_BOT_TOKEN")
        env["AGENTD_TELEGRAM__TOKEN_ENV"] = "HOME_BOT_TOKEN"
        daemon = Daemon(tmp_path, env).start()
        try:
            send_marker(strict, OWNER, "hello")
            strict.token = "999:a-new-token-from-botfather"
            assert daemon.proc is not None
            assert daemon.proc.wait(30) == 1
            assert "rejected the bot token (401); check HOME_BOT_TOKEN" in daemon.log()
            assert "TELEGRAM_BOT_TOKEN" not in daemon.log() and TOKEN not in daemon.log()
            again = daemon.cli("run")
        finally:
            daemon.stop()
    assert again.returncode == 78 and "check HOME_BOT_TOKEN" in again.stderr
    assert TOKEN not in again.stderr


def test_a_reply_met_by_a_revoked_token_is_sent_after_the_fix_not_lost(
    tmp_path: Path, tg: FakeTelegram, env: dict
) -> None:
    """The token is revoked while a turn works: its reply's sendMessage is the first call to
    meet the 401 (the long poll still hangs). agentd stops (exit 1) rather than error the
    turn; the reply waits in the journal, counted as no possible duplicate, and goes out once
    agentd starts again with a token Telegram takes."""
    daemon = Daemon(tmp_path, env).start()
    try:
        tg.fail_next("sendMessage", 401, times=None)
        tg.add_message(OWNER, OWNER, "still there?")
        assert daemon.proc is not None
        assert daemon.proc.wait(30) == 1
        assert "Telegram rejected the bot token" in daemon.log()
        # Open (waiting for the restart, or still running if agentd stopped first), with the
        # send's attempt journaled as refused, not as one that may have landed.
        assert daemon.query("SELECT status FROM workflow_instances")[0][0] in OPEN_STATUSES
        attempts = daemon.query(
            "SELECT a.outcome, a.error FROM workflow_attempts a JOIN workflow_steps s "
            "USING (instance_id, ordinal) WHERE s.name LIKE 'send%'"
        )
        assert [(r[0], "rejected the bot token" in r[1]) for r in attempts] == [("failed", True)]
        assert texts(tg, OWNER) == []
        tg.clear_faults()
        daemon.start()
        answered_in_turn(daemon, tg, ["still there?", "and now?"])
        uncertain = "SELECT COUNT(*) FROM audit WHERE kind = 'send_uncertain'"
        assert daemon.query(uncertain)[0][0] == 0
    finally:
        daemon.stop()


def test_a_reply_during_a_telegram_outage_is_sent_when_it_ends_across_a_kill(
    tmp_path: Path, tg: FakeTelegram, env: dict
) -> None:
    """Telegram answers 502 for longer than the session's retries: the reply is not given up
    (it used to end "undelivered"); its step tries again after 5 s, then 10 s as a durable
    sleep that a kill -9 keeps, and the reply goes out once when Telegram is back."""
    env["AGENTD_TELEGRAM__SEND_RETRIES"] = "1"  # two calls per attempt: the outage is 4 calls
    env["AGENTD_TELEGRAM__MAX_BACKOFF"] = "0.1"
    daemon = Daemon(tmp_path, env).start()
    try:
        tg.fail_next("sendMessage", 502, times=4)
        tg.add_message(OWNER, OWNER, "are you there?")
        poll(
            lambda: daemon.query(
                "SELECT 1 FROM workflow_instances WHERE status NOT IN ('queued', 'running')"
            ),
            60,
            "the turn waiting out the outage",
        )
        [(status,)] = daemon.query("SELECT status FROM workflow_instances")
        assert status == "sleeping", daemon.log()[-3000:]
        daemon.kill9()
        daemon.start()
        answered_in_turn(daemon, tg, ["are you there?", "back again"])
        sent = daemon.query("SELECT COUNT(*) FROM messages WHERE role = 'assistant'")[0][0]
        assert sent == 2
    finally:
        daemon.stop()


def test_an_approval_card_during_a_telegram_outage_is_sent_when_it_ends(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    """The card asking the owner meets an outage longer than the session's retries: it is
    tried again as a reply is (it used to be dropped, so the owner never saw it and the call
    waited unasked until it timed out), and Approve on it runs the call once."""
    env["AGENTD_TELEGRAM__SEND_RETRIES"] = "1"  # two calls per attempt: the outage is 4 calls
    env["AGENTD_TELEGRAM__MAX_BACKOFF"] = "0.1"
    llm.enqueue_tool_use("delete_file", {"path": "old-notes.txt"}, "toolu_card1")
    llm.enqueue_text("Done, as you approved.")
    with running_daemon(tmp_path, env) as daemon:
        tg.fail_next("sendMessage", 502, times=4)
        tg.add_message(OWNER, OWNER, "delete old-notes.txt")
        card = tg.wait_until(
            lambda: next((m for m in tg.sent if m.get("reply_markup")), None), 90, "the card"
        )
        assert "delete_file" in card["plain_text"]
        approve = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        tg.add_callback_query(OWNER, OWNER, card["message_id"], approve)
        tg.wait_until(
            lambda: any(m["plain_text"] == "Done, as you approved." for m in tg.sent),
            60,
            "the answer",
        )
        assert len(tg.calls("sendMessage")) >= 5  # the four refused, then the card
        assert [m for m in tg.sent if m.get("reply_markup")] == [card]
        daemon.wait_idle()
        decided = "SELECT status, expires_at FROM approvals"
        [(status, expires_at)] = daemon.query(decided)
        assert status == "approved"
        # The wait ends with the approval's lifetime, not a lifetime after the card, which the
        # outage delayed by 15 s (5 s and 10 s between tries); the clock is read twice.
        [(deadline,)] = daemon.query(
            "SELECT wake_at FROM workflow_steps WHERE name = 'wait:toolu_card1'"
        )
        assert deadline < expires_at + 1.0


def test_a_reply_that_may_have_landed_is_not_re_sent_for_hours(
    tmp_path: Path, tg: FakeTelegram, env: dict
) -> None:
    """Every answer to the reply's sendMessage is cut (Telegram may have sent it): the
    session's retries are counted as possible duplicates, and the step does not add more
    for hours as it does for an outage: the turn ends with the reply undelivered."""
    env["AGENTD_TELEGRAM__SEND_RETRIES"] = "1"
    env["AGENTD_TELEGRAM__MAX_BACKOFF"] = "0.1"
    with running_daemon(tmp_path, env) as daemon:
        tg.fail_next("sendMessage", mode="malformed", times=None)
        tg.add_message(OWNER, OWNER, "hello?")
        daemon.wait_for_instances(1, status="errored")
        assert len(tg.calls("sendMessage")) == 2  # the first call and the session's retry
        uncertain = "SELECT COUNT(*) FROM audit WHERE kind = 'send_uncertain'"
        assert daemon.query(uncertain)[0][0] == 2


def test_an_unwritable_database_path_is_a_clear_error(tmp_path: Path, env: dict) -> None:
    env["AGENTD_STORAGE__PATH"] = "/proc/agentd/agentd.db"
    result = Daemon(tmp_path, env).cli("run")
    assert result.returncode == 1
    assert "cannot open the database" in result.stderr and "Traceback" not in result.stderr


def test_kill_9_in_a_burst_over_three_chats_loses_and_repeats_nothing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, env: dict
) -> None:
    """Concurrent chats' journal writes share commits (group commit): a kill -9 between them
    loses no message and answers none twice, beyond the counted send window."""
    chats = [OWNER, 43, 44]
    env["AGENTD_ACCESS__ALLOWED_USER_IDS"] = str(chats)
    daemon = Daemon(tmp_path, env).start()
    try:
        for i in range(6):
            for chat in chats:
                tg.add_message(chat, chat, f"m{chat}-{i}")
        tg.wait_until(lambda: len(tg.sent) >= 5, 30, "the burst under way")
        daemon.kill9()
        daemon.start()
        deadline = time.monotonic() + 60
        sql = "SELECT COUNT(*) FROM workflow_instances WHERE workflow = 'turn' AND status = ?"
        while daemon.query(sql, ("complete",))[0][0] < 18:
            assert time.monotonic() < deadline, daemon.query(
                "SELECT id, status FROM workflow_instances"
            )
            time.sleep(0.05)
        for chat in chats:
            asked = [f"m{chat}-{i}" for i in range(6)]
            stored = daemon.query(
                "SELECT role, content FROM messages WHERE chat_id = ? ORDER BY id", (chat,)
            )
            assert [r[1] for r in stored if r[0] == "user"] == asked
            assert sorted(r[1] for r in stored if r[0] == "assistant") == [
                f"echo: {a}" for a in asked
            ]
            assert sorted(set(texts(tg, chat))) == [f"echo: {a}" for a in asked]
        repeated = len(tg.sent) - len({m["plain_text"] for m in tg.sent})
        counted = daemon.query("SELECT COUNT(*) FROM audit WHERE kind = 'send_uncertain'")[0][0]
        assert repeated <= counted  # a re-sent answer is always a counted one
    finally:
        daemon.stop()
