"""End to end: every model call is held by the [limits] daily budgets and written to the ledger
(llm_usage) once: a turn's later calls, summaries, and the structured calls that failed."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from aiohttp import web
from typer.testing import CliRunner

from agentd.cli.app import app
from agentd.db import open_sync
from agentd.llm.cut import prompt_chars
from agentd.llm.estimate import tokens_in
from tests.daemon_process import OWNER, Daemon, daemon_env, poll, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes._server import FakeServer
from tests.fakes.anthropic import Hang, last_user_text

TOOLS = '[tools]\nplugins = ["tests.plugins.e2e_tools"]\n'


def usage_of(total: int) -> dict[str, Any]:
    """An answer's usage as the API reports it: `total` tokens, a tenth of them output."""
    return {
        "input_tokens": total - total // 10,
        "output_tokens": total // 10,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    }


def test_a_turn_makes_no_model_call_past_the_budget(tmp_path: Path) -> None:
    """The turn's first call spends the budget; the tool it asked for runs, but the call that
    would read its result is not made, and the user is told why."""
    (tmp_path / "agentd.toml").write_text(TOOLS)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
            AGENTD_LIMITS__DAILY_TOKENS="1000",
        )
        llm.enqueue_tool_use(
            "count_words",
            {"text": "a b"},
            "toolu_b1",
            text_before="Counting…",
            usage=usage_of(5000),
        )
        llm.enqueue_text("Two words.")  # the answer a second call would have had
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "count these")
            reply = tg.wait_for_sent(1, timeout=30)[0]["plain_text"]
            daemon.wait_for_instances(1)
            assert reply.startswith("Counting…")
            assert (
                "Stopped before model call 2: today's token budget for you ([limits] "
                "daily_tokens, 1,000) is spent" in reply
            )
            assert len(llm.requests) == 1
            assert daemon.effects() == ["count_words a b"]
            rows = daemon.query("SELECT step, input_tokens + output_tokens FROM llm_usage")
            assert [tuple(r) for r in rows] == [("llm#1", 5000)]
            steps = [r[0] for r in daemon.query("SELECT name FROM workflow_steps ORDER BY ordinal")]
            assert "limits#2" in steps and "llm#2" not in steps


def test_a_paid_answer_is_counted_when_agentd_dies_before_journaling_it(tmp_path: Path) -> None:
    """agentd dies (kill -9) as it commits the journal's row for the turn's answer
    (tests/plugins/crash_tools.py): the answer was paid for, so its tokens are in the ledger
    already; the restarted turn asks the model again, paid again, and that answer has its row
    too: two rows for the two calls, none written twice."""
    (tmp_path / "agentd.toml").write_text('[tools]\nplugins = ["tests.plugins.crash_tools"]\n')
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
            AGENTD_TEST_KILL_AT="llm#1",
            AGENTD_TEST_KILL_ONCE=str(tmp_path / "killed"),
        )
        llm.enqueue_text("42", usage=usage_of(1000))
        llm.enqueue_text("42", usage=usage_of(2000))
        daemon = Daemon(tmp_path, env).start()
        try:
            tg.add_message(OWNER, OWNER, "what is 6 x 7?")
            assert daemon.proc is not None and daemon.proc.wait(60) == -signal.SIGKILL
            assert len(llm.requests) == 1 and tg.sent == []
            [(turn,)] = daemon.query("SELECT id FROM workflow_instances WHERE workflow = 'turn'")
            journaled = daemon.query(
                "SELECT name FROM workflow_steps WHERE instance_id = ? AND name = 'llm#1'", (turn,)
            )
            assert journaled == []  # died before the answer's commit, as the plugin means to
            daemon.start()
            assert tg.wait_for_sent(1, timeout=30)[0]["plain_text"] == "42"
            daemon.wait_for_instances(1)
            rows = daemon.query(
                "SELECT instance_id, step, input_tokens + output_tokens FROM llm_usage "
                "WHERE purpose = 'turn' ORDER BY id"
            )
            assert [tuple(r) for r in rows] == [(turn, "llm#1", 1000), (turn, "llm#1", 2000)]
            assert len(llm.requests) == 2
        finally:
            daemon.stop()


