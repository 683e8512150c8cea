"""End to end through `agentd run`: Claude (the fake Messages API) in an overload storm with a
model of an OpenAI-compatible server (the fake Chat Completions API) behind it; kill -9 in the
middle of a turn the fallback is answering; a tool turn on the OpenAI-compatible path alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import ErrorReply
from tests.fakes.openai_chat import ChatFault, ChatReply, FakeChat

LOCAL = "local/fake-model"


def _config(
    tmp: Path, chat: FakeChat, *, model: str = "claude-haiku-4-5", llm: str = "", more: str = ""
) -> str:
    """`llm`: more [llm] keys; `more`: more tables."""
    path = tmp / "agentd.toml"
    path.write_text(
        f"""
[llm]
model = "{model}"
fallbacks = ["{LOCAL}"]
{llm}
{more}
[llm.providers.local]
base_url = "{chat.base_url}/v1"
local = true
[llm.breaker]
failures = 2
interval = 600
[tools]
plugins = ["tests.plugins.e2e_tools"]
"""
    )
    return str(path)


def _overloaded(_body: dict[str, Any]) -> ErrorReply:
    return ErrorReply(529, "overloaded_error", "Overloaded")


@pytest.fixture
def fakes() -> Iterator[tuple[FakeTelegram, FakeAnthropic, FakeChat]]:
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as claude,
        FakeChat.running() as chat,
    ):
        yield tg, claude, chat


def _answers(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m["plain_text"] for m in tg.sent if m["chat_id"] == chat_id]


def _journaled(daemon: Daemon, step: str) -> list[dict[str, Any]]:
    rows = daemon.query(
        "SELECT result FROM workflow_steps WHERE name = ? AND status = 'complete'", (step,)
    )
    return [json.loads(r[0]) for r in rows]


def test_an_overload_storm_is_answered_once_by_the_fallback(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat]
) -> None:
    tg, claude, chat = fakes
    claude.set_responder(_overloaded)
    env = daemon_env(tmp_path, tg.base_url, claude.base_url, AGENTD_CONFIG=_config(tmp_path, chat))
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "hello there")
        tg.wait_for_sent(1, timeout=30)
        daemon.wait_for_instances(1)
        assert len(_answers(tg, OWNER)) == 1
        assert "hello there" in _answers(tg, OWNER)[0]
        (answer,) = _journaled(daemon, "llm#1")
        assert (answer["provider"], answer["model"]) == ("local", "fake-model")
        assert answer["fallback_reason"] == "overloaded"
        audit = daemon.cli_json("audit", "--kind", "llm_fallback")
        assert [(a["detail"]["model"], a["detail"]["reason"]) for a in audit] == [
            (LOCAL, "overloaded")
        ]
        usage = {m["model"]: m for m in daemon.cli_json("usage", "--by-model")}
        assert usage[LOCAL]["fallback_answers"] == 1
        assert usage[LOCAL]["estimated_cost_usd"] == 0 and usage[LOCAL]["price"] == "local: costs 0"


def test_kill_9_while_the_fallback_answers_runs_no_tool_twice(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat]
) -> None:
    tg, claude, chat = fakes
    claude.set_responder(_overloaded)
    # llm#1: the fallback asks for a tool; llm#2 hangs until the process is killed.
    chat.enqueue(ChatReply(tool_calls=[("count_words", {"text": "one two three"})]))
    chat.enqueue(ChatFault("hang"))
    env = daemon_env(tmp_path, tg.base_url, claude.base_url, AGENTD_CONFIG=_config(tmp_path, chat))
    daemon = Daemon(tmp_path, env).start()
    try:
        tg.add_message(OWNER, OWNER, "count the words in 'one two three'")
        chat.wait_for_requests(2, timeout=30)
        daemon.kill9()
        # Claude is well again: the resumed turn still goes on with the model it started on.
        claude.set_responder(None)
        before = len(claude.requests)
        daemon.start()
        tg.wait_for_sent(1, timeout=30)
        daemon.wait_for_instances(1)
    finally:
        daemon.stop()
    assert len(_answers(tg, OWNER)) == 1
    assert daemon.effects().count("count_words one two three") == 1
    assert len(chat.requests) == 3 and len(claude.requests) == before
    resumed = chat.requests[2]["body"]["messages"]
    assert [m["content"] for m in resumed if m["role"] == "tool"] == ["3"]


def test_a_tool_turn_on_an_openai_compatible_model_alone(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat]
) -> None:
    tg, claude, chat = fakes
    chat.enqueue(ChatReply(tool_calls=[("count_words", {"text": "a b c d"})]))
    chat.enqueue(ChatReply(text="There are 4 words."))
    config = _config(tmp_path, chat, model=LOCAL)
    # Every model is local: no Anthropic key is needed to start.
    env = daemon_env(tmp_path, tg.base_url, claude.base_url, AGENTD_CONFIG=config)
    env.pop("ANTHROPIC_API_KEY")
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "how many words in 'a b c d'?")
        tg.wait_for_sent(1, timeout=30)
        daemon.wait_for_instances(1)
        assert _answers(tg, OWNER) == ["There are 4 words."]
        assert daemon.effects().count("count_words a b c d") == 1
        second = chat.requests[1]["body"]["messages"]
        assert any(m["role"] == "tool" and m["content"] == "4" for m in second)
        assert claude.requests == []


def test_a_streamed_answer_from_a_server_that_sends_no_usage_is_billed_as_estimated(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat]
) -> None:
    """The answer's row counts what the text came to, marked estimated, not 0 tokens: the
    server ignores `include_usage`, and 0 would let its model past every [limits] budget."""
    tg, claude, chat = fakes
    chat.stream_usage = False
    answer = "Here is a streamed answer. " * 8  # 216 characters: 54 tokens
    chat.enqueue(ChatReply(text=answer))
    env = daemon_env(
        tmp_path,
        tg.base_url,
        claude.base_url,
        AGENTD_CONFIG=_config(tmp_path, chat, model=LOCAL),
        AGENTD_CHAT__STREAMING="true",
    )
    env.pop("ANTHROPIC_API_KEY")
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "tell me something")
        tg.wait_for_sent(1, timeout=30)
        daemon.wait_for_instances(1)
        assert chat.requests[0]["body"]["stream"] is True
        rows = daemon.query(
            "SELECT model, input_tokens, output_tokens, estimated FROM llm_usage "
            "WHERE purpose = 'turn'"
        )
    [(model, input_tokens, output_tokens, estimated)] = rows
    assert (model, output_tokens, estimated) == (LOCAL, 54, 1)
    assert input_tokens > 0


def test_the_owner_picks_a_chat_model_that_outlives_a_restart(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat]
) -> None:
    tg, claude, chat = fakes
    env = daemon_env(tmp_path, tg.base_url, claude.base_url, AGENTD_CONFIG=_config(tmp_path, chat))
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "/model")
        listing = tg.wait_for_sent(1, timeout=30)[-1]
        assert LOCAL in listing["plain_text"] and "claude-haiku-4-5" in listing["plain_text"]
        tg.add_message(43, 43, f"/model {LOCAL}")  # not the owner
        assert "Only the owner" in tg.wait_for_sent(2, timeout=30)[-1]["plain_text"]
        tg.add_message(OWNER, OWNER, f"/model {LOCAL}")
        assert LOCAL in tg.wait_for_sent(3, timeout=30)[-1]["plain_text"]
        daemon.stop()
        daemon.start()
        tg.add_message(OWNER, OWNER, "hi after the restart")
        tg.wait_for_sent(4, timeout=30)
        daemon.wait_for_instances(1, status="complete")
        (answer,) = _journaled(daemon, "llm#1")
        assert answer["provider"] == "local" and answer["fallback_reason"] is None
        assert claude.requests == []
        tg.add_message(OWNER, OWNER, "/status")
        status = tg.wait_for_sent(5, timeout=30)[-1]["plain_text"]
        assert f"Model: {LOCAL}" in status and "claude-haiku-4-5 closed" in status


def test_a_task_on_a_local_model_is_costed_as_the_local_model(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat]
) -> None:
    """A background task's usage names its model as configuration does (`local/…`), so
    `agentd usage` prices it at the provider's price (0), not as an unknown Claude model."""
    tg, claude, chat = fakes
    chat.enqueue(ChatReply(tool_calls=[("delegate", {"task": "sum it up", "tools": []})]))
    config = _config(tmp_path, chat, model=LOCAL)
    env = daemon_env(tmp_path, tg.base_url, claude.base_url, AGENTD_CONFIG=config)
    env.pop("ANTHROPIC_API_KEY")
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "do it in the background")
        tg.wait_for_sent(2, timeout=30)  # the turn's answer and the task's result
        daemon.wait_idle()
        rows = daemon.query("SELECT DISTINCT purpose, model FROM llm_usage ORDER BY purpose")
        assert [tuple(r) for r in rows] == [("task", LOCAL), ("turn", LOCAL)]
        usage = {m["model"]: m for m in daemon.cli_json("usage", "--by-model")}
        assert list(usage) == [LOCAL] and usage[LOCAL]["estimated_cost_usd"] == 0


