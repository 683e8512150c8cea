"""End to end: ANTHROPIC_MODEL / ANTHROPIC_BASE_URL beat the config file on the wire, and the
text of a message replied to reaches the model."""

from __future__ import annotations

from pathlib import Path

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram


def test_provider_variables_override_the_file_and_a_reply_brings_its_text(tmp_path: Path) -> None:
    # The file names a model and an address nothing listens on: the variables must win.
    (tmp_path / "agentd.toml").write_text(
        '[llm]\nmodel = "claude-from-file"\nbase_url = "http://127.0.0.1:9"\n'
    )
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url)
        del env["AGENTD_LLM__BASE_URL"]
        env.update(ANTHROPIC_BASE_URL=llm.base_url, ANTHROPIC_MODEL="claude-from-env")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "The boiler code is 4471.")
            answer = tg.wait_for_sent(1, timeout=30)[0]
            tg.add_message(OWNER, OWNER, "and the gate?", reply_to=answer["message_id"])
            tg.wait_for_sent(2, timeout=30)
            daemon.wait_for_instances(2)
    turns = [r["body"] for r in llm.requests if not r["body"].get("tool_choice")]
    assert {body["model"] for body in turns} == {"claude-from-env"}
    current = turns[-1]["messages"][-1]["content"][0]["text"]
    assert "(The user is replying to your earlier message:" in current
    assert answer["plain_text"] in current and current.rstrip().endswith("and the gate?")