def test_a_stream_broken_partway_is_in_the_ledger_beside_the_answer(tmp_path: Path) -> None:
    """The answer's first stream drops after 64 characters of text: the API billed its input
    and what it wrote, so it has its own row (input as message_start said, output estimated
    from the text and marked so), beside the retried answer's."""
    with FakeTelegram.running() as tg, FakeAnthropic.running(stream_chunk_chars=8) as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url)
        llm.enqueue_stream_error(drop=True, partial_text="word " * 40, after_deltas=8)
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "hello")
            assert tg.wait_for_sent(1, timeout=30)[0]["plain_text"] == "echo: hello"
            daemon.wait_for_instances(1)
            billed = [r for r in llm.responses if r["kind"] == "stream_drop"]
            assert len(billed) == 1
            rows = daemon.query(
                "SELECT step, attempt, input_tokens + cache_read_tokens + cache_write_tokens, "
                "output_tokens, estimated FROM llm_usage WHERE purpose = 'turn' ORDER BY id"
            )
            first, answer = (tuple(r) for r in rows)
            # The same request twice: the same input; 64 characters written, about 16 tokens.
            assert first == ("llm#1", 1, answer[2], 16, 1)
            assert answer[:2] == ("llm#1", 2) and answer[4] == 0


# Every text the answer stream gives is drafted (the interval only needs to be above 0): a
# draft showing some text says the daemon has read the stream that far.
EVERY_DRAFT = {"AGENTD_CHAT__STREAM_INTERVAL": "0.000001", "AGENTD_CHAT__PROGRESS_DELAY": "0"}
WRITTEN = ("word " * 40)[:64]  # what a stall after 8 deltas of 8 characters has written


def drafted(tg: FakeTelegram, text: str) -> bool:
    return any(d["plain_text"].strip() == text for d in tg.drafts)


def test_a_stream_the_owner_stops_is_in_the_ledger(tmp_path: Path) -> None:
    """/stop while the answer streams: the API billed its input and the 64 characters it wrote
    before the stop, so the stopped attempt has its row (output estimated, marked so), and
    the turn still ends as cancelled. The stop comes once the daemon has drafted all 64."""
    with FakeTelegram.running() as tg, FakeAnthropic.running(stream_chunk_chars=8) as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, **EVERY_DRAFT)
        llm.enqueue_stream_stall("word " * 40, after_deltas=8)
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "hello")
            stalled = llm.wait_until(
                lambda: [r for r in llm.responses if r["kind"] == "stream_stall"], 30, "a stall"
            )
            tg.wait_until(lambda: drafted(tg, WRITTEN), 30, "the 64 characters drafted")
            tg.add_message(OWNER, OWNER, "/stop")
            tg.wait_until(
                lambda: any("Stopped working on" in m["plain_text"] for m in tg.sent), 30, "stop"
            )
            daemon.wait_for_instances(1, status="cancelled")
            rows = daemon.query(
                "SELECT step, attempt, input_tokens + cache_read_tokens + cache_write_tokens, "
                "output_tokens, estimated FROM llm_usage WHERE purpose = 'turn'"
            )
            sent = stalled[0]["usage"]
            billed_input = sum(
                sent[k]
                for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            )
            assert [tuple(r) for r in rows] == [("llm#1", 1, billed_input, 16, 1)]


def test_a_stopped_streams_row_is_in_the_ledger_when_agentd_dies_as_the_stop_is_said(
    tmp_path: Path,
) -> None:
    """/stop while the answer streams, the stream slow to end once stopped (its connection slow
    to close), and agentd killed (kill -9) as it sends "Stopped working on…"
    (tests/plugins/crash_tools.py): the stop was said done, so the stopped attempt's row was
    in the ledger before it."""
    (tmp_path / "agentd.toml").write_text('[tools]\nplugins = ["tests.plugins.crash_tools"]\n')
    with FakeTelegram.running() as tg, FakeAnthropic.running(stream_chunk_chars=8) as llm:
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
            AGENTD_TEST_KILL_AT_REPLY="Stopped working on",
            AGENTD_TEST_SLOW_STOP="2",
            **EVERY_DRAFT,
        )
        llm.enqueue_stream_stall("word " * 40, after_deltas=8)
        daemon = Daemon(tmp_path, env).start()
        try:
            tg.add_message(OWNER, OWNER, "hello")
            tg.wait_until(lambda: drafted(tg, WRITTEN), 30, "the 64 characters drafted")
            tg.add_message(OWNER, OWNER, "/stop")
            assert daemon.proc is not None and daemon.proc.wait(60) == -signal.SIGKILL
            assert not [m for m in tg.sent if "Stopped" in m["plain_text"]]  # died saying it
            rows = daemon.query(
                "SELECT step, attempt, output_tokens, estimated FROM llm_usage "
                "WHERE purpose = 'turn'"
            )
            assert [tuple(r) for r in rows] == [("llm#1", 1, 16, 1)]
        finally:
            daemon.stop()


