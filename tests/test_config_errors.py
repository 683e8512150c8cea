"""A config error says what to fix without echoing a secret: an MCP server's env values and
headers are the secrets a config file may hold, and the error is printed by `agentd run`
(to stderr, the journal under systemd) and `agentd doctor` before any redactor exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.channels import load_config
from agentd.config import ConfigError
from tests.daemon_process import REPO_ROOT

TOKEN = "ghp_SECRETsecretSECRET123456"
HEADER = "SECRET_HEADER_TOKEN_123456"

MISSING_NAME = f"""
[[tools.mcp]]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = {{ GITHUB_PERSONAL_ACCESS_TOKEN = "{TOKEN}" }}
"""

URL_WITH_ARGS = f"""
[[tools.mcp]]
name = "remote"
url = "https://mcp.example.com/mcp"
args = ["--verbose"]
headers = {{ Authorization = "Bearer {HEADER}" }}
"""


def _error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    path = tmp_path / "agentd.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env or {})
    return str(caught.value)


def test_a_missing_name_names_the_key_and_the_entry_not_its_env(tmp_path: Path) -> None:
    error = _error(tmp_path, MISSING_NAME)
    assert TOKEN not in error
    assert "tools.mcp.0.name: Field required" in error
    assert "args, command, env" in error  # which entry it is


def test_a_misplaced_key_says_why_not_the_headers(tmp_path: Path) -> None:
    error = _error(tmp_path, URL_WITH_ARGS)
    assert HEADER not in error
    assert "args, env, pass_env and cwd are for command servers" in error


def test_a_wrong_env_value_is_not_echoed(tmp_path: Path) -> None:
    error = _error(tmp_path, '[[tools.mcp]]\nname = "a"\ncommand = "x"\nenv = { T = 123456789 }\n')
    assert "123456789" not in error
    assert "tools.mcp.0.env.T: Input should be a valid string" in error


def test_an_environment_override_holding_a_secret_is_not_echoed(tmp_path: Path) -> None:
    given = f'[{{"name": "a", "env": {{"X": "{TOKEN}"}}}}]'
    error = _error(tmp_path, "", {"AGENTD_TOOLS__MCP": given})
    assert TOKEN not in error
    assert error.startswith("environment variable AGENTD_TOOLS__MCP: tools.mcp.0:")
    assert "needs exactly one of command or url" in error


def test_a_plain_value_is_still_shown(tmp_path: Path) -> None:
    error = _error(tmp_path, '[llm]\nmax_tokens = "many"\n')
    assert error.endswith(
        "llm.max_tokens: Input should be a valid integer, unable to parse "
        "string as an integer (got 'many')"
    )
    error = _error(tmp_path, '[[tools.mcp]]\nname = "a b"\ncommand = "x"\n')
    assert "(got 'a b')" in error
    error = _error(tmp_path, "", {"AGENTD_LLM__RETRIES": "lots"})
    assert "(got 'lots')" in error


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "ANTHROPIC_"))}
    env["AGENTD_STORAGE__PATH"] = str(tmp / "agentd.db")
    env["PYTHONPATH"] = str(REPO_ROOT)  # this checkout's agentd, wherever it is installed from
    return env


@pytest.mark.parametrize(
    ("command", "text", "secret"),
    [
        ("run", MISSING_NAME, TOKEN),
        ("doctor", URL_WITH_ARGS, HEADER),
    ],
)
def test_agentd_run_and_doctor_print_the_error_without_the_secret(
    tmp_path: Path, command: str, text: str, secret: str
) -> None:
    (tmp_path / "agentd.toml").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "agentd", command],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "tools.mcp.0" in done.stdout + done.stderr
    assert secret not in done.stdout + done.stderr


def test_a_misspelt_price_key_is_an_error(tmp_path: Path) -> None:
    """[llm.prices.<model>] forbids unknown keys like every other section: a typo in
    audio_minute would otherwise leave that price at 0 in every estimate."""
    prices = "input = 1.0\noutput = 5.0\ncache_read = 0.1\ncache_write_5m = 1.25\n"
    prices += "cache_write_1h = 2.0\naudio_minutes = 0.006\n"
    error = _error(tmp_path, f"[llm.prices.whisper-1]\n{prices}")
    assert "audio_minutes" in error


def test_every_config_table_forbids_unknown_keys() -> None:
    import typing

    from pydantic import BaseModel

    from agentd.channels import config_class

    lax: list[str] = []
    seen: set[type] = set()

    def walk(annotation: object, path: str) -> None:
        for arg in typing.get_args(annotation):
            walk(arg, path)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in seen:
                return
            seen.add(annotation)
            if annotation.model_config.get("extra") != "forbid":
                lax.append(f"{path or '(root)'}: {annotation.__name__}")
            for name, field in annotation.model_fields.items():
                if not field.exclude:
                    walk(field.annotation, f"{path}.{name}".lstrip("."))

    walk(config_class(), "")
    assert len(seen) > 20 and lax == []
