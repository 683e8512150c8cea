"""What `agentd run` says on its way out goes through the process's redactor: a failure's
message and an unexpected error's traceback hide every configured secret, as the log does."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import agentd.daemon
from agentd.cli.app import app
from agentd.daemon.startup import StartupError

KEY = "sk-ant-api03-" + "k" * 40


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'[access]\nallowed_user_ids = [1]\n[storage]\npath = "{tmp_path / "agentd.db"}"\n'
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setattr(signal, "signal", lambda *_args: None)  # the test runner's stay
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield path
    root.handlers[:], root.level = handlers, level


def _run_failing(config: Path, monkeypatch: pytest.MonkeyPatch, error: Exception) -> Any:
    async def fails(*_args: Any, **_kwargs: Any) -> int:
        raise error

    monkeypatch.setattr(agentd.daemon, "run", fails)
    return CliRunner().invoke(app, ["run", "--config", str(config)])


def test_a_start_up_failure_quoting_a_secret_prints_it_redacted(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run_failing(config, monkeypatch, StartupError(f"the server said: bad key {KEY}"))
    assert result.exit_code == 1
    assert "the server said: bad key [REDACTED]" in result.stderr
    assert KEY not in result.output + result.stderr


def test_an_unexpected_error_quoting_a_secret_is_logged_redacted(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run_failing(config, monkeypatch, RuntimeError(f"lost with {KEY} in hand"))
    assert result.exit_code == 1
    assert "agentd stopped on an unexpected error" in result.stderr
    assert "RuntimeError" in result.stderr
    assert KEY not in result.output + result.stderr