def test_a_stop_slower_than_the_wait_says_its_count_is_still_to_come(tmp_path: Path) -> None:
    """/stop while the answer streams, the stream 7 s to end once stopped, longer than /stop
    waits for it (engine.STOP_WAIT, 5 s): the reply does not say the stop is done with its
    cost counted, but that the count follows; the row is there once the turn has ended."""
    from agentd.commands.chat import STILL_ENDING

    (tmp_path / "agentd.toml").write_text('[tools]\nplugins = ["tests.plugins.crash_tools"]\n')
    with FakeTelegram.running() as tg, FakeAnthropic.running(stream_chunk_chars=8) as llm:
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
            AGENTD_TEST_SLOW_STOP="7",
            **EVERY_DRAFT,
        )
        llm.enqueue_stream_stall("word " * 40, after_deltas=8)
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "hello")
            tg.wait_until(lambda: drafted(tg, WRITTEN), 30, "the 64 characters drafted")
            tg.add_message(OWNER, OWNER, "/stop")
            [reply] = tg.wait_until(
                lambda: [m for m in tg.sent if "Stopped working on" in m["plain_text"]],
                30,
                "the stop's reply",
            )
            assert reply["plain_text"].endswith(STILL_ENDING.strip())
            daemon.wait_for_instances(1, status="cancelled", timeout=30)
            rows = daemon.query(
                "SELECT step, attempt, output_tokens, estimated FROM llm_usage "
                "WHERE purpose = 'turn'"
            )
            assert [tuple(r) for r in rows] == [("llm#1", 1, 16, 1)]


def test_a_call_not_streamed_that_the_owner_stops_is_in_the_ledger(tmp_path: Path) -> None:
    """/stop while the model works on an answer not streamed (streaming off, as in a group):
    nothing of it was seen, but the API took the request and bills it, so the stopped call
    has its row, its input estimated from the request's text and marked so."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_CHAT__STREAMING="false")
        with running_daemon(tmp_path, env) as daemon:
            llm.hold()
            try:
                tg.add_message(OWNER, OWNER, "hello")
                llm.wait_for_held(1, timeout=30)
                assert llm.requests[0]["stream"] is False
                tg.add_message(OWNER, OWNER, "/stop")
                daemon.wait_for_instances(1, status="cancelled")
            finally:
                llm.release()
            rows = poll(
                lambda: daemon.query(
                    "SELECT step, attempt, input_tokens, output_tokens, estimated FROM llm_usage "
                    "WHERE purpose = 'turn'"
                ),
                what="the stopped call's row",
            )
            [(step, attempt, estimated_input, output, estimated)] = [tuple(r) for r in rows]
            assert (step, attempt, output, estimated) == ("llm#1", 1, 0, 1)
            # The one estimate rule (llm/estimate.py) on the text the request sent.
            assert estimated_input == tokens_in(prompt_chars(llm.requests[0]["body"])) > 100


def test_a_stream_the_owner_stops_before_its_first_event_is_in_the_ledger(
    tmp_path: Path,
) -> None:
    """/stop while the model works on a streamed answer of which nothing has come yet: the API
    took the request and bills it, so the stopped attempt has its row, as a call not streamed
    has: its input estimated from the request's text, no output guessed, marked so."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url)
        with running_daemon(tmp_path, env) as daemon:
            llm.hold()
            try:
                tg.add_message(OWNER, OWNER, "hello")
                llm.wait_for_held(1, timeout=30)
                assert llm.requests[0]["stream"] is True
                tg.add_message(OWNER, OWNER, "/stop")
                tg.wait_until(
                    lambda: any("Stopped working on" in m["plain_text"] for m in tg.sent),
                    30,
                    "stop",
                )
                # The reply follows the row (engine.cancel waits for the stopped task).
                rows = daemon.query(
                    "SELECT step, attempt, input_tokens, output_tokens, estimated FROM llm_usage "
                    "WHERE purpose = 'turn'"
                )
            finally:
                llm.release()
            daemon.wait_for_instances(1, status="cancelled")
            [(step, attempt, estimated_input, output, estimated)] = [tuple(r) for r in rows]
            assert (step, attempt, output, estimated) == ("llm#1", 1, 0, 1)
            assert estimated_input == tokens_in(prompt_chars(llm.requests[0]["body"])) > 100


SUMMARY = {
    "summary": "Alice talked about moving to Lyon.",
    "facts": [{"kind": "fact", "key": "home_city", "content": "Lives in Lyon"}],
    "retract_keys": [],
}


def is_summary(body: dict[str, Any]) -> bool:
    return body.get("tool_choice", {}).get("name") == "record_summary"


