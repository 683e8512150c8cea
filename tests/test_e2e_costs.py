"""End to end: every model call is held by the [limits] daily budgets and written to the ledger
(llm_usage) once: a turn's later calls, summaries, and the structured calls that failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

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
