"""`/model`'s buttons and `/status`'s breaker lines, and the notes a model adds to an answer,
without a daemon: a connection to a migrated database and a two-model chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import SecretStr

from agentd.agent.toolloop import with_notes
from agentd.chat import model_choice
from agentd.chat.inputs import CallbackPress
from agentd.commands.deps import CommandDeps
from agentd.commands.model import PREFIX, _by_button, breaker_lines
from agentd.config import AccessConfig, Config, LLMConfig
from agentd.config.models import ProviderConfig
from agentd.llm.factory import build
from tests.docs_support import open_store

OWNER = 7


def _deps(tmp_path: Path) -> tuple[CommandDeps, Any]:
    llm_config = LLMConfig(
        fallbacks=["local/qwen"],
        providers={"local": ProviderConfig(base_url="http://127.0.0.1:9/v1", local=True)},
    )
    config = Config(llm=llm_config, access=AccessConfig(owner_id=OWNER))
    config.secrets.anthropic_api_key = SecretStr("sk-ant-test")
    llm = build(config)
    deps = CommandDeps(config, None, None, None, None, 0.0, llm=llm)  # type: ignore[arg-type]
    return deps, open_store(tmp_path / "a.db")


def _press(user: int, data: str, chat: int | None = OWNER) -> CallbackPress:
    kind = None if chat is None else "group" if chat < 0 else "private"
    return CallbackPress(
        update_id=1, callback_id="c", user_id=user, chat_id=chat, chat_kind=kind, data=data
    )


def test_a_button_sets_the_chat_model_for_the_owner_only(tmp_path: Path) -> None:
    deps, conn = _deps(tmp_path)
    assert model_choice.offered(deps.llm) == ["claude-haiku-4-5", "local/qwen"]
    assert "Only the owner" in _by_button(deps, conn, _press(8, PREFIX + "local/qwen"))
    assert model_choice.chosen(conn, OWNER) is None
    assert "now uses local/qwen" in _by_button(deps, conn, _press(OWNER, PREFIX + "local/qwen"))
    assert model_choice.chosen(conn, OWNER) == "local/qwen"
    assert "not configured" in _by_button(deps, conn, _press(OWNER, PREFIX + "gone/x"))
    assert "not recognised" in _by_button(deps, conn, _press(OWNER, PREFIX + "x", chat=None))
    model_choice.choose(conn, OWNER, None)
    assert model_choice.chosen(conn, OWNER) is None


def test_status_shows_each_breaker_and_why_it_opened(tmp_path: Path) -> None:
    deps, _ = _deps(tmp_path)
    assert breaker_lines(deps.llm) == ["**Models:** `claude-haiku-4-5` closed; `local/qwen` closed"]
    breaker = deps.llm.candidates()[0].breaker
    breaker.failed("overloaded")
    breaker.failed("overloaded")
    assert "`claude-haiku-4-5` open, overloaded" in breaker_lines(deps.llm)[0]


def test_what_a_model_left_out_is_said_in_the_answer() -> None:
    note = "local/qwen has no provider-side tools (web_search); answered without them"
    assert with_notes("Hi.", [note]) == f"Hi.\n\n({note})"
    assert with_notes("Hi.", []) == "Hi."