def summary_or_echo(body: dict[str, Any]) -> Any:
    """The summariser's forced call answered; every turn answered with 400 tokens."""
    if is_summary(body):
        summary = [
            {"type": "tool_use", "id": "toolu_s", "name": "record_summary", "input": SUMMARY}
        ]
        return {"content": summary, "usage": usage_of(400)}
    echo = [{"type": "text", "text": f"echo: {last_user_text(body)}"}]
    return {"content": echo, "usage": usage_of(400)}


def chat(tg: FakeTelegram, texts: list[str]) -> None:
    for n, text in enumerate(texts, start=1):
        tg.add_message(OWNER, OWNER, text)
        tg.wait_for_sent(n, timeout=30)


def test_a_summary_past_the_budget_waits_for_tomorrow_and_loses_nothing(tmp_path: Path) -> None:
    """Three turns under the 1,000-token budget spend it (400 each, asked before each): the
    summary they start is deferred to 00:00 UTC, not made; after the night, it is."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(summary_or_echo)
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
            AGENTD_LIMITS__DAILY_TOKENS="1000",
        )
        daemon = Daemon(tmp_path, env).start()
        try:
            chat(tg, ["I'm moving to Lyon", "in May", "with my cat"])
            daemon.wait_for_instances(1, status="sleeping")
            [(iid, wake)] = daemon.query(
                "SELECT id, wake_at FROM workflow_instances WHERE workflow = 'summarise'"
            )
            assert wake % 86400 == 0 and 0 < wake - time.time() <= 86400  # the next 00:00 UTC
            assert not [r for r in llm.requests if is_summary(r["body"])]
            [(detail,)] = daemon.query(
                "SELECT detail FROM audit WHERE kind = 'memory_summary_deferred'"
            )
            assert json.loads(detail) == {"limit": "daily_tokens", "until": wake}
            assert daemon.query("SELECT COUNT(*) FROM messages WHERE summarised = 0")[0][0] == 6
            assert daemon.stop() == 0
            # The night passes (its wake-up comes now) and a new day's budget is there.
            with closing(open_sync(daemon.db_path)) as conn, conn:
                now = time.time()
                conn.execute("UPDATE workflow_instances SET wake_at = ? WHERE id = ?", (now, iid))
                conn.execute(
                    "UPDATE workflow_steps SET wake_at = ? WHERE instance_id = ? AND name = ?",
                    (now, iid, "defer#1"),
                )
                conn.execute("UPDATE llm_usage SET at = at - 86400")
            daemon.start()
            daemon.wait_idle()
            assert len([r for r in llm.requests if is_summary(r["body"])]) == 1
            [(output,)] = daemon.query("SELECT output FROM workflow_instances WHERE id = ?", (iid,))
            assert json.loads(output)["deferred"] == 1
            assert daemon.query("SELECT COUNT(*) FROM messages WHERE summarised = 1")[0][0] == 4
            kinds = [r[0] for r in daemon.query("SELECT kind FROM memories ORDER BY id")]
            assert kinds == ["summary", "fact"]
        finally:
            daemon.stop()


def unfit(body: dict[str, Any]) -> Any:
    """Every forced structured call answered in words, not the tool (300 tokens each)."""
    if body.get("tool_choice"):
        return {"content": [{"type": "text", "text": "I'd rather not."}], "usage": usage_of(300)}
    return None


def test_summary_answers_that_did_not_fit_are_in_the_ledger(tmp_path: Path) -> None:
    """The summary's step is tried 3 times, each asking twice for an answer that fits: all six
    answers were paid for, so all six are in llm_usage, a row each, though none gave a
    summary."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(unfit)
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
        )
        with running_daemon(tmp_path, env) as daemon:
            chat(tg, ["one", "two", "three"])
            daemon.wait_for_instances(1, status="errored", timeout=60)
            assert len([r for r in llm.requests if is_summary(r["body"])]) == 6
            rows = daemon.query(
                "SELECT step, input_tokens + output_tokens, user_id FROM llm_usage "
                "WHERE purpose = 'summary'"
            )
            assert [tuple(r) for r in rows] == [("llm", 300, OWNER)] * 6
            assert daemon.query("SELECT COUNT(*) FROM messages WHERE summarised = 1")[0][0] == 0


