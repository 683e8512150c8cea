"""End to end (R-RATE-1): over a limit, one polite notice, the message saved, no model call."""

from __future__ import annotations

from pathlib import Path

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram


def test_messages_per_minute(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp_path, tg.base_url, llm.base_url, AGENTD_LIMITS__MESSAGES_PER_MINUTE="2"
        )
        with running_daemon(tmp_path, env) as daemon:
            for n in range(5):
                tg.add_message(OWNER, OWNER, f"message {n}")
            daemon.wait_for_instances(5)
            # Over the limit a turn still runs (it saves the message and may send the notice):
            # once no turn is open, every notice and model call any of them makes was made.
            # (No marker message: it would be over the limit too.)
            daemon.wait_idle()
            texts = [m["plain_text"] for m in tg.sent]
            assert texts[:2] == ["echo: message 0", "echo: message 1"]
            assert len(texts) == 3 and "faster than I can take them" in texts[2]  # once
            assert len(llm.requests) == 2
            users = [m for m in daemon.cli_json("history") if m["role"] == "user"]
            assert len(users) == 5  # nothing lost
            rows = daemon.query("SELECT detail FROM audit WHERE kind = 'rate_limited'")
            assert ['"notified": true' in r[0] for r in rows] == [True, False, False]


def test_daily_token_budget(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_LIMITS__DAILY_TOKENS="1")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "first")
            tg.wait_for_sent(1, timeout=20)
            tg.add_message(OWNER, OWNER, "second")
            tg.wait_for_sent(2, timeout=20)
            daemon.wait_for_instances(2)
            assert "today's token budget" in tg.sent[1]["plain_text"]
            assert len(llm.requests) == 1