def test_a_task_answered_by_the_fallback_is_audited_as_a_turn_is(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat]
) -> None:
    """Claude is overloaded: the turn and the background task it starts are both answered by
    the local fallback, and each call says so in the audit log (`llm_fallback`), with why."""
    tg, claude, chat = fakes
    claude.set_responder(_overloaded)
    chat.enqueue(ChatReply(tool_calls=[("delegate", {"task": "sum it up", "tools": []})]))
    env = daemon_env(tmp_path, tg.base_url, claude.base_url, AGENTD_CONFIG=_config(tmp_path, chat))
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "do it in the background")
        tg.wait_for_sent(2, timeout=30)  # the turn's answer and the task's result
        daemon.wait_idle()
        rows = daemon.query(
            "SELECT instance_id, json_extract(detail, '$.step'), json_extract(detail, '$.model') "
            "FROM audit WHERE kind = 'llm_fallback' AND instance_id LIKE 'task-%'"
        )
        assert [tuple(r[1:]) for r in rows] == [("llm#1", LOCAL)]
        used = daemon.query(
            "SELECT instance_id FROM llm_usage WHERE purpose = 'task' AND model = ?", (LOCAL,)
        )
        assert [r[0] for r in used] == [rows[0][0]]


@pytest.mark.parametrize(
    ("tables", "task_model"),
    [("", "claude-haiku-4-5"), (f'[llm.models]\ntask = "{LOCAL}"', LOCAL)],
    ids=["unnamed_stays_on_the_chat_model", "named_routes_tasks"],
)
def test_a_background_task_runs_on_its_own_model_or_the_chats(
    tmp_path: Path,
    fakes: tuple[FakeTelegram, FakeAnthropic, FakeChat],
    tables: str,
    task_model: str,
) -> None:
    """With `background_model` elsewhere, a task stays on the chat's model (as it always
    has) unless `[llm.models] task` names one; then it runs there, the chat staying put."""
    tg, claude, chat = fakes
    claude.enqueue_tool_use("delegate", {"task": "sum it up", "tools": []})
    llm = f'background_model = "{LOCAL}"'
    config = _config(tmp_path, chat, llm=llm, more=tables)
    env = daemon_env(tmp_path, tg.base_url, claude.base_url, AGENTD_CONFIG=config)
    with running_daemon(tmp_path, env) as daemon:
        tg.add_message(OWNER, OWNER, "do it in the background")
        tg.wait_for_sent(2, timeout=30)  # the turn's answer and the task's result
        daemon.wait_idle()
        rows = daemon.query(
            "SELECT DISTINCT purpose, model FROM llm_usage WHERE purpose IN ('task', 'turn') "
            "ORDER BY purpose"
        )
        assert [tuple(r) for r in rows] == [("task", task_model), ("turn", "claude-haiku-4-5")]