def test_an_answer_that_did_not_fit_is_counted_when_agentd_dies_during_the_second_ask(
    tmp_path: Path,
) -> None:
    """The summary's first answer does not fit, and agentd is killed (kill -9) while the model
    works on the second ask: the first answer was paid for, so its row is in the ledger
    already, written as it came, not when the whole call would have ended."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
        )
        daemon = Daemon(tmp_path, env).start()
        asked: list[dict[str, Any]] = []

        def dies_on_the_second_ask(body: dict[str, Any]) -> Any:
            if not is_summary(body):
                return summary_or_echo(body)
            asked.append(body)
            if len(asked) == 2 and daemon.proc is not None:
                daemon.proc.kill()
            return unfit(body)

        llm.set_responder(dies_on_the_second_ask)
        try:
            chat(tg, ["one", "two", "three"])
            assert daemon.proc is not None and daemon.proc.wait(60) == -signal.SIGKILL
            assert len(asked) == 2
            rows = daemon.query(
                "SELECT step, input_tokens + output_tokens, user_id FROM llm_usage "
                "WHERE purpose = 'summary'"
            )
            assert [tuple(r) for r in rows] == [("llm", 300, OWNER)]
        finally:
            daemon.stop()


def test_a_summary_call_a_shutdown_stops_is_in_the_ledger(tmp_path: Path) -> None:
    """agentd is stopped while the model works on a summary's answer (not streamed): the API
    took the request and bills it, so the call has its row, its input estimated from the
    request's text by the one estimate rule and marked so, as a stopped turn's call has."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(lambda body: Hang() if is_summary(body) else summary_or_echo(body))
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
            AGENTD_ENGINE__SHUTDOWN_GRACE="0",  # the running call is stopped, not waited for
        )
        daemon = Daemon(tmp_path, env).start()
        try:
            chat(tg, ["one", "two", "three"])
            llm.wait_until(lambda: [r for r in llm.responses if r["kind"] == "hang"], 30, "hang")
            assert daemon.stop() == 0
            [asked] = [r["body"] for r in llm.requests if is_summary(r["body"])]
            rows = daemon.query(
                "SELECT step, attempt, input_tokens, output_tokens, estimated, user_id "
                "FROM llm_usage WHERE purpose = 'summary'"
            )
            estimate = tokens_in(prompt_chars(asked))
            assert [tuple(r) for r in rows] == [("llm", 1, estimate, 0, 1, OWNER)]
        finally:
            daemon.stop()


def test_a_summary_retry_asks_the_budget_again(tmp_path: Path) -> None:
    """The summary's first try spends the 1,000-token budget on two answers that did not fit
    (300 each, after three 200-token turns): its retries ask no model, and the summary waits
    for 00:00 UTC as it would have before its first try."""

    def small_turns_unfit_summary(body: dict[str, Any]) -> Any:
        if is_summary(body):
            return unfit(body)
        echo = [{"type": "text", "text": f"echo: {last_user_text(body)}"}]
        return {"content": echo, "usage": usage_of(200)}

    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(small_turns_unfit_summary)
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
            AGENTD_LIMITS__DAILY_TOKENS="1000",
        )
        daemon = Daemon(tmp_path, env).start()
        try:
            chat(tg, ["one", "two", "three"])
            daemon.wait_for_instances(1, status="sleeping", timeout=60)
            assert len([r for r in llm.requests if is_summary(r["body"])]) == 2
            rows = daemon.query(
                "SELECT step, input_tokens + output_tokens FROM llm_usage WHERE purpose = 'summary'"
            )
            assert [tuple(r) for r in rows] == [("llm", 300)] * 2
            [(detail,)] = daemon.query(
                "SELECT detail FROM audit WHERE kind = 'memory_summary_deferred'"
            )
            assert json.loads(detail)["limit"] == "daily_tokens"
            assert daemon.query("SELECT COUNT(*) FROM messages WHERE summarised = 1")[0][0] == 0
            assert daemon.stop() == 0
            # The night passes and the model answers in shape: the waiting summary is made.
            [(iid,)] = daemon.query(
                "SELECT id FROM workflow_instances WHERE workflow = 'summarise'"
            )
            with closing(open_sync(daemon.db_path)) as conn, conn:
                now = time.time()
                conn.execute("UPDATE workflow_instances SET wake_at = ? WHERE id = ?", (now, iid))
                conn.execute(
                    "UPDATE workflow_steps SET wake_at = ? WHERE instance_id = ? AND name = ?",
                    (now, iid, "defer#1@2"),
                )
                conn.execute("UPDATE llm_usage SET at = at - 86400")
            llm.set_responder(summary_or_echo)
            daemon.start()
            daemon.wait_idle()
            [(output,)] = daemon.query("SELECT output FROM workflow_instances WHERE id = ?", (iid,))
            assert json.loads(output)["deferred"] == 1
            assert daemon.query("SELECT COUNT(*) FROM messages WHERE summarised = 1")[0][0] == 4
            rows = daemon.query("SELECT step FROM llm_usage WHERE purpose = 'summary' ORDER BY id")
            assert [r[0] for r in rows] == ["llm", "llm", "llm@2"]
        finally:
            daemon.stop()


