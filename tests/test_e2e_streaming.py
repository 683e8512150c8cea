"""End to end: the answer grows as Telegram drafts while the model writes, then is sent once."""

from __future__ import annotations

from pathlib import Path

from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon, send_marker
from tests.fakes import FakeAnthropic, FakeTelegram

ANSWER = "Here is a fairly long answer, written slowly so that drafts can show it growing. " * 4


def test_drafts_grow_then_one_final_message(tmp_path: Path) -> None:
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running(stream_delay=0.05, stream_chunk_chars=12) as llm,
    ):
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_CHAT__STREAM_INTERVAL="0.2")
        llm.enqueue_text(ANSWER.strip())
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "tell me something")
            tg.wait_for_sent(1, timeout=30)
            daemon.wait_for_instances(1)
            drafts = [d for d in tg.drafts if d["chat_id"] == OWNER]
            assert len(drafts) >= 3
            lengths = [len(d["text"]) for d in drafts]
            assert lengths == sorted(lengths) and lengths[0] < len(ANSWER.strip())
            assert len({d["draft_id"] for d in drafts}) == 1
            assert [m["plain_text"] for m in tg.sent] == [ANSWER.strip()]
            assert llm.requests[0]["stream"] is True
            stored = daemon.cli_json("history")
            assert stored[-1]["content"] == ANSWER.strip()  # streaming changes nothing stored


def test_a_server_without_drafts_still_answers(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running(stream_delay=0.02) as llm:
        tg.disable_method("sendMessageDraft")
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_CHAT__STREAM_INTERVAL="0.01")
        llm.enqueue_text(ANSWER.strip())
        with running_daemon(tmp_path, env):
            tg.add_message(OWNER, OWNER, "hi")
            tg.wait_for_sent(1, timeout=30)
            assert len(tg.calls("sendMessageDraft")) == 1  # tried once, then gave up
            assert [m["plain_text"] for m in tg.sent] == [ANSWER.strip()]


def test_kill_9_mid_stream_resumes_without_a_duplicate(tmp_path: Path) -> None:
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running(stream_delay=0.3, stream_chunk_chars=4) as llm,
    ):
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_CHAT__STREAM_INTERVAL="0.1")
        llm.enqueue_text(ANSWER.strip())
        daemon = Daemon(tmp_path, env).start()
        try:
            tg.add_message(OWNER, OWNER, "stream please")
            tg.wait_until(lambda: len(tg.drafts) >= 2, 30, "some drafts")
            daemon.kill9()
            assert tg.sent == []
            llm.reset()
            llm.enqueue_text("Short final answer.")
            daemon.start()
            tg.wait_for_sent(1, timeout=30)
            daemon.wait_for_instances(1)
            # A later message's reply: the resumed turn (and any duplicate of it) is over.
            assert [m["plain_text"] for m in send_marker(tg, OWNER)] == ["Short final answer."]
        finally:
            daemon.stop()
