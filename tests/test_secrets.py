"""Every configured secret is redacted, and none is in the repository's reach."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from agentd.channels import load_config
from agentd.config import Config, Secrets
from agentd.daemon.startup import configured_secrets
from agentd.runtime.logs import JsonFormatter
from agentd.runtime.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]


def test_every_configured_secret_is_collected(tmp_path: Path) -> None:
    config = Config.model_validate(
        {
            "media": {"transcription": "openai", "transcription_key_env": "STT_KEY"},
            "memory": {
                "embedder": "http",
                "http_url": "http://127.0.0.1:1",
                "http_api_key_env": "EMBED_KEY",
            },
            "web": {"provider": "tavily", "api_key_env": "TAVILY_KEY"},
            "tools": {
                "mcp": [
                    {
                        "name": "files",
                        "command": "srv",
                        "env": {"FILES_TOKEN": "mcp-env-secret-1"},
                        "pass_env": ["GITHUB_TOKEN"],
                    },
                    {
                        "name": "remote",
                        "url": "https://mcp.example",
                        "bearer_token_env": "REMOTE_TOKEN",
                        "headers": {"Authorization": "Bearer header-secret-2"},
                    },
                ]
            },
        }
    )
    config.secrets = Secrets(anthropic_api_key="sk-ant-k")
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "tavily_key").write_text("tavily-from-credential\n")  # a systemd credential
    env = {
        "TELEGRAM_BOT_TOKEN": "123:bot-token-x",  # a channel's own, named in its section
        "STT_KEY": "stt-secret-3",
        "EMBED_KEY": "embed-secret-4",
        "GITHUB_TOKEN": "gh-sec-5",
        "REMOTE_TOKEN": "remote-secret-6",
        "CREDENTIALS_DIRECTORY": str(creds),
    }
    found = set(configured_secrets(config, env))
    assert found >= {
        "123:bot-token-x",
        "sk-ant-k",
        "stt-secret-3",
        "embed-secret-4",
        "tavily-from-credential",
        "mcp-env-secret-1",
        "gh-sec-5",
        "remote-secret-6",
        "Bearer header-secret-2",
        "header-secret-2",
    }
    line = JsonFormatter(Redactor(found)).format(
        logging.makeLogRecord(
            {
                "msg": "calling with %s and %s",
                "args": ("embed-secret-4", "Bearer header-secret-2"),
                "token": "remote-secret-6",
            }
        )
    )
    assert "secret" not in line.replace("[REDACTED]", "") and line.count("[REDACTED]") == 3


def test_each_model_providers_key_is_collected(tmp_path: Path) -> None:
    """An OpenAI-compatible provider's key (OpenRouter's, say) is hidden like Anthropic's."""
    config = tmp_path / "agentd.toml"
    config.write_text(
        """
[llm]
model = "router/some-model"
[llm.providers.router]
kind = "openai"
base_url = "https://openrouter.example/api/v1"
api_key_env = "OPENROUTER_API_KEY"
[llm.providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"
[llm.providers.gateway]
kind = "anthropic"
base_url = "https://gateway.example"
api_key_env = "GATEWAY_KEY"
"""
    )
    (tmp_path / "agentd.env").write_text("GATEWAY_KEY=gw-key-from-the-secrets-file\n")
    (tmp_path / "agentd.env").chmod(0o600)
    env = {"OPENROUTER_API_KEY": "sk-or-v1-provider-key-0123"}
    loaded = load_config(config, env)
    found = configured_secrets(loaded, env)
    assert {"sk-or-v1-provider-key-0123", "gw-key-from-the-secrets-file"} <= set(found)
    assert "" not in found


def test_the_secrets_file_is_ignored_by_git(tmp_path: Path) -> None:
    for name in ("agentd.env", "deploy/agentd.env", ".env"):
        checked = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "--no-index", name],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, f"{name} is not ignored by git"


def test_doctor_warns_of_a_secret_too_short_to_redact(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentd.cli.ops import _doctor_short_secrets

    config = Config.model_validate({"web": {"provider": "tavily", "api_key_env": "TAVILY_KEY"}})
    config.secrets = Secrets(anthropic_api_key="sk-ant-long-enough")
    results: list[dict[str, object]] = []
    monkeypatch.setenv("TAVILY_KEY", "tavily-key-long-enough")
    _doctor_short_secrets(config, results)
    assert results == []
    monkeypatch.setenv("TAVILY_KEY", "abc12")
    _doctor_short_secrets(config, results)
    [check] = results
    assert check["ok"] and check["warn"] and "abc12" not in str(check["detail"])
    assert "1 configured secret(s) shorter than 6 characters" in str(check["detail"])


def test_a_profile_teaches_its_token_like_values_and_not_its_words() -> None:
    """What the redactor learns of a signed-in browser profile: a session id, a JWT, a token
    inside a local-storage JSON value; not a consent flag, a theme or a number, which would
    be blanked out of every page the model reads."""
    from agentd.browser.profiles import MAX_SECRETS, secret_values

    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlMTIz"
    state = {
        "cookies": [
            {"name": "session", "value": "sess-5f2a9c7e1b"},
            {"name": "consent", "value": "accepted"},
            {"name": "theme", "value": "dark mode 2"},
            {"name": "visits", "value": "1700000000"},
        ],
        "origins": [
            {
                "origin": "https://shop.example",
                "localStorage": [
                    {"name": "auth", "value": f'{{"access_token": "{jwt}", "user": "owner"}}'},
                    {"name": "lang", "value": "en-GB"},
                ],
            }
        ],
    }
    assert secret_values(state) == [jwt, "sess-5f2a9c7e1b"]
    many = {"cookies": [{"value": f"token-{n:04d}-x"} for n in range(MAX_SECRETS + 10)]}
    assert len(secret_values(many)) == MAX_SECRETS
