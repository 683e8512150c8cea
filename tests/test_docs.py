"""The docs must stay true: every config key documented with its default, every command in the
README (STYLE.md 11)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel

from agentd.cli.app import command_names
from agentd.config import Config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "config.example.toml"
README = ROOT / "README.md"


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += _keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def test_config_example_is_the_defaults() -> None:
    documented = Config.model_validate(tomllib.loads(EXAMPLE.read_text()))
    assert documented.model_dump() == Config().model_dump()


def test_every_config_key_is_documented() -> None:
    text = EXAMPLE.read_text()
    data = tomllib.loads(text)
    missing = []
    for key in _keys(Config):
        node: object = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        # Lists of tables (tools.mcp) and maps (tools.risk) are documented as comments.
        if node is None and f"{key.split('.')[-1]} =" not in text and f"[{key}]" not in text:
            missing.append(key)
    assert missing == []


def test_every_cli_command_is_in_the_readme() -> None:
    readme = README.read_text()
    assert [n for n in command_names() if f"agentd {n}" not in readme] == []


def test_readme_first_screen_has_install_run_and_test() -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    assert "pip install -e '.[test]'" in first_screen
    assert "agentd run" in first_screen
    assert "pytest" in first_screen
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install --quiet -e '.[test]'" in ci and "\npytest" in ci
