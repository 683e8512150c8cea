"""`agentd models` against the fakes: every configured model listed with its price and what it
can do; `--test` tries each with one call and names the one that fails; doctor does the same."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from tests.fakes import FakeAnthropic
from tests.fakes.openai_chat import FakeChat


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], FakeAnthropic, FakeChat]]:
    with FakeAnthropic.running() as claude, FakeChat.running(tools=False) as chat:
        path = tmp_path / "agentd.toml"
        path.write_text(
            f"""
[llm]
model = "claude-haiku-4-5"
base_url = "{claude.base_url}"
fallbacks = ["local/qwen2.5:7b"]
[llm.models]
summary = "gone/llama"
[llm.providers.local]
base_url = "{chat.base_url}/v1"
local = true
tools = false
[llm.providers.gone]
base_url = "http://127.0.0.1:{_closed_port()}/v1"
timeout = 5
[storage]
path = "{tmp_path / "agentd.db"}"
"""
        )
        env = {"ANTHROPIC_API_KEY": "sk-ant-test", "AGENTD_CONFIG": str(path)}
        yield path, env, claude, chat


def test_models_lists_price_and_capabilities(setup: tuple) -> None:  # type: ignore[type-arg]
    _, env, claude, chat = setup
    result = CliRunner().invoke(app, ["models", "--json"], env=env)
    assert result.exit_code == 0, result.output
    rows = {r["model"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"claude-haiku-4-5", "local/qwen2.5:7b", "gone/llama"}
    assert rows["local/qwen2.5:7b"]["price"] == "local: costs 0"
    assert rows["local/qwen2.5:7b"]["tools"] is False
    assert rows["claude-haiku-4-5"]["price"] == "list price"
    assert rows["gone/llama"]["purposes"] == ["summary"]
    assert rows["claude-haiku-4-5"]["ok"] is None  # listed, not tried
    assert claude.requests == [] and chat.requests == []


def test_models_test_tries_each_and_names_the_failing_one(setup: tuple) -> None:  # type: ignore[type-arg]
    _, env, claude, chat = setup
    result = CliRunner().invoke(app, ["models", "--test", "--json"], env=env)
    assert result.exit_code == 1
    rows = {r["model"]: r for r in json.loads(result.stdout)}
    assert rows["claude-haiku-4-5"]["ok"] and rows["local/qwen2.5:7b"]["ok"]
    assert rows["gone/llama"]["ok"] is False
    assert "base_url" in rows["gone/llama"]["problem"]
    assert len(claude.requests) == 1 and len(chat.requests) == 1

    doctor = CliRunner().invoke(app, ["doctor", "--json"], env=env)
    checks = {c["check"]: c for c in json.loads(doctor.stdout)}
    assert checks["model local/qwen2.5:7b"]["ok"]
    assert not checks["model gone/llama"]["ok"]
    assert "summary" in checks["model gone/llama"]["detail"]


def test_models_without_the_key_claude_needs_says_so(setup: tuple) -> None:  # type: ignore[type-arg]
    _, env, _, _ = setup
    result = CliRunner().invoke(app, ["models"], env={**env, "ANTHROPIC_API_KEY": ""})
    assert result.exit_code == 78
    assert "ANTHROPIC_API_KEY" in result.output


def test_usage_prices_each_provider_and_counts_fallback_answers(setup: tuple) -> None:  # type: ignore[type-arg]
    from agentd.ledger import audit, usage
    from agentd.ledger.pricing import Tokens
    from tests.docs_support import open_store

    path, env, _, _ = setup
    conn = open_store(path.parent / "agentd.db")
    with conn:
        tokens = Tokens(input_tokens=1_000_000, output_tokens=1000)
        usage.record(conn, tokens, model="claude-haiku-4-5", purpose="turn", chat_id=1)
        usage.record(conn, tokens, model="local/qwen2.5:7b", purpose="turn", chat_id=1)
        detail = {"model": "local/qwen2.5:7b", "reason": "overloaded"}
        audit.record(conn, "llm_fallback", chat_id=1, detail=detail)
    conn.close()
    result = CliRunner().invoke(app, ["usage", "--by-model", "--json"], env=env)
    assert result.exit_code == 0, result.output
    rows = {r["model"]: r for r in json.loads(result.stdout)}
    assert rows["local/qwen2.5:7b"]["estimated_cost_usd"] == 0
    assert rows["local/qwen2.5:7b"]["fallback_answers"] == 1
    assert rows["claude-haiku-4-5"]["estimated_cost_usd"] > 1
    text = CliRunner().invoke(app, ["usage"], env={**env, "COLUMNS": "120"})
    assert text.exit_code == 0 and "local: costs 0" in text.stdout


def test_model_checks_are_in_the_ledger_counted_never_refused(setup: tuple) -> None:  # type: ignore[type-arg]
    """`models --test` and doctor's model checks are paid calls: `agentd usage` shows them
    (purpose "check", no chat) and the day's total counts them; the owner runs them by hand,
    so a spent budget does not stop them, and they count against no one user's budget."""
    from agentd.access.ratelimit import tokens_used
    from agentd.ledger import usage
    from agentd.ledger.pricing import Tokens
    from tests.docs_support import open_store

    path, env, claude, chat = setup
    path.write_text(path.read_text() + "[limits]\ndaily_tokens = 5\ndaily_tokens_total = 5\n")
    db = path.parent / "agentd.db"
    conn = open_store(db)
    with conn:  # today's budgets are spent already
        usage.record(conn, Tokens(input_tokens=10), model="claude-haiku-4-5", purpose="turn")
    conn.close()

    result = CliRunner().invoke(app, ["models", "--test", "--json"], env=env)
    assert result.exit_code == 1  # gone/llama fails; the other two answer
    assert len(claude.requests) == 1 and len(chat.requests) == 1
    conn = open_store(db)
    checks = conn.execute(
        "SELECT model, chat_id, user_id, input_tokens + output_tokens FROM llm_usage "
        "WHERE purpose = 'check' ORDER BY model"
    ).fetchall()
    assert [tuple(r)[:3] for r in checks] == [
        ("claude-haiku-4-5", None, None),
        ("local/qwen2.5:7b", None, None),
    ]
    assert all(r[3] > 0 for r in checks)
    day = time.time() - time.time() % 86400
    assert tokens_used(conn, day) == 10 + sum(r[3] for r in checks)
    assert tokens_used(conn, day, user_id=42) == 0
    conn.close()
    shown = CliRunner().invoke(app, ["usage", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    assert sum(r["calls"] for r in json.loads(shown.stdout)) == 3

    doctor = CliRunner().invoke(app, ["doctor", "--json"], env=env)
    assert doctor.stdout, doctor.output
    conn = open_store(db)
    (n,) = conn.execute("SELECT COUNT(*) FROM llm_usage WHERE purpose = 'check'").fetchone()
    conn.close()
    assert n == 4  # doctor tried the two that answer again