def test_a_summary_does_not_ask_again_once_its_first_answer_spent_the_budget(
    tmp_path: Path,
) -> None:
    """Three 200-token turns, then the summary's first answer does not fit and costs 500: the
    1,000-token budget is spent, so the second ask of the same try is not made; the answer is
    in the ledger and the summary waits for 00:00 UTC."""

    def small_turns_costly_unfit(body: dict[str, Any]) -> Any:
        if is_summary(body):
            return {"content": [{"type": "text", "text": "No."}], "usage": usage_of(500)}
        echo = [{"type": "text", "text": f"echo: {last_user_text(body)}"}]
        return {"content": echo, "usage": usage_of(200)}

    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(small_turns_costly_unfit)
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
            AGENTD_LIMITS__DAILY_TOKENS="1000",
        )
        with running_daemon(tmp_path, env) as daemon:
            chat(tg, ["one", "two", "three"])
            daemon.wait_for_instances(1, status="sleeping", timeout=60)
            assert len([r for r in llm.requests if is_summary(r["body"])]) == 1
            rows = daemon.query(
                "SELECT step, input_tokens + output_tokens FROM llm_usage WHERE purpose = 'summary'"
            )
            assert [tuple(r) for r in rows] == [("llm", 500)]
            [(detail,)] = daemon.query(
                "SELECT detail FROM audit WHERE kind = 'memory_summary_deferred'"
            )
            assert json.loads(detail)["limit"] == "daily_tokens"


def test_a_photo_in_a_group_is_paid_by_its_sender_even_when_unseen(tmp_path: Path) -> None:
    """A look at a photo in a group counts to its sender's [limits] budget (as in their own
    chat), and so do the answers that did not fit the summary's shape."""
    from tests.daemon_process import TOKEN
    from tests.test_e2e_vision import png, vision_reply

    group = -900
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_ACCESS__ALLOW_GROUPS="true")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_bot_to_group(group, OWNER, int(TOKEN.split(":")[0]))
            tg.add_message(group, OWNER, "@fake_bot hello", chat_type="group")
            # A photo in a group is for the agent when it replies to the agent's message.
            hello = tg.wait_for_sent(1, timeout=30, chat_id=group)[0]["message_id"]
            llm.set_responder(unfit)
            tg.add_photo(
                group, OWNER, png(40, 40), "what is it?", chat_type="group", reply_to=hello
            )
            tg.wait_for_sent(2, timeout=30, chat_id=group)
            llm.set_responder(vision_reply)
            tg.add_photo(group, OWNER, png(41, 40), "and this?", chat_type="group", reply_to=hello)
            tg.wait_for_sent(3, timeout=30, chat_id=group)
            daemon.wait_for_instances(3)
            rows = daemon.query(
                "SELECT chat_id, user_id, input_tokens + output_tokens FROM llm_usage "
                "WHERE purpose = 'vision' ORDER BY id"
            )
            assert [tuple(r[:2]) for r in rows] == [(group, OWNER)] * 3
            assert rows[0][2] == rows[1][2] == 300  # the two answers that did not fit


def test_a_photo_whose_first_answer_spent_the_budget_is_not_asked_about_again(
    tmp_path: Path,
) -> None:
    """The look at a photo answers in words, not the summary's shape, and costs 5,000 tokens,
    past the 1,000-token budget: the model is not asked again (for the photo or the turn); the
    answer is in the ledger, and the turn ends as one over the budget before the look would."""
    from tests.test_e2e_vision import png

    def costly_unfit(body: dict[str, Any]) -> Any:
        words = [{"type": "text", "text": "I'd rather not."}]
        return {"content": words, "usage": usage_of(5000)}

    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(costly_unfit)
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_LIMITS__DAILY_TOKENS="1000")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_photo(OWNER, OWNER, png(40, 40), "what is it?")
            reply = tg.wait_for_sent(1, timeout=30)[0]["plain_text"]
            daemon.wait_for_instances(1)
            assert len(llm.requests) == 1
            rows = daemon.query(
                "SELECT purpose, input_tokens + output_tokens FROM llm_usage ORDER BY id"
            )
            assert [tuple(r) for r in rows] == [("vision", 5000)]
            assert "today's token budget for you" in reply
            [(detail,)] = daemon.query("SELECT detail FROM audit WHERE kind = 'rate_limited'")
            refused = json.loads(detail)
            assert (refused["limit"], refused["notified"]) == ("daily_tokens", True)
            [(content,)] = daemon.query("SELECT content FROM messages WHERE role = 'user'")
            assert content == "[photo, not looked at: over the limit] what is it?"


