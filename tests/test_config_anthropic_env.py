"""ANTHROPIC_MODEL and ANTHROPIC_BASE_URL override the file; AGENTD_LLM__… override them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.channels import load_config

FILE = '[llm]\nmodel = "claude-from-file"\nbase_url = "http://file.example"\n'


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "agentd.toml"
    path.write_text(FILE)
    return path


def test_the_file_when_no_variable_is_set(config: Path) -> None:
    llm = load_config(config, env={}).llm
    assert (llm.model, llm.base_url) == ("claude-from-file", "http://file.example")


def test_the_providers_variables_override_the_file(config: Path) -> None:
    env = {"ANTHROPIC_MODEL": "claude-env", "ANTHROPIC_BASE_URL": "http://env.example"}
    llm = load_config(config, env=env).llm
    assert (llm.model, llm.base_url) == ("claude-env", "http://env.example")


def test_agentds_own_variables_override_the_providers(config: Path) -> None:
    env = {
        "ANTHROPIC_MODEL": "claude-env",
        "ANTHROPIC_BASE_URL": "http://env.example",
        "AGENTD_LLM__MODEL": "claude-agentd",
        "AGENTD_LLM__BASE_URL": "http://agentd.example",
    }
    llm = load_config(config, env=env).llm
    assert (llm.model, llm.base_url) == ("claude-agentd", "http://agentd.example")


def test_an_empty_variable_is_not_set(config: Path) -> None:
    llm = load_config(config, env={"ANTHROPIC_MODEL": "", "ANTHROPIC_BASE_URL": ""}).llm
    assert (llm.model, llm.base_url) == ("claude-from-file", "http://file.example")
