"""Every capability comes in through one door (agentd/tools/capability.py), listed once
(agentd/daemon/capabilities.py); the promises every capability keeps are checked over that
list, so a new capability is checked the day it is listed.

`CAPABILITIES` is the list-level hook: a test of another cross-cutting promise (one call path,
one send path) parameterises over it the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agentd.config import Config, SecretSource, read_secret
from agentd.daemon.capabilities import capabilities, secret_values
from agentd.tools.capability import Capability, Check, Probe

ROOT = Path(__file__).resolve().parents[1] / "agentd"
CAPABILITIES = capabilities()
# Where each capability's code lives (what the "one secret reader" scan reads).
PACKAGES = {
    "memory": ["memory", "retrieval"],
    "documents": ["knowledge"],
    "web": ["web"],
    "media": ["media"],
    "schedule": ["schedule"],
    "watch": ["watch"],
    "mail": ["mail"],
    "calendar": ["calendar"],
    "skills": ["skills"],
    "mcp": ["tools/mcp.py"],
    "automations": ["automations"],
    "dashboard": ["dashboard"],
    "browser": ["browser"],
    "plugins": ["tools/plugins.py"],
    "hands": ["hands"],
    "tasks": ["tasks"],
}


def every_secret_config() -> Config:
    """A configuration in which every capability names at least the secrets it can."""
    return Config.model_validate(
        {
            "media": {"transcription": "openai", "transcription_key_env": "STT_KEY"},
            "memory": {
                "embedder": "http",
                "http_url": "http://127.0.0.1:1",
                "http_api_key_env": "EMBED_KEY",
            },
            "automations": {
                "hooks": {"routes": {"gh": {"workflow": "w", "secret_env": "HOOK_SECRET"}}}
            },
            "mail": [
                {
                    "address": "me@example.org",
                    "password_env": "MAIL_PASSWORD",
                    "imap_host": "imap.example.org",
                }
            ],
            "calendar": [{"url": "https://dav.example.org/cal/", "password_env": "CAL_PASSWORD"}],
            "tools": {
                "web": {"provider": "tavily", "api_key_env": "SEARCH_KEY"},
                "mcp": [
                    {"name": "files", "command": "srv", "pass_env": ["GITHUB_TOKEN"]},
                    {
                        "name": "remote",
                        "url": "https://m.example",
                        "bearer_token_env": "MCP_BEARER",
                    },
                ],
            },
        }
    )


def ids(caps: list[Capability]) -> list[str]:
    return [cap.name for cap in caps]


def test_the_list_names_each_capability_once_in_order() -> None:
    assert ids(CAPABILITIES) == list(PACKAGES)


@pytest.mark.parametrize("cap", CAPABILITIES, ids=ids(CAPABILITIES))
def test_a_capability_returns_what_it_gives_and_registers_nothing(cap: Capability) -> None:
    """Its workflows, commands and buttons are in the Contribution it returns: no code of its
    registers a workflow on the engine or a command on a router as a side effect."""
    wrong = []
    for where in PACKAGES[cap.name]:
        path = ROOT / where
        for source in [path] if path.suffix else sorted(path.rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                if not isinstance(node, ast.Attribute):
                    continue
                owner = ast.unparse(node.value)
                registers = node.attr in ("register", "command", "callback", "awaits") and (
                    owner.endswith("engine") or owner in ("router", "ctx.router")
                )
                if registers or (node.attr == "router" and owner == "ctx"):
                    wrong.append(f"{source.relative_to(ROOT.parent)}:{node.lineno}")
    # Automations hand the engine's register to their runtime for `agentd automations reload`
    # (SIGHUP): the owner's edited workflows are registered while the daemon runs; the ones
    # loaded at start are returned in the Contribution like every other capability's.
    allowed = {"automations": 1}
    assert len(wrong) <= allowed.get(cap.name, 0), wrong


@pytest.mark.parametrize("cap", CAPABILITIES, ids=ids(CAPABILITIES))
def test_a_capability_reads_no_secret_but_through_the_one_reader(cap: Capability) -> None:
    """No os.environ / os.getenv in its code: whatever it reads comes from the SecretSource it
    is handed, which is the one reader (environment, agentd.env, systemd credential)."""
    wrong = []
    for where in PACKAGES[cap.name]:
        path = ROOT / where
        for source in [path] if path.suffix else sorted(path.rglob("*.py")):
            tree = ast.parse(source.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                    if isinstance(node.value, ast.Name) and node.value.id == "os":
                        wrong.append(f"{source.relative_to(ROOT.parent)}:{node.lineno}")
    # MCP's one use: the default when no SecretSource is handed (tests, scripts).
    allowed = {"mcp": 1}
    assert len(wrong) <= allowed.get(cap.name, 0), wrong


@pytest.mark.parametrize("cap", CAPABILITIES, ids=ids(CAPABILITIES))
def test_a_capability_declares_its_doctor_checks(cap: Capability, tmp_path: Path) -> None:
    """`agentd doctor` can ask every capability, with no database yet, and gets Check lines."""
    config = Config.model_validate({"storage": {"path": str(tmp_path / "a.db")}})
    config.memory.embedder = "hashing"
    probe = Probe(secrets=SecretSource({}), read=lambda fn: None)
    checks = cap.checks(config, probe)
    assert isinstance(checks, list) and all(isinstance(c, Check) for c in checks)


EXPECTED_SECRETS = {
    "memory": ["EMBED_KEY"],
    "web": ["SEARCH_KEY"],
    "media": ["STT_KEY"],
    "mail": ["MAIL_PASSWORD"],
    "calendar": ["CAL_PASSWORD"],
    "mcp": ["GITHUB_TOKEN", "MCP_BEARER"],
    "automations": ["HOOK_SECRET"],
}


@pytest.mark.parametrize("cap", CAPABILITIES, ids=ids(CAPABILITIES))
@pytest.mark.parametrize("where", ["environment", "agentd.env", "credential"])
def test_each_secret_is_read_and_redacted_from_each_source(
    cap: Capability, where: str, tmp_path: Path
) -> None:
    config = every_secret_config()
    names = cap.secret_names(config)
    assert names == EXPECTED_SECRETS.get(cap.name, [])
    creds = tmp_path / "creds"
    creds.mkdir()
    for name in names:
        value = f"{name.lower()}-from-{where}-value"
        env: dict[str, str] = {"CREDENTIALS_DIRECTORY": str(creds)}
        stored: dict[str, str] = {}
        if where == "environment":
            env[name] = value
        elif where == "agentd.env":
            stored[name] = value
        else:
            (creds / name).write_text(value + "\n")
        source = SecretSource(env, stored)
        assert read_secret(name, source) == value
        assert source.get(name) == value  # what a builder taking an `env` mapping reads
        config.stored_secrets = stored
        assert value in secret_values(config, config.secret_source(env))


def test_the_environment_wins_over_agentd_env_over_a_credential(tmp_path: Path) -> None:
    (tmp_path / "KEY").write_text("credential")
    env = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    assert read_secret("KEY", SecretSource(env)) == "credential"
    assert read_secret("KEY", SecretSource(env, {"KEY": "file"})) == "file"
    assert read_secret("KEY", SecretSource({**env, "KEY": "env"}, {"KEY": "file"})) == "env"