def test_a_photo_whose_look_spent_the_budget_gets_no_model_call_after_it(tmp_path: Path) -> None:
    """The look at a photo fits the summary's shape at once and costs 5,000 tokens, past the
    1,000-token budget that held nothing when the turn began: the limits are asked again
    after the look, so the turn's first model call is not made; the message is kept with what
    the look saw, and the user told why."""
    from tests.test_e2e_vision import png, vision_reply

    def costly_look(body: dict[str, Any]) -> Any:
        look = vision_reply(body)
        if look is None:  # the turn's call, which must not come
            echo = [{"type": "text", "text": f"echo: {last_user_text(body)}"}]
            return {"content": echo, "usage": usage_of(100)}
        return {"content": look, "usage": usage_of(5000)}

    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(costly_look)
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_LIMITS__DAILY_TOKENS="1000")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_photo(OWNER, OWNER, png(40, 40), "what is it?")
            reply = tg.wait_for_sent(1, timeout=30)[0]["plain_text"]
            daemon.wait_for_instances(1)
            assert len(llm.requests) == 1
            rows = daemon.query(
                "SELECT purpose, input_tokens + output_tokens FROM llm_usage ORDER BY id"
            )
            assert [tuple(r) for r in rows] == [("vision", 5000)]
            assert "today's token budget for you" in reply
            [(detail,)] = daemon.query("SELECT detail FROM audit WHERE kind = 'rate_limited'")
            assert json.loads(detail)["limit"] == "daily_tokens"
            steps = [r[0] for r in daemon.query("SELECT name FROM workflow_steps ORDER BY ordinal")]
            assert "rate-check:looked" in steps and "llm#1" not in steps
            [(content,)] = daemon.query("SELECT content FROM messages WHERE role = 'user'")
            assert content.startswith("[photo] what is it?") and "Café Lumière" in content


def journal_without_the_check_after_the_look(db_path: Path, turn: str) -> None:
    """The turn's journal as agentd wrote it before the limits were asked after a paid look:
    no `rate-check:looked`, the steps after it one place earlier (the daemon is down; no
    foreign keys enforced, as each table's ordinals move on their own)."""
    with closing(sqlite3.connect(db_path)) as conn, conn:
        [(looked,)] = conn.execute(
            "SELECT ordinal FROM workflow_steps WHERE instance_id = ? AND name = ?",
            (turn, "rate-check:looked"),
        ).fetchall()
        for table in ("workflow_attempts", "workflow_steps"):
            where = "WHERE instance_id = ? AND ordinal"
            conn.execute(f"DELETE FROM {table} {where} = ?", (turn, looked))
            # Through negatives: no two steps share an ordinal at any moment.
            conn.execute(f"UPDATE {table} SET ordinal = 1 - ordinal {where} > ?", (turn, looked))
            conn.execute(f"UPDATE {table} SET ordinal = -ordinal {where} < 0", (turn,))


def test_a_photo_turn_journaled_before_the_check_after_the_look_replays(tmp_path: Path) -> None:
    """A photo turn older agentd left waiting past its first model call (the tool it asked
    for waits for the owner's approval), with no check after the look in its journal: after
    the upgrade it goes on and answers, not parked as a journal that diverged."""
    from tests.test_e2e_vision import png, vision_reply

    def script(body: dict[str, Any]) -> Any:
        look = vision_reply(body)
        if look is not None or "tool_result" in last_user_text(body):
            return look  # None: the echo, for the call that reads the tool's result
        use = {"type": "tool_use", "id": "toolu_c1", "name": "count_words"}
        return {"content": [use | {"input": {"text": "a b"}}], "stop_reason": "tool_use"}

    (tmp_path / "agentd.toml").write_text(TOOLS)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(script)
        env = daemon_env(
            tmp_path, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp_path / "agentd.toml")
        )
        daemon = Daemon(tmp_path, env).start()
        try:
            tg.add_photo(OWNER, OWNER, png(40, 40), "count a b")
            [card] = tg.wait_for_sent(1, timeout=30)  # the photo taints: count_words is asked
            daemon.wait_for_instances(1, status="waiting")
            daemon.kill9()
            [(turn,)] = daemon.query("SELECT id FROM workflow_instances WHERE workflow = 'turn'")
            journal_without_the_check_after_the_look(daemon.db_path, turn)
            daemon.start()
            data = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            tg.add_callback_query(OWNER, OWNER, card["message_id"], data)
            daemon.wait_for_instances(1)
            steps = daemon.query(
                "SELECT name FROM workflow_steps WHERE instance_id = ? ORDER BY ordinal", (turn,)
            )
            names = [r[0] for r in steps]
            assert names[:4] == ["rate-check", "vision#1", "save-user", "load-history"], names
            status = daemon.query("SELECT status FROM workflow_instances WHERE id = ?", (turn,))
            assert status[0][0] == "complete"
            assert daemon.effects() == ["count_words a b"]
            assert "echo: tool_result: 2" in tg.sent[-1]["plain_text"]
        finally:
            daemon.stop()


class FakeEmbeddings(FakeServer):
    """An OpenAI-compatible /v1/embeddings that reports, as OpenAI does, the tokens it read."""

    def __init__(self) -> None:
        super().__init__()
        self.billed: list[int] = []

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self._handle)

    async def _handle(self, request: web.Request) -> web.Response:
        texts = (await request.json())["input"]
        tokens = sum(len(t.split()) + 1 for t in texts)
        with self._lock:
            self.billed.append(tokens)
        data = [{"index": i, "embedding": [1.0 + i] + [0.5] * 7} for i in range(len(texts))]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return web.json_response({"data": data, "model": "e", "usage": usage})


def test_a_remote_embedders_calls_are_in_the_ledger_at_no_price(tmp_path: Path) -> None:
    """`[memory] embedder = "http"`: each request the server answered is counted with the
    tokens its `usage` reports (purpose "embedding", priced at 0 unless configured), and the
    chat models' budgets do not count them."""
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
        FakeEmbeddings.running() as embeddings,
    ):
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_MEMORY__EMBEDDER="http",
            AGENTD_MEMORY__HTTP_URL=f"{embeddings.base_url}/v1",
            AGENTD_MEMORY__EMBEDDING_MODEL="nomic-embed-text",
            AGENTD_MEMORY__EMBEDDING_DIM="8",
            AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
        )
        llm.set_responder(summary_or_echo)
        daemon = Daemon(tmp_path, env).start()
        try:
            chat(tg, ["I'm moving to Lyon", "in May", "with my cat"])  # a summary, embedded
            daemon.wait_for_instances(4)
            daemon.wait_idle()
            assert daemon.stop() == 0  # the last minute's count is written at shutdown
        finally:
            daemon.stop()
        billed = list(embeddings.billed)
    assert billed, "the summary and its fact were embedded"
    rows = daemon.query(
        "SELECT model, chat_id, user_id, calls, input_tokens, output_tokens FROM llm_usage "
        "WHERE purpose = 'embedding'"
    )
    assert [tuple(r) for r in rows] == [
        ("http:nomic-embed-text", None, None, len(billed), sum(billed), 0)
    ]
    from agentd.access.ratelimit import tokens_used

    with closing(open_sync(daemon.db_path)) as conn:
        chat_tokens = conn.execute(
            "SELECT SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens) "
            "FROM llm_usage WHERE purpose != 'embedding'"
        ).fetchone()[0]
        assert tokens_used(conn, 0) == chat_tokens
    shown = daemon.cli_json("usage", "--by-model")
    [embedder] = [m for m in shown if m["model"] == "http:nomic-embed-text"]
    assert embedder["estimated_cost_usd"] == 0 and embedder["calls"] == len(billed)


def test_a_remote_embedder_used_from_the_shell_is_in_the_ledger(tmp_path: Path) -> None:
    """`agentd memory search` (and reindex, ingest) embed through the same server: their
    requests are in the daemon's ledger too."""
    from tests.docs_support import open_store

    db = tmp_path / "agentd.db"
    open_store(db).close()
    (tmp_path / "agentd.toml").write_text(
        f'[storage]\npath = "{db}"\n[memory]\nembedder = "http"\n'
        'embedding_model = "nomic-embed-text"\nembedding_dim = 8\n'
    )
    with FakeEmbeddings.running() as embeddings:
        env = {
            "AGENTD_CONFIG": str(tmp_path / "agentd.toml"),
            "AGENTD_MEMORY__HTTP_URL": f"{embeddings.base_url}/v1",
        }
        found = CliRunner().invoke(app, ["memory", "search", "Lyon", "--user", "42"], env=env)
        assert found.exit_code == 0, found.output
        billed = list(embeddings.billed)
    assert billed
    with closing(open_sync(db)) as conn:
        rows = conn.execute(
            "SELECT model, calls, input_tokens FROM llm_usage WHERE purpose = 'embedding'"
        ).fetchall()
    assert [tuple(r) for r in rows] == [("http:nomic-embed-text", len(billed), sum(billed))]
